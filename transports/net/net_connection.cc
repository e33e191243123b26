#include "transports/net/net_connection.h"

#include "transports/net/rail.h"

namespace strata::transport::net {

int deviceFor(Network& net, const PeerInfo& self) {
  std::string why;
  int d = railDevice(net, self, &why);
  STRATA_INFO(kSubsysNet, self.rank, "net transport (%s): rank %d uses device %d (%s): %s", net.name().c_str(),
              self.rank, d, net.properties(d).name.c_str(), why.c_str());
  return d;
}

std::chrono::steady_clock::time_point abortWindowEnd() {
  static std::mutex mu;
  static std::chrono::steady_clock::time_point end;
  std::lock_guard<std::mutex> lock(mu);
  auto now = std::chrono::steady_clock::now();
  if (now > end + std::chrono::seconds(1)) end = now + std::chrono::milliseconds(500);
  return end;
}

}  // namespace strata::transport::net
