// A build without CUDA has no CUDA backend (gpu_backend.h).
#include "device/gpu_backend.h"

namespace strata::device {

GpuBackend* cudaGpus() { return nullptr; }

}  // namespace strata::device
