// Memory registrations of one protection domain, shared by every connection on
// it: ranges are widened to whole pages, a registration that covers a request is
// reused (reference counted), and the last release deregisters it, so no
// registration outlives the memory it pins (freed memory cannot be reached
// through a stale key). Bounded: at most `limit` bytes registered at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace strata::transport::ib {

class MrCache {
 public:
  using Register = std::function<void*(void* base, size_t bytes)>;  // null (errno) when it fails
  using Deregister = std::function<void(void* mr)>;
  MrCache(Register reg, Deregister dereg, size_t limit);

  // A registration covering [p, p + n); throws ncclSystemError when the device
  // refuses it, ncclInvalidUsage beyond the limit.
  void* acquire(const void* p, size_t n);
  void release(void* mr);
  // Whether a live registration covers [p, p + n) (nothing is taken or counted).
  bool covers(const void* p, size_t n) const;

  struct Counters {
    uint64_t registrations = 0, hits = 0, deregistrations = 0;
    size_t bytes = 0;  // registered now
  };
  Counters counters() const;

 private:
  struct Entry {
    uintptr_t begin, end;
    void* mr;
    int refs;
  };
  Entry* coveringLocked(uintptr_t begin, uintptr_t end);
  Register reg_;
  Deregister dereg_;
  size_t limit_;
  mutable std::mutex mu_;
  std::multimap<uintptr_t, Entry> byBegin_;
  std::map<void*, uintptr_t> byMr_;
  Counters c_;
};

}  // namespace strata::transport::ib
