#include "harness/perf_colls.h"

#include "verify/reference.h"

namespace strata::perf {
namespace {

using verify::movedValue;
using verify::TestOp;

TestOp testOp(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return TestOp::kSum;
    case ncclProd: return TestOp::kProd;
    case ncclMax: return TestOp::kMax;
    case ncclMin: return TestOp::kMin;
    case ncclAvg: return TestOp::kAvg;
    default: return TestOp::kPreMulHost;  // mulsum
  }
}

// Per-rank counts of the "split" collectives: a multiple of 16 bytes, as nccl-tests rounds them.
size_t perRank(size_t bytes, size_t esize, int n) {
  size_t count = bytes / esize / n;
  size_t align = 16 / esize;
  return count / align * align;
}

}  // namespace

Counts PerfColl::counts(size_t bytes, size_t esize, int n) const {
  if (traits(coll_).wide == Wide::kNone) {
    size_t c = bytes / esize;
    return {c, c, c, c * esize};
  }
  size_t c = perRank(bytes, esize, n);
  return {c, sendElements(coll_, c, n), recvElements(coll_, c, n), c * n * esize};
}

double PerfColl::algBytes(const Counts& c, size_t esize, int n) const {
  size_t perRankBytes = c.count * esize;
  return static_cast<double>(traits(coll_).wide == Wide::kNone ? perRankBytes : perRankBytes * n);
}

