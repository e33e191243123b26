#include "base/shared_buffers.h"

#include <sys/statvfs.h>

#include <map>
#include <mutex>

#include "base/shm_segment.h"

namespace strata {
namespace {

struct Registry {
  std::mutex mu;
  std::map<const char*, ShmSegment> byBase;  // by the mapping's start
};

Registry& registry() {
  static Registry* r = new Registry();  // outlives every static destructor that frees a buffer
  return *r;
}

}  // namespace

void* allocateShared(size_t bytes) {
  // A full /dev/shm (containers often give it 64 MiB) would fault on first touch: check first.
  struct statvfs st;
  if (statvfs("/dev/shm", &st) != 0 || static_cast<double>(st.f_bavail) * st.f_frsize < 2.0 * bytes) return nullptr;
  ShmSegment seg = ShmSegment::create(bytes);
  void* p = seg.data();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.byBase.emplace(static_cast<const char*>(p), std::move(seg));
  return p;
}

bool freeShared(void* p) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.byBase.erase(static_cast<const char*>(p)) > 0;  // unmaps and unlinks
}

bool findShared(const void* p, size_t bytes, SharedBufferRef* ref) {
  auto* c = static_cast<const char*>(p);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.byBase.upper_bound(c);
  if (it == r.byBase.begin()) return false;
  --it;
  size_t off = static_cast<size_t>(c - it->first);
  if (off > it->second.size() || bytes > it->second.size() - off) return false;
  ref->segment = it->second.name();
  ref->offset = off;
  return true;
}

}  // namespace strata
