#include "base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "nccl.h"

namespace strata {
namespace {

std::mutex gMutex;
FILE* gFile = nullptr;
std::atomic<bool> gStarted{false};
char gHost[64] = "";

// Expands %h (host) and %p (pid) in NCCL_DEBUG_FILE.
std::string expandPath(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'h') { out += gHost; continue; }
      if (c == 'p') { out += std::to_string(getpid()); continue; }
      out += '%';
    }
    out += pattern[i];
  }
  return out;
}

FILE* output() {
  if (!gFile) {
    if (gHost[0] == '\0') {
      gethostname(gHost, sizeof(gHost) - 1);
      if (char* dot = strchr(gHost, '.')) *dot = '\0';
    }
    const std::string& path = config().debugFile;
    if (!path.empty()) gFile = fopen(expandPath(path).c_str(), "w");
    if (!gFile) gFile = stdout;
  }
  return gFile;
}

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kTrace: return "TRACE";
    default: return "VERSION";
  }
}

}  // namespace

bool logEnabled(LogLevel level, uint32_t subsys) {
  const Config& c = config();
  if (level > c.debugLevel) return false;
  return level <= LogLevel::kWarn || (c.debugSubsys & subsys) != 0;
}

void logLine(LogLevel level, uint32_t, int rank, const char* fmt, ...) {
  char msg[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(msg, sizeof(msg), fmt, args);
  va_end(args);
  std::lock_guard<std::mutex> lock(gMutex);
  FILE* f = output();
  long tid = syscall(SYS_gettid);
  if (rank >= 0)
    fprintf(f, "%s:%d:%ld [%d] NCCL %s %s\n", gHost, getpid(), tid, rank, levelName(level), msg);
  else
    fprintf(f, "%s:%d:%ld NCCL %s %s\n", gHost, getpid(), tid, levelName(level), msg);
  fflush(f);
}

void logStartup() {
  if (gStarted.exchange(true)) return;
  const Config& c = config();
  for (const std::string& w : c.warnings) STRATA_WARN(-1, "%s", w.c_str());
  if (c.debugLevel >= LogLevel::kVersion)
    logLine(LogLevel::kVersion, kSubsysInit, -1, "Strata %s (NCCL API %d.%d.%d) host memory", STRATA_VERSION_STRING,
            NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  for (const std::string& f : c.confFiles)
    if (c.debugLevel >= LogLevel::kInfo) logLine(LogLevel::kInfo, kSubsysInit, -1, "Read configuration file %s", f.c_str());
}

void resetLogging() {
  std::lock_guard<std::mutex> lock(gMutex);
  if (gFile && gFile != stdout) fclose(gFile);
  gFile = nullptr;
  gStarted = false;
}

}  // namespace strata
