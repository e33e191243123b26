#include "device/sim_pipe.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <utility>

#include "base/config.h"
#include "device/cpu_reduce.h"
#include "device/dtypes.h"
#include "device/gpu_sim_state.h"

namespace strata::device::sim {
int PipeBlock::regionOf(const char* p) const {
  const KernelPipe& k = *k_;
  size_t regionBytes = k.part + KernelPipe::regionBytes(k.channels, k.conns, k.depth, k.slotBytes);
  int regions = k.algo == KernelPipe::kRing ? 3 : k.n;
  for (int q = 0; q < regions; ++q)
    if (k.region[q] && p >= k.region[q] && p < k.region[q] + regionBytes) return q;
  return -1;
}

bool PipeBlock::hold(char* dst, const void* src, size_t bytes) {
  if (!weak_ || bytes == 0) return false;
  int q = regionOf(dst);
  if (q < 0 || q == (k_->algo == KernelPipe::kRing ? KernelPipe::kSelf : k_->rank)) return false;
  held_.hold(dst, src, bytes);
  return true;
}

bool PipeBlock::holdWord(uint64_t* dst, uint64_t v) {
  if (!weak_) return false;
  std::lock_guard<std::mutex> lock(heldMutex_);
  heldWords_.emplace_back(dst, v);
  return true;
}

void PipeBlock::landWords(size_t keep) {
  for (size_t i = heldWords_.size(); i > 1; --i) std::swap(heldWords_[i - 1], heldWords_[xorshift(&rng_) % i]);
  for (size_t i = keep; i < heldWords_.size(); ++i)
    __atomic_store_n(heldWords_[i].first, heldWords_[i].second, __ATOMIC_RELAXED);
  heldWords_.resize(keep);
}

void PipeBlock::publishSomeWords() {
  if (!weak_) return;
  std::lock_guard<std::mutex> lock(heldMutex_);
  landWords(heldWords_.empty() ? 0 : xorshift(&rng_) % (heldWords_.size() + 1));
}

void PipeBlock::publish() {
  {
    std::lock_guard<std::mutex> lock(heldMutex_);
    landWords(0);
  }
  held_.publish(weak_);
}

PipePrims::PipePrims(const KernelPipe& k, PipeBlock& b, int thread, bool jitter, bool weak)
    : k_(k), b_(b), thread_(thread), jitter_(jitter), weak_(weak),
      rng_(0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(pthread_self()) ^ (static_cast<uint64_t>(thread) << 40)) {
  if (thread == 0) {
    b.k_ = &k;
    b.weak_ = weak;
  }
  if (weak_) visibility::join(&reader_);
}

PipePrims::~PipePrims() {
  if (weak_) visibility::leave(&reader_);
}

uint64_t PipePrims::loadAcquire(const uint64_t* p) {
  uint64_t v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
  if (weak_) visibility::acquired(&reader_, p, v);
  return v;
}

int PipePrims::barrierOr(uint32_t v) {
  if (!weak_) return b_.barrier(v) != 0;
  b_.raiseEpoch(reader_.epoch);
  int any = b_.barrier(v) != 0;
  visibility::raise(&reader_, b_.epoch());
  return any;
}

const char* PipePrims::source(const char* src, size_t bytes, int s) {
  if (!weak_ || b_.regionOf(src) < 0) return src;
  char* to = seen_.data() + static_cast<size_t>(s) * bytes;
  visibility::read(to, src, bytes, reader_);
  return to;
}

uint64_t PipePrims::now() const {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

void PipePrims::pause() const { sched_yield(); }

void PipePrims::jitter() {
  if (!jitter_) return;
  uint64_t x = xorshift(&rng_);
  if (x % 4 == 0) usleep(static_cast<useconds_t>(x / 4 % 200));
}

void PipePrims::storeRelease(uint64_t* p, uint64_t v) {
  jitter();
  b_.publish();
  if (weak_) visibility::released(p);
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

void PipePrims::pass(const pipe::Pass& x) {
  barrierOr(0);  // thread 0 described the pass: every thread sees it (a GPU's __syncthreads)
  if (x.ndst == 0 || x.count == 0) return;
  // This thread's part: whole 16-byte vectors, as a GPU block splits a pass.
  size_t es = static_cast<size_t>(k_.es), v = 16 / es;
  size_t per = (x.count + threads() - 1) / threads();
  per = (per + v - 1) / v * v;
  size_t lo = per * thread_ < x.count ? per * thread_ : x.count;
  size_t cnt = lo + per < x.count ? per : x.count - lo;
  if (cnt == 0) return;
  jitter();
  size_t bytes = cnt * es;
  ReduceOp plain = k_.op;
  plain.preMultiply = false;
  plain.postDivide = x.finish ? k_.op.postDivide : 0;
  // Sources the op multiplies first go through a scaled copy, as prepared inputs do.
  const void* in[KernelPipe::kMaxSources];
  scaled_.resize(bytes * x.nsrc + 1);
  if (weak_) seen_.resize(bytes * x.nsrc + 1);
  for (int s = 0; s < x.nsrc; ++s) {
    in[s] = source(x.src[s] + lo * es, bytes, s);
    if (x.premul >> s & 1) {
      char* to = scaled_.data() + s * bytes;
      device::prepare(to, in[s], cnt, k_.type, k_.op);
      in[s] = to;
    }
  }
  const void* result = in[0];
  if (x.reduce || plain.postDivide > 1) {
    scratch_.resize(bytes + 1);
    device::reduceInOrder(scratch_.data(), in, x.reduce ? x.nsrc : 1, cnt, k_.type, plain);
    result = scratch_.data();
  }
  for (int d = 0; d < x.ndst; ++d) {
    char* to = x.dst[d] + lo * es;
    if (!b_.hold(to, result, bytes) && to != result) memmove(to, result, bytes);
  }
}

LLUnit PipePrims::loadUnit(const char* src, size_t cnt, bool multiply) {
  LLUnit u{};
  memcpy(u.w, src, cnt * static_cast<size_t>(k_.es));
  if (multiply) {
    LLUnit scaled{};
    device::prepare(scaled.w, u.w, 16 / static_cast<size_t>(k_.es), k_.type, k_.op);
    return scaled;
  }
  return u;
}

LLUnit PipePrims::combine(const LLUnit& a, const LLUnit& b) const {
  ReduceOp plain = k_.op;
  plain.preMultiply = false;
  plain.postDivide = 0;
  const void* in[2] = {a.w, b.w};
  LLUnit out{};
  device::reduceInOrder(out.w, in, 2, 16 / static_cast<size_t>(k_.es), k_.type, plain);
  return out;
}

LLUnit PipePrims::finish(const LLUnit& a) const {
  if (k_.op.postDivide <= 1) return a;
  ReduceOp plain = k_.op;
  plain.preMultiply = false;
  const void* in[1] = {a.w};
  LLUnit out{};
  device::reduceInOrder(out.w, in, 1, 16 / static_cast<size_t>(k_.es), k_.type, plain);
  return out;
}

// Two 16-byte lines, {w0, f, w1, f} {w2, f, w3, f}: each 8-byte half one atomic store.
void PipePrims::storeLines(char* first, char* second, const LLUnit& u, uint32_t flag) {
  jitter();
  uint64_t* word[4] = {reinterpret_cast<uint64_t*>(first), reinterpret_cast<uint64_t*>(first) + 1,
                       reinterpret_cast<uint64_t*>(second), reinterpret_cast<uint64_t*>(second) + 1};
  for (int h = 0; h < 4; ++h) {
    uint64_t v = static_cast<uint64_t>(flag) << 32 | u.w[h];
    if (!b_.holdWord(word[h], v)) __atomic_store_n(word[h], v, __ATOMIC_RELAXED);
  }
}

LLLines PipePrims::loadLines(const char* first, const char* second) {
  b_.publishSomeWords();  // this thread waits: some of its block's stores land meanwhile
  const uint64_t* word[4] = {reinterpret_cast<const uint64_t*>(first), reinterpret_cast<const uint64_t*>(first) + 1,
                             reinterpret_cast<const uint64_t*>(second), reinterpret_cast<const uint64_t*>(second) + 1};
  LLLines l;
  for (int h = 0; h < 4; ++h) {
    uint64_t v = __atomic_load_n(word[h], __ATOMIC_RELAXED);
    l.v[2 * h] = static_cast<uint32_t>(v);
    l.v[2 * h + 1] = static_cast<uint32_t>(v >> 32);
  }
  return l;
}

void runBlock(const KernelPipe& k, PipePrims& p, PipeBlock& b, int ch) {
  if (k.algo != KernelPipe::kMeshLL) return pipe::runBlock(k, p, b.state(), ch);
  ll::runBlock(k, p, ch);
  b.publish();  // this thread's stores land by the end of its work (it may be the last to poll)
}

void runKernelPipe(const KernelPipe& given, int device) {
  KernelPipe k = given;
  if (k.op.scalarAt) loadScalar(k.op.scalarAt, k.type, &k.op);  // now, as the kernel runs
  int threads = config().gpuSimThreads;
  BlockRoom room(device, k.blocks);
  std::vector<std::unique_ptr<PipeBlock>> blocks;
  for (int b = 0; b < k.blocks; ++b) blocks.push_back(std::make_unique<PipeBlock>(threads));
  std::vector<std::thread> running;
  for (int b = 0; b < k.blocks; ++b)
    for (int t = 0; t < threads; ++t)
      running.emplace_back([&k, &blocks, b, t] {
        PipePrims p(k, *blocks[b], t, config().gpuSimJitter, config().gpuSimWeak);
        blocks[b]->barrier(0);  // thread 0 has set the block up
        runBlock(k, p, *blocks[b], b);
      });
  for (std::thread& t : running) t.join();
  for (auto& b : blocks) b->publish();  // the kernel ended: everything it stored is visible
}

}  // namespace strata::device::sim
