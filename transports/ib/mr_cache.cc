#include "transports/ib/mr_cache.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.h"

namespace strata::transport::ib {

MrCache::MrCache(Register reg, Deregister dereg, size_t limit)
    : reg_(std::move(reg)), dereg_(std::move(dereg)), limit_(limit) {}

namespace {

// [p, p + n) widened to whole pages.
std::pair<uintptr_t, uintptr_t> pagesOf(const void* p, size_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + (n ? n : 1) + page - 1) & ~(page - 1);
  return {begin, end};
}

}  // namespace

MrCache::Entry* MrCache::coveringLocked(uintptr_t begin, uintptr_t end) {
  // Any live registration that starts at or before the range and ends at or after it.
  for (auto it = byBegin_.upper_bound(begin); it != byBegin_.begin();) {
    --it;
    if (it->second.end >= end) return &it->second;
  }
  return nullptr;
}

bool MrCache::covers(const void* p, size_t n) const {
  auto [begin, end] = pagesOf(p, n);
  std::lock_guard<std::mutex> lock(mu_);
  return const_cast<MrCache*>(this)->coveringLocked(begin, end) != nullptr;
}

void* MrCache::acquire(const void* p, size_t n) {
  auto [begin, end] = pagesOf(p, n);
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = coveringLocked(begin, end)) {
    ++e->refs;
    ++c_.hits;
    return e->mr;
  }
  size_t bytes = end - begin;
  STRATA_REQUIRE(c_.bytes + bytes <= limit_, ncclInvalidUsage,
                 "IB: registering %zu more bytes would pin %zu bytes, over the limit of %zu", bytes, c_.bytes + bytes,
                 limit_);
  void* mr = reg_(reinterpret_cast<void*>(begin), bytes);
  if (!mr) fail(ncclSystemError, "IB: ibv_reg_mr of %zu bytes at %p failed: %s", bytes, reinterpret_cast<void*>(begin),
                strerror(errno));
  byBegin_.emplace(begin, Entry{begin, end, mr, 1});
  byMr_[mr] = begin;
  ++c_.registrations;
  c_.bytes += bytes;
  return mr;
}

void MrCache::release(void* mr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto m = byMr_.find(mr);
  STRATA_REQUIRE(m != byMr_.end(), ncclInternalError, "IB: releasing a registration this cache does not hold");
  auto range = byBegin_.equal_range(m->second);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.mr != mr || --it->second.refs > 0) continue;
    c_.bytes -= it->second.end - it->second.begin;
    ++c_.deregistrations;
    byBegin_.erase(it);
    byMr_.erase(m);
    dereg_(mr);
    return;
  }
}

MrCache::Counters MrCache::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return c_;
}

}  // namespace strata::transport::ib
