// A 2-process all-gather on private memory made by a bare program: only the copies
// every design must make, with no library around them (no planning, checks, progress
// engine or waiting for a peer's call). What the machine gives those copies at the
// moment it runs; a reference, not a strict lower bound (the machine's rates drift
// between this program's run and a collective's, and a library may order its copies
// better for the caches). Each process holds its piece (S/2 bytes) in a private buffer
// and must end with both pieces in its private S-byte output. Its own piece is one
// memcpy; the peer's piece crosses between the processes in one of the only two ways
// private memory allows:
//   cma    one kernel copy, process_vm_readv straight out of the peer's buffer
//          (the one copy Open MPI's vader BTL and Strata's CMA paths make, by
//          process_vm_readv or _writev; skipped, with a line that says so, where
//          the kernel refuses it);
//   slots  two user copies through a shared segment, pipelined in chunks, the
//          sender's copy into the slot fused with its own piece's copy out of it
//          (what Strata's ring does); the best of a grid of chunk sizes and slot
//          counts is reported.
// Each way writes the output it copies itself either with memcpy or with streaming
// stores (past the caches, as Strata's ring does from 8 MiB), whichever is faster
// (cma's kernel copy writes the peer's half its own way).
// And, for reference, `mapped`: the peer's piece in memory both map (what
// ncclMemAlloc'd buffers allow), two plain memcpys.
// Each is timed over ITERS calls after 6 warm-up calls (the first touches of new
// memory cost 10-100x on the test VM), median of 5 samples. Times are the mean of the
// two processes' per-call time, as the perf tools' default `-a` combines ranks. The
// reported time is the least of the ways and settings tried, which biases it low.
// After each, one more call runs on inputs refilled with a new pattern into a poisoned
// output, and the output is checked exactly (a stale slot or a skipped copy fails).
// A 2-process all-to-all of S bytes makes the same copies.
//
// usage: bare_exchange [MiB (S, the all-gather's size, as nccl-tests')] [ITERS]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include <emmintrin.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr size_t kMaxSlotBytes = 16u << 20;  // per direction: chunk x slots at most
constexpr double kSpinLimitS = 20;

struct Shared {
  std::atomic<uint64_t> arrived{0}, generation{0};
  std::atomic<uint64_t> posted[2], released[2];  // per direction (the sender's rank): chunks
  pid_t pid[2];
  uint32_t* send[2];
  double us[2];
  bool cmaRefused[2];
};

Shared* shared;
pid_t child = -1;  // in the parent: the other process, ended with it on failure
char* slotArea;    // [2][kMaxSlotBytes], shared
uint32_t* mapped;  // [2][piece], shared: the `mapped` variant's inputs

[[noreturn]] void fail(const char* what) {
  fprintf(stderr, "bare_exchange: %s\n", what);
  if (child > 0) kill(child, SIGKILL);
  exit(1);
}

void* map(size_t bytes, int flags) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) fail("mmap failed");
  return p;
}

// Spins until done() holds; a peer that died or hangs ends the run instead.
template <class F>
void spinUntil(F done) {
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; !done(); ++i) {
    if ((i & 0xffff) == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(kSpinLimitS))
      fail("the other process did not answer within 20 s");
    __builtin_ia32_pause();
  }
}

void barrier() {
  uint64_t gen = shared->generation.load();
  if (shared->arrived.fetch_add(1) == 1) {
    shared->arrived.store(0);
    shared->generation.fetch_add(1);
  } else {
    spinUntil([&] { return shared->generation.load() != gen; });
  }
}

// memcpy with non-temporal stores for whole 16-byte-aligned blocks of the destination.
void* streamCopy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  size_t lead = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  memcpy(d, s, lead);
  size_t i = lead;
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  memcpy(d + i, s + i, bytes - i);
  _mm_sfence();
  return dst;
}

void* (*outCopy)(void*, const void*, size_t) = memcpy;  // how the output is written

struct Rank {
  int me, peer;
  size_t piece;  // bytes
  uint32_t* send;
  char* recv;
  uint64_t chunkSeq[2] = {0, 0};  // chunks sent (own direction) and received (peer's), over all calls
  uint32_t tag = 0;               // the inputs' pattern (word())
};

