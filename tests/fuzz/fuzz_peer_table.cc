// What reaches a bootstrap root (and comes back from it) from other processes: a
// hello header and PeerInfo entries. Any bytes must be refused with a
// strata::Error or unpacked into entries whose names end inside their arrays.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/error.h"
#include "core/bootstrap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string msg(reinterpret_cast<const char*>(data), size);
  try {
    strata::core::HelloHeader h;
    auto peers = strata::core::unpackPeers(msg, &h);
    for (const strata::PeerInfo& p : peers)  // reads every name to its end, as the logs and doorbells do
      if (strlen(p.hostname) + strlen(p.bellName) + strlen(p.busId) > 1 << 20) __builtin_trap();
    std::string again = strata::core::packPeers(h, peers);
    strata::core::HelloHeader h2;
    (void)strata::core::unpackPeers(again, &h2);
  } catch (const strata::Error&) {
  }
  return 0;
}
