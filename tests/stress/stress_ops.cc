#include "stress/stress_ops.h"

#include <cmath>
#include <cstring>

#include "device/dtypes.h"

namespace strata::test {

using namespace strata::verify;

namespace {

constexpr ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,    ncclInt64,   ncclUint64,
                                     ncclFloat16, ncclFloat32,  ncclFloat64,    ncclBfloat16,  ncclFloat8e4m3,
                                     ncclFloat8e5m2};
constexpr TestOp kOps[] = {TestOp::kSum, TestOp::kProd, TestOp::kMax, TestOp::kMin, TestOp::kAvg};

ncclRedOp_t ncclOp(TestOp op) {
  static const ncclRedOp_t builtin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  return builtin[static_cast<int>(op)];
}

// Bytes of one call: 5% empty, 70% up to 4 KiB, 20% up to 1 MiB, 5% up to maxBytes; log-uniform inside a class.
size_t drawBytes(std::mt19937_64& rng, size_t maxBytes) {
  std::uniform_real_distribution<double> u(0, 1);
  double cls = u(rng);
  if (cls < 0.05) return 0;
  double hi = cls < 0.75 ? 4096 : cls < 0.95 ? (1 << 20) : static_cast<double>(maxBytes);
  double lo = cls < 0.75 ? 1 : cls < 0.95 ? 4096 : (1 << 20);
  return static_cast<size_t>(std::exp(std::log(lo) + u(rng) * (std::log(hi) - std::log(lo))));
}

// Collectives whose buffers are n pieces of `count` (the whole is what maxBytes bounds).
bool piecewise(StressColl c) {
  return c == StressColl::kAllGather || c == StressColl::kReduceScatter || c == StressColl::kAlltoAll ||
         c == StressColl::kGather || c == StressColl::kScatter;
}

bool reduces(StressColl c) {
  return c == StressColl::kAllReduce || c == StressColl::kReduce || c == StressColl::kReduceScatter;
}

}  // namespace

const char* stressCollName(StressColl c) {
  static const char* names[] = {"AllReduce", "Broadcast",  "Reduce",  "AllGather", "ReduceScatter",
                                "AlltoAll",  "Gather",     "Scatter", "SendRecv"};
  return names[static_cast<int>(c)];
}

std::string StressCase::describe() const {
  std::string s = std::string(stressCollName(coll)) + " " + device::dtypeName(type) + " count " +
                  std::to_string(count) + (inPlace ? " in-place" : " out-of-place");
  if (reduces(coll)) s += std::string(" ") + opName(op);
  if (coll == StressColl::kBroadcast || coll == StressColl::kReduce || coll == StressColl::kGather ||
      coll == StressColl::kScatter)
    s += " root " + std::to_string(root);
  return s;
}

StressCase drawCase(std::mt19937_64& rng, int nranks, size_t maxBytes) {
  StressCase c;
  c.coll = static_cast<StressColl>(rng() % static_cast<int>(StressColl::kCount));
  c.type = kTypes[rng() % std::size(kTypes)];
  c.op = kOps[rng() % std::size(kOps)];
  size_t bytes = drawBytes(rng, maxBytes);
  c.count = bytes / device::dtypeSize(c.type) / (piecewise(c.coll) ? nranks : 1);
  c.root = static_cast<int>(rng() % nranks);
  c.inPlace = rng() % 2 == 0 && c.coll != StressColl::kSendRecv;
  return c;
}

