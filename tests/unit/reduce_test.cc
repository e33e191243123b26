// Conversions and reductions of the CPU device layer against hand-checked values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "device/cpu_reduce.h"
#include "device/dtypes.h"

namespace strata::device {
namespace {

#ifndef STRATA_SOFT_HALF
// The software binary16 (used where the compiler has no _Float16) against the
// compiler's: every half decodes alike, and every half, every midpoint between
// neighbours (ties to even) and a sweep of floats encode alike.
uint16_t hardBits(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}

TEST(SoftHalf, MatchesTheCompilersHalfEverywhere) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    _Float16 h;
    uint16_t bits = static_cast<uint16_t>(b);
    memcpy(&h, &bits, 2);
    float hard = static_cast<float>(h), soft = halfBitsToFloat(bits);
    if (std::isnan(hard)) {
      ASSERT_TRUE(std::isnan(soft)) << b;
      ASSERT_TRUE(std::isnan(halfBitsToFloat(floatToHalfBits(soft)))) << b;
      continue;
    }
    ASSERT_EQ(memcmp(&hard, &soft, 4), 0) << "decode " << b;
    ASSERT_EQ(floatToHalfBits(hard), bits) << "round trip " << b;
    if ((b & 0x7fff) < 0x7c00) {  // finite: the midpoint to the next half up, and just around it
      uint16_t next = static_cast<uint16_t>(b + 1);
      _Float16 n;
      memcpy(&n, &next, 2);
      float mid = (hard + static_cast<float>(n)) / 2;
      for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)})
        ASSERT_EQ(floatToHalfBits(f), hardBits(f)) << "encode " << f << " near half " << b;
    }
  }
  uint32_t x = 12345;
  for (int i = 0; i < 1000000; ++i) {  // floats of every exponent
    x = x * 1664525u + 1013904223u;
    float f;
    memcpy(&f, &x, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(floatToHalfBits(f), hardBits(f)) << f;
  }
}
#endif

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(1.0f + 1.0f / 256), 0x3f80);      // halfway, even stays
  EXPECT_EQ(floatToBf16(1.0f + 3.0f / 256), 0x3f82);      // halfway, odd rounds up
  EXPECT_EQ(floatToBf16(1.0f + 1.5f / 256), 0x3f81);      // above halfway
  EXPECT_EQ(floatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(floatToBf16(INFINITY), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
}

TEST(Fp8E4M3, KnownEncodings) {
  EXPECT_EQ(floatToFp8E4M3(1.0f), 0x38);
  EXPECT_EQ(floatToFp8E4M3(0.5f), 0x30);
  EXPECT_EQ(floatToFp8E4M3(448.0f), 0x7e);
  EXPECT_EQ(floatToFp8E4M3(1000.0f), 0x7e);   // saturates
  EXPECT_EQ(floatToFp8E4M3(-INFINITY), 0xfe);  // saturates, keeps the sign
  EXPECT_EQ(floatToFp8E4M3(NAN), 0x7f);
  EXPECT_EQ(floatToFp8E4M3(std::ldexp(1.0f, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(floatToFp8E4M3(1.0625f), 0x38);  // tie between 1.0 and 1.125 goes to even
  EXPECT_EQ(floatToFp8E4M3(1.1875f), 0x3a);  // tie between 1.125 and 1.25 goes to even
  EXPECT_FLOAT_EQ(fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(fp8E4M3ToFloat(0x7f)));
}

TEST(Fp8E5M2, KnownEncodings) {
  EXPECT_EQ(floatToFp8E5M2(1.0f), 0x3c);
  EXPECT_EQ(floatToFp8E5M2(57344.0f), 0x7b);
  EXPECT_EQ(floatToFp8E5M2(INFINITY), 0x7b);
  EXPECT_EQ(floatToFp8E5M2(1.125f), 0x3c);  // tie between 1.0 and 1.25 goes to even
  EXPECT_EQ(floatToFp8E5M2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_TRUE(std::isinf(fp8E5M2ToFloat(0x7c)));
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    float a = fp8E4M3ToFloat(static_cast<uint8_t>(c));
    if (!std::isnan(a)) {
      EXPECT_EQ(floatToFp8E4M3(a), c) << c;
    }
    float b = fp8E5M2ToFloat(static_cast<uint8_t>(c));
    if (std::isfinite(b)) {
      EXPECT_EQ(floatToFp8E5M2(b), c) << c;
    }
  }
}

TEST(Half, RoundsToNearestEven) {
  _Float16 h = static_cast<_Float16>(2049.0f);  // halfway between 2048 and 2050
  EXPECT_EQ(static_cast<float>(h), 2048.0f);
  h = static_cast<_Float16>(2051.0f);
  EXPECT_EQ(static_cast<float>(h), 2052.0f);
}

template <typename T>
std::vector<T> run(ReduceOp op, ncclDataType_t type, std::vector<T> acc, std::vector<T> local) {
  std::vector<T> out(acc.size());
  reduce(out.data(), acc.data(), local.data(), acc.size(), type, op);
  return out;
}

TEST(Reduce, IntegerOpsWrapAndCompare) {
  ReduceOp sum, prod, mx, mn;
  prod.kind = ReduceKind::kProd;
  mx.kind = ReduceKind::kMax;
  mn.kind = ReduceKind::kMin;
  EXPECT_EQ(run<int8_t>(sum, ncclInt8, {127, -3}, {1, 5}), (std::vector<int8_t>{-128, 2}));
  EXPECT_EQ(run<uint32_t>(prod, ncclUint32, {0x80000000u, 3}, {2, 5}), (std::vector<uint32_t>{0, 15}));
  EXPECT_EQ(run<int64_t>(mx, ncclInt64, {-5, 9}, {-7, 10}), (std::vector<int64_t>{-5, 10}));
  EXPECT_EQ(run<int32_t>(mn, ncclInt32, {-5, 9}, {-7, 10}), (std::vector<int32_t>{-7, 9}));
}

TEST(Reduce, PreMultiplyScalesOnlyTheLocalInput) {
  ReduceOp op;
  op.preMultiply = true;
  op.scalarF = 0.5;
  EXPECT_EQ(run<float>(op, ncclFloat32, {1.0f, 2.0f}, {4.0f, 6.0f}), (std::vector<float>{3.0f, 5.0f}));
  std::vector<double> out(2), in{3.0, -8.0};
  op.scalarF = 0.25;
  prepare(out.data(), in.data(), 2, ncclFloat64, op);
  EXPECT_EQ(out, (std::vector<double>{0.75, -2.0}));
}

// Integer scalars wrap as the sums do (two's complement), never overflow (UBSan).
TEST(Reduce, IntegerPreMultiplyWraps) {
  ReduceOp op;
  op.preMultiply = true;
  op.scalarI = 4;
  std::vector<int32_t> out(2), in{0x40000000, -3};
  prepare(out.data(), in.data(), 2, ncclInt32, op);
  EXPECT_EQ(out, (std::vector<int32_t>{0, -12}));
  EXPECT_EQ(run<int32_t>(op, ncclInt32, {1, 2}, {0x40000001, 5}), (std::vector<int32_t>{5, 22}));
}

TEST(Reduce, AvgDividesTheFinalSum) {
  ReduceOp op;
  op.postDivide = 4;
  std::vector<int32_t> i{9, -9};
  finalize(i.data(), 2, ncclInt32, op);
  EXPECT_EQ(i, (std::vector<int32_t>{2, -2}));  // truncates, as integer division does
  std::vector<uint16_t> b{floatToBf16(10.0f)};
  finalize(b.data(), 1, ncclBfloat16, op);
  EXPECT_EQ(bf16ToFloat(b[0]), 2.5f);
}

TEST(Reduce, Fp8SumRoundsEachResult) {
  ReduceOp sum;
  std::vector<uint8_t> a{floatToFp8E4M3(16.0f)}, b{floatToFp8E4M3(1.0f)}, out(1);
  reduce(out.data(), a.data(), b.data(), 1, ncclFloat8e4m3, sum);
  EXPECT_EQ(fp8E4M3ToFloat(out[0]), 16.0f);  // 17 is a tie between 16 and 18: even mantissa wins
}

TEST(Reduce, InPlaceLongVectors) {
  ReduceOp sum;
  std::vector<float> a(100003, 1.5f), b(100003, 2.0f);
  reduce(a.data(), a.data(), b.data(), a.size(), ncclFloat32, sum);
  for (float v : a) ASSERT_EQ(v, 3.5f);
}

TEST(Copy, StreamingCopyAnyAlignmentAndLength) {
  std::vector<unsigned char> src(70000), dst(70016);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  for (size_t offset : {0, 1, 8, 15}) {
    for (size_t len : {size_t{0}, size_t{100}, size_t{4096}, size_t{65537}, size_t{69999}}) {
      std::fill(dst.begin(), dst.end(), 0xee);
      copyStreaming(dst.data() + offset, src.data(), len);
      ASSERT_EQ(memcmp(dst.data() + offset, src.data(), len), 0) << offset << " " << len;
      ASSERT_EQ(dst[offset + len], 0xee) << "wrote past the end";
      if (offset) {
        ASSERT_EQ(dst[offset - 1], 0xee) << "wrote before the start";
      }
    }
  }
}

TEST(Dtypes, SizesAndNames) {
  EXPECT_EQ(dtypeSize(ncclBfloat16), 2u);
  EXPECT_EQ(dtypeSize(ncclFloat8e5m2), 1u);
  EXPECT_EQ(dtypeSize(ncclUint64), 8u);
  EXPECT_EQ(dtypeSize(static_cast<ncclDataType_t>(12)), 0u);
  EXPECT_STREQ(dtypeName(ncclFloat16), "half");
}

}  // namespace
}  // namespace strata::device
