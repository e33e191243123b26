// Memory rates on this machine, the basis of the models in perf/compare.py: copy
// (memcpy) and c = a + b (float) of buffers of the given size (MiB, default 256), in
// bytes written per second per thread, with THREADS threads (default 1) each working on
// its own buffers at the same time (the ranks of a collective share the memory system
// so), median of 5 samples of at least 20 ms each (small buffers are copied many times
// per sample, so they run at the caches' speed, as a collective of that size does).
// Also `cma`: the same copy made by process_vm_readv (Cross Memory Attach), the single
// copy out of another process's private memory that Open MPI's vader makes, measured in
// THREADS processes at once (threads of one process would share its address space's
// locks, which ranks do not), each on its own memory; 0 where the kernel refuses it.
//
// Also what the first touch of memory costs, once, on one buffer of the size: the
// first and the second write (memset) of pages mmap populated, and the first and the
// second process_vm_readv out of pages another process wrote, into pages written
// here, in ms per MiB. On the test VM the first write cost 20-100x the second, the
// first read 10-16x (docs/perf.md, "Warm-up on new memory").
//
// usage: membw_probe [MiB] [THREADS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

// Seconds per call, over enough calls to last 20 ms.
double seconds(void (*fn)(float*, const float*, const float*, size_t), float* c, const float* a, const float* b,
               size_t n) {
  int calls = 0;
  auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    fn(c, a, b, n);
    ++calls;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < 0.02);
  return elapsed / calls;
}

void copy(float* c, const float* a, const float*, size_t n) { memcpy(c, a, n * sizeof(float)); }

bool cmaFailed = false;

void cma(float* c, const float* a, const float*, size_t n) {
  size_t bytes = n * sizeof(float), done = 0;
  while (done < bytes) {
    iovec local{reinterpret_cast<char*>(c) + done, bytes - done};
    iovec remote{const_cast<char*>(reinterpret_cast<const char*>(a)) + done, bytes - done};
    ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (got <= 0) {
      cmaFailed = true;
      return;
    }
    done += static_cast<size_t>(got);
  }
}

void add(float* c, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

double medianRate(void (*fn)(float*, const float*, const float*, size_t), float* c, const float* a, const float* b,
                  size_t n) {
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) rates.push_back(n * sizeof(float) / seconds(fn, c, a, b, n) / 1e9);
  std::sort(rates.begin(), rates.end());
  return rates[2];
}

// Each thread's median rate while all of them run.
struct Rates {
  double copy = 0, add = 0, cma = 0;
};

Rates probeOne(size_t n) {
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.0f);  // touched here, so no page faults below
  Rates r;
  r.copy = medianRate(copy, c.data(), a.data(), b.data(), n);
  r.add = medianRate(add, c.data(), a.data(), b.data(), n);
  if (c[n / 2] != 3.0f) r.add = -1;  // the sums were not computed: report nonsense rather than a rate
  return r;
}

// process_vm_readv's rate in a process of its own: -1 if the copy went wrong.
double cmaOne(size_t n) {
  std::vector<float> a(n, 1.0f), c(n, 0.0f);
  double rate = medianRate(cma, c.data(), a.data(), nullptr, n);
  if (cmaFailed) return 0;
  return c[n / 2] == 1.0f ? rate : -1;
}

// The mean of cmaOne over `procs` processes running at once.
double cmaRate(size_t n, int procs) {
  std::vector<std::pair<pid_t, int>> kids;
  for (int p = 0; p < procs; ++p) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
      double r = cmaOne(n);
      ssize_t w = write(fds[1], &r, sizeof r);
      _exit(w == sizeof r ? 0 : 1);
    }
    close(fds[1]);
    kids.push_back({pid, fds[0]});
  }
  double sum = 0;
  for (auto [pid, fd] : kids) {
    double r = -1;
    if (read(fd, &r, sizeof r) != sizeof r) r = -1;
    close(fd);
    waitpid(pid, nullptr, 0);
    if (r < 0) return -1;
    sum += r;
  }
  return sum / procs;
}

