// The emulated ports' addresses, and how a requester finds its peer's process.
//
// Every process with an emulated NIC claims a slot k (1 .. kSlots - 1) in a
// directory all processes of the machine share (STRATA_VERBS_EMU_DIR, default
// /dev/shm/strata-verbs-emu-<uid>): the file slot-k says "pid ip port" of its
// NIC's listener. Its queue pair numbers are k << kQpnBits | n, so a requester
// finds the process from the destination QPN alone; the address vector (GIDs,
// LIDs, path MTU) is then checked by the responder against its own queue pair,
// and a packet a real fabric would not deliver is refused (emu_responder.cc), so
// the requester's retries run out as on hardware.
//
// Ports (STRATA_VERBS_EMU_LINK_LAYER):
//  - Ethernet (default, RoCE): GIDs 0 and 1 link-local (fe80::, then the IPv4
//    address, listener port and device as the interface id) as RoCE v1 and v2;
//    GIDs 2 and 3 the IPv4-mapped ::ffff:a.b.c.d as RoCE v1 and v2, as a RoCE
//    NIC with an IPv4 address reports them. No LID; every packet carries a GRH.
//  - "ib" (InfiniBand): LID k * 8 + device + 1; one GID, the subnet prefix and a
//    port GUID. The prefix is fe80:: (one subnet) unless STRATA_VERBS_EMU_SUBNET
//    gives 16 hex digits, or "process" (each process its own subnet, so every
//    path is routed with a GRH).
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

#include <csignal>
#include <string>

#include "emu.h"

namespace verbs_emu {
namespace {

std::string slotDir() {
  if (const char* d = getenv("STRATA_VERBS_EMU_DIR"); d && *d) return d;
  struct stat st{};
  std::string base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
  return base + "/strata-verbs-emu-" + std::to_string(getuid());
}

std::string slotFile(int k) { return slotDir() + "/slot-" + std::to_string(k); }

struct Record {
  long pid = 0;
  Endpoint at;
};

bool readSlot(int k, Record* r) {
  FILE* f = fopen(slotFile(k).c_str(), "re");
  if (!f) return false;
  unsigned ip = 0, port = 0;
  bool ok = fscanf(f, "%ld %u %u", &r->pid, &ip, &port) == 3 && port <= 65535;
  fclose(f);
  r->at = Endpoint{static_cast<uint32_t>(ip), static_cast<uint16_t>(port)};
  return ok;
}

bool alive(long pid) { return pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

void releaseSlot() {
  State& s = state();
  Record r;
  if (s.slot > 0 && s.slotPid == getpid() && readSlot(s.slot, &r) && r.pid == getpid()) unlink(slotFile(s.slot).c_str());
}

void writeSlot(int k) {
  std::string tmp = slotFile(k) + ".new." + std::to_string(getpid());
  FILE* f = fopen(tmp.c_str(), "we");
  if (!f) return;
  fprintf(f, "%ld %u %u\n", static_cast<long>(getpid()), state().ip, state().port);
  fclose(f);
  rename(tmp.c_str(), slotFile(k).c_str());  // whole, or not at all, to a reader
}

uint8_t hexDigit(char c) {
  return static_cast<uint8_t>(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10);
}

// The InfiniBand subnet prefix: the first 8 bytes of the port's GID.
void subnetPrefix(uint8_t* raw) {
  raw[0] = 0xfe;
  raw[1] = 0x80;
  const char* v = getenv("STRATA_VERBS_EMU_SUBNET");
  if (!v || !*v) return;
  if (strcmp(v, "process") == 0) {
    raw[1] = 0xc0;  // site-local fec0::<slot>
    raw[6] = static_cast<uint8_t>(state().slot >> 8);
    raw[7] = static_cast<uint8_t>(state().slot);
    return;
  }
  if (strlen(v) != 16 || strspn(v, "0123456789abcdefABCDEF") != 16) return;
  for (int i = 0; i < 8; ++i) raw[i] = static_cast<uint8_t>(hexDigit(v[2 * i]) << 4 | hexDigit(v[2 * i + 1]));
}

}  // namespace

void claimSlot() {
  State& s = state();
  std::string dir = slotDir();
  mkdir(dir.c_str(), 0700);
  int lock = open((dir + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) {
    fprintf(stderr, "verbs_emu: cannot lock %s/lock: %s\n", dir.c_str(), strerror(errno));
    abort();
  }
  s.slot = 0;
  for (int i = 0; i < kSlots - 1 && s.slot == 0; ++i) {
    int k = 1 + static_cast<int>((getpid() + i) % (kSlots - 1));
    Record r;
    if (readSlot(k, &r) && alive(r.pid)) continue;  // taken (a dead owner's slot is free again)
    s.slot = k;
    s.slotPid = getpid();
    writeSlot(k);
  }
  flock(lock, LOCK_UN);
  close(lock);
  if (s.slot == 0) {
    fprintf(stderr, "verbs_emu: all %d slots in %s are taken by live processes\n", kSlots - 1, dir.c_str());
    abort();
  }
  s.nextQpn = 1;
  static bool once = (atexit(releaseSlot), true);
  (void)once;
}

bool findEndpoint(uint32_t qpn, Endpoint* e) {
  int k = static_cast<int>(qpn >> kQpnBits);
  if (k == state().slot && state().slotPid == getpid()) {
    *e = Endpoint{state().ip, state().port};
    return true;
  }
  Record r;
  if (k <= 0 || k >= kSlots || !readSlot(k, &r)) return false;
  *e = r.at;
  return true;
}

bool infiniband() {
  const char* v = getenv("STRATA_VERBS_EMU_LINK_LAYER");
  return v && (strcmp(v, "ib") == 0 || strcmp(v, "IB") == 0 || strcmp(v, "infiniband") == 0);
}

int gidTableLength() { return infiniband() ? 1 : 4; }

ibv_mtu activeMtu() {
  const char* v = getenv("STRATA_VERBS_EMU_MTU");
  int bytes = v ? atoi(v) : 4096;
  if (v && strcmp(v, "mixed") == 0) bytes = state().slot % 2 ? 1024 : 4096;
  for (int m = IBV_MTU_4096; m > IBV_MTU_256; --m)
    if (bytes >= (128 << m)) return static_cast<ibv_mtu>(m);
  return IBV_MTU_256;
}

uint16_t localLid(int device) { return infiniband() ? static_cast<uint16_t>(state().slot * 8 + device + 1) : 0; }

bool localGidAt(int device, int index, ibv_gid* gid, int* type) {
  if (index < 0 || index >= gidTableLength()) return false;
  memset(gid, 0, sizeof(*gid));
  if (index >= 2) {  // ::ffff:a.b.c.d
    gid->raw[10] = gid->raw[11] = 0xff;
    memcpy(gid->raw + 12, &state().ip, 4);
  } else {
    if (infiniband()) subnetPrefix(gid->raw);
    else gid->raw[0] = 0xfe, gid->raw[1] = 0x80;
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
