#include "algorithms/device_shared/shared_run.h"

#include <cstdint>

#include "base/error.h"
#include "base/log.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::algorithms::device_shared {
namespace {

constexpr int kMaxRanks = 8;  // the reduce kernel's inputs in one launch: an output may alias any of them

bool reducing(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduce || c == Collective::kReduceScatter;
}

// Every rank's input, pre-multiplied into scratch where its op says so.
std::vector<const char*> inputsOf(const std::vector<SharedPost>& posts, size_t inBytes, void* stream,
                                  Scratch& scratch) {
  int n = static_cast<int>(posts.size());
  std::vector<const char*> in(n);
  char* room = nullptr;
  for (int r = 0; r < n; ++r) {
    const SharedPost& p = posts[r];
    in[r] = static_cast<const char*>(p.sendbuff);
    if (!p.op.preMultiply) continue;
    if (!room) room = scratch.get(inBytes * n);
    char* mine = room + inBytes * r;
    device::gpuPrepare(mine, p.sendbuff, inBytes / device::dtypeSize(p.type), p.type, p.op, stream);
    in[r] = mine;
  }
  return in;
}

bool overlaps(const void* a, const void* b, size_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

// dst = in[0][offset..] OP ... OP in[n-1][offset..], `count` elements. The reduce
// may write dst before it reads a later input, so an output that is one of those
// (in place, a reduce's root or a reduce-scatter's rank above 0) goes through `temp`.
void reduceAt(void* dst, const std::vector<const char*>& in, size_t offset, size_t count, ncclDataType_t type,
              const device::ReduceOp& how, void* stream, Scratch& temp) {
  const size_t bytes = count * device::dtypeSize(type);
  std::vector<const void*> at(in.size());
  bool aliased = false;
  for (size_t r = 0; r < in.size(); ++r) {
    at[r] = in[r] + offset;
    aliased = aliased || (r > 0 && overlaps(dst, at[r], bytes));
  }
  void* out = aliased ? temp.get(bytes) : dst;
  device::gpuReduceInOrder(out, at.data(), static_cast<int>(at.size()), count, type, how, stream);
  if (aliased) device::gpuCopy(dst, out, bytes, stream);
}

}  // namespace

Scratch::~Scratch() {
  try {
    if (p_) device::gpuFree(p_);
  } catch (const Error& e) {
    STRATA_WARN(-1, "freeing the scratch of ranks sharing a GPU: %s", e.what());
  }
}

char* Scratch::get(size_t bytes) {
  if (bytes > bytes_) {
    // cudaFree waits for the whole device (rank 0 stalls once per growth); nothing
    // this algorithm enqueues waits for a host, so that wait ends.
    if (p_) device::gpuFree(p_);
    p_ = nullptr;
    bytes_ = 0;
    p_ = device::gpuAlloc(bytes);
    bytes_ = bytes;
  }
  return static_cast<char*>(p_);
}

void checkAlike(const std::vector<SharedPost>& posts, const char* fn) {
  const SharedPost& a = posts[0];
  for (size_t r = 1; r < posts.size(); ++r) {
    const SharedPost& b = posts[r];
    if (b.coll != a.coll || b.count != a.count || b.type != a.type || b.root != a.root)
      fail(ncclInvalidUsage,
           "%s: rank %zu called %s (count %zu, type %d, root %d) where rank 0 called %s (count %zu, type %d, root %d): "
           "every rank must make the same calls in the same order",
           fn, r, collectiveName(b.coll), b.count, static_cast<int>(b.type), b.root, collectiveName(a.coll), a.count,
           static_cast<int>(a.type), a.root);
    // The reduction too (a pre-multiplied sum's scalar may differ by rank: it is each rank's own).
    if (b.op.kind != a.op.kind || b.op.postDivide != a.op.postDivide)
      fail(ncclInvalidUsage, "%s: rank %zu reduces with another operation than rank 0 (every rank must pass the same "
           "ncclRedOp_t)", fn, r);
  }
}

void enqueueShared(const std::vector<SharedPost>& posts, void* stream, Scratch& scratch, Scratch& temp) {
  const int n = static_cast<int>(posts.size());
  STRATA_REQUIRE(n <= kMaxRanks, ncclInternalError, "ranks sharing a GPU: %d ranks, at most %d", n, kMaxRanks);
  const SharedPost& a = posts[0];
  const size_t es = device::dtypeSize(a.type), bytes = a.count * es;
  device::ReduceOp how = a.op;  // the inputs are pre-multiplied already; avg's divide is the same on every rank
  how.preMultiply = false;
  how.scalarAt = nullptr;
  std::vector<const char*> in;
  if (reducing(a.coll)) in = inputsOf(posts, a.coll == Collective::kReduceScatter ? bytes * n : bytes, stream, scratch);
  switch (a.coll) {
    case Collective::kAllReduce:  // into rank 0's output (input 0 may be it), then copied to the others
      reduceAt(a.recvbuff, in, 0, a.count, a.type, how, stream, temp);
      for (int r = 1; r < n; ++r) device::gpuCopy(posts[r].recvbuff, a.recvbuff, bytes, stream);
      break;
    case Collective::kReduce:
      reduceAt(posts[a.root].recvbuff, in, 0, a.count, a.type, how, stream, temp);
      break;
    case Collective::kReduceScatter:
      if (bytes % 16 == 0) {  // rank r's block of every input; in place its output is one of them
        for (int r = 0; r < n; ++r) reduceAt(posts[r].recvbuff, in, bytes * r, a.count, a.type, how, stream, temp);
      } else {  // blocks off 16-byte boundaries would take the reduce off its vector path: one reduce, then copies
        char* all = temp.get(bytes * n);
        std::vector<const void*> at(in.begin(), in.end());
        device::gpuReduceInOrder(all, at.data(), n, a.count * n, a.type, how, stream);
        for (int r = 0; r < n; ++r) device::gpuCopy(posts[r].recvbuff, all + bytes * r, bytes, stream);
      }
      break;
    case Collective::kBroadcast:
      for (int r = 0; r < n; ++r) device::gpuCopy(posts[r].recvbuff, posts[a.root].sendbuff, bytes, stream);
      break;
    case Collective::kAllGather:  // every input into rank 0's output, then that to the others
      for (int r = 0; r < n; ++r) device::gpuCopy(static_cast<char*>(a.recvbuff) + bytes * r, posts[r].sendbuff, bytes, stream);
      for (int r = 1; r < n; ++r) device::gpuCopy(posts[r].recvbuff, a.recvbuff, bytes * n, stream);
      break;
    default:
      fail(ncclInternalError, "ranks sharing a GPU: %s is not served", collectiveName(a.coll));
  }
}

}  // namespace strata::algorithms::device_shared
