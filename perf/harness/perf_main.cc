#include "harness/perf_main.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "harness/perf_args.h"
#include "harness/perf_device.h"
#include "harness/perf_mpi.h"
#include "harness/perf_world.h"
#include "verify/reference.h"

namespace strata::perf {
namespace {

constexpr ncclRedOp_t kMulSum = ncclNumOps;
constexpr int kExitNccl = 3, kExitTimeout = 4, kExitWrong = 7;

std::atomic<uint64_t> gProgress{0};
std::atomic<int> gExit{0};
std::mutex gPrintMutex;

std::string hostName() {
  char h[256] = {};
  gethostname(h, sizeof(h) - 1);
  if (char* dot = strchr(h, '.')) *dot = '\0';
  return h;
}

// nccl-tests' number formatting: as many decimals (2, 1, 0) as fit the column, else an exponent.
std::string num(double v, int width) {
  char buf[64];
  for (int prec = 2; prec >= 0; --prec) {
    snprintf(buf, sizeof(buf), "%.*f", prec, v);
    if (static_cast<int>(strlen(buf)) <= width) return buf;
  }
  snprintf(buf, sizeof(buf), "%.0e", v);
  return buf;
}

// One rank driven by one thread.
struct Slot {
  ncclComm_t comm = nullptr;
  int rank = 0;
  void* send = nullptr;
  void* recv = nullptr;
  int device = -1;         // the GPU its buffers live on; -1: host memory
  void* stream = nullptr;  // its cudaStream_t when device >= 0
};

// Buffers live on the GPU when one is visible (as nccl-tests'), else in host memory.
void fill(const Slot& s, void* dst, size_t bytes, const std::vector<char>& host) {
  if (s.device < 0) return void(memcpy(dst, host.data(), bytes));
  copyToDevice(dst, host.data(), bytes);
}
void clear(const Slot& s, void* dst, size_t bytes) {
  if (s.device < 0) return void(memset(dst, 0, bytes));
  clearDevice(dst, bytes);
}
const void* readable(const Slot& s, const void* src, size_t bytes, std::vector<char>& host) {
  if (s.device < 0) return src;
  host.resize(bytes);
  copyToHost(host.data(), src, bytes);
  return host.data();
}
// Page-aligned and pre-faulted (a page fault costs 13-24 us on the test VMs).
void* hostBuffer(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  return p;
}
bool privateMemory() {
  const char* v = getenv("STRATA_PERF_PRIVATE_MEMORY");
  return v && strcmp(v, "1") == 0;
}

void finish(std::vector<Slot>& slots) {
  if (slots.empty() || slots[0].device < 0) return;  // host memory: complete when the calls return
  std::vector<ncclComm_t> comms;
  std::vector<void*> streams;
  for (Slot& s : slots) {
    comms.push_back(s.comm);
    streams.push_back(s.stream);
  }
  synchronize(comms, streams);
}

struct Case {
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  Counts counts;
  bool inPlace;
};

class Runner {
 public:
  Runner(const Args& args, Coll coll, World& world, const char* prog)
      : args_(args), kind_(coll), coll_(perfColl(coll)), world_(world), prog_(prog),
        nranks_(world.nProcs() * args.nThreads * args.nGpus) {}

  int run();

 private:
  void threadMain(int t, const ncclUniqueId& id);
  bool issue(std::vector<Slot>& slots, const Case& c, int times);
  double timeCase(int t, std::vector<Slot>& slots, const Case& c);
  size_t checkCase(std::vector<Slot>& slots, const Case& c);
  void sendRecvPtrs(const Slot& s, const Case& c, const void** send, void** recv) const;
  void printHeader();
  void printDevices(int t, std::vector<Slot>& slots);
  void ncclFailed(const char* what, ncclResult_t r);

