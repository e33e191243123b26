// The arithmetic of one reduction step, shared by the CPU loops and the CUDA
// kernels so that both give the same bits.
#pragma once

#include <type_traits>

#include "device/cpu_reduce.h"

#ifdef __CUDACC__
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata::device {

// a OP b in the compute type; integers wrap (unsigned arithmetic) instead of overflowing.
template <typename C>
STRATA_HOST_DEVICE inline C combine(C a, C b, ReduceKind kind) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    switch (kind) {
      case ReduceKind::kSum: return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
      case ReduceKind::kProd: return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
      case ReduceKind::kMax: return a > b ? a : b;
      default: return a < b ? a : b;
    }
  } else {
    switch (kind) {
      case ReduceKind::kSum: return a + b;
      case ReduceKind::kProd: return a * b;
      case ReduceKind::kMax: return a > b ? a : b;
      default: return a < b ? a : b;
    }
  }
}

}  // namespace strata::device