void cmaCall(Rank& r) {
  outCopy(r.recv + r.me * r.piece, r.send, r.piece);
  size_t done = 0;
  while (done < r.piece) {
    iovec local{r.recv + r.peer * r.piece + done, r.piece - done};
    iovec remote{reinterpret_cast<char*>(shared->send[r.peer]) + done, r.piece - done};
    ssize_t got = process_vm_readv(shared->pid[r.peer], &local, 1, &remote, 1, 0);
    if (got <= 0) fail("process_vm_readv failed");
    done += static_cast<size_t>(got);
  }
}

void mappedCall(Rank& r) {
  memcpy(r.recv + r.me * r.piece, mapped + r.me * (r.piece / 4), r.piece);
  memcpy(r.recv + r.peer * r.piece, mapped + r.peer * (r.piece / 4), r.piece);
}

size_t gChunk = 0, gSlots = 0;

char* slot(int dir, uint64_t seq) { return slotArea + dir * kMaxSlotBytes + (seq % gSlots) * gChunk; }

void slotsCall(Rank& r) {
  size_t n = (r.piece + gChunk - 1) / gChunk, sent = 0, got = 0;
  const char* src = reinterpret_cast<const char*>(r.send);
  uint64_t& s = r.chunkSeq[0];
  uint64_t& g = r.chunkSeq[1];
  auto canSend = [&] { return sent < n && s - shared->released[r.me].load(std::memory_order_acquire) < gSlots; };
  auto canTake = [&] { return got < n && shared->posted[r.peer].load(std::memory_order_acquire) > g; };
  while (sent < n || got < n) {
    if (canSend()) {
      size_t off = sent * gChunk, len = std::min(gChunk, r.piece - off);
      memcpy(slot(r.me, s), src + off, len);
      outCopy(r.recv + r.me * r.piece + off, slot(r.me, s), len);
      shared->posted[r.me].store(++s, std::memory_order_release);
      ++sent;
      continue;
    }
    if (canTake()) {
      size_t off = got * gChunk, len = std::min(gChunk, r.piece - off);
      outCopy(r.recv + r.peer * r.piece + off, slot(r.peer, g), len);
      shared->released[r.peer].store(++g, std::memory_order_release);
      ++got;
      continue;
    }
    spinUntil([&] { return canSend() || canTake(); });
  }
}

// Rank i's piece, word w, under pattern `tag`: distinct in every word of both pieces
// (pieces of under 8 GiB), and different from the same word under another tag.
uint32_t word(int rank, size_t w, uint32_t tag) {
  return (static_cast<uint32_t>(rank) << 31 | static_cast<uint32_t>(w)) ^ tag;
}

void fill(Rank& r) {
  for (size_t w = 0; w < r.piece / 4; ++w) r.send[w] = mapped[r.me * (r.piece / 4) + w] = word(r.me, w, r.tag);
}

// One call on inputs under a new pattern into a poisoned output; false if any word
// of the output is not the one expected.
bool oneCallRight(Rank& r, void (*call)(Rank&)) {
  barrier();  // the peer is done with this call's inputs and slots
  r.tag += 0x9e3779b9u;
  fill(r);
  memset(r.recv, 0xff, 2 * r.piece);
  barrier();
  call(r);
  barrier();  // both calls are done before either process changes its inputs or slots
  const uint32_t* out = reinterpret_cast<const uint32_t*>(r.recv);
  size_t words = r.piece / 4;
  for (int rank = 0; rank < 2; ++rank)
    for (size_t w = 0; w < words; ++w)
      if (out[rank * words + w] != word(rank, w, r.tag)) return false;
  return true;
}

// Median over 5 samples of the two processes' mean per-call time, in us.
double timeVariant(Rank& r, void (*call)(Rank&), int iters, const char* name) {
  std::vector<double> samples;
  memset(r.recv, 0, 2 * r.piece);
  for (int i = 0; i < 6; ++i) call(r);
  for (int s = 0; s < 5; ++s) {
    barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call(r);
    shared->us[r.me] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    barrier();
    samples.push_back((shared->us[0] + shared->us[1]) / 2);
    barrier();  // both have read us[] before the next sample writes it
  }
  if (!oneCallRight(r, call)) {
    char what[96];
    snprintf(what, sizeof what, "rank %d's output is wrong after %s", r.me, name);
    fail(what);
  }
  std::sort(samples.begin(), samples.end());
  return samples[2];
}

