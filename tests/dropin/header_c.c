/* Strata's nccl.h in a C translation unit: with the CUDA headers on the include
 * path it brings in cuda_runtime.h (as NVIDIA's does); without them it still
 * compiles, with cudaStream_t as the same opaque pointer type. */
#include <nccl.h>
#include <stdio.h>

int main(void) {
  cudaStream_t stream = NULL;
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 1;
#if defined(EXPECT_CUDA_HEADERS) && !defined(CUDART_VERSION)
  printf("FAILED: the CUDA headers are on the include path but nccl.h did not include them\n");
  return 1;
#elif !defined(EXPECT_CUDA_HEADERS) && defined(CUDART_VERSION)
  printf("FAILED: nccl.h included CUDA headers that are not on the include path\n");
  return 1;
#endif
  printf("header_c: library %d, stream %p, all results exact\n", version, (void*)stream);
  return 0;
}
