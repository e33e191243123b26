// The pipelined collective kernel for fp8 e5m2 (gpu_kernel_pipe.cuh; each fp8 type in
// a file of its own: before sm_89 their conversions make them the slowest to compile).
#include "device/gpu_kernel_pipe.cuh"

namespace strata::device::cuda {

template void launchPipe<__nv_fp8_e5m2>(const KernelPipe& k, void* stream);

}  // namespace strata::device::cuda
