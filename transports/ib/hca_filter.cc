#include "transports/ib/hca_filter.h"

#include <cstdlib>
#include <fstream>

namespace strata::transport::ib {

HcaFilter::HcaFilter(const std::string& spec) {
  size_t i = 0;
  if (i < spec.size() && spec[i] == '^') exclude_ = true, ++i;
  if (i < spec.size() && spec[i] == '=') exact_ = true, ++i;
  while (i < spec.size()) {
    size_t comma = spec.find(',', i);
    if (comma == std::string::npos) comma = spec.size();
    std::string tok = spec.substr(i, comma - i);
    i = comma + 1;
    if (tok.empty()) continue;
    Item it;
    size_t colon = tok.find(':');
    it.name = tok.substr(0, colon);
    if (colon != std::string::npos) it.port = atoi(tok.c_str() + colon + 1);
    if (!it.name.empty()) items_.push_back(it);
  }
}

bool HcaFilter::selects(const std::string& device, int port) const {
  if (items_.empty()) return true;
  bool listed = false;
  for (const Item& it : items_) {
    bool name = exact_ ? device == it.name : device.compare(0, it.name.size(), it.name) == 0;
    if (name && (it.port < 0 || it.port == port)) listed = true;
  }
  return listed != exclude_;
}

int portRateMbps(int activeSpeed, int activeWidth) {
  int lane;  // Mbit/s per lane
  switch (activeSpeed) {
    case 1: lane = 2500; break;     // SDR
    case 2: lane = 5000; break;     // DDR
    case 4: lane = 10000; break;    // QDR
    case 8: lane = 10000; break;    // FDR10
    case 16: lane = 14000; break;   // FDR
    case 32: lane = 25000; break;   // EDR
    case 64: lane = 50000; break;   // HDR
    case 128: lane = 100000; break; // NDR
    case 256: lane = 200000; break; // XDR (active_speed_ex, rdma-core 50 and later)
    default: return 0;
  }
  int lanes;
  switch (activeWidth) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: return 0;
  }
  return lane * lanes;
}

int sysfsRateMbps(const std::string& ibdevPath, int port) {
  std::ifstream in(ibdevPath + "/ports/" + std::to_string(port) + "/rate");
  double gbps = 0;
  std::string unit;
  if (ibdevPath.empty() || !(in >> gbps >> unit) || unit != "Gb/sec" || gbps <= 0 || gbps > 1e6) return 0;
  return static_cast<int>(gbps * 1000 + 0.5);
}

}  // namespace strata::transport::ib
