// Inputs chosen so that every result is exact in every datatype, and the
// expected outputs computed independently of the library's data path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nccl.h"

namespace strata::verify {

// The op under test: NCCL's built-ins plus pre-multiplied sums by where their scalar lives.
enum class TestOp { kSum, kProd, kMax, kMin, kAvg, kPreMulHost, kPreMulDevice };
constexpr TestOp kAllOps[] = {TestOp::kSum, TestOp::kProd, TestOp::kMax, TestOp::kMin,
                              TestOp::kAvg, TestOp::kPreMulHost, TestOp::kPreMulDevice};
const char* opName(TestOp op);
constexpr double kPreMulScalar = 2.0;

// Small integers: sums over 8 ranks (times the pre-multiply scalar) stay
// exact even in fp8 e5m2, and products stay at most 4.
double inputValue(int rank, size_t i, ncclDataType_t type, TestOp op);
// Values for data-movement collectives (wider range, still exact in every type).
double movedValue(int rank, size_t i, ncclDataType_t type);

// The exact result of reducing the n ranks' element i (as stored in `type`).
double reducedValue(int nranks, size_t i, ncclDataType_t type, TestOp op);

// Buffers of a datatype filled from doubles, and compared element by element.
void fillBuffer(ncclDataType_t type, void* dst, size_t count, const std::function<double(size_t)>& value);
// count elements exactly (data() is never null).
std::vector<char> makeBuffer(ncclDataType_t type, size_t count, const std::function<double(size_t)>& value);
// How many elements differ bit for bit.
size_t countMismatches(ncclDataType_t type, const void* got, const void* expected, size_t count);
// "" when equal, else the first mismatch: index, got, expected.
std::string compareBuffers(ncclDataType_t type, const void* got, const void* expected, size_t count,
                           const std::string& what);

}  // namespace strata::verify
