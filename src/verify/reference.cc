#include "verify/reference.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <cstring>
#include <stdexcept>

#include "common/dtype.h"

namespace strata::verify {
namespace {

// splitmix64's finalizer: a bijection of 64-bit words that scatters every input bit.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t hash2(uint64_t a, uint64_t b) { return mix64(mix64(a + 0x9e3779b97f4a7c15ull) ^ (b * 0x632be59bd9b4e019ull)); }
uint64_t positionHash(size_t i, uint64_t salt) { return hash2(salt, i); }

// murmur3's 32-bit finalizer: a bijection, so distinct inputs stay distinct.
uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  return x ^ (x >> 16);
}

// How a type's values are chosen (see the header).
struct Kind {
  bool modular;   // 8- and 32-bit integers: any value, arithmetic wraps
  bool isSigned;
  bool floating;
  int bits;
  double budget;  // bounded types: every |partial sum| up to this is exact
  int maxTwos;    // bounded types: most factors of 2 (or 1/2) in a product
};

Kind kindOf(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return {true, true, false, 8, 0, 0};
    case ncclUint8: return {true, false, false, 8, 0, 0};
    case ncclInt32: return {true, true, false, 32, 0, 0};
    case ncclUint32: return {true, false, false, 32, 0, 0};
    case ncclInt64: return {false, true, false, 64, std::ldexp(1.0, 52), 30};
    case ncclUint64: return {false, false, false, 64, std::ldexp(1.0, 52), 30};
    case ncclFloat16: return {false, true, true, 16, 2048, 15};
    case ncclFloat32: return {false, true, true, 32, std::ldexp(1.0, 24), 30};
    case ncclFloat64: return {false, true, true, 64, std::ldexp(1.0, 53), 30};
    case ncclBfloat16: return {false, true, true, 16, 256, 30};
    case ncclFloat8e4m3: return {false, true, true, 8, 16, 8};  // 2^8 <= 448, 2^-8 a subnormal
    case ncclFloat8e5m2: return {false, true, true, 8, 8, 15};
    default: return {false, false, false, 0, 0, 0};
  }
}

bool isPreMul(TestOp op) { return op == TestOp::kPreMulHost || op == TestOp::kPreMulDevice; }

// --- 8- and 32-bit integers: codes of the type's width ---------------------------

// A fixed random permutation of the bytes: a window of consecutive inputs maps to
// distinct bytes whose sum is no affine function of the window's start.
const uint8_t* byteShuffle() {
  static const auto table = [] {
    std::array<uint8_t, 256> t{};
    for (int j = 0; j < 256; ++j) t[j] = static_cast<uint8_t>(j);
    for (int j = 255; j > 0; --j) std::swap(t[j], t[hash2(5, j) % (j + 1)]);
    return t;
  }();
  return table.data();
}

uint64_t modularCode(const Kind& k, int n, int r, size_t i, TestOp op) {
  uint64_t code;
  if (k.bits == 8)
    code = byteShuffle()[(positionHash(i, 1) + static_cast<uint64_t>(r)) & 0xff];
  else
    code = mix32(static_cast<uint32_t>(i * static_cast<uint64_t>(n) + static_cast<uint64_t>(r)));
  return op == TestOp::kProd ? code | 1 : code;  // odd factors: products never collapse to 0
}

double codeToDouble(const Kind& k, uint64_t code) {
  uint64_t mask = k.bits == 64 ? ~0ull : (1ull << k.bits) - 1;
  code &= mask;
  if (!k.isSigned) return static_cast<double>(code);
  uint64_t signBit = 1ull << (k.bits - 1);
  return static_cast<double>(static_cast<int64_t>((code ^ signBit) - signBit));
}

double modularReduced(const Kind& k, int n, size_t i, TestOp op) {
  uint64_t acc = modularCode(k, n, 0, i, op);
  double best = codeToDouble(k, acc);
  if (isPreMul(op)) acc *= static_cast<uint64_t>(kPreMulScalar);
  for (int r = 1; r < n; ++r) {
    uint64_t v = modularCode(k, n, r, i, op);
    double dv = codeToDouble(k, v);
    switch (op) {
      case TestOp::kProd: acc *= v; break;
      case TestOp::kMax: best = dv > best ? dv : best; break;
      case TestOp::kMin: best = dv < best ? dv : best; break;
      default: acc += isPreMul(op) ? v * static_cast<uint64_t>(kPreMulScalar) : v; break;
    }
  }
  if (op == TestOp::kMax || op == TestOp::kMin) return best;
  double wrapped = codeToDouble(k, acc);
  if (op != TestOp::kAvg) return wrapped;
  return static_cast<double>(static_cast<int64_t>(wrapped) / n);  // truncates, as integer division does
}

// --- Bounded types: exact partial sums ----------------------------------------