void report(const Rank& r, const char* line) {
  if (r.me == 0) fputs(line, stdout);
}

// Whether the kernel lets this process read the peer's piece (Yama's ptrace_scope or a
// container may forbid it); both processes learn whether either was refused.
bool cmaAllowed(const Rank& r) {
  uint32_t word = 0;
  iovec local{&word, sizeof word}, remote{shared->send[r.peer], sizeof word};
  shared->cmaRefused[r.me] = process_vm_readv(shared->pid[r.peer], &local, 1, &remote, 1, 0) != sizeof word;
  barrier();
  return !shared->cmaRefused[0] && !shared->cmaRefused[1];
}

void runRank(int me, size_t piece, int iters) {
  Rank r{me, 1 - me, piece, static_cast<uint32_t*>(map(piece, MAP_PRIVATE)),
         static_cast<char*>(map(2 * piece, MAP_PRIVATE))};
  fill(r);
  memset(r.recv, 0, 2 * piece);
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);  // where Yama restricts CMA to ptracers, as Open MPI does
  shared->pid[me] = getpid();
  shared->send[me] = r.send;
  barrier();
  bool cmaOk = cmaAllowed(r);
  char line[160];
  const char* how[2] = {"memcpy", "streaming"};
  double cma[2] = {0, 0}, best = 0;
  size_t bestChunk = 0, bestSlots = 0, bestHow = 0;
  for (int h = 0; h < 2; ++h) {
    outCopy = h ? streamCopy : memcpy;
    if (cmaOk) cma[h] = timeVariant(r, cmaCall, iters, "cma");
    for (size_t chunk : {128u << 10, 512u << 10, 1u << 20})
      for (size_t slots : {2, 4, 8}) {
        if (chunk > piece || chunk * slots > kMaxSlotBytes) continue;
        gChunk = chunk, gSlots = slots;
        double us = timeVariant(r, slotsCall, iters, "slots");
        if (best == 0 || us < best) best = us, bestChunk = chunk, bestSlots = slots, bestHow = h;
      }
  }
  int cmaHow = cma[1] < cma[0];
  if (cmaOk)
    snprintf(line, sizeof line, "cma_us %.1f\ncma_best %s\n", cma[cmaHow], how[cmaHow]);
  else
    snprintf(line, sizeof line, "cma refused: process_vm_readv between these processes is not allowed here\n");
  report(r, line);
  snprintf(line, sizeof line, "slots_us %.1f\nslots_best %zu KiB x %zu, %s\n", best, bestChunk >> 10, bestSlots,
           how[bestHow]);
  report(r, line);
  outCopy = memcpy;
  snprintf(line, sizeof line, "mapped_us %.1f\n", timeVariant(r, mappedCall, iters, "mapped"));
  report(r, line);
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = static_cast<size_t>((argc > 1 ? strtod(argv[1], nullptr) : 8) * (1 << 20));
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  size_t piece = bytes / 2 / 4 * 4;
  if (piece < (128u << 10) || iters < 1) {
    fprintf(stderr, "usage: bare_exchange [MiB >= 0.25] [ITERS >= 1]\n");
    return 2;
  }
  shared = new (map(sizeof(Shared), MAP_SHARED)) Shared();
  slotArea = static_cast<char*>(map(2 * kMaxSlotBytes, MAP_SHARED));
  mapped = static_cast<uint32_t*>(map(2 * piece, MAP_SHARED));
  printf("bare_exchange: 2 processes, all-gather of %.3g MiB (pieces of %zu bytes), %d calls per sample, "
         "median of 5, us per call\n",
         static_cast<double>(2 * piece) / (1 << 20), piece, iters);
  fflush(stdout);
  pid_t parent = getpid();
  child = fork();
  if (child < 0) fail("fork failed");
  // The child ends with the parent, so that no process is left spinning.
  if (child == 0 && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)) _exit(1);
  runRank(child == 0 ? 1 : 0, piece, iters);
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
