// Many ranks in one process, as nccl-tests' -g N makes them: one thread makes N
// communicators (ncclCommInitAll), runs one grouped all-reduce across all of them
// twice (the first opens its links), checks every rank's output exactly, and
// destroys them. Prints the time of each phase and the process's peak resident
// memory, so that a cost growing faster than the rank count shows across runs of
// growing N (one N per process: the peak is the process's).
//
// usage: init_scale N [COUNT]   (COUNT float elements per rank, 1031 by default)
// NCCL_ALGO / NCCL_PROTO choose the algorithm as usual.
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "verify/reference.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

long peakRssKb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

bool allReduce(std::vector<ncclComm_t>& comms, std::vector<std::vector<float>>& in,
               std::vector<std::vector<float>>& out) {
  ncclGroupStart();
  for (size_t r = 0; r < comms.size(); ++r)
    ncclAllReduce(in[r].data(), out[r].data(), in[r].size(), ncclFloat, ncclSum, comms[r], nullptr);
  ncclResult_t rc = ncclGroupEnd();
  if (rc != ncclSuccess) std::fprintf(stderr, "init_scale: all-reduce failed: %s\n", ncclGetErrorString(rc));
  return rc == ncclSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  using strata::verify::TestOp;
  int n = argc > 1 ? std::atoi(argv[1]) : 0;
  size_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1031;
  if (n < 1 || count < 1) {
    std::fprintf(stderr, "usage: init_scale N [COUNT]\n");
    return 2;
  }
  std::vector<ncclComm_t> comms(n);
  double t0 = now();
  ncclResult_t rc = ncclCommInitAll(comms.data(), n, nullptr);
  if (rc != ncclSuccess) {
    std::fprintf(stderr, "init_scale: ncclCommInitAll(%d) failed: %s\n", n, ncclGetErrorString(rc));
    return 1;
  }
  double t1 = now();
  std::vector<std::vector<float>> in(n, std::vector<float>(count)), out(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      in[r][i] = static_cast<float>(strata::verify::inputValue(n, r, i, ncclFloat, TestOp::kSum));
  double t2 = now();
  if (!allReduce(comms, in, out)) return 1;
  double t3 = now();
  for (auto& o : out) std::fill(o.begin(), o.end(), -1.0f);
  if (!allReduce(comms, in, out)) return 1;
  double t4 = now();
  std::vector<float> expected(count);
  for (size_t i = 0; i < count; ++i)
    expected[i] = static_cast<float>(strata::verify::reducedValue(n, i, ncclFloat, TestOp::kSum));
  size_t wrong = 0;
  std::string first;
  for (int r = 0; r < n; ++r) {
    std::string diff = strata::verify::compareBuffers(ncclFloat, out[r].data(), expected.data(), count,
                                                      "rank " + std::to_string(r));
    if (diff.empty()) continue;
    if (first.empty()) first = diff;
    ++wrong;
  }
  double t5 = now();
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  double t6 = now();
  std::printf("ranks %d  init %.2f s  first all-reduce %.3f s  second %.3f s  destroy %.2f s  peak RSS %.0f MB "
              "(%.2f MB per rank)  exact %s\n",
              n, t1 - t0, t3 - t2, t4 - t3, t6 - t5, peakRssKb() / 1024.0, peakRssKb() / 1024.0 / n,
              wrong ? "NO" : "yes");
  if (wrong) std::printf("%zu ranks wrong; first: %s\n", wrong, first.c_str());
  return wrong ? 1 : 0;
}
