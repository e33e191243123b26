// Dispatch on an NCCL datatype. The 16- and 8-bit floating types are stored
// differently on the CPU (dtypes.h) and in CUDA kernels (cuda_fp16.h ...), so the
// caller names its set of storage types; the integers, float and double are shared.
#pragma once

#include <cstdint>

#include "nccl.h"

namespace strata {

// Calls f(T{}) with the storage type of `type`; Types provides Half, BFloat16, Fp8E4M3, Fp8E5M2.
template <typename Types, typename F>
decltype(auto) switchType(ncclDataType_t type, F&& f) {
  switch (type) {
    case ncclInt8: return f(int8_t{});
    case ncclUint8: return f(uint8_t{});
    case ncclInt32: return f(int32_t{});
    case ncclUint32: return f(uint32_t{});
    case ncclInt64: return f(int64_t{});
    case ncclUint64: return f(uint64_t{});
    case ncclFloat16: return f(typename Types::Half{});
    case ncclFloat32: return f(float{});
    case ncclFloat64: return f(double{});
    case ncclBfloat16: return f(typename Types::BFloat16{});
    case ncclFloat8e4m3: return f(typename Types::Fp8E4M3{});
    default: return f(typename Types::Fp8E5M2{});
  }
}

}  // namespace strata
