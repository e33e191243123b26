// The emulated ports' addresses, and how a requester finds its peer's process.
//
// Every process with an emulated NIC claims a slot k (1 .. kSlots - 1) in a
// directory all processes of the machine share (STRATA_VERBS_EMU_DIR, default
// /dev/shm/strata-verbs-emu-<uid>, or /tmp's): it holds a lock on the file slot-k,
// which says "ip port" of its NIC's listener. Its queue pair numbers are k << kQpnBits | n, so a requester
// finds the process from the destination QPN alone; the address vector (GIDs,
// LIDs, path MTU) is then checked by the responder against its own queue pair,
// and a packet a real fabric would not deliver is refused (emu_responder.cc), so
// the requester's retries run out as on hardware.
//
// Ports (STRATA_VERBS_EMU_LINK_LAYER):
//  - Ethernet (default, RoCE): GIDs 0 and 1 link-local (fe80::, then the IPv4
//    address, listener port and device as the interface id) as RoCE v1 and v2;
//    GIDs 2 and 3 the IPv4-mapped ::ffff:a.b.c.d as RoCE v1 and v2, as a RoCE
//    NIC with an IPv4 address reports them (mappedAddress). No LID; every packet
//    carries a GRH.
//  - "ib" (InfiniBand): LID k * 8 + device + 1; GID 0 the subnet prefix and a port
//    GUID, the prefix fe80:: (one subnet) unless STRATA_VERBS_EMU_SUBNET gives 16
//    hex digits. GID 1 is unused, or with STRATA_VERBS_EMU_SUBNET=process the
//    routable fec0:0:<FLID>:<k> and the GUID: each process a subnet of its own,
//    every path routed with a GRH to the peer's FLID (0x4000 + its LID), as NCCL
//    takes GID 1 where it carries an FLID (NCCL_IB_ROUTABLE_FLID_GID_INDEX).
// STRATA_VERBS_EMU_MTU: the ports' active MTU in bytes (256 .. 4096, default 4096),
// or "mixed": 1024 in processes of odd slots, 4096 in the others (peers must agree
// on the smaller).
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "emu.h"

namespace verbs_emu {
namespace {

// /dev/shm where it is writable, else /tmp; STRATA_VERBS_EMU_DIR overrides.
std::string slotDir() {
  if (const char* d = getenv("STRATA_VERBS_EMU_DIR"); d && *d) return d;
  std::string base = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
  return base + "/strata-verbs-emu-" + std::to_string(getuid());
}

std::string slotFile(int k) { return slotDir() + "/slot-" + std::to_string(k); }

// "ip port" of slot k's NIC; false when there is no such file or it is incomplete.
bool readSlot(int k, Endpoint* e) {
  FILE* f = fopen(slotFile(k).c_str(), "re");
  if (!f) return false;
  unsigned ip = 0, port = 0;
  bool ok = fscanf(f, "%u %u\n", &ip, &port) == 2 && port > 0 && port <= 65535;
  fclose(f);
  *e = Endpoint{static_cast<uint32_t>(ip), static_cast<uint16_t>(port)};
  return ok;
}

[[noreturn]] void die(const char* what, const std::string& path) {
  fprintf(stderr, "verbs_emu: %s %s: %s\n", what, path.c_str(), strerror(errno));
  abort();
}

void releaseSlot() {
  State& s = state();
  if (s.slot > 0 && s.slotPid == getpid()) unlink(slotFile(s.slot).c_str());
}

uint8_t hexDigit(char c) {
  return static_cast<uint8_t>(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10);
}

bool subnetPerProcess() {
  const char* v = getenv("STRATA_VERBS_EMU_SUBNET");
  return v && strcmp(v, "process") == 0;
}

// An InfiniBand GID's first 8 bytes: GID 0 the subnet prefix (fe80::, or
// STRATA_VERBS_EMU_SUBNET's 16 hex digits); GID 1, where each process is a subnet of
// its own, the routable fec0:0:<FLID>:<slot> (false: GID 1 is unused).
bool subnetPrefix(int device, int index, uint8_t* raw) {
  if (index == 1) {
    if (!subnetPerProcess()) return false;
    uint16_t flid = localFlid(device);
    raw[0] = 0xfe;
    raw[1] = 0xc0;
    raw[4] = static_cast<uint8_t>(flid >> 8);
    raw[5] = static_cast<uint8_t>(flid);
    raw[6] = static_cast<uint8_t>(state().slot >> 8);
    raw[7] = static_cast<uint8_t>(state().slot);
    return true;
  }
  raw[0] = 0xfe;
  raw[1] = 0x80;
  const char* v = getenv("STRATA_VERBS_EMU_SUBNET");
  if (!v || strlen(v) != 16 || strspn(v, "0123456789abcdefABCDEF") != 16) return true;
  for (int i = 0; i < 8; ++i) raw[i] = static_cast<uint8_t>(hexDigit(v[2 * i]) << 4 | hexDigit(v[2 * i + 1]));
  return true;
}

}  // namespace

// A slot is held by an exclusive flock on its file for the owner's lifetime: the
// kernel releases it when the owner exits however it exits, and a lock knows
// nothing of pids (processes in other pid namespaces sharing the directory, pids
// reused). A forked child closes its inherited descriptor (the lock stays the
// parent's) and claims a slot of its own.
void claimSlot() {
  State& s = state();
  if (s.slotFd >= 0) close(s.slotFd);
  s.slotFd = -1;
  s.slot = 0;
  std::string dir = slotDir();
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) die("cannot make", dir);
  for (int i = 0; i < kSlots - 1 && s.slot == 0; ++i) {
    int k = 1 + static_cast<int>((getpid() + i) % (kSlots - 1));
    std::string path = slotFile(k);
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) die("cannot open", path);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {  // a live process holds it
      close(fd);
      continue;
    }
    char line[64];
    int n = snprintf(line, sizeof(line), "%u %u\n", s.ip, s.port);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, static_cast<size_t>(n), 0) != n) die("cannot write", path);
    s.slot = k;
    s.slotFd = fd;
    s.slotPid = getpid();
  }
  if (s.slot == 0) {
    fprintf(stderr, "verbs_emu: all %d slots in %s are held by live processes\n", kSlots - 1, dir.c_str());
    abort();
  }
  s.nextQpn = 1;
  s.endpoints.clear();
  static bool once = (atexit(releaseSlot), true);
  (void)once;
}

