#include "algorithms/device_shared/shared_run.h"

#include <cstdint>

#include "base/error.h"
#include "base/log.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::algorithms::device_shared {
namespace {

// The reduce kernel's inputs and outputs in one launch (an output may be an input in place).
constexpr int kMaxRanks = device::kMaxReduceOutputs;

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

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One kernel may write every output (`bytes` each) from these inputs: it reads each
// element of every input before writing it, so an output may be an input at the same
// position (in place), but may overlap no other input and no other output.
bool oneKernel(const std::vector<void*>& outs, const std::vector<const void*>& in, size_t bytes) {
  for (size_t i = 0; i < outs.size(); ++i) {
    for (const void* x : in)
      if (x != outs[i] && overlaps(outs[i], x, bytes)) return false;
    for (size_t j = 0; j < i; ++j)
      if (overlaps(outs[i], outs[j], bytes)) return false;
  }
  return true;
}

// Every output = in[0][offset..] OP ... OP in[n-1][offset..], `count` elements: one
// kernel that reads every input once and writes every output once (the least any
// all-reduce can move), or, when an output overlaps the inputs otherwise than in
// place, into `temp` first and copied.
void reduceAt(const std::vector<void*>& outs, const std::vector<const char*>& in, size_t offset, size_t count,
              ncclDataType_t type, const device::ReduceOp& how, void* stream, Scratch& temp) {
  const size_t bytes = count * device::dtypeSize(type);
  std::vector<const void*> at(in.size());
  for (size_t r = 0; r < in.size(); ++r) at[r] = in[r] + offset;
  const int n = static_cast<int>(at.size());
  if (oneKernel(outs, at, bytes)) {
    device::gpuReduceInOrder(outs.data(), static_cast<int>(outs.size()), at.data(), n, count, type, how, stream);
    return;
  }
  void* aside = temp.get(bytes);
  device::gpuReduceInOrder(aside, at.data(), n, count, type, how, stream);
  for (void* out : outs) device::gpuCopy(out, aside, bytes, stream);
}

// `src` into every output: where every pointer is 16-byte aligned (the kernel's
// vector path) and one kernel may write them all, a one-input reduce (a copy of the
// bits) that reads `src` once; else a copy each.
void copyToAll(const std::vector<void*>& outs, const void* src, size_t bytes, void* stream) {
  bool vectors = aligned16(src);
  for (void* out : outs) vectors = vectors && aligned16(out);
  if (vectors && oneKernel(outs, {src}, bytes)) {
    device::gpuReduceInOrder(outs.data(), static_cast<int>(outs.size()), &src, 1, bytes, ncclUint8,
                             device::ReduceOp{}, stream);
    return;
  }
  for (void* out : outs) device::gpuCopy(out, src, bytes, stream);
}

// Block q of rank r's input into block r of rank q's output. A rank in place (its
// output is its input) would have a block overwritten before it is sent: such
// inputs are copied into scratch first.
void allToAll(const std::vector<SharedPost>& posts, size_t bytes, void* stream, Scratch& scratch) {
  const int n = static_cast<int>(posts.size());
  const size_t wide = bytes * n;
  std::vector<const char*> in(n);
  std::vector<bool> inPlace(n);
  size_t staged = 0;
  for (int r = 0; r < n; ++r) {
    in[r] = static_cast<const char*>(posts[r].sendbuff);
    inPlace[r] = overlaps(in[r], posts[r].recvbuff, wide);
    staged += inPlace[r] ? wide : 0;
  }
  char* room = staged ? scratch.get(staged) : nullptr;
  for (int r = 0; r < n; ++r) {
    if (!inPlace[r]) continue;
    device::gpuCopy(room, in[r], wide, stream);
    in[r] = room;
    room += wide;
  }
  for (int r = 0; r < n; ++r)
    for (int q = 0; q < n; ++q)
      device::gpuCopy(static_cast<char*>(posts[q].recvbuff) + bytes * r, in[r] + bytes * q, bytes, stream);
}

}  // namespace

