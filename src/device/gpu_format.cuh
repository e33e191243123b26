// Storage types of the CUDA kernels and the arithmetic type of each (shared by
// gpu_kernels.cu and gpu_kernel_coll.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <utility>

#include "common/type_switch.h"

namespace strata::device::cuda {

// Storage type -> the type arithmetic is done in, and back (round to nearest even;
// fp8 saturates to the largest finite value, as the CPU conversions do).
template <typename T>
struct DevFormat {
  using C = T;
  __device__ static C load(T v) { return v; }
  __device__ static T store(C v) { return v; }
};
template <>
struct DevFormat<__half> {
  using C = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct DevFormat<__nv_bfloat16> {
  using C = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct DevFormat<__nv_fp8_e4m3> {
  using C = float;
  __device__ static float load(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
  __device__ static __nv_fp8_e4m3 store(float v) { return __nv_fp8_e4m3(v); }
};
template <>
struct DevFormat<__nv_fp8_e5m2> {
  using C = float;
  __device__ static float load(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
  __device__ static __nv_fp8_e5m2 store(float v) { return __nv_fp8_e5m2(v); }
};

// The kernels' storage types.
struct CudaTypes {
  using Half = __half;
  using BFloat16 = __nv_bfloat16;
  using Fp8E4M3 = __nv_fp8_e4m3;
  using Fp8E5M2 = __nv_fp8_e5m2;
};

template <typename F>
void withDevType(ncclDataType_t type, F&& f) {
  switchType<CudaTypes>(type, std::forward<F>(f));
}

}  // namespace strata::device::cuda