PreparedOp::PreparedOp(const StressCase& c, int rank, int n) : c_(c), rank_(rank), n_(n) {
  size_t cnt = c.count, es = device::dtypeSize(c.type);
  ncclDataType_t t = c.type;
  switch (c.coll) {
    case StressColl::kAllReduce:
    case StressColl::kReduce:
      in_ = makeBuffer(t, cnt, [&](size_t i) { return inputValue(n, rank, i, t, c.op); });
      expected_ = makeBuffer(t, cnt, [&](size_t i) { return reducedValue(n, i, t, c.op); });
      out_.assign(cnt * es, 0x5a);
      recv_ = c.inPlace ? in_.data() : out_.data();
      checked_ = c.coll == StressColl::kReduce && rank != c.root ? 0 : cnt;
      break;
    case StressColl::kReduceScatter:
      in_ = makeBuffer(t, cnt * n, [&](size_t i) { return inputValue(n, rank, i, t, c.op); });
      expected_ = makeBuffer(t, cnt, [&](size_t i) { return reducedValue(n, rank * cnt + i, t, c.op); });
      out_.assign(cnt * es, 0x5a);
      recv_ = c.inPlace ? in_.data() + rank * cnt * es : out_.data();
      checked_ = cnt;
      break;
    case StressColl::kBroadcast:
      in_ = makeBuffer(t, cnt, [&](size_t i) { return rank == c.root ? movedValue(c.root, i, t) : -1; });
      expected_ = makeBuffer(t, cnt, [&](size_t i) { return movedValue(c.root, i, t); });
      out_.assign(cnt * es, 0x5a);
      recv_ = c.inPlace ? in_.data() : out_.data();
      checked_ = cnt;
      break;
    case StressColl::kAllGather:
    case StressColl::kGather: {
      bool ag = c.coll == StressColl::kAllGather;
      in_ = makeBuffer(t, cnt, [&](size_t i) { return movedValue(rank, i, t); });
      expected_ = makeBuffer(t, cnt * n, [&](size_t i) { return movedValue(static_cast<int>(i / cnt), i % cnt, t); });
      out_.assign(cnt * n * es, 0x5a);
      recv_ = out_.data();
      int at = ag ? rank : c.root;
      if (c.inPlace && (ag || rank == c.root)) {
        if (cnt) memcpy(out_.data() + at * cnt * es, in_.data(), cnt * es);  // an empty vector's data() may be null
        send_ = out_.data() + at * cnt * es;
      }
      checked_ = ag || rank == c.root ? cnt * n : 0;
      break;
    }
    case StressColl::kScatter:
      in_ = makeBuffer(t, cnt * n, [&](size_t i) { return rank == c.root ? movedValue(c.root, i, t) : -1; });
      expected_ = makeBuffer(t, cnt, [&](size_t i) { return movedValue(c.root, rank * cnt + i, t); });
      out_.assign(cnt * es, 0x5a);
      recv_ = c.inPlace && rank == c.root ? in_.data() + c.root * cnt * es : out_.data();
      checked_ = cnt;
      break;
    case StressColl::kAlltoAll:
      in_ = makeBuffer(t, cnt * n, [&](size_t i) { return movedValue(rank * n + static_cast<int>(i / cnt), i % cnt, t); });
      expected_ = makeBuffer(t, cnt * n, [&](size_t i) { return movedValue(static_cast<int>(i / cnt) * n + rank, i % cnt, t); });
      out_.assign(cnt * n * es, 0x5a);
      recv_ = c.inPlace ? in_.data() : out_.data();
      checked_ = cnt * n;
      break;
    case StressColl::kSendRecv: {
      int prev = (rank + n - 1) % n;
      in_ = makeBuffer(t, cnt, [&](size_t i) { return movedValue(rank, i, t); });
      expected_ = makeBuffer(t, cnt, [&](size_t i) { return movedValue(prev, i, t); });
      out_.assign(cnt * es, 0x5a);
      recv_ = out_.data();
      checked_ = cnt;
      break;
    }
    case StressColl::kCount: break;
  }
  if (!send_) send_ = in_.data();
}

ncclResult_t PreparedOp::issue(ncclComm_t comm) {
  size_t cnt = c_.count;
  ncclDataType_t t = c_.type;
  switch (c_.coll) {
    case StressColl::kAllReduce: return ncclAllReduce(send_, recv_, cnt, t, ncclOp(c_.op), comm, nullptr);
    case StressColl::kReduce: return ncclReduce(send_, recv_, cnt, t, ncclOp(c_.op), c_.root, comm, nullptr);
    case StressColl::kReduceScatter: return ncclReduceScatter(send_, recv_, cnt, t, ncclOp(c_.op), comm, nullptr);
    case StressColl::kBroadcast: return ncclBroadcast(send_, recv_, cnt, t, c_.root, comm, nullptr);
    case StressColl::kAllGather: return ncclAllGather(send_, recv_, cnt, t, comm, nullptr);
    case StressColl::kGather: return ncclGather(send_, recv_, cnt, t, c_.root, comm, nullptr);
    case StressColl::kScatter: return ncclScatter(send_, recv_, cnt, t, c_.root, comm, nullptr);
    case StressColl::kAlltoAll: return ncclAlltoAll(send_, recv_, cnt, t, comm, nullptr);
    case StressColl::kSendRecv: {
      ncclResult_t r = ncclGroupStart();
      if (r == ncclSuccess) r = ncclSend(send_, cnt, t, (rank_ + 1) % n_, comm, nullptr);
      if (r == ncclSuccess) r = ncclRecv(recv_, cnt, t, (rank_ + n_ - 1) % n_, comm, nullptr);
      ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    }
    case StressColl::kCount: break;
  }
  return ncclInvalidUsage;
}

std::string PreparedOp::check() const {
  if (checked_ == 0) return "";
  return compareBuffers(c_.type, recv_, expected_.data(), checked_, c_.describe());
}

size_t PreparedOp::bytesMoved() const { return checked_ * device::dtypeSize(c_.type); }

}  // namespace strata::test
