// Command-line options of the perf tools: nccl-tests' letters and defaults,
// plus Strata's long options (which no nccl-tests letter collides with).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nccl.h"

namespace strata::perf {

struct Args {
  int nThreads = 1;             // -t
  int nGpus = 1;                // -g: ranks per thread
  size_t minBytes = 32 << 20;   // -b
  size_t maxBytes = 32 << 20;   // -e
  size_t stepBytes = 1 << 20;   // -i
  double stepFactor = 1;        // -f
  int iters = 20;               // -n
  int warmup = 1;               // -w
  int aggIters = 1;             // -m
  int cycles = 1;               // -N
  int check = 1;                // -c
  std::vector<ncclRedOp_t> ops{ncclSum};        // -o (ncclNumOps stands for mulsum)
  std::vector<ncclDataType_t> types{ncclFloat};  // -d
  int root = 0;                 // -r (-1: every root)
  int blocking = 0;             // -z
  int average = 1;              // -a: 0 rank 0, 1 mean, 2 min, 3 max
  int timeoutSec = 0;           // -T
  bool mpiBackend = false;      // --backend mpi: the same sweep through MPI's collectives
};

// Parses argv; returns -1 to continue, else the exit code (0 for -h, 255 for bad values).
int parseArgs(int argc, char** argv, Args* args);

// The sweep's size after `bytes`: larger by -f (a factor above 1) or else by -i,
// always by at least one byte; 0 once past -e (or at once when -i is 0 and -f is 1).
size_t nextSize(const Args& a, size_t bytes);

// "1K" -> 1024 (K, M, G binary; fractions allowed), 0 on a bad value.
size_t parseSize(const char* s);

const char* opName(ncclRedOp_t op);

}  // namespace strata::perf
