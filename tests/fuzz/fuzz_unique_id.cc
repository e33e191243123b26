// An ncclUniqueId comes from outside the process (the job's launcher passes it on):
// any 128 bytes must be accepted or refused with a strata::Error, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "core/bootstrap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  memcpy(id.internal, data, size < sizeof id.internal ? size : sizeof id.internal);
  int rank = size > sizeof id.internal ? static_cast<int8_t>(data[sizeof id.internal]) : 0;
  try {
    (void)strata::core::parseUniqueId(id, rank);
  } catch (const strata::Error&) {
  }
  return 0;
}
