// Test data that shows data in the wrong place, and the exact results it must give.
//
// Every input element depends on (rank, index) as far as its type allows, and every
// result of every op over up to 64 ranks (and more) is exact:
// - 8- and 32-bit integers take values from the whole type; sums, products and
//   pre-multiplied sums wrap as the library's (and NCCL's) integer arithmetic does,
//   and the expected values wrap the same way. Per position, the ranks' values differ.
// - The other types have an exactness budget S (exact integers up to 2^mantissa for
//   floating types, 2^52 for 64-bit integers). Each rank's value is at most S/n in
//   magnitude, so every partial sum in any order is exact. Where the budget allows,
//   a value is unique per (rank, index) within an odd period of positions, and which
//   rank holds the largest value turns with the position; where it does not (fp8 and
//   bf16 at many ranks), values are hashed from (rank, index), never periodic in a
//   power of two.
// - Products multiply +-1 and +-2 (and 1/2 for floating types), so they are exact
//   powers of two that vary by position.
// - Data-movement values are hashed from (tag, index) over the type's finite codes:
//   unique for the wide types, and any chunk moved by any distance shows.
// docs/testing.md has the derivation.
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

// Rank `rank` of `nranks`' input element i for a reduction with op.
double inputValue(int nranks, int rank, size_t i, ncclDataType_t type, TestOp op);
// The exact result of reducing the nranks ranks' element i (as stored in `type`).
double reducedValue(int nranks, size_t i, ncclDataType_t type, TestOp op);
// Values for data-movement collectives: element i of the piece tagged `tag` (a rank,
// or a (sender, receiver) pair folded into one number).
double movedValue(int tag, size_t i, ncclDataType_t type);

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

// The same data for tests in other languages (the PyTorch tests load it with ctypes):
// fills count elements from index first. Returns 0, or -1 for an unknown type or op.
extern "C" {
#define STRATA_REFERENCE_API __attribute__((visibility("default")))
STRATA_REFERENCE_API int strata_reference_input(int type, int op, int nranks, int rank, uint64_t first, uint64_t count, void* out);
STRATA_REFERENCE_API int strata_reference_reduced(int type, int op, int nranks, uint64_t first, uint64_t count, void* out);
STRATA_REFERENCE_API int strata_reference_moved(int type, int tag, uint64_t first, uint64_t count, void* out);
}
