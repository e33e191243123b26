// NCCL's 12 data types as stored in memory: sizes, names, and the bit-exact
// conversions of the 16- and 8-bit floating formats. Header-only plain data:
// the device layer computes with it, and the reference-data library that the
// tests and perf tools use checks results with it, without linking each other.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "common/type_switch.h"
#include "nccl.h"

namespace strata {

// Bytes per element; 0 for an unknown type.
inline size_t dtypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// nccl-tests' short names: int8, uint8, int32, ..., half, float, double, bfloat16, f8e4m3, f8e5m2.
inline const char* dtypeName(ncclDataType_t type) {
  static const char* const names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                      "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  return (type >= 0 && type < ncclNumTypes) ? names[type] : "unknown";
}

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
struct Fp8Layout {
  int manBits;
  int bias;
  float maxFinite;
  uint8_t maxCode;  // encoding of +maxFinite
  uint8_t nanCode;
  bool hasInf;      // e5m2 encodes infinities, e4m3 does not
};
constexpr Fp8Layout kFp8E4M3{3, 7, 448.0f, 0x7e, 0x7f, false};
constexpr Fp8Layout kFp8E5M2{2, 15, 57344.0f, 0x7b, 0x7f, true};

inline float fp8Decode(uint8_t b, const Fp8Layout& l) {
  int expBits = 7 - l.manBits;
  int e = (b >> l.manBits) & ((1 << expBits) - 1);
  int m = b & ((1 << l.manBits) - 1);
  float sign = (b & 0x80) ? -1.0f : 1.0f;
  int expMax = (1 << expBits) - 1;
  if (l.hasInf && e == expMax) return m == 0 ? sign * INFINITY : NAN;
  if (!l.hasInf && e == expMax && m == (1 << l.manBits) - 1) return NAN;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), 1 - l.bias - l.manBits);
  return sign * std::ldexp(1.0f + static_cast<float>(m) / (1 << l.manBits), e - l.bias);
}

inline uint8_t fp8Encode(float f, const Fp8Layout& l) {
  if (std::isnan(f)) return l.nanCode;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= l.maxFinite) return sign | l.maxCode;  // saturate (inf included)
  int minNormalExp = 1 - l.bias;
  int e;
  std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  int exp = e - 1;    // a = 1.x * 2^exp
  if (exp < minNormalExp) exp = minNormalExp;
  float quantum = std::ldexp(1.0f, exp - l.manBits);
  float r = std::nearbyint(a / quantum) * quantum;  // ties to even in the default rounding mode
  if (r >= l.maxFinite) return sign | l.maxCode;
  if (r == 0) return sign;
  std::frexp(r, &e);
  exp = e - 1;
  if (exp < minNormalExp) {  // subnormal
    int m = static_cast<int>(r / std::ldexp(1.0f, minNormalExp - l.manBits));
    return sign | static_cast<uint8_t>(m);
  }
  int m = static_cast<int>((r / std::ldexp(1.0f, exp) - 1.0f) * (1 << l.manBits));
  return sign | static_cast<uint8_t>(((exp + l.bias) << l.manBits) | m);
}

// Decoding goes through a 256-entry table per format, made once.
struct Fp8Table {
  float values[256];
  explicit Fp8Table(const Fp8Layout& l) {
    for (int i = 0; i < 256; ++i) values[i] = fp8Decode(static_cast<uint8_t>(i), l);
  }
};
inline float fp8E4M3ToFloat(uint8_t b) {
  static const Fp8Table t(kFp8E4M3);
  return t.values[b];
}
inline float fp8E5M2ToFloat(uint8_t b) {
  static const Fp8Table t(kFp8E5M2);
  return t.values[b];
}
inline uint8_t floatToFp8E4M3(float f) { return fp8Encode(f, kFp8E4M3); }
inline uint8_t floatToFp8E5M2(float f) { return fp8Encode(f, kFp8E5M2); }

// IEEE binary16 in software, for compilers without _Float16 on this target
// (clang before 15 on x86-64); exact decode, round to nearest even on encode,
// infinities kept, NaN stays a quiet NaN. Checked against _Float16 (unit tests).
inline float halfBitsToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0);
  } else if (e != 0) {
    u = sign | ((e + 112) << 23) | (m << 13);
  } else {  // zero or subnormal: m x 2^-24, exact in float
    float f = std::ldexp(static_cast<float>(m), -24);
    return sign ? -f : f;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

inline uint16_t floatToHalfBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;                  // rounds to infinity (65520 and up)
  if (a < 0x38800000u) {                                         // below the smallest normal: subnormal
    float q = std::nearbyint(std::fabs(f) * 16777216.0f);        // in units of 2^-24, ties to even
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);              // ties to even at bit 13
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

struct SoftHalf {
  uint16_t bits;
};

// Load/store between a storage type and the type arithmetic is done in.
template <typename T>
struct Format {
  using Compute = T;
  static Compute load(T v) { return v; }
  static T store(Compute v) { return v; }
};
#if defined(__clang__) && __clang_major__ < 15 && defined(__x86_64__)
#define STRATA_SOFT_HALF 1  // no _Float16 on x86-64 before clang 15
using HostHalf = SoftHalf;
#else
using HostHalf = _Float16;
template <>
struct Format<_Float16> {
  using Compute = float;
  static float load(_Float16 v) { return static_cast<float>(v); }
  static _Float16 store(float v) { return static_cast<_Float16>(v); }
};
#endif
template <>
struct Format<SoftHalf> {
  using Compute = float;
  static float load(SoftHalf v) { return halfBitsToFloat(v.bits); }
  static SoftHalf store(float v) { return SoftHalf{floatToHalfBits(v)}; }
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
  using Half = HostHalf;
  using BFloat16 = Bf16;
  using Fp8E4M3 = strata::Fp8E4M3;
  using Fp8E5M2 = strata::Fp8E5M2;
};

// Calls f(T{}) with the host storage type of `type`.
template <typename F>
decltype(auto) withType(ncclDataType_t type, F&& f) {
  return switchType<HostTypes>(type, std::forward<F>(f));
}

}  // namespace strata
