#include "verify/reference.h"

#include <cstring>

#include "common/dtype.h"

namespace strata::verify {


const char* opName(TestOp op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg", "premul-host", "premul-device"};
  return names[static_cast<int>(op)];
}

static bool isFp8(ncclDataType_t t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

double inputValue(int rank, size_t i, ncclDataType_t type, TestOp op) {
  if (op == TestOp::kProd) return (i + rank) % 5 == 0 ? 2 : 1;
  return static_cast<double>((i * 3 + rank * 5) % (isFp8(type) ? 2 : 4));
}

double movedValue(int rank, size_t i, ncclDataType_t type) {
  return static_cast<double>((rank * 131 + i * 7) % (isFp8(type) ? 8 : 100));
}

double reducedValue(int n, size_t i, ncclDataType_t type, TestOp op) {
  double acc = inputValue(0, i, type, op);
  if (op == TestOp::kPreMulHost || op == TestOp::kPreMulDevice) acc *= kPreMulScalar;
  for (int r = 1; r < n; ++r) {
    double v = inputValue(r, i, type, op);
    switch (op) {
      case TestOp::kProd: acc *= v; break;
      case TestOp::kMax: acc = v > acc ? v : acc; break;
      case TestOp::kMin: acc = v < acc ? v : acc; break;
      case TestOp::kPreMulHost:
      case TestOp::kPreMulDevice: acc += kPreMulScalar * v; break;
      default: acc += v; break;
    }
  }
  if (op != TestOp::kAvg) return acc;
  // Integers divide with truncation; floating types divide the exact sum once and round.
  bool integral = type <= ncclUint64;
  if (integral) return static_cast<double>(static_cast<int64_t>(acc) / n);
  return withType(type, [&](auto tag) -> double {
    using T = decltype(tag);
    using C = typename Format<T>::Compute;
    return static_cast<double>(Format<T>::load(Format<T>::store(static_cast<C>(acc) / static_cast<C>(n))));
  });
}

void fillBuffer(ncclDataType_t type, void* dst, size_t count, const std::function<double(size_t)>& value) {
  withType(type, [&](auto tag) {
    using T = decltype(tag);
    using C = typename Format<T>::Compute;
    T* p = static_cast<T*>(dst);
    for (size_t i = 0; i < count; ++i) p[i] = Format<T>::store(static_cast<C>(value(i)));
  });
}

std::vector<char> makeBuffer(ncclDataType_t type, size_t count, const std::function<double(size_t)>& value) {
  // Exactly count elements (a device upload of size() bytes must fit the buffer);
  // never a null data() though, even for count 0.
  std::vector<char> buf;
  buf.reserve(count * dtypeSize(type) + 1);
  buf.resize(count * dtypeSize(type));
  fillBuffer(type, buf.data(), count, value);
  return buf;
}

size_t countMismatches(ncclDataType_t type, const void* got, const void* expected, size_t count) {
  size_t es = dtypeSize(type), wrong = 0;
  const char* g = static_cast<const char*>(got);
  const char* e = static_cast<const char*>(expected);
  for (size_t i = 0; i < count; ++i) wrong += memcmp(g + i * es, e + i * es, es) != 0;
  return wrong;
}

std::string compareBuffers(ncclDataType_t type, const void* got, const void* expected, size_t count,
                           const std::string& what) {
  size_t es = dtypeSize(type);
  for (size_t i = 0; i < count; ++i) {
    const char* g = static_cast<const char*>(got) + i * es;
    const char* e = static_cast<const char*>(expected) + i * es;
    if (memcmp(g, e, es) == 0) continue;
    return withType(type, [&](auto tag) {
      using T = decltype(tag);
      T gv, ev;
      memcpy(&gv, g, es);
      memcpy(&ev, e, es);
      return what + ": element " + std::to_string(i) + " of " + std::to_string(count) + " is " +
             std::to_string(static_cast<double>(Format<T>::load(gv))) + ", expected " +
             std::to_string(static_cast<double>(Format<T>::load(ev)));
    });
  }
  return "";
}

}  // namespace strata::verify
