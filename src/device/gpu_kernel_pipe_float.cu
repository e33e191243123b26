// The pipelined collective kernel for float and double (gpu_kernel_pipe.cuh).
#include "device/gpu_kernel_pipe.cuh"

namespace strata::device::cuda {

template void launchPipe<float>(const KernelPipe& k, void* stream);
template void launchPipe<double>(const KernelPipe& k, void* stream);

}  // namespace strata::device::cuda
