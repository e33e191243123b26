// Single-core memory rates on this machine, the basis of the bounds in perf/compare.py:
// copy (memcpy) and c = a + b (float) of buffers of the given size (MiB, default 256),
// in bytes written per second, median of 5 samples of at least 20 ms each (small
// buffers are copied many times per sample, so they run at the caches' speed, as a
// collective of that size does).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

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

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = static_cast<size_t>((argc > 1 ? strtod(argv[1], nullptr) : 256) * (1 << 20));
  size_t n = bytes / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.0f);  // touched here, so no page faults below
  double copyRate = medianRate(copy, c.data(), a.data(), b.data(), n);
  double addRate = medianRate(add, c.data(), a.data(), b.data(), n);
  printf("membw_probe: %.3g MiB buffers, one core: copy %.2f GB/s, c=a+b %.2f GB/s (bytes written per second)\n",
         static_cast<double>(bytes) / (1 << 20), copyRate, addRate);
  printf("copy_gbps %.3f\nadd_gbps %.3f\n", copyRate, addRate);
  return c[n / 2] == 3.0f ? 0 : 1;
}