Scratch::~Scratch() {
  try {
    if (p_) device::gpuFree(p_);
    for (void* p : kept_) device::gpuFree(p);
  } catch (const Error& e) {
    STRATA_WARN(-1, "freeing the scratch of ranks sharing a GPU: %s", e.what());
  }
}

char* Scratch::get(size_t bytes) {
  if (bytes > bytes_) {
    // cudaFree waits for the whole device (rank 0 stalls once per growth); nothing
    // this algorithm enqueues waits for a host, so that wait ends.
    if (p_ && forGraph_) kept_.push_back(p_);
    else if (p_) device::gpuFree(p_);
    p_ = nullptr;
    bytes_ = 0;
    p_ = device::gpuAlloc(bytes, forGraph_);
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
    // Rank 0's stream runs the whole operation: a capture holds it only if every
    // rank's stream is in that capture (one thread driving every rank on one stream,
    // as with ncclCommInitAll and a group).
    if (b.capture != a.capture)
      fail(ncclInvalidUsage,
           "%s: rank %zu's stream is %s and rank 0's %s: ranks sharing one GPU run each operation on rank 0's stream, "
           "so a CUDA graph can capture it only when every rank's stream is in the same capture (one thread driving "
           "every rank in a group); separate captures per rank are not supported",
           fn, r, b.capture ? "being captured" : "not being captured",
           a.capture == 0 ? "is not" : b.capture ? "is in another capture" : "is");
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
  std::vector<void*> outs(n);
  switch (a.coll) {
    case Collective::kAllReduce:  // every output in one pass
      for (int r = 0; r < n; ++r) outs[r] = posts[r].recvbuff;
      reduceAt(outs, in, 0, a.count, a.type, how, stream, temp);
      break;
    case Collective::kReduce:
      reduceAt({posts[a.root].recvbuff}, in, 0, a.count, a.type, how, stream, temp);
      break;
    case Collective::kReduceScatter:
      if (bytes % 16 == 0) {  // rank r's block of every input; in place its output is input r's block
        for (int r = 0; r < n; ++r) reduceAt({posts[r].recvbuff}, in, bytes * r, a.count, a.type, how, stream, temp);
      } else {  // blocks off 16-byte boundaries would take the reduce off its vector path: one reduce, then copies
        char* all = temp.get(bytes * n);
        std::vector<const void*> at(in.begin(), in.end());
        device::gpuReduceInOrder(all, at.data(), n, a.count * n, a.type, how, stream);
        for (int r = 0; r < n; ++r) device::gpuCopy(posts[r].recvbuff, all + bytes * r, bytes, stream);
      }
      break;
    case Collective::kBroadcast:
      for (int r = 0; r < n; ++r) outs[r] = posts[r].recvbuff;
      copyToAll(outs, posts[a.root].sendbuff, bytes, stream);
      break;
    case Collective::kAllGather:  // rank r's input into block r of every output
      for (int r = 0; r < n; ++r) {
        for (int q = 0; q < n; ++q) outs[q] = static_cast<char*>(posts[q].recvbuff) + bytes * r;
        copyToAll(outs, posts[r].sendbuff, bytes, stream);
      }
      break;
    case Collective::kGather:  // rank r's input into block r of the root's output
      for (int r = 0; r < n; ++r)
        device::gpuCopy(static_cast<char*>(posts[a.root].recvbuff) + bytes * r, posts[r].sendbuff, bytes, stream);
      break;
    case Collective::kScatter:  // block r of the root's input into rank r's output
      for (int r = 0; r < n; ++r)
        device::gpuCopy(posts[r].recvbuff, static_cast<const char*>(posts[a.root].sendbuff) + bytes * r, bytes, stream);
      break;
    case Collective::kAllToAll:
      allToAll(posts, bytes, stream, scratch);
      break;
    default:
      fail(ncclInternalError, "ranks sharing a GPU: %s is not served", collectiveName(a.coll));
  }
}

}  // namespace strata::algorithms::device_shared
