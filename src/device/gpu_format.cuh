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
// GPUs before sm_89 have no fp8 conversion instructions: CUDA emulates them, and
// that emulation inlined into every unrolled access made e4m3's pipelined kernel
// 460,000 lines of PTX for sm_80 (ptxas took over five minutes and 6.5 GB on it).
// There the conversions are out of line, one copy per kernel module.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#define STRATA_FP8_CVT static __device__ __noinline__
#else
#define STRATA_FP8_CVT static __device__ __forceinline__
#endif
STRATA_FP8_CVT float fp8ToFloat(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
STRATA_FP8_CVT float fp8ToFloat(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
STRATA_FP8_CVT __nv_fp8_e4m3 floatToE4m3(float v) { return __nv_fp8_e4m3(v); }
STRATA_FP8_CVT __nv_fp8_e5m2 floatToE5m2(float v) { return __nv_fp8_e5m2(v); }
#undef STRATA_FP8_CVT

template <>
struct DevFormat<__nv_fp8_e4m3> {
  using C = float;
  __device__ static float load(__nv_fp8_e4m3 v) { return fp8ToFloat(v); }
  __device__ static __nv_fp8_e4m3 store(float v) { return floatToE4m3(v); }
};
template <>
struct DevFormat<__nv_fp8_e5m2> {
  using C = float;
  __device__ static float load(__nv_fp8_e5m2 v) { return fp8ToFloat(v); }
  __device__ static __nv_fp8_e5m2 store(float v) { return floatToE5m2(v); }
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