bool findEndpoint(uint32_t qpn, Endpoint* e) {
  State& s = state();
  int k = static_cast<int>(qpn >> kQpnBits);
  if (k == s.slot) {
    *e = Endpoint{s.ip, s.port};
    return true;
  }
  if (k <= 0 || k >= kSlots) return false;
  // Read again after 100 ms: a requester retries every millisecond while a peer is not ready.
  double now = nowSec();
  auto it = s.endpoints.find(k);
  if (it != s.endpoints.end() && now - it->second.second < 0.1) {
    *e = it->second.first;
    return e->port != 0;
  }
  Endpoint found;
  if (!readSlot(k, &found)) found = Endpoint{};
  s.endpoints[k] = {found, now};
  *e = found;
  return found.port != 0;
}

// "mixed": 1024 on odd nodes (NCCL_HOSTID ending in an odd number, as the tests'
// fake nodes are named), else in processes of odd slots.
static bool mixedMtuIsSmall() {
  const char* host = getenv("NCCL_HOSTID");
  size_t n = host ? strlen(host) : 0;
  if (n && host[n - 1] >= '0' && host[n - 1] <= '9') return (host[n - 1] - '0') % 2 == 1;
  return state().slot % 2 == 1;
}

bool infiniband() {
  const char* v = getenv("STRATA_VERBS_EMU_LINK_LAYER");
  return v && (strcmp(v, "ib") == 0 || strcmp(v, "IB") == 0 || strcmp(v, "infiniband") == 0);
}

int gidTableLength() { return infiniband() ? 2 : 4; }

ibv_mtu activeMtu() {
  const char* v = getenv("STRATA_VERBS_EMU_MTU");
  int bytes = v ? atoi(v) : 4096;
  if (v && strcmp(v, "mixed") == 0) bytes = mixedMtuIsSmall() ? 1024 : 4096;
  for (int m = IBV_MTU_4096; m > IBV_MTU_256; --m)
    if (bytes >= (128 << m)) return static_cast<ibv_mtu>(m);
  return IBV_MTU_256;
}

uint16_t localLid(int device) { return infiniband() ? static_cast<uint16_t>(state().slot * 8 + device + 1) : 0; }

uint16_t localFlid(int device) { return infiniband() ? static_cast<uint16_t>(0x4000 + localLid(device)) : 0; }

// The IPv4 address in the port's mapped GIDs: the interface's; with a loopback one
// (fake nodes on one machine) 127.<slot>.<device + 1> of its own, as every node's
// NIC has an address of its own, so that a GID of the wrong process or device
// reaches nobody.
static uint32_t mappedAddress(int device) {
  uint32_t ip = state().ip;
  if ((ntohl(ip) >> 24) != 127) return ip;
  return htonl(127u << 24 | static_cast<uint32_t>(state().slot) << 8 | static_cast<uint32_t>(device + 1));
}

bool localGidAt(int device, int index, ibv_gid* gid, int* type) {
  if (index < 0 || index >= gidTableLength()) return false;
  memset(gid, 0, sizeof(*gid));
  if (index >= 2) {  // ::ffff:a.b.c.d
    gid->raw[10] = gid->raw[11] = 0xff;
    uint32_t ip = mappedAddress(device);
    memcpy(gid->raw + 12, &ip, 4);
  } else {
    if (infiniband() && !subnetPrefix(device, index, gid->raw)) {
      *type = IBV_GID_TYPE_IB;
      return true;  // an unused entry: all zero
    }
    if (!infiniband()) gid->raw[0] = 0xfe, gid->raw[1] = 0x80;
    memcpy(gid->raw + 8, &state().ip, 4);
    uint16_t port = htons(state().port);
    memcpy(gid->raw + 12, &port, 2);
    gid->raw[14] = static_cast<uint8_t>(device);
  }
  *type = infiniband() ? IBV_GID_TYPE_IB : index % 2 == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
  return true;
}

bool ipv4Mapped(const ibv_gid& g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g.raw, prefix, 12) == 0;
}

}  // namespace verbs_emu
