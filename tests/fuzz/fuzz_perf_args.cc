// The perf tools' command line (nccl-tests' flags and Strata's long options):
// any arguments must parse to an exit code or to options whose size sweep
// moves forward and ends inside [-b, -e].
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "harness/perf_args.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Usage text is not what is tested; stderr stays: libFuzzer reports there.
  if (!freopen("/dev/null", "w", stdout)) return 0;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Arguments are the input's NUL-separated pieces, after the program's name.
  std::vector<std::string> pieces{"all_reduce_perf"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      pieces.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  pieces.push_back(cur);
  std::vector<char*> argv;
  for (std::string& p : pieces) argv.push_back(p.data());
  argv.push_back(nullptr);
  strata::perf::Args args;
  if (strata::perf::parseArgs(static_cast<int>(pieces.size()), argv.data(), &args) != -1) return 0;
  if (args.minBytes == 0 || args.minBytes > args.maxBytes) __builtin_trap();
  size_t bytes = args.minBytes;
  for (int steps = 0; steps < 10000 && bytes != 0; ++steps) {  // a sweep of any length starts like this
    size_t next = strata::perf::nextSize(args, bytes);
    if (next != 0 && (next <= bytes || next > args.maxBytes)) __builtin_trap();
    bytes = next;
  }
  return 0;
}