double boundedValue(const Kind& k, int n, int r, size_t i) {
  double c = std::floor(k.budget / n);
  if (c < 1) {  // more ranks than the budget: at most `budget` ranks hold +-1 at each position
    uint64_t m = static_cast<uint64_t>(std::ceil(n / k.budget));
    if ((r + positionHash(i, 2)) % m != 0) return 0;
    return k.isSigned && (hash2(r, i) & 1) ? -1 : 1;
  }
  double lo = k.isSigned ? -c : 0;
  double alphabet = k.isSigned ? 2 * c + 1 : c + 1;
  if (alphabet >= 3.0 * n) {  // unique per (rank, index) within each block of `period` positions
    uint64_t period = static_cast<uint64_t>(alphabet / n);
    period -= period % 2 == 0;
    uint64_t q = (i + positionHash(i / period, 6)) % period;  // each block turned its own way: no period at all
    return lo + static_cast<double>(q) * n + static_cast<double>((r + i) % n);
  }
  auto a = static_cast<uint64_t>(alphabet);
  if (a > static_cast<uint64_t>(n))  // a window of the alphabet, distinct per rank
    return lo + static_cast<double>((positionHash(i, 3) + r) % a);
  return lo + static_cast<double>(hash2(r, i) % a);
}

// +-2^e with e in {-1, 0, 1} (in {0, 1} for integers), at most maxTwos nonzero e per position.
double boundedFactor(const Kind& k, int n, int r, size_t i) {
  uint64_t m = (n + k.maxTwos - 1) / k.maxTwos;
  uint64_t h = hash2(r + 1000003, i);
  int e = 0;
  if ((r + positionHash(i, 4)) % m == 0) e = (h & 2) ? 1 : (k.floating ? -1 : 0);
  double sign = k.isSigned && (h & 1) ? -1 : 1;
  return sign * std::ldexp(1.0, e);
}

double boundedInput(const Kind& k, int n, int r, size_t i, TestOp op) {
  return op == TestOp::kProd ? boundedFactor(k, n, r, i) : boundedValue(k, n, r, i);
}

double boundedReduced(const Kind& k, int n, size_t i, ncclDataType_t type, TestOp op) {
  double acc = boundedInput(k, n, 0, i, op);
  if (isPreMul(op)) acc *= kPreMulScalar;
  for (int r = 1; r < n; ++r) {
    double v = boundedInput(k, n, r, i, op);
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
  if (!k.floating) return static_cast<double>(static_cast<int64_t>(acc) / n);
  // Floating types divide the exact sum once and round to the type.
  return withType(type, [&](auto tag) -> double {
    using T = decltype(tag);
    using C = typename Format<T>::Compute;
    return static_cast<double>(Format<T>::load(Format<T>::store(static_cast<C>(acc) / static_cast<C>(n))));
  });
}

// --- Moved data: hashed codes of the type's finite values ----------------------

// A finite floating value from raw bits: an all-ones exponent (inf, NaN) loses its top bit.
template <typename T, typename Bits>
double finiteFromBits(Bits bits, int expShift, Bits expMask) {
  if ((bits & (expMask << expShift)) == (expMask << expShift)) bits &= ~(((expMask + 1) >> 1) << expShift);
  T v;
  memcpy(&v, &bits, sizeof v);
  return static_cast<double>(Format<T>::load(v));
}

double movedFromCode(ncclDataType_t type, uint64_t code) {
  switch (type) {
    case ncclFloat16: return finiteFromBits<HostHalf, uint16_t>(static_cast<uint16_t>(code), 10, 0x1f);
    case ncclBfloat16: return finiteFromBits<Bf16, uint16_t>(static_cast<uint16_t>(code), 7, 0xff);
    case ncclFloat32: return finiteFromBits<float, uint32_t>(static_cast<uint32_t>(code), 23, 0xff);
    case ncclFloat64: return finiteFromBits<double, uint64_t>(code, 52, 0x7ff);
    case ncclFloat8e4m3: {  // only S.1111.111 is NaN
      uint8_t b = static_cast<uint8_t>(code);
      if ((b & 0x7f) == 0x7f) b ^= 0x40;
      return fp8E4M3ToFloat(b);
    }
    case ncclFloat8e5m2: return finiteFromBits<Fp8E5M2, uint8_t>(static_cast<uint8_t>(code), 2, 0x1f);
    default: return 0;
  }
}

}  // namespace

const char* opName(TestOp op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg", "premul-host", "premul-device"};
  return names[static_cast<int>(op)];
}

double inputValue(int n, int rank, size_t i, ncclDataType_t type, TestOp op) {
  if (n < 1 || rank < 0 || rank >= n) throw std::invalid_argument("verify::inputValue: rank " + std::to_string(rank) + " of " + std::to_string(n));
  Kind k = kindOf(type);
  return k.modular ? codeToDouble(k, modularCode(k, n, rank, i, op)) : boundedInput(k, n, rank, i, op);
}

