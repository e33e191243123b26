/*
 * Built against NVIDIA's own nccl.h (NCCL 2.28, from the CUDA toolkit) and
 * linked with Strata's libnccl.so.2: every collective on host memory across
 * N forked processes, with exact results. Usage: abi_check NRANKS
 */
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNT 1000
#define CHECK(call)                                                                             \
  do {                                                                                          \
    ncclResult_t r_ = (call);                                                                   \
    if (r_ != ncclSuccess) {                                                                    \
      fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #call, ncclGetErrorString(r_),     \
              ncclGetLastError(NULL));                                                          \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)
#define EXPECT(cond, what)                                            \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "rank %d: wrong result in %s\n", rank, what);   \
      return 1;                                                       \
    }                                                                 \
  } while (0)

static int runRank(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER; /* NVIDIA's 2.28 layout and version */
  cfg.commName = "abi";
  CHECK(ncclCommInitRankConfig(&comm, n, id, rank, &cfg));
  int count = 0, me = -1;
  CHECK(ncclCommCount(comm, &count));
  CHECK(ncclCommUserRank(comm, &me));
  EXPECT(count == n && me == rank, "ncclCommCount/ncclCommUserRank");

  float* f = malloc(sizeof(float) * COUNT * n);
  float* g = malloc(sizeof(float) * COUNT * n);
  int* a = malloc(sizeof(int) * COUNT * n);
  int* b = malloc(sizeof(int) * COUNT * n);
  for (int i = 0; i < COUNT; ++i) f[i] = (float)(rank + i % 7);
  CHECK(ncclAllReduce(f, g, COUNT, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < COUNT; ++i) EXPECT(g[i] == (float)(n * (n - 1) / 2 + n * (i % 7)), "ncclAllReduce");

  for (int i = 0; i < COUNT; ++i) a[i] = rank * 100000 + i;
  CHECK(ncclAllGather(a, b, COUNT, ncclInt32, comm, NULL));
  for (int i = 0; i < COUNT * n; ++i) EXPECT(b[i] == (i / COUNT) * 100000 + i % COUNT, "ncclAllGather");

  for (int i = 0; i < COUNT * n; ++i) a[i] = i;
  CHECK(ncclReduceScatter(a, b, COUNT, ncclInt32, ncclMax, comm, NULL));
  for (int i = 0; i < COUNT; ++i) EXPECT(b[i] == rank * COUNT + i, "ncclReduceScatter");

  for (int i = 0; i < COUNT; ++i) a[i] = rank == n - 1 ? 7 * i : -1;
  CHECK(ncclBroadcast(a, a, COUNT, ncclInt32, n - 1, comm, NULL));
  for (int i = 0; i < COUNT; ++i) EXPECT(a[i] == 7 * i, "ncclBroadcast");

  for (int i = 0; i < COUNT; ++i) a[i] = rank + i;
  CHECK(ncclReduce(a, b, COUNT, ncclInt32, ncclMin, 0, comm, NULL));
  if (rank == 0)
    for (int i = 0; i < COUNT; ++i) EXPECT(b[i] == i, "ncclReduce");

  double scalar = 0.5, d = 4.0 * (rank + 1), e = 0;
  ncclRedOp_t op;
  CHECK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat64, ncclScalarHostImmediate, comm));
  CHECK(ncclAllReduce(&d, &e, 1, ncclFloat64, op, comm, NULL));
  CHECK(ncclRedOpDestroy(op, comm));
  EXPECT(e == 2.0 * n * (n + 1) / 2, "ncclRedOpCreatePreMulSum");

  for (int i = 0; i < COUNT * n; ++i) a[i] = rank * 1000000 + i;
  CHECK(ncclAlltoAll(a, b, COUNT, ncclInt32, comm, NULL));
  for (int i = 0; i < COUNT * n; ++i)
    EXPECT(b[i] == (i / COUNT) * 1000000 + rank * COUNT + i % COUNT, "ncclAlltoAll");

  for (int i = 0; i < COUNT; ++i) a[i] = rank * 10 + i;
  CHECK(ncclGather(a, b, COUNT, ncclInt32, n / 2, comm, NULL));
  if (rank == n / 2)
    for (int i = 0; i < COUNT * n; ++i) EXPECT(b[i] == (i / COUNT) * 10 + i % COUNT, "ncclGather");

  for (int i = 0; i < COUNT * n; ++i) a[i] = rank == 0 ? i : -1;
  CHECK(ncclScatter(a, b, COUNT, ncclInt32, 0, comm, NULL));
  for (int i = 0; i < COUNT; ++i) EXPECT(b[i] == rank * COUNT + i, "ncclScatter");

  for (int i = 0; i < COUNT; ++i) a[i] = rank * 3 + i;
  CHECK(ncclGroupStart());
  CHECK(ncclSend(a, COUNT, ncclInt32, (rank + 1) % n, comm, NULL));
  CHECK(ncclRecv(b, COUNT, ncclInt32, (rank + n - 1) % n, comm, NULL));
  CHECK(ncclGroupEnd());
  for (int i = 0; i < COUNT; ++i) EXPECT(b[i] == ((rank + n - 1) % n) * 3 + i, "ncclSend/ncclRecv");

  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
  free(f);
  free(g);
  free(a);
  free(b);
  return 0;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2, rank = -1, version = 0;
  ncclGetVersion(&version);
  printf("abi_check: built against nccl.h %d.%d.%d, library reports %d, %d ranks\n", NCCL_MAJOR, NCCL_MINOR,
         NCCL_PATCH, version, n);
  /* Rank 0's process makes the id and passes it on: this process starts no threads before forking. */
  int idPipe[2];
  if (pipe(idPipe) != 0) return 1;
  pid_t pids[64];
  for (int r = 0; r < n; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      ncclUniqueId id;
      alarm(60); /* never hang the suite */
      rank = r;
      if (r == 0) {
        CHECK(ncclGetUniqueId(&id));
        for (int k = 1; k < n; ++k)
          if (write(idPipe[1], &id, sizeof(id)) != (ssize_t)sizeof(id)) _exit(2);
      } else if (read(idPipe[0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
        _exit(2);
      }
      _exit(runRank(r, n, id));
    }
  }
  int failed = 0;
  for (int r = 0; r < n; ++r) {
    int status;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  printf("abi_check: %d of %d ranks failed\n", failed, n);
  return failed ? 1 : 0;
}