namespace {

class AllReduce final : public PerfColl {
 public:
  AllReduce() : PerfColl(Collective::kAllReduce) {}
  bool sameOnEveryRank() const override { return true; }
  ncclResult_t call(const CallArgs& a) const override {
    return ncclAllReduce(a.send, a.recv, a.count, a.type, a.op, a.comm, static_cast<cudaStream_t>(a.stream));
  }
  double input(int rank, int n, int, size_t i, ncclDataType_t t, ncclRedOp_t op, const Counts&) const override {
    return verify::inputValue(n, rank, i, t, testOp(op));
  }
  bool expected(int, int n, int, size_t i, ncclDataType_t t, ncclRedOp_t op, const Counts&, double* v) const override {
    *v = verify::reducedValue(n, i, t, testOp(op));
    return true;
  }
};

class Reduce final : public PerfColl {
 public:
  Reduce() : PerfColl(Collective::kReduce) {}
  ncclResult_t call(const CallArgs& a) const override {
    return ncclReduce(a.send, a.recv, a.count, a.type, a.op, a.root, a.comm, static_cast<cudaStream_t>(a.stream));
  }
  double input(int rank, int n, int, size_t i, ncclDataType_t t, ncclRedOp_t op, const Counts&) const override {
    return verify::inputValue(n, rank, i, t, testOp(op));
  }
  bool expected(int rank, int n, int root, size_t i, ncclDataType_t t, ncclRedOp_t op, const Counts&,
                double* v) const override {
    *v = verify::reducedValue(n, i, t, testOp(op));
    return rank == root;
  }
};

class ReduceScatter final : public PerfColl {
 public:
  ReduceScatter() : PerfColl(Collective::kReduceScatter) {}
  ncclResult_t call(const CallArgs& a) const override {
    return ncclReduceScatter(a.send, a.recv, a.count, a.type, a.op, a.comm, static_cast<cudaStream_t>(a.stream));
  }
  double input(int rank, int n, int, size_t i, ncclDataType_t t, ncclRedOp_t op, const Counts&) const override {
    return verify::inputValue(n, rank, i, t, testOp(op));
  }
  bool expected(int rank, int n, int, size_t i, ncclDataType_t t, ncclRedOp_t op, const Counts& c,
                double* v) const override {
    *v = verify::reducedValue(n, rank * c.count + i, t, testOp(op));
    return true;
  }
};

class AllGather final : public PerfColl {
 public:
  AllGather() : PerfColl(Collective::kAllGather) {}
  bool sameOnEveryRank() const override { return true; }
  ncclResult_t call(const CallArgs& a) const override {
    return ncclAllGather(a.send, a.recv, a.count, a.type, a.comm, static_cast<cudaStream_t>(a.stream));
  }
  double input(int rank, int, int, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts&) const override {
    return movedValue(rank, i, t);
  }
  bool expected(int, int, int, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts& c, double* v) const override {
    *v = movedValue(static_cast<int>(i / c.count), i % c.count, t);
    return true;
  }
};

class Broadcast final : public PerfColl {
 public:
  Broadcast() : PerfColl(Collective::kBroadcast) {}
  bool sameOnEveryRank() const override { return true; }
  ncclResult_t call(const CallArgs& a) const override {
    return ncclBroadcast(a.send, a.recv, a.count, a.type, a.root, a.comm, static_cast<cudaStream_t>(a.stream));
  }
  double input(int rank, int, int root, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts&) const override {
    return rank == root ? movedValue(root, i, t) : 0;
  }
  bool expected(int, int, int root, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts&, double* v) const override {
    *v = movedValue(root, i, t);
    return true;
  }
};

class AllToAll final : public PerfColl {
 public:
  AllToAll() : PerfColl(Collective::kAllToAll) {}
  ncclResult_t call(const CallArgs& a) const override {
    return ncclAlltoAll(a.send, a.recv, a.count, a.type, a.comm, static_cast<cudaStream_t>(a.stream));
  }
  // Tagged by sender and its element's position: unique at any rank count (a tag per
  // (sender, piece) pair would outgrow what movedValue keeps unique).
  double input(int rank, int, int, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts&) const override {
    return movedValue(rank, i, t);
  }
  bool expected(int rank, int, int, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts& c,
                double* v) const override {
    *v = movedValue(static_cast<int>(i / c.count), rank * c.count + i % c.count, t);
    return true;
  }
};

class SendRecv final : public PerfColl {
 public:
  SendRecv() : PerfColl(Collective::kSendRecv) {}
  ncclResult_t call(const CallArgs& a) const override {
    ncclGroupStart();
    ncclResult_t r = ncclSend(a.send, a.count, a.type, (a.rank + 1) % a.nranks, a.comm, static_cast<cudaStream_t>(a.stream));
    ncclResult_t s = ncclRecv(a.recv, a.count, a.type, (a.rank + a.nranks - 1) % a.nranks, a.comm, static_cast<cudaStream_t>(a.stream));
    ncclResult_t e = ncclGroupEnd();
    return r != ncclSuccess ? r : s != ncclSuccess ? s : e;
  }
  double input(int rank, int, int, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts&) const override {
    return movedValue(rank, i, t);
  }
  bool expected(int rank, int n, int, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts&,
                double* v) const override {
    *v = movedValue((rank + n - 1) % n, i, t);
    return true;
  }
};

class Gather final : public PerfColl {
 public:
  Gather() : PerfColl(Collective::kGather) {}
  ncclResult_t call(const CallArgs& a) const override {
    return ncclGather(a.send, a.recv, a.count, a.type, a.root, a.comm, static_cast<cudaStream_t>(a.stream));
  }
  double input(int rank, int, int, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts&) const override {
    return movedValue(rank, i, t);
  }
  bool expected(int rank, int, int root, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts& c,
                double* v) const override {
    *v = movedValue(static_cast<int>(i / c.count), i % c.count, t);
    return rank == root;
  }
};

class Scatter final : public PerfColl {
 public:
  Scatter() : PerfColl(Collective::kScatter) {}
  ncclResult_t call(const CallArgs& a) const override {
    return ncclScatter(a.send, a.recv, a.count, a.type, a.root, a.comm, static_cast<cudaStream_t>(a.stream));
  }
  double input(int rank, int, int root, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts&) const override {
    return rank == root ? movedValue(root, i, t) : 0;
  }
  bool expected(int rank, int, int root, size_t i, ncclDataType_t t, ncclRedOp_t, const Counts& c,
                double* v) const override {
    *v = movedValue(root, rank * c.count + i, t);
    return true;
  }
};

}  // namespace

const PerfColl& perfColl(Coll c) {
  static const AllReduce allReduce;
  static const AllGather allGather;
  static const Broadcast broadcast;
  static const Reduce reduce;
  static const ReduceScatter reduceScatter;
  static const AllToAll allToAll;
  static const SendRecv sendRecv;
  static const Gather gather;
  static const Scatter scatter;
  switch (c) {
    case Coll::kAllReduce: return allReduce;
    case Coll::kAllGather: return allGather;
    case Coll::kBroadcast: return broadcast;
    case Coll::kReduce: return reduce;
    case Coll::kReduceScatter: return reduceScatter;
    case Coll::kAllToAll: return allToAll;
    case Coll::kSendRecv: return sendRecv;
    case Coll::kGather: return gather;
    default: return scatter;
  }
}

}  // namespace strata::perf