double reducedValue(int n, size_t i, ncclDataType_t type, TestOp op) {
  if (n < 1) throw std::invalid_argument("verify::reducedValue: " + std::to_string(n) + " ranks");
  Kind k = kindOf(type);
  return k.modular ? modularReduced(k, n, i, op) : boundedReduced(k, n, i, type, op);
}

double movedValue(int tag, size_t i, ncclDataType_t type) {
  Kind k = kindOf(type);
  // Wide types: a bijection of (index, tag), so unique while index * 4099 + tag fits.
  uint64_t key = static_cast<uint64_t>(i) * 4099 + static_cast<uint64_t>(tag);
  switch (type) {
    case ncclInt32:
    case ncclUint32: return codeToDouble(k, mix32(static_cast<uint32_t>(key)));
    case ncclFloat32: return movedFromCode(type, mix32(static_cast<uint32_t>(key)));
    case ncclInt64:
    case ncclUint64: {  // 53 bits (exact in a double): odd multiply and xorshift are bijections mod 2^53
      constexpr uint64_t m53 = (1ull << 53) - 1;
      uint64_t x = (key * 0x5bd1e9955bd1e995ull) & m53;
      x ^= x >> 29;
      double v = static_cast<double>(x);
      return k.isSigned ? v - std::ldexp(1.0, 52) : v;
    }
    case ncclFloat64: return movedFromCode(type, mix64(key));
    default: break;
  }
  uint64_t code = hash2(static_cast<uint64_t>(tag) + 77, i);  // 8- and 16-bit types: hashed
  return k.floating ? movedFromCode(type, code) : codeToDouble(k, code);
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

namespace {
// The fewest digits that read back as the same value of an `es`-byte element
// (integral values as integers, -0 as "-0").
std::string valueText(double v, size_t es) {
  char b[48];
  if (v == 0) return std::signbit(v) ? "-0" : "0";
  if (std::isfinite(v) && v == std::nearbyint(v) && std::fabs(v) < 9e18) {
    snprintf(b, sizeof(b), "%lld", static_cast<long long>(v));
    return b;
  }
  for (int digits = 6; digits <= 17; ++digits) {
    snprintf(b, sizeof(b), "%.*g", digits, v);
    double back = strtod(b, nullptr);
    if (es >= 8 ? back == v : static_cast<float>(back) == static_cast<float>(v)) break;
  }
  return b;
}
std::string hexBytes(const char* p, size_t n) {
  std::string out;
  char b[4];
  for (size_t i = n; i-- > 0;) {  // most significant first (little-endian)
    snprintf(b, sizeof(b), "%02x", static_cast<unsigned char>(p[i]));
    out += b;
  }
  return out;
}
}  // namespace

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
      std::string is = valueText(static_cast<double>(Format<T>::load(gv)), es);
      std::string want = valueText(static_cast<double>(Format<T>::load(ev)), es);
      if (is == want) is += " (bytes " + hexBytes(g, es) + ")", want += " (bytes " + hexBytes(e, es) + ")";
      return what + ": element " + std::to_string(i) + " of " + std::to_string(count) + " is " + is + ", expected " +
             want;
    });
  }
  return "";
}

}  // namespace strata::verify

namespace {
bool validType(int type) { return type >= 0 && type < ncclNumTypes && strata::dtypeSize(static_cast<ncclDataType_t>(type)) > 0; }
bool validOp(int op) { return op >= 0 && op <= static_cast<int>(strata::verify::TestOp::kPreMulDevice); }
}  // namespace

extern "C" int strata_reference_input(int type, int op, int nranks, int rank, uint64_t first, uint64_t count, void* out) {
  using namespace strata::verify;
  if (!validType(type) || !validOp(op) || nranks < 1 || rank < 0 || rank >= nranks) return -1;
  auto t = static_cast<ncclDataType_t>(type);
  fillBuffer(t, out, count, [&](size_t i) { return inputValue(nranks, rank, first + i, t, static_cast<TestOp>(op)); });
  return 0;
}

extern "C" int strata_reference_reduced(int type, int op, int nranks, uint64_t first, uint64_t count, void* out) {
  using namespace strata::verify;
  if (!validType(type) || !validOp(op) || nranks < 1) return -1;
  auto t = static_cast<ncclDataType_t>(type);
  fillBuffer(t, out, count, [&](size_t i) { return reducedValue(nranks, first + i, t, static_cast<TestOp>(op)); });
  return 0;
}

extern "C" int strata_reference_moved(int type, int tag, uint64_t first, uint64_t count, void* out) {
  using namespace strata::verify;
  if (!validType(type)) return -1;
  auto t = static_cast<ncclDataType_t>(type);
  fillBuffer(t, out, count, [&](size_t i) { return movedValue(tag, first + i, t); });
  return 0;
}
