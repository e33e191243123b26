// Typed errors thrown inside Strata and turned into ncclResult_t at the C API boundary.
#pragma once

#include <stdexcept>
#include <string>

#include "nccl.h"

namespace strata {

// An error with the NCCL result code the API returns for it. The message says
// what went wrong and, where possible, what to do about it.
class Error : public std::runtime_error {
 public:
  Error(ncclResult_t code, std::string message) : std::runtime_error(std::move(message)), code_(code) {}
  ncclResult_t code() const { return code_; }

 private:
  ncclResult_t code_;
};

// Formats like printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Throws Error(code, formatted message).
[[noreturn]] void fail(ncclResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Throws ncclSystemError naming the failed call and errno's text.
[[noreturn]] void failErrno(const char* what);

}  // namespace strata

// Checks a condition that the caller's input must satisfy; throws with the given code and message.
#define STRATA_REQUIRE(cond, code, ...) \
  do {                                  \
    if (!(cond)) ::strata::fail(code, __VA_ARGS__); \
  } while (0)
