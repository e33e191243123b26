// What reaches a post office from any process that connects to it: a byte
// stream cut into messages by their headers. Fed in chunks of every size, the
// reader must never store past the message it is on, never allocate what a
// header merely claims, and hand over payloads of exactly the length claimed.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t chunk = 1 + data[0] % 64;  // how the bytes arrive: 1..64 at a time
  ++data;
  --size;
  strata::core::FrameReader in;
  while (size > 0) {
    auto [at, room] = in.space();
    if (!at) return 0;  // a length no rank sends: the post office closes the connection
    if (room == 0 || room > (1 << 20)) __builtin_trap();
    size_t k = room < chunk ? room : chunk;
    if (k > size) k = size;
    memcpy(at, data, k);  // ASan: past the space offered would be an overflow
    data += k;
    size -= k;
    if (in.commit(k)) {
      uint64_t claimed = in.header().length;
      if (in.takePayload().size() != claimed || in.started()) __builtin_trap();
    }
  }
  return 0;
}
