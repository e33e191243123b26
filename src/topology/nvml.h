// GPUs as NVML reports them, with NVML loaded at run time (libnvidia-ml.so.1):
// a machine without the driver simply has no GPUs here.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace strata::topology {

struct NvmlGpu {
  std::string busId;  // "0000:07:00.0"
  int index = -1;     // NVML index
  int sm = 0;         // compute capability x 10 + minor
  std::vector<std::pair<std::string, int>> nvlinks;  // remote bus id -> active P2P-capable links
  std::vector<std::string> noP2p;                    // GPUs NVML says it cannot read and write directly
};

// Empty with `why` set when NVML is missing or reports nothing.
std::vector<NvmlGpu> probeNvmlGpus(std::string* why);

// "00000000:07:00.0" -> "0000:07:00.0", lower case.
std::string normalizeBusId(const std::string& busId);

}  // namespace strata::topology
