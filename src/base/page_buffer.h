// Memory of whole pages that the library alone owns (an anonymous mapping), for
// buffers it registers with a NIC. Fork protection (ibv_fork_init) marks every
// registered range MADV_DONTFORK: a forked child then has no such pages, and a heap
// buffer's pages would take its neighbours (any object of the process) out of the
// child too. A mapping holds nothing else.
#pragma once

#include <cstddef>

namespace strata {

// `bytes` rounded up to whole pages, zeroed; throws ncclSystemError when the mapping fails.
void* allocPages(size_t bytes);
void freePages(void* p, size_t bytes);

class PageBuffer {
 public:
  explicit PageBuffer(size_t bytes) : data_(static_cast<char*>(allocPages(bytes))), size_(bytes) {}
  ~PageBuffer() { freePages(data_, size_); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_;
  size_t size_;
};

}  // namespace strata
