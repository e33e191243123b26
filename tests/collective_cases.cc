// The exact-results cases every rank runs: every collective, counts 0, 1,
// n-1, n, odd and large, every datatype and op, in place and out of place,
// every root.
#include "collective_cases.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "device/dtypes.h"
#include "harness/ranks.h"
#include "verify/reference.h"

namespace strata::test {
namespace {

using namespace strata::verify;

using device::dtypeName;
using device::dtypeSize;

constexpr ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,
                                        ncclInt64,   ncclUint64,  ncclFloat16,  ncclFloat32,
                                        ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

std::vector<size_t> countsFor(int n) { return {0, 1, static_cast<size_t>(n > 1 ? n - 1 : 2), static_cast<size_t>(n), 1031}; }
constexpr size_t kLargeCount = 300007;  // several staging slots per channel, not a multiple of anything

// STRATA_TEST_COLLECTIVES (tests only; a comma-separated list of NCCL's names, e.g.
// "AllReduce,Broadcast"): the ctest variants that change one collective's algorithm
// run only the cases it changes. Unset: every collective.
bool wanted(const char* coll) {
  const char* only = getenv("STRATA_TEST_COLLECTIVES");
  if (!only || !*only) return true;
  std::string list = std::string(",") + only + ",";
  return list.find(std::string(",") + coll + ",") != std::string::npos;
}

// Creates the NCCL op for a test op (a pre-multiplied sum is made per call, as PyTorch does).
struct OpHandle {
  ncclRedOp_t op = ncclSum;
  ncclComm_t comm = nullptr;
  std::vector<char> scalar;
  ~OpHandle() {
    if (op >= ncclNumOps) ncclRedOpDestroy(op, comm);
  }
};

std::string makeOp(TestOp t, ncclDataType_t type, ncclComm_t comm, OpHandle* h) {
  static const ncclRedOp_t builtin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  h->comm = comm;
  if (t != TestOp::kPreMulHost && t != TestOp::kPreMulDevice) {
    h->op = builtin[static_cast<int>(t)];
    return "";
  }
  h->scalar = makeBuffer(type, 1, [](size_t) { return kPreMulScalar; });
  auto residence = t == TestOp::kPreMulHost ? ncclScalarHostImmediate : ncclScalarDevice;
  RANK_NCCL(ncclRedOpCreatePreMulSum(&h->op, h->scalar.data(), type, residence, comm));
  return "";
}

std::string label(const char* coll, ncclDataType_t type, TestOp op, size_t count, bool inPlace, int root = -1) {
  std::string s = std::string(coll) + " " + dtypeName(type) + " " + opName(op) + " count " + std::to_string(count) +
                  (inPlace ? " in-place" : " out-of-place");
  if (root >= 0) s += " root " + std::to_string(root);
  return s;
}

// All-reduce, reduce-scatter or reduce of one case.
std::string reduceCase(ncclComm_t comm, int rank, int n, const char* coll, ncclDataType_t type, TestOp op,
                       size_t count, bool inPlace, int root) {
  if (!wanted(coll)) return "";
  bool rs = strcmp(coll, "ReduceScatter") == 0;
  size_t es = dtypeSize(type);
  size_t inCount = rs ? count * n : count;
  auto input = makeBuffer(type, inCount, [&](size_t i) { return inputValue(n, rank, i, type, op); });
  auto expected = makeBuffer(type, count, [&](size_t i) { return reducedValue(n, rs ? rank * count + i : i, type, op); });
  std::vector<char> out(inCount * es + 1, 0x5a);
  char* recv = inPlace ? input.data() + (rs ? rank * count * es : 0) : out.data();
  OpHandle h;
  if (std::string e = makeOp(op, type, comm, &h); !e.empty()) return e;
  std::string what = label(coll, type, op, count, inPlace, root);
  ncclResult_t r;
  if (rs)
    r = ncclReduceScatter(input.data(), recv, count, type, h.op, comm, nullptr);
  else if (strcmp(coll, "AllReduce") == 0)
    r = ncclAllReduce(input.data(), recv, count, type, h.op, comm, nullptr);
  else
    r = ncclReduce(input.data(), recv, count, type, h.op, root, comm, nullptr);
  if (r != ncclSuccess) return what + ": " + ncclFailure("collective", r);
  if (strcmp(coll, "Reduce") == 0 && rank != root) return "";
  return compareBuffers(type, recv, expected.data(), count, what);
}

std::string gatherCase(ncclComm_t comm, int rank, int n, const char* coll, ncclDataType_t type, size_t count,
                       bool inPlace, int root) {
  if (!wanted(coll)) return "";
  size_t es = dtypeSize(type);
  bool ag = strcmp(coll, "AllGather") == 0;
  auto mine = makeBuffer(type, count, [&](size_t i) { return movedValue(rank, i, type); });
  auto expected = makeBuffer(type, count * n, [&](size_t i) { return movedValue(i / count, i % count, type); });
  std::vector<char> out(count * n * es + 1, 0x5a);
  const char* send = mine.data();
  if (inPlace) {
    memcpy(out.data() + (ag ? rank : root) * count * es, mine.data(), count * es);
    if (ag || rank == root) send = out.data() + (ag ? rank : root) * count * es;
  }
  std::string what = label(coll, type, TestOp::kSum, count, inPlace, ag ? -1 : root);
  ncclResult_t r = ag ? ncclAllGather(send, out.data(), count, type, comm, nullptr)
                      : ncclGather(send, out.data(), count, type, root, comm, nullptr);
  if (r != ncclSuccess) return what + ": " + ncclFailure("collective", r);
  if (!ag && rank != root) return "";
  return compareBuffers(type, out.data(), expected.data(), count * n, what);
}

// Broadcast and scatter: data flows out of the root.
std::string scatterCase(ncclComm_t comm, int rank, int n, const char* coll, ncclDataType_t type, size_t count,
                        bool inPlace, int root) {
  if (!wanted(coll)) return "";
  size_t es = dtypeSize(type);
  bool bc = strcmp(coll, "Broadcast") == 0;
  size_t total = bc ? count : count * n;
  auto src = makeBuffer(type, total, [&](size_t i) { return rank == root ? movedValue(root, i, type) : -1; });
  auto full = makeBuffer(type, total, [&](size_t i) { return movedValue(root, i, type); });
  const char* expected = full.data() + (bc ? 0 : rank * count * es);
  std::vector<char> out(count * es + 1, 0x5a);
  char* recv = out.data();
  if (inPlace && (bc || rank == root)) recv = src.data() + (bc ? 0 : root * count * es);
  std::string what = label(coll, type, TestOp::kSum, count, inPlace, root);
  ncclResult_t r = bc ? ncclBroadcast(src.data(), recv, count, type, root, comm, nullptr)
                      : ncclScatter(src.data(), recv, count, type, root, comm, nullptr);
  if (r != ncclSuccess) return what + ": " + ncclFailure("collective", r);
  return compareBuffers(type, recv, expected, count, what);
}

std::string alltoallCase(ncclComm_t comm, int rank, int n, ncclDataType_t type, size_t count, bool inPlace) {
  if (!wanted("AlltoAll")) return "";
  size_t es = dtypeSize(type);
  // Rank r's piece j holds values tagged (r, j).
  auto input = makeBuffer(type, count * n, [&](size_t i) { return movedValue(rank * n + i / count, i % count, type); });
  auto expected =
      makeBuffer(type, count * n, [&](size_t i) { return movedValue((i / count) * n + rank, i % count, type); });
  std::vector<char> out(count * n * es + 1, 0x5a);
  char* recv = inPlace ? input.data() : out.data();
  std::string what = label("AlltoAll", type, TestOp::kSum, count, inPlace);
  ncclResult_t r = ncclAlltoAll(input.data(), recv, count, type, comm, nullptr);
  if (r != ncclSuccess) return what + ": " + ncclFailure("collective", r);
  return compareBuffers(type, recv, expected.data(), count * n, what);
}

}  // namespace

std::string runAll(ncclComm_t comm, int rank, int n) {
  for (ncclDataType_t type : kAllTypes) {
    for (size_t count : countsFor(n)) {
      for (bool inPlace : {false, true}) {
        for (TestOp op : kAllOps) {
          for (const char* coll : {"AllReduce", "ReduceScatter"})
            if (auto e = reduceCase(comm, rank, n, coll, type, op, count, inPlace, 0); !e.empty()) return e;
        }
        for (int root = 0; root < n; ++root) {
          for (TestOp op : {TestOp::kSum, TestOp::kMax, TestOp::kPreMulDevice})
            if (auto e = reduceCase(comm, rank, n, "Reduce", type, op, count, inPlace, root); !e.empty()) return e;
          for (const char* coll : {"Broadcast", "Scatter"})
            if (auto e = scatterCase(comm, rank, n, coll, type, count, inPlace, root); !e.empty()) return e;
          if (auto e = gatherCase(comm, rank, n, "Gather", type, count, inPlace, root); !e.empty()) return e;
        }
        if (auto e = gatherCase(comm, rank, n, "AllGather", type, count, inPlace, 0); !e.empty()) return e;
        if (auto e = alltoallCase(comm, rank, n, type, count, inPlace); !e.empty()) return e;
      }
    }
  }
  // Large counts cross many slots and use several channels.
  for (ncclDataType_t type : {ncclFloat32, ncclBfloat16, ncclInt64}) {
    for (bool inPlace : {false, true}) {
      for (TestOp op : {TestOp::kSum, TestOp::kAvg})
        for (const char* coll : {"AllReduce", "ReduceScatter"})
          if (auto e = reduceCase(comm, rank, n, coll, type, op, kLargeCount, inPlace, 0); !e.empty()) return e;
      if (auto e = reduceCase(comm, rank, n, "Reduce", type, TestOp::kSum, kLargeCount, inPlace, n - 1); !e.empty())
        return e;
      if (auto e = scatterCase(comm, rank, n, "Broadcast", type, kLargeCount, inPlace, n / 2); !e.empty()) return e;
      if (auto e = gatherCase(comm, rank, n, "AllGather", type, kLargeCount / n, inPlace, 0); !e.empty()) return e;
      if (auto e = alltoallCase(comm, rank, n, type, kLargeCount / n, inPlace); !e.empty()) return e;
    }
  }
  // Outputs of 8 MiB and more are written with streaming stores (out of place only).
  constexpr size_t kHugeCount = (9 << 20) / 4 + 3;
  if (auto e = reduceCase(comm, rank, n, "AllReduce", ncclFloat32, TestOp::kSum, kHugeCount, false, 0); !e.empty())
    return e;
  if (auto e = gatherCase(comm, rank, n, "AllGather", ncclInt32, kHugeCount / n, false, 0); !e.empty()) return e;
  if (auto e = scatterCase(comm, rank, n, "Broadcast", ncclUint8, kHugeCount * 4 + 1, false, n - 1); !e.empty())
    return e;
  return "";
}

std::string runAllOnNewComm(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
  std::string err = runAll(comm, rank, nranks);
  ncclCommDestroy(comm);
  return err;
}

}  // namespace strata::test
