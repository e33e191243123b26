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
  ~Doorbell();  // and its entry in the process's registry
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  const std::string& name() const { return segment_.name(); }
  // Wakes the doorbell's sleepers, if any, after the caller published its work.
  // Costs a fence and a load when nobody sleeps.
  void ring();

  // How a rank sleeps: announce, look for work once more, then sleep. Whoever
  // publishes work before the announcement is seen by that last look; whoever
  // publishes after it sees the sleeper and rings (a Dekker pair of seq_cst
  // operations), so no wake-up is lost.
  class Sleep {
   public:
    explicit Sleep(Doorbell& bell);
    ~Sleep();
    // Sleeps until a ring or timeoutUs; call only after the last look found nothing.
    void wait(int timeoutUs);

   private:
    Doorbell& bell_;
    uint32_t seen_;
  };

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
