#include "base/peer_info.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <fstream>

#include "base/config.h"

namespace strata {

uint64_t hashBytes(const void* data, size_t n, uint64_t seed) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static std::string readFirstLine(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

static std::string machineName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + readFirstLine("/proc/sys/kernel/random/boot_id");
}

uint64_t hostIdentity(std::string* description) {
  std::string id = config().hostId;
  if (id.empty()) id = machineName();
  if (description) *description = id;
  return hashBytes(id.data(), id.size());
}

uint64_t machineIdentity() {
  std::string id = machineName();
  return hashBytes(id.data(), id.size());
}

uint64_t processIdentity() {
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  std::string key = std::to_string(getpid()) + "/" + (n > 0 ? std::string(ns, n) : "");
  return hashBytes(key.data(), key.size(), hostIdentity(nullptr));
}

bool processAlive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return true;  // no procfs view of it (another pid namespace): assume alive
  char state = '?';
  // The state follows the command name, which is in parentheses and may hold spaces.
  int c, last = 0;
  while ((c = fgetc(f)) != EOF) {
    if (c == ')') last = 1;
    else if (last == 1 && c == ' ') last = 2;
    else if (last == 2) { state = static_cast<char>(c); break; }
  }
  fclose(f);
  return state != 'Z' && state != 'X';
}

}  // namespace strata
