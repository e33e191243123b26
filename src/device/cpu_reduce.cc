#include "device/cpu_reduce.h"

#include <emmintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device/combine.h"
#include "device/dtypes.h"

namespace strata::device {
namespace {

template <typename T>
typename Format<T>::Compute scalarOf(const ReduceOp& op) {
  using C = typename Format<T>::Compute;
  if constexpr (std::is_integral_v<C>) return static_cast<C>(op.scalarI);
  // Round the scalar to the storage type first, as a scalar of that datatype would be.
  else return Format<T>::load(Format<T>::store(static_cast<C>(op.scalarF)));
}

// The hot loops: one per kind so the compiler vectorises each; ivdep because
// dst may alias an input exactly, which is safe element by element.
template <typename T, ReduceKind K>
void reduceLoop(T* dst, const T* acc, const T* local, size_t n) {
  using F = Format<T>;
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) dst[i] = F::store(combine(F::load(acc[i]), F::load(local[i]), K));
}

template <typename T>
void reduceTyped(void* dstV, const void* accV, const void* localV, size_t n, const ReduceOp& op) {
  using F = Format<T>;
  T* dst = static_cast<T*>(dstV);
  const T* acc = static_cast<const T*>(accV);
  const T* local = static_cast<const T*>(localV);
  if (op.preMultiply) {
    auto s = scalarOf<T>(op);
#pragma GCC ivdep
    for (size_t i = 0; i < n; ++i) {
      T scaled = F::store(combine(F::load(local[i]), s, ReduceKind::kProd));  // rounded to T, as a pre-multiplied input is
      dst[i] = F::store(combine(F::load(acc[i]), F::load(scaled), ReduceKind::kSum));
    }
    return;
  }
  switch (op.kind) {
    case ReduceKind::kSum: return reduceLoop<T, ReduceKind::kSum>(dst, acc, local, n);
    case ReduceKind::kProd: return reduceLoop<T, ReduceKind::kProd>(dst, acc, local, n);
    case ReduceKind::kMax: return reduceLoop<T, ReduceKind::kMax>(dst, acc, local, n);
    case ReduceKind::kMin: return reduceLoop<T, ReduceKind::kMin>(dst, acc, local, n);
  }
}

}  // namespace

void prepare(void* dst, const void* src, size_t count, ncclDataType_t type, const ReduceOp& op) {
  if (!op.preMultiply) {
    if (dst != src) memcpy(dst, src, count * dtypeSize(type));
    return;
  }
  withType(type, [&](auto tag) {
    using T = decltype(tag);
    using F = Format<T>;
    auto s = scalarOf<T>(op);
    T* d = static_cast<T*>(dst);
    const T* in = static_cast<const T*>(src);
#pragma GCC ivdep
    for (size_t i = 0; i < count; ++i) d[i] = F::store(combine(F::load(in[i]), s, ReduceKind::kProd));
  });
}

void reduce(void* dst, const void* acc, const void* local, size_t count, ncclDataType_t type, const ReduceOp& op) {
  withType(type, [&](auto tag) { reduceTyped<decltype(tag)>(dst, acc, local, count, op); });
}

void copyStreaming(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  size_t head = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;
  if (bytes < 4096 || head > bytes) {
    memcpy(d, s, bytes);
    return;
  }
  memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t blocks = bytes / 64;
  for (size_t i = 0; i < blocks; ++i, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  memcpy(d, s, bytes % 64);
  _mm_sfence();  // streaming stores are weakly ordered: complete them before anyone looks
}

void loadScalar(const void* p, ncclDataType_t type, ReduceOp* op) {
  withType(type, [&](auto tag) {
    using T = decltype(tag);
    T v;
    memcpy(&v, p, sizeof(T));
    auto c = Format<T>::load(v);
    if constexpr (std::is_integral_v<decltype(c)>)
      op->scalarI = static_cast<int64_t>(c);
    else
      op->scalarF = static_cast<double>(c);
  });
}

void finalize(void* dst, size_t count, ncclDataType_t type, const ReduceOp& op) {
  if (op.postDivide <= 1) return;
  withType(type, [&](auto tag) {
    using T = decltype(tag);
    using F = Format<T>;
    using C = typename F::Compute;
    T* d = static_cast<T*>(dst);
    C div = static_cast<C>(op.postDivide);
    for (size_t i = 0; i < count; ++i) d[i] = F::store(F::load(d[i]) / div);
  });
}

void reduceInOrder(void* dst, const void* const* inputs, int n, size_t count, ncclDataType_t type,
                   const ReduceOp& op) {
  ReduceOp plain = op;
  plain.preMultiply = false;
  memcpy(dst, inputs[0], count * dtypeSize(type));
  for (int j = 1; j < n; ++j) reduce(dst, dst, inputs[j], count, type, plain);
  finalize(dst, count, type, op);
}

}  // namespace strata::device
