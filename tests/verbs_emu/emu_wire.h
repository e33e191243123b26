// The emulated NIC's wire between processes (emu_nic.cc: the requester side;
// emu_responder.cc: the responder side) and the stream helpers both use.
//   hello {magic, src qpn, dst qpn, path}  -> {magic, 0 ready | 1 not ready or not for this QP}
//   request {op, len, addr, rkey, imm, rnr_retry} [+ len bytes for writes and sends]
//                                          -> {status, len} [+ len bytes for reads]
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "emu.h"

namespace verbs_emu {

inline constexpr uint32_t kMagic = 0x53564d55;  // "SVMU"

// With the requester's path, which the responder checks against its own queue
// pair's (emu_responder.cc): what a fabric would not deliver is refused.
struct Hello {
  uint32_t magic, srcQpn, dstQpn;
  uint8_t global, gidType, pathMtu, pad;
  uint16_t slid, dlid;
  uint8_t sgid[16], dgid[16];
};
struct HelloAck {
  uint32_t magic, status;
};
struct Request {
  uint32_t op, len;
  uint64_t addr;
  uint32_t rkey, imm, rnrRetry, pad;
};
struct Response {
  uint32_t status, len;
};

// IB's RNR NAK timer encoding, in milliseconds (min_rnr_timer 0..31).
inline const double kRnrMs[32] = {655.36, 0.01, 0.02, 0.03, 0.04,  0.06,  0.08,  0.12,  0.16,   0.24,   0.32,
                           0.48,   0.64, 0.96, 1.28, 1.92,  2.56,  3.84,  5.12,  7.68,   10.24,  15.36,
                           20.48,  30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52};

// Stores in ascending address order, as PCIe posted writes land (emu_wire.cc).
void landAscending(char* dst, const char* src, size_t n);
// The NIC's write of [addr, addr + n) into region `m`: landed, or held while `m` is
// device memory (State::held; STRATA_VERBS_EMU_DEVICE_WRITES=visible lands it at once).
void landInto(Mr* m, uint64_t addr, const char* src, size_t n);
// Before the NIC reads region `m`, or deregisters it: where `m` is device memory, every
// held write lands, in order (a read through the NIC follows all its earlier writes
// to the device, whichever registration of the same pages they went through).
void settle(Mr* m);
// The region a remote access with `rkey` may use for [addr, addr + len), or null.
Mr* findRemote(ibv_pd* pd, uint32_t rkey, uint64_t addr, uint64_t len, int access);
// Writes what it can without blocking; false when the stream is broken.
bool flushOut(int fd, std::string* out);
// Reads what is there (up to `cap` buffered); false on end of stream or error.
bool fillIn(int fd, std::string* in, size_t cap);
template <typename T>
void append(std::string* s, const T& v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Applies what a peer's requester sent on one stream; false when the stream must close.
bool driveResponder(Responder& r);

}  // namespace verbs_emu
