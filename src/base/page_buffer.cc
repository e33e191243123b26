#include "base/page_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define STRATA_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define STRATA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define STRATA_POISON(p, n) ((void)(p), (void)(n))
#define STRATA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace strata {
namespace {
size_t pagesOf(size_t bytes) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}
}  // namespace

void* allocPages(size_t bytes) {
  size_t len = pagesOf(bytes ? bytes : 1);
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail(ncclSystemError, "mmap of %zu bytes for a registered buffer failed: %s", len, strerror(errno));
  STRATA_POISON(static_cast<char*>(p) + bytes, len - bytes);  // AddressSanitizer: past the end, as on the heap
  return p;
}

void freePages(void* p, size_t bytes) {
  if (!p) return;
  size_t len = pagesOf(bytes ? bytes : 1);
  STRATA_UNPOISON(p, len);
  munmap(p, len);
}

}  // namespace strata
