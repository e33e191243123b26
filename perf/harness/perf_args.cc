#include "harness/perf_args.h"

#include <getopt.h>
#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/dtype.h"

namespace strata::perf {
namespace {

constexpr ncclRedOp_t kMulSum = ncclNumOps;  // stands for a pre-multiplied sum made per call

void usage(const char* prog) {
  printf(
      "USAGE: %s\n"
      "  [-t,--nthreads <threads per process>] [-g,--ngpus <ranks per thread>]\n"
      "  [-b,--minbytes <min size in bytes>] [-e,--maxbytes <max size in bytes>]\n"
      "  [-i,--stepbytes <increment>] [-f,--stepfactor <multiplication factor>]\n"
      "  [-n,--iters <iterations>] [-m,--agg_iters <operations per group>] [-w,--warmup_iters <warm-up>]\n"
      "  [-N,--run_cycles <cycles, 0 = forever>] [-c,--check <0/1>]\n"
      "  [-o,--op <sum/prod/min/max/avg/mulsum/all>]\n"
      "  [-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/f8e4m3/f8e5m2/all>]\n"
      "  [-r,--root <root, -1 = every root>] [-z,--blocking <0/1>] [-a,--average <0/1/2/3>]\n"
      "  [-T,--timeout <seconds>] [-h,--help]\n"
      "  Strata: [--backend nccl|mpi] (mpi: the same sweep through MPI's collectives, under mpirun)\n"
      "          [--show-choice] (print the tuner's algorithm and protocol per size: NCCL_DEBUG=INFO, subsystem TUNING)\n"
      "          [--buffers host|device] (host: the only kind this build has)\n",
      prog);
}

bool parseOps(const char* s, std::vector<ncclRedOp_t>* ops) {
  struct { const char* name; ncclRedOp_t op; } table[] = {
      {"sum", ncclSum}, {"prod", ncclProd}, {"max", ncclMax}, {"min", ncclMin}, {"avg", ncclAvg}, {"mulsum", kMulSum}};
  if (strcasecmp(s, "all") == 0) {
    ops->clear();
    for (auto& t : table) ops->push_back(t.op);
    return true;
  }
  for (auto& t : table) {
    if (strcasecmp(s, t.name) == 0) {
      *ops = {t.op};
      return true;
    }
  }
  return false;
}

bool parseTypes(const char* s, std::vector<ncclDataType_t>* types) {
  types->clear();
  for (int t = 0; t < ncclNumTypes; ++t) {
    auto dt = static_cast<ncclDataType_t>(t);
    if (strcasecmp(s, "all") == 0 || strcasecmp(s, dtypeName(dt)) == 0) types->push_back(dt);
  }
  if (types->empty()) *types = {ncclFloat};
  return strcasecmp(s, "all") == 0 || types->size() == 1;
}

}  // namespace

const char* opName(ncclRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg", "mulsum"};
  return op >= 0 && op <= kMulSum ? names[op] : "?";
}

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (end == s || !(v >= 0)) return 0;  // also NaN
  switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  // 2^64 and more (or inf) is no size: converting it would be undefined (found by fuzz_perf_args).
  if (!(v < 18446744073709551616.0)) return 0;
  return static_cast<size_t>(v);
}

size_t nextSize(const Args& a, size_t bytes) {
  if (a.stepFactor > 1) {
    double next = static_cast<double>(bytes) * a.stepFactor;
    if (next > static_cast<double>(a.maxBytes)) return 0;
    size_t n = static_cast<size_t>(next);
    return n > bytes ? n : (bytes < a.maxBytes ? bytes + 1 : 0);  // 1 x 1.5 is still 1: move on anyway
  }
  if (a.stepBytes == 0 || bytes > a.maxBytes || a.maxBytes - bytes < a.stepBytes) return 0;
  return bytes + a.stepBytes;
}

int parseArgs(int argc, char** argv, Args* a) {
  optind = 0;  // getopt's full reset: parsing twice in one process (a fuzzer, a test) starts afresh
  static option longOpts[] = {
      {"nthreads", required_argument, nullptr, 't'},   {"ngpus", required_argument, nullptr, 'g'},
      {"minbytes", required_argument, nullptr, 'b'},   {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},  {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},      {"agg_iters", required_argument, nullptr, 'm'},
      {"warmup_iters", required_argument, nullptr, 'w'}, {"run_cycles", required_argument, nullptr, 'N'},
      {"check", required_argument, nullptr, 'c'},      {"op", required_argument, nullptr, 'o'},
      {"datatype", required_argument, nullptr, 'd'},   {"root", required_argument, nullptr, 'r'},
      {"blocking", required_argument, nullptr, 'z'},   {"average", required_argument, nullptr, 'a'},
      {"timeout", required_argument, nullptr, 'T'},    {"help", no_argument, nullptr, 'h'},
      {"backend", required_argument, nullptr, 1000},   {"show-choice", no_argument, nullptr, 1001},
      {"buffers", required_argument, nullptr, 1002},   {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:c:o:d:r:z:a:T:h", longOpts, nullptr)) != -1) {
    switch (c) {
      case 't': a->nThreads = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 'g': a->nGpus = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 'b': a->minBytes = parseSize(optarg); break;
      case 'e': a->maxBytes = parseSize(optarg); break;
      case 'i': a->stepBytes = parseSize(optarg); break;
      case 'f': a->stepFactor = strtod(optarg, nullptr); break;
      case 'n': a->iters = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 'm': a->aggIters = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 'w': a->warmup = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 'N': a->cycles = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 'c': a->check = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 'o':
        if (!parseOps(optarg, &a->ops)) {
          printf("invalid op %s, defaulting to sum\n", optarg);
          a->ops = {ncclSum};
        }
        break;
      case 'd':
        if (!parseTypes(optarg, &a->types)) printf("invalid type %s, defaulting to float\n", optarg);
        break;
      case 'r': a->root = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 'z': a->blocking = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 'a': a->average = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 'T': a->timeoutSec = static_cast<int>(strtol(optarg, nullptr, 0)); break;
      case 1000:
        if (strcmp(optarg, "mpi") != 0 && strcmp(optarg, "nccl") != 0) {
          fprintf(stderr, "invalid --backend %s (nccl or mpi)\n", optarg);
          return 255;
        }
        a->mpiBackend = strcmp(optarg, "mpi") == 0;
        break;
      case 1001:  // read by the library at its first call, which comes after argument parsing
        setenv("NCCL_DEBUG", "INFO", 1);
        setenv("NCCL_DEBUG_SUBSYS", "TUNING", 1);
        break;
      case 1002:
        if (strcmp(optarg, "host") != 0) {
          fprintf(stderr, "--buffers %s: this build has host buffers only (the GPU path is not built)\n", optarg);
          return 255;
        }
        break;
      case 'h': usage(argv[0]); return 0;
      default:
        printf("invalid option\n");
        usage(argv[0]);
        return 0;  // as nccl-tests
    }
  }
  if (a->minBytes == 0 || a->maxBytes == 0 || a->minBytes > a->maxBytes) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", a->minBytes, a->maxBytes);
    return 255;
  }
  if (a->nThreads < 1 || a->nGpus < 1 || a->iters < 1 || a->aggIters < 1 || a->warmup < 0) {
    fprintf(stderr, "invalid -t, -g, -n, -m or -w value\n");
    return 255;
  }
  if (a->mpiBackend && (a->nThreads != 1 || a->nGpus != 1)) {
    fprintf(stderr, "--backend mpi runs one rank per process: use -t 1 -g 1 under mpirun\n");
    return 255;
  }
  return -1;
}

}  // namespace strata::perf
