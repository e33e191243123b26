// Storage formats of NCCL's 12 data types on the CPU and their conversions to a compute type.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "device/type_switch.h"
#include "nccl.h"

namespace strata::device {

// Bytes per element; 0 for an unknown type.
size_t dtypeSize(ncclDataType_t type);
// nccl-tests' short names: int8, uint8, int32, ..., half, float, double, bfloat16, f8e4m3, f8e5m2.
const char* dtypeName(ncclDataType_t type);

struct Bf16 { uint16_t bits; };
struct Fp8E4M3 { uint8_t bits; };
struct Fp8E5M2 { uint8_t bits; };

inline float bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// Round to nearest, ties to even; NaN stays a quiet NaN.
inline uint16_t floatToBf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// OCP FP8 formats as CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2 define them; conversion
// from float rounds to nearest even and saturates to the largest finite value.
float fp8E4M3ToFloat(uint8_t b);
float fp8E5M2ToFloat(uint8_t b);
uint8_t floatToFp8E4M3(float f);
uint8_t floatToFp8E5M2(float f);

// Load/store between a storage type and the type arithmetic is done in.
template <typename T>
struct Format {
  using Compute = T;
  static Compute load(T v) { return v; }
  static T store(Compute v) { return v; }
};
template <>
struct Format<_Float16> {
  using Compute = float;
  static float load(_Float16 v) { return static_cast<float>(v); }
  static _Float16 store(float v) { return static_cast<_Float16>(v); }
};
template <>
struct Format<Bf16> {
  using Compute = float;
  static float load(Bf16 v) { return bf16ToFloat(v.bits); }
  static Bf16 store(float v) { return Bf16{floatToBf16(v)}; }
};
template <>
struct Format<Fp8E4M3> {
  using Compute = float;
  static float load(Fp8E4M3 v) { return fp8E4M3ToFloat(v.bits); }
  static Fp8E4M3 store(float v) { return Fp8E4M3{floatToFp8E4M3(v)}; }
};
template <>
struct Format<Fp8E5M2> {
  using Compute = float;
  static float load(Fp8E5M2 v) { return fp8E5M2ToFloat(v.bits); }
  static Fp8E5M2 store(float v) { return Fp8E5M2{floatToFp8E5M2(v)}; }
};

// The CPU's storage types.
struct HostTypes {
  using Half = _Float16;
  using BFloat16 = Bf16;
  using Fp8E4M3 = device::Fp8E4M3;
  using Fp8E5M2 = device::Fp8E5M2;
};

// Calls f(T{}) with the storage type of `type`.
template <typename F>
decltype(auto) withType(ncclDataType_t type, F&& f) {
  return switchType<HostTypes>(type, std::forward<F>(f));
}

}  // namespace strata::device
