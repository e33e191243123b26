// The long random stress (STRATA_STRESS=1, label stress): thousands of random
// collectives (collective, type, op, size 0..64 MiB, root, in or out of place,
// alone or grouped) over 4 and 8 ranks, as threads, processes and fake nodes,
// with the algorithm and protocol forced at random for each epoch of calls and a
// new communicator per epoch. Every result is checked exactly; heap in use,
// mappings and file descriptors must not grow after the first epoch, and no
// shared-memory segment may be left when the ranks are done.
// STRATA_STRESS_OPS (default 10000) sets the operations per configuration.
#include <dirent.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "harness/ranks.h"
#include "stress/stress_ops.h"

namespace strata::test {
namespace {

// Operations per communicator (and per forced algorithm): STRATA_STRESS_EPOCH_OPS, default 250.
int epochOps() {
  static int n = getenv("STRATA_STRESS_EPOCH_OPS") ? std::max(1, atoi(getenv("STRATA_STRESS_EPOCH_OPS"))) : 250;
  return n;
}
constexpr size_t kMaxBytes = 64 << 20;
constexpr uint64_t kSeed = 0x5eed5eed;

struct StressConfig {
  const char* name;
  Mode mode;
  int nranks;
  int fakeNodes;  // 0: one host
};

size_t countEntries(const char* dir, const std::string& prefix = "") {
  size_t n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.' && std::string(e->d_name).rfind(prefix, 0) == 0) ++n;
    closedir(d);
  }
  return n;
}

size_t countLines(const char* path) {
  std::ifstream f(path);
  size_t n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

// What a leak would grow: heap in use, mappings (shared segments), descriptors.
// Heap in use counts glibc's per-thread cache of freed chunks as used, up to a few
// hundred KiB that fill over time: ctest runs this with GLIBC_TUNABLES=glibc.malloc.tcache_count=0.
struct Resources {
  size_t heap = 0, maps = 0, fds = 0, rssKiB = 0;
  static Resources now() {
    Resources r;
    r.heap = mallinfo2().uordblks;
    r.maps = countLines("/proc/self/maps");
    r.fds = countEntries("/proc/self/fd");
    std::ifstream statm("/proc/self/statm");
    size_t size = 0, resident = 0;
    statm >> size >> resident;
    r.rssKiB = resident * (sysconf(_SC_PAGESIZE) / 1024);
    return r;
  }
};

// The test's own buffers come and go (up to 64 MiB each): with glibc's moving mmap
// threshold they would stay cached in the heap, and resident memory would say
// nothing about the library. A fixed threshold returns them at once.
void returnLargeBuffers() {
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
}

// ASan and TSan allocate through their own allocators (quarantines, shadow memory):
// there the resource figures are printed, not judged.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kOwnAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kOwnAllocator = true;
#else
constexpr bool kOwnAllocator = false;
#endif
#else
constexpr bool kOwnAllocator = false;
#endif

constexpr size_t kRssSlackKiB = 64 << 10;  // pages the allocator and the kernel may keep between samples

std::string growth(const Resources& base, const Resources& now) {
  std::string s;
  if (now.rssKiB > base.rssKiB + kRssSlackKiB)
    s += "resident memory grew " + std::to_string(base.rssKiB >> 10) + " -> " + std::to_string(now.rssKiB >> 10) +
         " MiB; ";
  if (now.heap > base.heap + (1 << 20))
    s += "heap in use grew " + std::to_string((now.heap - base.heap) >> 10) + " KiB; ";
  if (now.maps > base.maps) s += "mappings grew " + std::to_string(base.maps) + " -> " + std::to_string(now.maps) + "; ";
  if (now.fds > base.fds) s += "descriptors grew " + std::to_string(base.fds) + " -> " + std::to_string(now.fds) + "; ";
  return s;
}

// The epoch's forced algorithms and protocol, the same on every rank (drawn from the epoch).
void forceForEpoch(int epoch, bool fakeNodes) {
  std::mt19937_64 rng(kSeed ^ (0xa1a0ull * (epoch + 1)));
  std::vector<const char*> ar{"", "Ring", "Tree", "OneShot"}, bc{"", "Ring", "Tree"}, rd{"", "Ring", "Tree"},
      ag{"", "Ring"};
  if (fakeNodes) {
    ar.push_back("Hierarchical");
    ar.push_back("Leaders");
  } else {
    bc.push_back("DirectRead");
    ag.push_back("DirectRead");
  }
  std::string a = ar[rng() % ar.size()], b = bc[rng() % bc.size()], r = rd[rng() % rd.size()];
  std::string g = ag[rng() % ag.size()];
  std::string algo;
  for (auto [coll, name] : {std::pair{"allreduce", a}, {"broadcast", b}, {"reduce", r}, {"allgather", g}})
    if (!name.empty()) {
      if (!algo.empty()) algo += ';';
      algo.append(coll).append(":").append(name);
    }
  std::string proto = a == "OneShot" && !fakeNodes ? std::vector<std::string>{"", "LL", "Simple"}[rng() % 3] : "";
  auto set = [](const char* var, const std::string& v) { v.empty() ? unsetenv(var) : setenv(var, v.c_str(), 1); };
  set("NCCL_ALGO", algo);
  set("NCCL_PROTO", proto.empty() ? "" : "allreduce:" + proto);
  // DirectRead serves sizes from STRATA_PUT_BYTES up.
  set("STRATA_PUT_BYTES", b == "DirectRead" || g == "DirectRead" ? "1" : "");
  reloadEnvironment();  // the one way to make a running process re-read NCCL_ALGO/NCCL_PROTO
}

struct Totals {
  size_t ops = 0, groups = 0, bytes = 0, epochs = 0;
};

// One epoch's calls on `comm`; "" or the first wrong result or failed call.
std::string runEpoch(ncclComm_t comm, int rank, int n, int epoch, size_t limit, Totals* t) {
  for (int k = 0; k < epochOps() && t->ops < limit; ++k) {
    std::mt19937_64 rng(kSeed + static_cast<uint64_t>(epoch) * 1000003 + k);  // shared by every rank
    int g = rng() % 5 == 0 ? 2 + static_cast<int>(rng() % 3) : 1;
    std::vector<std::unique_ptr<PreparedOp>> ops;
    std::string what;
    for (int i = 0; i < g; ++i) {
      StressCase c = drawCase(rng, n, kMaxBytes);
      if (!what.empty()) what += " + ";
      what += c.describe();
      ops.push_back(std::make_unique<PreparedOp>(c, rank, n));
    }
    if (g > 1) RANK_NCCL(ncclGroupStart());
    for (auto& op : ops)
      if (ncclResult_t r = op->issue(comm); r != ncclSuccess) return what + ": " + ncclFailure("issue", r);
    if (g > 1)
      if (ncclResult_t r = ncclGroupEnd(); r != ncclSuccess) return what + ": " + ncclFailure("ncclGroupEnd", r);
    for (auto& op : ops) {
      if (std::string e = op->check(); !e.empty()) return "epoch " + std::to_string(epoch) + " op " + std::to_string(k) + ": " + e;
      t->bytes += op->bytesMoved();
    }
    t->ops += g;
    t->groups += g > 1;
  }
  return "";
}

std::string stressRank(const StressConfig& cfg, int rank, int n, ncclUniqueId id, size_t limit, std::barrier<>* bar) {
  bool threads = cfg.mode == Mode::kThreads;
  returnLargeBuffers();
  bool measures = !threads || rank == 0;  // a process measures itself; threads share one
  auto start = std::chrono::steady_clock::now();
  Totals t;
  Resources base;
  for (int epoch = 0; t.ops < limit; ++epoch) {
    if (threads) bar->arrive_and_wait();  // nobody mid-call while the configuration changes
    if (!threads || rank == 0) forceForEpoch(epoch, cfg.fakeNodes > 0);
    if (threads) bar->arrive_and_wait();
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    if (epoch == 0) {
      // Every pair exchanges once before the baseline: a process keeps one bootstrap
      // connection to each peer process it has sent to (bounded by the ranks, reused by
      // every communicator), and those must not count as growth later.
      std::vector<int> mine(n, rank), all(n, -1);
      RANK_NCCL(ncclAlltoAll(mine.data(), all.data(), 1, ncclInt32, comm, nullptr));
      for (int k = 0; k < n; ++k)
        if (all[k] != k) return "warm-up all-to-all: wrong value from rank " + std::to_string(k);
    }
    std::string err = runEpoch(comm, rank, n, epoch, limit, &t);
    if (!err.empty()) {
      ncclCommAbort(comm);
      return err;
    }
    if (rank == 0) RANK_NCCL(ncclGetUniqueId(&id));  // the next epoch's communicator
    RANK_NCCL(ncclBroadcast(&id, &id, sizeof(id), ncclUint8, 0, comm, nullptr));
    RANK_NCCL(ncclCommDestroy(comm));
    ++t.epochs;
    if (threads) bar->arrive_and_wait();  // every rank's communicator is gone
    if (measures && epoch == 0) base = Resources::now();
    if (measures && t.ops >= limit) {
      Resources end = Resources::now();
      if (std::string g = growth(base, end); !g.empty() && !kOwnAllocator)
        return "after " + std::to_string(t.ops) + " operations: " + g;
      size_t shm = countEntries("/dev/shm", "strata-" + std::to_string(getpid()) + "-");
      if (shm) return std::to_string(shm) + " shared-memory segment(s) of this process left in /dev/shm";
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      printf("[stress] %s rank %d: %zu operations (%zu groups) in %zu communicators, %.1f GiB checked, %.0f s; "
             "heap %+lld KiB, RSS %zu -> %zu MiB, mappings %zu -> %zu, fds %zu -> %zu, 0 wrong\n",
             cfg.name, rank, t.ops, t.groups, t.epochs, t.bytes / double(1 << 30), sec,
             (static_cast<long long>(end.heap) - static_cast<long long>(base.heap)) / 1024, base.rssKiB >> 10,
             end.rssKiB >> 10, base.maps, end.maps, base.fds, end.fds);
      fflush(stdout);
    }
  }
  return "";
}

class Stress : public ::testing::TestWithParam<StressConfig> {};

TEST_P(Stress, RandomCollectivesExactAndNoLeaks) {
  if (!getenv("STRATA_STRESS") || std::string(getenv("STRATA_STRESS")) != "1")
    GTEST_SKIP() << "the long stress runs with STRATA_STRESS=1 (ctest -L stress)";
  const StressConfig cfg = GetParam();
  size_t limit = getenv("STRATA_STRESS_OPS") ? std::stoul(getenv("STRATA_STRESS_OPS")) : 10000;
  std::barrier<> bar(cfg.nranks);
  auto results = runRanks(
      cfg.mode, cfg.nranks,
      [&](int rank, int n, const ncclUniqueId& id) { return stressRank(cfg, rank, n, id, limit, &bar); }, 7200,
      [&cfg](int rank) {
        if (cfg.fakeNodes) {
          setenv("NCCL_HOSTID", ("fake-node" + std::to_string(rank % cfg.fakeNodes)).c_str(), 1);
          setenv("NCCL_SOCKET_IFNAME", "lo", 1);
        }
        return std::string();
      });
  EXPECT_EQ(failures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Configs, Stress,
                         ::testing::Values(StressConfig{"threads4", Mode::kThreads, 4, 0},
                                           StressConfig{"threads8", Mode::kThreads, 8, 0},
                                           StressConfig{"processes4", Mode::kProcesses, 4, 0},
                                           StressConfig{"processes8", Mode::kProcesses, 8, 0},
                                           StressConfig{"fakenodes4", Mode::kProcesses, 4, 2},
                                           StressConfig{"fakenodes8", Mode::kProcesses, 8, 2}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata::test
