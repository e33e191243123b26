// A futex-backed event counter in shared memory: peers ring it when they post
// data or free space, and a rank with nothing to do sleeps on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "base/shm_segment.h"

namespace strata {

class Doorbell {
 public:
  // A new doorbell in its own shared-memory segment.
  static std::shared_ptr<Doorbell> create();
  // The doorbell with this name, mapped once per process.
  static std::shared_ptr<Doorbell> attach(const std::string& name);

  const std::string& name() const { return segment_.name(); }
  // The current count; pass it to wait() after finding nothing to do.
  uint32_t read() const { return word()->seq.load(std::memory_order_acquire); }
  // Bumps the count and wakes sleepers.
  void ring();
  // Sleeps until the count differs from `seen` or timeoutUs passes.
  void wait(uint32_t seen, int timeoutUs);

 private:
  struct Word {
    std::atomic<uint32_t> seq;
    std::atomic<uint32_t> sleepers;
  };
  explicit Doorbell(ShmSegment seg) : segment_(std::move(seg)) {}
  Word* word() const { return static_cast<Word*>(segment_.data()); }

  ShmSegment segment_;
};

}  // namespace strata