  const Args& args_;
  Coll kind_;
  const PerfColl& coll_;
  World& world_;
  const char* prog_;
  int nranks_;
  size_t slotBytes_ = 0;
  double bwSum_ = 0;
  int bwCount_ = 0;
  long wrongCases_ = 0;
};

void Runner::ncclFailed(const char* what, ncclResult_t r) {
  std::lock_guard<std::mutex> lock(gPrintMutex);
  printf("%s: Test NCCL failure %s '%s / %s'\n", hostName().c_str(), what, ncclGetErrorString(r),
         ncclGetLastError(nullptr));
  fflush(stdout);
  gExit.store(kExitNccl);
}

void Runner::sendRecvPtrs(const Slot& s, const Case& c, const void** send, void** recv) const {
  size_t es = dtypeSize(c.type);
  if (!c.inPlace) {
    *send = s.send;
    *recv = s.recv;
    return;
  }
  char* base = static_cast<char*>(s.recv);
  *send = base + coll_.inPlaceSendOffset(c.counts, s.rank) * es;
  *recv = base + coll_.inPlaceRecvOffset(c.counts, s.rank) * es;
}

// Issues `times` operations on every slot of this thread, grouped as nccl-tests groups them.
bool Runner::issue(std::vector<Slot>& slots, const Case& c, int times) {
  if (args_.mpiBackend) {
    for (int k = 0; k < times; ++k) {
      CallArgs a{nullptr, nullptr, c.counts.count, c.type, c.op, c.root, slots[0].rank, nranks_, nullptr};
      sendRecvPtrs(slots[0], c, &a.send, &a.recv);
      if (!mpiCollective(kind_, a, c.inPlace)) return ncclFailed("MPI collective", ncclSystemError), false;
    }
    gProgress.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  bool group = slots.size() > 1 || times > 1;
  if (group) ncclGroupStart();
  for (int k = 0; k < times; ++k) {
    for (Slot& s : slots) {
      CallArgs a{nullptr, nullptr, c.counts.count, c.type, c.op, c.root, s.rank, nranks_, s.comm, s.stream};
      sendRecvPtrs(s, c, &a.send, &a.recv);
      std::vector<char> scalar;
      if (c.op == kMulSum) {  // made and destroyed around each call, as nccl-tests does
        scalar = verify::makeBuffer(c.type, 1, [](size_t) { return verify::kPreMulScalar; });
        ncclResult_t r = ncclRedOpCreatePreMulSum(&a.op, scalar.data(), c.type, ncclScalarHostImmediate, s.comm);
        if (r != ncclSuccess) return ncclFailed("ncclRedOpCreatePreMulSum", r), false;
      }
      ncclResult_t r = coll_.call(a);
      if (c.op == kMulSum) ncclRedOpDestroy(a.op, s.comm);
      if (r != ncclSuccess) return ncclFailed(prog_, r), false;
    }
  }
  if (group) {
    ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess) return ncclFailed("ncclGroupEnd", r), false;
  }
  gProgress.fetch_add(1, std::memory_order_relaxed);
  return true;
}

double Runner::timeCase(int t, std::vector<Slot>& slots, const Case& c) {
  for (int i = 0; i < args_.warmup && gExit.load() == 0; ++i) issue(slots, c, args_.aggIters);
  finish(slots);
  world_.barrier();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < args_.iters && gExit.load() == 0; ++i) {
    issue(slots, c, args_.aggIters);
    if (args_.blocking) {
      finish(slots);
      world_.barrier();
    }
  }
  finish(slots);
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return world_.combine(t, us / (static_cast<double>(args_.iters) * args_.aggIters), args_.average);
}

// Runs once on exact data and counts wrong elements on this thread's ranks.
size_t Runner::checkCase(std::vector<Slot>& slots, const Case& c) {
  const Counts& k = c.counts;
  size_t es = dtypeSize(c.type);
  for (Slot& s : slots) {
    const void* send;
    void* recv;
    sendRecvPtrs(s, c, &send, &recv);
    clear(s, s.recv, slotBytes_);
    fill(s, const_cast<void*>(send), k.sendCount * es, verify::makeBuffer(c.type, k.sendCount, [&](size_t i) {
           return coll_.input(s.rank, nranks_, c.root, i, c.type, c.op, k);
         }));
  }
  if (!issue(slots, c, 1)) return 0;
  finish(slots);
  size_t wrong = 0;
  std::vector<char> expected;
  for (Slot& s : slots) {
    const void* send;
    void* recv;
    sendRecvPtrs(s, c, &send, &recv);
    double probe;  // nothing to check on an empty output (all-gather of 8 B on 3 ranks: 0 elements each)
    if (k.recvCount == 0 || !coll_.expected(s.rank, nranks_, c.root, 0, c.type, c.op, k, &probe)) continue;
    if (expected.empty() || !coll_.sameOnEveryRank()) {
      expected.assign(k.recvCount * es + 1, 0);
      verify::fillBuffer(c.type, expected.data(), k.recvCount, [&](size_t i) {
        double v = 0;
        coll_.expected(s.rank, nranks_, c.root, i, c.type, c.op, k, &v);
        return v;
      });
    }
    std::vector<char> host;
    wrong += verify::countMismatches(c.type, readable(s, recv, k.recvCount * es, host), expected.data(), k.recvCount);
  }
  return wrong;
}

void Runner::printHeader() {
  int version = 0;
  ncclGetVersion(&version);
  printf("# Strata perf (nccl-tests 2.19.6 format) nccl-headers=%d nccl-library=%d\n", NCCL_VERSION_CODE, version);
  printf("# Collective test starting: %s\n", prog_);
  bool factor = args_.stepFactor > 1;
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
         "validation: %d graph: 0 unalign: 0\n",
         args_.nThreads, args_.nGpus, args_.minBytes, args_.maxBytes,
         factor ? static_cast<size_t>(args_.stepFactor) : args_.stepBytes, factor ? "factor" : "bytes", args_.warmup,
         args_.iters, args_.aggIters, args_.check);
  if (args_.blocking) printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
  if (args_.mpiBackend) printf("# Backend: MPI (the same sweep through MPI's collectives, for comparison)\n");
  printf("#\n# Using devices\n");
}

