#include "device/dtypes.h"

#include <cmath>

namespace strata::device {

size_t dtypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* dtypeName(ncclDataType_t type) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  return (type >= 0 && type < ncclNumTypes) ? names[type] : "unknown";
}

namespace {

// An FP8 layout: exponent and mantissa widths and the largest finite value.
struct Fp8Layout {
  int manBits;
  int bias;
  float maxFinite;
  uint8_t maxCode;  // encoding of +maxFinite
  uint8_t nanCode;
  bool hasInf;      // e5m2 encodes infinities, e4m3 does not
};
constexpr Fp8Layout kE4M3{3, 7, 448.0f, 0x7e, 0x7f, false};
constexpr Fp8Layout kE5M2{2, 15, 57344.0f, 0x7b, 0x7f, true};

float decode(uint8_t b, const Fp8Layout& l) {
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

uint8_t encode(float f, const Fp8Layout& l) {
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

struct Table {
  float values[256];
  explicit Table(const Fp8Layout& l) {
    for (int i = 0; i < 256; ++i) values[i] = decode(static_cast<uint8_t>(i), l);
  }
};

}  // namespace

float fp8E4M3ToFloat(uint8_t b) {
  static const Table t(kE4M3);
  return t.values[b];
}
float fp8E5M2ToFloat(uint8_t b) {
  static const Table t(kE5M2);
  return t.values[b];
}
uint8_t floatToFp8E4M3(float f) { return encode(f, kE4M3); }
uint8_t floatToFp8E5M2(float f) { return encode(f, kE5M2); }

}  // namespace strata::device