double msPerMiB(std::chrono::steady_clock::time_point t0, size_t bytes) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() * (1 << 20) / bytes;
}

char* populated(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

// The first and second memset of a buffer mmap populated: ms per MiB each.
bool firstWrite(size_t bytes, double out[2]) {
  char* p = populated(bytes);
  if (!p) return false;
  for (int i = 0; i < 2; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    memset(p, i + 1, bytes);
    out[i] = msPerMiB(t0, bytes);
  }
  munmap(p, bytes);
  return true;
}

// The first and second process_vm_readv of a buffer a child wrote, into a buffer
// written here: ms per MiB each; false where the kernel refuses it or the child fails.
bool firstRead(size_t bytes, double out[2]) {
  int addr[2], done[2];
  if (pipe(addr) != 0) return false;
  if (pipe(done) != 0) {
    close(addr[0]), close(addr[1]);
    return false;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(addr[0]), close(done[1]);
    char* p = populated(bytes);
    if (p) memset(p, 7, bytes);
    char c;
    // Waits until the parent is done reading (or gone: read returns 0).
    _exit(write(addr[1], &p, sizeof p) == sizeof p && read(done[0], &c, 1) >= 0 ? 0 : 1);
  }
  close(addr[1]), close(done[0]);  // the child's ends: a child that dies unblocks the read below
  char* remote = nullptr;
  bool ok = pid > 0 && read(addr[0], &remote, sizeof remote) == sizeof remote && remote;
  char* local = ok ? populated(bytes) : nullptr;
  if (local) memset(local, 1, bytes);
  for (int i = 0; local && i < 2; ++i) {
    iovec l{local, bytes}, r{remote, bytes};
    auto t0 = std::chrono::steady_clock::now();
    ok = ok && process_vm_readv(pid, &l, 1, &r, 1, 0) == static_cast<ssize_t>(bytes) && local[bytes - 1] == 7;
    out[i] = msPerMiB(t0, bytes);
  }
  close(done[1]);  // the child exits
  close(addr[0]);
  if (pid > 0) waitpid(pid, nullptr, 0);
  if (local) munmap(local, bytes);
  return ok && local;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = static_cast<size_t>((argc > 1 ? strtod(argv[1], nullptr) : 256) * (1 << 20));
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  if (threads < 1 || bytes < sizeof(float)) {
    fprintf(stderr, "usage: membw_probe [MiB > 0] [THREADS >= 1]\n");
    return 2;
  }
  size_t n = bytes / sizeof(float);
  std::vector<Rates> got(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { got[t] = probeOne(n); });
  for (auto& th : pool) th.join();
  Rates mean;
  for (const Rates& r : got) {
    if (r.add < 0) return 1;
    mean.copy += r.copy / threads;
    mean.add += r.add / threads;
  }
  mean.cma = cmaRate(n, threads);
  if (mean.cma < 0) return 1;
  printf("membw_probe: %.3g MiB buffers, %d thread(s) at once: copy %.2f GB/s, c=a+b %.2f GB/s, copy by "
         "process_vm_readv %.2f GB/s per thread (bytes written per second)\n",
         static_cast<double>(bytes) / (1 << 20), threads, mean.copy, mean.add, mean.cma);
  printf("copy_gbps %.3f\nadd_gbps %.3f\ncma_gbps %.3f\n", mean.copy, mean.add, mean.cma);
  double w[2], r[2];
  if (firstWrite(bytes, w)) printf("first_write_ms_per_mib %.3f\nsecond_write_ms_per_mib %.3f\n", w[0], w[1]);
  if (mean.cma > 0 && firstRead(bytes, r))
    printf("first_cma_ms_per_mib %.3f\nsecond_cma_ms_per_mib %.3f\n", r[0], r[1]);
  return 0;
}