void Runner::printDevices(int t, std::vector<Slot>& slots) {
  static std::mutex m;
  static std::vector<std::string> lines;  // by rank within this process
  {
    std::lock_guard<std::mutex> lock(m);
    lines.resize(static_cast<size_t>(args_.nThreads) * args_.nGpus);
    for (size_t g = 0; g < slots.size(); ++g) {
      char buf[256];
      snprintf(buf, sizeof(buf), "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n",
               slots[g].rank, 0, getpid(), hostName().c_str(), slots[g].device, 0, 0, 0,
               slots[g].device >= 0 ? "device memory" : "host memory");
      lines[t * args_.nGpus + g] = buf;
    }
  }
  world_.barrier();
  if (t == 0) {
    std::string mine;
    for (const std::string& l : lines) mine += l;
    auto all = world_.gatherToFirst(mine);
    if (world_.proc() == 0)
      for (const std::string& l : all) fputs(l.c_str(), stdout);
  }
  world_.barrier();
}

void Runner::threadMain(int t, const ncclUniqueId& id) {
  std::vector<Slot> slots(args_.nGpus);
  bool first = world_.proc() == 0 && t == 0;
  for (int g = 0; g < args_.nGpus; ++g) slots[g].rank = (world_.proc() * args_.nThreads + t) * args_.nGpus + g;
  int gpus = args_.mpiBackend ? 0 : gpuCount();
  if (!args_.mpiBackend) {
    ncclGroupStart();  // one thread creates its ranks inside one group, as nccl-tests does
    for (Slot& s : slots) {
      if (gpus > 0) {  // as nccl-tests: GPU (local index) mod the GPUs visible; several ranks may share one
        s.device = (world_.proc() * args_.nThreads * args_.nGpus + t * args_.nGpus + (&s - slots.data())) % gpus;
        setDevice(s.device);
        s.stream = streamCreate();
      }
      ncclResult_t r = ncclCommInitRank(&s.comm, nranks_, id, s.rank);
      if (r != ncclSuccess) ncclFailed("ncclCommInitRank", r);
    }
    ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess) ncclFailed("ncclGroupEnd (init)", r);
  }
  for (Slot& s : slots) {
    setDevice(s.device);
    // MPI gets private host memory even where a GPU is visible; so does Strata with
    // STRATA_PERF_PRIVATE_MEMORY=1 (as a framework's tensors: no ncclMemAlloc).
    const bool host = args_.mpiBackend || s.device < 0;
    if (host && (args_.mpiBackend || privateMemory())) {
      s.send = hostBuffer(slotBytes_);
      s.recv = hostBuffer(slotBytes_);
    } else if (ncclMemAlloc(&s.send, slotBytes_) != ncclSuccess || ncclMemAlloc(&s.recv, slotBytes_) != ncclSuccess)
      ncclFailed("ncclMemAlloc", ncclSystemError);
    // Host memory is written once here: on the test VMs a page populated by mmap
    // still costs ~5 us on its first write (4 MiB: 5.0-5.7 ms the first time, 35-40 us
    // the third; docs/perf.md), which would land in the calls of whichever size first
    // reaches the page.
    if (host) {
      memset(s.send, 0, slotBytes_);
      memset(s.recv, 0, slotBytes_);
    }
  }
  printDevices(t, slots);
  if (first) {
    printf("#\n#%*sout-of-place%*sin-place%*s\n", 62, "", 23, "", 10, "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    fflush(stdout);
  }
  std::vector<ncclRedOp_t> ops = coll_.hasOp() ? args_.ops : std::vector<ncclRedOp_t>{ncclSum};
  std::vector<int> roots;
  if (!coll_.hasRoot()) roots = {-1};
  else if (args_.root == -1) for (int r2 = 0; r2 < nranks_; ++r2) roots.push_back(r2);
  else roots = {args_.root};
  for (int cycle = 0; args_.cycles == 0 || cycle < args_.cycles; ++cycle) {
    for (ncclDataType_t type : args_.types) {
      size_t es = dtypeSize(type);
      for (ncclRedOp_t op : ops) {
        for (int root : roots) {
          for (size_t bytes = args_.minBytes; bytes != 0; bytes = nextSize(args_, bytes)) {
            Case c{type, op, root < 0 ? 0 : root, coll_.counts(bytes, es, nranks_), false};
            if (args_.mpiBackend && !mpiUnsupported(kind_, type, op, false, world_.mpi()).empty()) {
              if (first && bytes == args_.minBytes)
                printf("# skipped %s %s: %s\n", dtypeName(type), opName(op),
                       mpiUnsupported(kind_, type, op, false, world_.mpi()).c_str());
              break;
            }
            std::string row;
            if (first) {
              char buf[128];
              snprintf(buf, sizeof(buf), "%12zu  %12zu  %8s  %6s  %6i", c.counts.sizeBytes, c.counts.count,
                       dtypeName(type), coll_.hasOp() ? opName(op) : "none", root);
              row = buf;
            }
            for (bool inPlace : {false, true}) {
              c.inPlace = inPlace;
              if (args_.mpiBackend && !mpiUnsupported(kind_, type, op, inPlace, true).empty()) {
                row += "      N/A     N/A     N/A     N/A";  // same columns, nothing measured
                continue;
              }
              double us = timeCase(t, slots, c);
              bool checkable = args_.check && !(inPlace && coll_.inPlaceUnchecked());
              double wrong = checkable ? world_.combine(t, static_cast<double>(checkCase(slots, c)), 4) : 0;
              if (!first) continue;
              double algbw = coll_.algBytes(c.counts, es, nranks_) / 1e3 / us;  // bytes/us = MB/s -> GB/s
              double busbw = algbw * coll_.busFactor(nranks_);
              bwSum_ += busbw;
              ++bwCount_;
              wrongCases_ += wrong > 0;
              char buf[128];
              if (checkable)
                snprintf(buf, sizeof(buf), "  %7s  %6s  %6s  %6g", num(us, 7).c_str(), num(algbw, 6).c_str(),
                         num(busbw, 6).c_str(), wrong);
              else
                snprintf(buf, sizeof(buf), "  %7s  %6s  %6s  %6s", num(us, 7).c_str(), num(algbw, 6).c_str(),
                         num(busbw, 6).c_str(), "N/A");
              row += buf;
            }
            if (first) {
              printf("%s\n", row.c_str());
              fflush(stdout);
            }
            if (gExit.load() != 0) break;
          }
        }
      }
    }
  }
  world_.barrier();
  for (Slot& s : slots) {
    if (args_.mpiBackend || (s.device < 0 && privateMemory())) {
      munmap(s.send, slotBytes_);
      munmap(s.recv, slotBytes_);
    } else {
      ncclMemFree(s.send);
      ncclMemFree(s.recv);
    }
    if (s.stream) streamDestroy(s.stream);
    if (s.comm) ncclCommDestroy(s.comm);
  }
}

