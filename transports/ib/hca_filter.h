// NCCL_IB_HCA: which devices and ports the IB network uses, as NCCL reads it.
// "mlx5_0:1,mlx5_1" selects by name prefix (a port, or any); "=" in front makes
// names exact; "^" in front excludes the list instead. Empty: every device.
#pragma once

#include <string>
#include <vector>

namespace strata::transport::ib {

class HcaFilter {
 public:
  explicit HcaFilter(const std::string& spec);
  bool selects(const std::string& device, int port) const;

 private:
  struct Item {
    std::string name;
    int port = -1;  // -1: any
  };
  bool exclude_ = false, exact_ = false;
  std::vector<Item> items_;
};

// The link rate of a port in Mbit/s from ibv_port_attr's active_speed and
// active_width codes (0 when a code is unknown).
int portRateMbps(int activeSpeed, int activeWidth);
// The rate sysfs gives a port, "800 Gb/sec (4X XDR)" in <ibdevPath>/ports/<port>/rate,
// in Mbit/s; 0 when unreadable. For speeds the 8-bit active_speed cannot code (XDR
// reads 0 there where rdma-core predates active_speed_ex, as Debian 12's v44 does).
int sysfsRateMbps(const std::string& ibdevPath, int port);

}  // namespace strata::transport::ib
