// The post office's framing on a bootstrap connection: a WireHeader, then
// `length` payload bytes. FrameReader is one connection's message in the making,
// filled from whatever bytes arrive, never past the message it is on; it holds
// no socket, so a fuzzer can drive it (tests/fuzz/fuzz_post_office_framing.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace strata::core {

struct WireHeader {
  uint64_t magic;
  uint32_t kind;
  int32_t src;
  int32_t dst;
  uint64_t seq;
  uint64_t length;
};

constexpr uint64_t kMaxPayload = 1ull << 30;

class FrameReader {
 public:
  // Where the next bytes go and how many fit, at most 1 MiB, all of them within
  // the current message; {nullptr, 0} once the header claims more than kMaxPayload
  // (nothing any rank sends: the connection should close).
  std::pair<char*, size_t> space();
  // `n` bytes were stored into space(); true once the message is complete.
  bool commit(size_t n);
  bool started() const { return headerGot_ > 0; }
  bool complete() const { return headerGot_ == sizeof(h_) && got_ == h_.length; }
  const WireHeader& header() const { return h_; }
  std::string takePayload();  // the complete message's payload; the reader starts over
  double lastByte = 0;        // when bytes last arrived (the caller's clock)

 private:
  WireHeader h_{};
  size_t headerGot_ = 0;
  std::string payload_;  // grows as bytes arrive: a length claimed is not allocated up front
  size_t got_ = 0;       // payload bytes stored
};

}  // namespace strata::core