int Runner::run() {
  // Room for the largest size's send or receive buffer (counted in bytes, so any type fits).
  Counts most = coll_.counts(args_.maxBytes, 1, nranks_);
  slotBytes_ = std::max<size_t>(64, std::max(most.sendCount, most.recvCount) + 64);
  if (world_.proc() == 0) printHeader();
  ncclUniqueId id;
  if (!args_.mpiBackend && world_.proc() == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
    ncclFailed("ncclGetUniqueId", ncclSystemError);
    return kExitNccl;
  }
  world_.broadcast(&id, sizeof(id));
  if (args_.mpiBackend && !world_.mpi()) {
    fprintf(stderr, "%s\n", mpiUnsupported(kind_, ncclFloat, ncclSum, false, false).c_str());
    return 255;
  }
  if (args_.timeoutSec > 0) {
    std::thread([this] {
      uint64_t last = gProgress.load();
      for (int idle = 0;; ++idle) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        uint64_t now = gProgress.load();
        if (now != last) idle = 0;
        last = now;
        if (idle >= args_.timeoutSec) {
          printf("%s: Test timeout (%ds) %s\n", hostName().c_str(), args_.timeoutSec, prog_);
          fflush(stdout);
          _exit(kExitTimeout);
        }
      }
    }).detach();
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < args_.nThreads; ++t) threads.emplace_back([this, t, &id] { threadMain(t, id); });
  for (std::thread& th : threads) th.join();
  if (world_.proc() == 0) {
    printf("# %-20s : %ld %s\n", "Out of bounds values", wrongCases_, wrongCases_ ? "FAILED" : "OK");
    printf("# %-20s : %g \n", "Avg bus bandwidth", bwCount_ ? bwSum_ / bwCount_ : 0.0);
    printf("#\n# Collective test concluded: %s\n#\n\n", prog_);
    fflush(stdout);
  }
  if (gExit.load() != 0) return gExit.load();
  return wrongCases_ ? kExitWrong : 0;
}

}  // namespace

int perfMain(int argc, char** argv, Coll coll) {
  Args args;
  int rc = parseArgs(argc, argv, &args);
  if (rc >= 0) return rc;
  World world(&argc, &argv, args.nThreads);
  const char* prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  Runner runner(args, coll, world, prog);
  return runner.run();
}

}  // namespace strata::perf
