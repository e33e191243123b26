// The reference data itself: every expected result exact whatever order the ranks
// are combined in, results that change from position to position (so a chunk in the
// wrong place fails), inputs that differ from rank to rank, moved data unique.
#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "device/cpu_reduce.h"
#include "device/dtypes.h"
#include "verify/reference.h"

namespace strata::verify {
namespace {

constexpr int kRankCounts[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 32, 64};

device::ReduceOp libraryOp(TestOp op, ncclDataType_t type, int n) {
  device::ReduceOp r;
  static const device::ReduceKind kinds[] = {device::ReduceKind::kSum, device::ReduceKind::kProd,
                                             device::ReduceKind::kMax, device::ReduceKind::kMin};
  r.kind = op <= TestOp::kMin ? kinds[static_cast<int>(op)] : device::ReduceKind::kSum;
  if (op == TestOp::kAvg) r.postDivide = n;
  if (op == TestOp::kPreMulHost || op == TestOp::kPreMulDevice) {
    auto scalar = makeBuffer(type, 1, [](size_t) { return kPreMulScalar; });
    r.preMultiply = true;
    device::loadScalar(scalar.data(), type, &r);
  }
  return r;
}

// Every rank's input prepared (pre-multiplied where the op says), stored in the type.
std::vector<std::vector<char>> preparedInputs(ncclDataType_t type, TestOp op, int n, size_t count) {
  device::ReduceOp rop = libraryOp(op, type, n);
  std::vector<std::vector<char>> in;
  for (int r = 0; r < n; ++r) {
    auto raw = makeBuffer(type, count, [&](size_t i) { return inputValue(n, r, i, type, op); });
    std::vector<char> prepared(raw.size());
    device::prepare(prepared.data(), raw.data(), count, type, rop);
    in.push_back(std::move(prepared));
  }
  return in;
}

// Partial results of the ranks in [lo, hi) combined as halves, each rounded to the type.
std::vector<char> pairwise(const std::vector<std::vector<char>>& in, int lo, int hi, size_t count,
                           ncclDataType_t type, const device::ReduceOp& plain) {
  if (hi - lo == 1) return in[lo];
  int mid = (lo + hi) / 2;
  auto a = pairwise(in, lo, mid, count, type, plain);
  auto b = pairwise(in, mid, hi, count, type, plain);
  device::reduce(a.data(), a.data(), b.data(), count, type, plain);
  return a;
}

TEST(Reference, ExpectedResultsAreExactInEveryCombiningOrder) {
  constexpr size_t kCount = 1500;
  for (int t = 0; t < ncclNumTypes; ++t) {
    auto type = static_cast<ncclDataType_t>(t);
    for (TestOp op : kAllOps) {
      for (int n : kRankCounts) {
        auto in = preparedInputs(type, op, n, kCount);
        auto want = makeBuffer(type, kCount, [&](size_t i) { return reducedValue(n, i, type, op); });
        device::ReduceOp plain = libraryOp(op, type, n);
        plain.preMultiply = false;
        std::string what = std::string(device::dtypeName(type)) + " " + opName(op) + " n=" + std::to_string(n);
        // a chain from each of three starting ranks (rings start anywhere), and halves (trees)
        for (int start : {0, n / 2, n - 1}) {
          std::vector<char> acc = in[start];
          for (int k = 1; k < n; ++k) device::reduce(acc.data(), acc.data(), in[(start + k) % n].data(), kCount, type, plain);
          device::finalize(acc.data(), kCount, type, plain);
          ASSERT_EQ(compareBuffers(type, acc.data(), want.data(), kCount, what + " chain from " + std::to_string(start)), "");
        }
        auto tree = pairwise(in, 0, n, kCount, type, plain);
        device::finalize(tree.data(), kCount, type, plain);
        ASSERT_EQ(compareBuffers(type, tree.data(), want.data(), kCount, what + " halves"), "");
      }
    }
  }
}

// A window of expected results against the same window shifted by k: some element
// must differ, for every k a misplaced chunk could plausibly be off by.
std::vector<size_t> shifts(int n) {
  std::vector<size_t> k;
  for (size_t s = 1; s <= 64; ++s) k.push_back(s);
  for (size_t s = 128; s <= 4096; s *= 2) k.push_back(s);
  for (size_t s : {size_t(1031), size_t(n) * 3, size_t(n) * 7, size_t(n) * 64}) k.push_back(s);
  return k;
}

size_t differing(ncclDataType_t type, const std::vector<char>& buf, size_t from, size_t window) {
  size_t es = device::dtypeSize(type);
  return countMismatches(type, buf.data(), buf.data() + from * es, window);
}

TEST(Reference, ResultsChangeWithPositionSoMisplacedChunksShow) {
  constexpr size_t kWindow = 1024;
  for (int t = 0; t < ncclNumTypes; ++t) {
    auto type = static_cast<ncclDataType_t>(t);
    for (int n : kRankCounts) {
      if (n == 1) continue;
      for (TestOp op : {TestOp::kSum, TestOp::kProd, TestOp::kAvg, TestOp::kPreMulHost, TestOp::kMax, TestOp::kMin}) {
        // With 4 bits of mantissa, max and min over many ranks are nearly always the alphabet's ends.
        bool narrow = type == ncclFloat8e4m3 || type == ncclFloat8e5m2 || type == ncclBfloat16;
        if ((op == TestOp::kMax || op == TestOp::kMin) && narrow && n > 8) continue;
        size_t total = kWindow + size_t(n) * 64 + 4096;
        auto want = makeBuffer(type, total, [&](size_t i) { return reducedValue(n, i, type, op); });
        for (size_t k : shifts(n))
          ASSERT_GT(differing(type, want, k, kWindow), 0u)
              << device::dtypeName(type) << " " << opName(op) << " n=" << n << ": a shift by " << k << " is invisible";
      }
      // Data movement: pieces of different tags differ, and so does a piece against itself shifted.
      size_t total = kWindow + 8192;
      auto a = makeBuffer(type, total, [&](size_t i) { return movedValue(n, i, type); });
      auto b = makeBuffer(type, total, [&](size_t i) { return movedValue(n + 1, i, type); });
      ASSERT_GT(countMismatches(type, a.data(), b.data(), kWindow), kWindow * 9 / 10) << device::dtypeName(type);
      for (size_t k : shifts(n)) ASSERT_GT(differing(type, a, k, kWindow), kWindow * 9 / 10) << device::dtypeName(type) << " " << k;
    }
  }
}

// Up to how many ranks a type's inputs differ at every position (its budget allows it).
int distinctUpTo(ncclDataType_t type) {
  switch (type) {
    case ncclFloat8e4m3: case ncclFloat8e5m2: return 4;
    case ncclBfloat16: return 16;
    default: return 64;
  }
}

TEST(Reference, RanksHoldDifferentValuesAtEveryPosition) {
  for (int t = 0; t < ncclNumTypes; ++t) {
    auto type = static_cast<ncclDataType_t>(t);
    for (int n : kRankCounts) {
      if (n > distinctUpTo(type)) continue;
      for (TestOp op : {TestOp::kSum, TestOp::kMax}) {
        for (size_t i = 0; i < 2000; ++i) {
          std::set<double> seen;
          for (int r = 0; r < n; ++r) seen.insert(inputValue(n, r, i, type, op));
          ASSERT_EQ(seen.size(), size_t(n)) << device::dtypeName(type) << " n=" << n << " position " << i;
        }
      }
    }
  }
}

TEST(Reference, WideTypesAreUniquePerRankAndPosition) {
  for (auto type : {ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat32, ncclFloat64}) {
    for (int n : {2, 4, 8, 64}) {
      std::set<double> seen;
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < 4096; ++i) seen.insert(inputValue(n, r, i, type, TestOp::kSum));
      EXPECT_EQ(seen.size(), size_t(n) * 4096) << device::dtypeName(type) << " n=" << n;
    }
    std::set<double> moved;
    for (int tag = 0; tag < 16; ++tag)
      for (size_t i = 0; i < 4096; ++i) moved.insert(movedValue(tag, i, type));
    EXPECT_EQ(moved.size(), 16u * 4096) << device::dtypeName(type);
  }
}

TEST(Reference, TheMaximumMovesBetweenRanks) {
  // A max that returned one rank's buffer would pass if the same rank always held the largest value.
  for (auto type : {ncclInt8, ncclInt32, ncclFloat16, ncclFloat32, ncclInt64, ncclBfloat16}) {
    for (int n : {2, 4, 8}) {
      std::set<int> winners;
      for (size_t i = 0; i < 64; ++i) {
        double best = reducedValue(n, i, type, TestOp::kMax);
        for (int r = 0; r < n; ++r)
          if (inputValue(n, r, i, type, TestOp::kMax) == best) winners.insert(r);
      }
      EXPECT_EQ(winners.size(), size_t(n)) << device::dtypeName(type) << " n=" << n;
    }
  }
}

TEST(Reference, TheCInterfaceFillsTheSameValues) {
  std::vector<float> in(10), red(10), moved(10);
  ASSERT_EQ(strata_reference_input(ncclFloat32, static_cast<int>(TestOp::kSum), 4, 3, 100, 10, in.data()), 0);
  ASSERT_EQ(strata_reference_reduced(ncclFloat32, static_cast<int>(TestOp::kMax), 4, 100, 10, red.data()), 0);
  ASSERT_EQ(strata_reference_moved(ncclFloat32, 5, 100, 10, moved.data()), 0);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(in[i], static_cast<float>(inputValue(4, 3, 100 + i, ncclFloat32, TestOp::kSum)));
    EXPECT_EQ(red[i], static_cast<float>(reducedValue(4, 100 + i, ncclFloat32, TestOp::kMax)));
    EXPECT_EQ(moved[i], static_cast<float>(movedValue(5, 100 + i, ncclFloat32)));
  }
  EXPECT_EQ(strata_reference_input(ncclNumTypes, 0, 4, 0, 0, 1, in.data()), -1);
  EXPECT_EQ(strata_reference_reduced(ncclFloat32, 99, 4, 0, 1, in.data()), -1);
}

