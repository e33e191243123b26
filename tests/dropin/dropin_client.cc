// A client written the way NCCL's own samples and nccl-tests are: it includes
// <nccl.h> and nothing else of NCCL's or Strata's, takes half, __nv_bfloat16 and
// the fp8 types from it, checks NCCL_VERSION_CODE, and builds ncclConfig_t with
// NCCL_CONFIG_INITIALIZER. CMake compiles it as C++ and (dropin_client.cu) as
// CUDA, once against NVIDIA's header and once against Strata's, and links every
// build with Strata's libnccl.so.2, which runs it on host memory.
//
// Usage: dropin_client NRANKS. Exit status 0 when every result is exact.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define NCCLCHECK(cmd)                                                                                   \
  do {                                                                                                   \
    ncclResult_t res_ = (cmd);                                                                           \
    if (res_ != ncclSuccess) {                                                                           \
      std::printf("Failed, NCCL error %s:%d '%s': %s\n", __FILE__, __LINE__, ncclGetErrorString(res_), \
                  ncclGetLastError(NULL));                                                               \
      return 1;                                                                                          \
    }                                                                                                    \
  } while (0)
#define EXPECT(cond, what)                                  \
  do {                                                      \
    if (!(cond)) {                                          \
      std::printf("wrong result: %s (%s)\n", what, #cond); \
      return 1;                                             \
    }                                                       \
  } while (0)

namespace {

constexpr int kCount = 1000;

// Every rank contributes rank + (i % 5): small integers, exact in half and bfloat16.
float contribution(int rank, int i) { return static_cast<float>(rank + i % 5); }
float sumOf(int nranks, int i) { return static_cast<float>(nranks * (nranks - 1) / 2 + nranks * (i % 5)); }

// half buffers through ncclFloat16, as a mixed-precision framework passes them.
int halfAllReduce(ncclComm_t* comms, int nranks) {
  std::vector<std::vector<half>> send(nranks, std::vector<half>(kCount)), recv = send;
  for (int r = 0; r < nranks; ++r)
    for (int i = 0; i < kCount; ++i) send[r][i] = __float2half(contribution(r, i));
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < nranks; ++r)
    NCCLCHECK(ncclAllReduce(send[r].data(), recv[r].data(), kCount, ncclFloat16, ncclSum, comms[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < nranks; ++r)
    for (int i = 0; i < kCount; ++i) EXPECT(__half2float(recv[r][i]) == sumOf(nranks, i), "half all-reduce");
  return 0;
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
int bfloat16AllGather(ncclComm_t* comms, int nranks) {
  std::vector<std::vector<__nv_bfloat16>> send(nranks, std::vector<__nv_bfloat16>(kCount));
  std::vector<std::vector<__nv_bfloat16>> recv(nranks, std::vector<__nv_bfloat16>(kCount * nranks));
  for (int r = 0; r < nranks; ++r)
    for (int i = 0; i < kCount; ++i) send[r][i] = __float2bfloat16(contribution(r, i));
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < nranks; ++r)
    NCCLCHECK(ncclAllGather(send[r].data(), recv[r].data(), kCount, ncclBfloat16, comms[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < nranks; ++r)
    for (int i = 0; i < kCount * nranks; ++i)
      EXPECT(__bfloat162float(recv[r][i]) == contribution(i / kCount, i % kCount), "bfloat16 all-gather");
  return 0;
}
#endif

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0) && defined(CUDART_VERSION) && CUDART_VERSION >= 11080
// fp8 e4m3 is exact for these small integers; max needs no rounding either.
int fp8AllReduce(ncclComm_t* comms, int nranks) {
  std::vector<std::vector<__nv_fp8_e4m3>> send(nranks, std::vector<__nv_fp8_e4m3>(kCount)), recv = send;
  for (int r = 0; r < nranks; ++r)
    for (int i = 0; i < kCount; ++i) send[r][i] = __nv_fp8_e4m3(contribution(r, i));
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < nranks; ++r)
    NCCLCHECK(ncclAllReduce(send[r].data(), recv[r].data(), kCount, ncclFloat8e4m3, ncclMax, comms[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < nranks; ++r)
    for (int i = 0; i < kCount; ++i)
      EXPECT(static_cast<float>(recv[r][i]) == contribution(nranks - 1, i), "fp8 e4m3 all-reduce max");
  return 0;
}
#endif

// One rank per thread with ncclCommInitRankConfig, the multi-process pattern's shape.
int configuredRanks(int nranks) {
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  std::vector<int> status(nranks, 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      status[r] = [&]() -> int {
        ncclComm_t comm;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 1;
        config.commName = "dropin";
        NCCLCHECK(ncclCommInitRankConfig(&comm, nranks, id, r, &config));
#else
        NCCLCHECK(ncclCommInitRank(&comm, nranks, id, r));
#endif
        double in = r + 1.0, out = 0;
        NCCLCHECK(ncclAllReduce(&in, &out, 1, ncclDouble, ncclSum, comm, NULL));
        EXPECT(out == nranks * (nranks + 1) / 2.0, "double all-reduce");
        NCCLCHECK(ncclCommFinalize(comm));
        NCCLCHECK(ncclCommDestroy(comm));
        return 0;
      }();
    });
  for (std::thread& t : threads) t.join();
  for (int s : status)
    if (s != 0) return 1;
  return 0;
}

// A failing call returns its code, and ncclGetLastError says why.
int lastError(ncclComm_t comm) {
  int x = 0;
  ncclResult_t r = ncclAllReduce(&x, &x, 1, static_cast<ncclDataType_t>(ncclNumTypes + 3), ncclSum, comm, NULL);
  EXPECT(r == ncclInvalidArgument, "invalid datatype -> ncclInvalidArgument");
  const char* why = ncclGetLastError(comm);
  EXPECT(why && std::strlen(why) > 0, "ncclGetLastError names the problem");
  std::printf("expected error: %s\n", why);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int nranks = argc > 1 ? std::atoi(argv[1]) : 2;
  int version = 0;
  NCCLCHECK(ncclGetVersion(&version));
  std::printf("dropin_client: nccl.h %d.%d.%d (NCCL_VERSION_CODE %d, suffix '%s'), library %d, %d ranks\n",
              NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_VERSION_CODE, NCCL_SUFFIX, version, nranks);
  std::vector<ncclComm_t> comms(nranks);
  std::vector<int> devs(nranks);
  for (int r = 0; r < nranks; ++r) devs[r] = r;
  NCCLCHECK(ncclCommInitAll(comms.data(), nranks, devs.data()));
  int failed = halfAllReduce(comms.data(), nranks);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
  failed |= bfloat16AllGather(comms.data(), nranks);
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0) && defined(CUDART_VERSION) && CUDART_VERSION >= 11080
  failed |= fp8AllReduce(comms.data(), nranks);
#else
  std::printf("fp8 not available from this header\n");
#endif
  failed |= lastError(comms[0]);
  for (ncclComm_t c : comms) NCCLCHECK(ncclCommDestroy(c));
  failed |= configuredRanks(nranks);
  std::printf("dropin_client: %s\n", failed ? "FAILED" : "all results exact");
  return failed;
}