// A mismatch names values that differ in print as they differ in memory: small ones
// keep their digits, and where the text is alike (0 and -0) the bytes are given.
TEST(Reference, AMismatchPrintsValuesThatTellThemApart) {
  std::vector<float> got = {1.0f, 1e-8f}, want = {1.0f, 2e-8f};
  EXPECT_EQ(compareBuffers(ncclFloat32, got.data(), want.data(), 2, "x"), "x: element 1 of 2 is 1e-08, expected 2e-08");
  got = {-0.0f}, want = {0.0f};
  EXPECT_EQ(compareBuffers(ncclFloat32, got.data(), want.data(), 1, "y"), "y: element 0 of 1 is -0, expected 0");
  uint32_t nan1 = 0x7fc00001, nan2 = 0x7fc00002;
  memcpy(got.data(), &nan1, 4), memcpy(want.data(), &nan2, 4);
  EXPECT_EQ(compareBuffers(ncclFloat32, got.data(), want.data(), 1, "n"),
            "n: element 0 of 1 is nan (bytes 7fc00001), expected nan (bytes 7fc00002)");
  std::vector<double> d = {0.1}, e = {0.1 + 1e-17};
  EXPECT_EQ(compareBuffers(ncclFloat64, d.data(), e.data(), 1, "d"),
            "d: element 0 of 1 is 0.1, expected 0.10000000000000002");
  std::vector<int32_t> a = {35}, b = {95};
  EXPECT_EQ(compareBuffers(ncclInt32, a.data(), b.data(), 1, "z"), "z: element 0 of 1 is 35, expected 95");
}

}  // namespace
}  // namespace strata::verify
