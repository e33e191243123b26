// The memory a plan borrows until its group has run (PlanContext::scratch), kept for
// the plan's next use. An in-place all-to-all copies its input aside on every call;
// a fresh allocation of that size is a fresh mapping whose every page faults on the
// copy: 37-49x the out-of-place call's time at 32-128 MiB on the 2-core VM
// (docs/perf.md, "In-place all-to-all").
// Not thread-safe: one plan, one planning thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace strata::core {

class ScratchArena {
 public:
  // `bytes` of memory no other take() of this round holds; reuses a kept buffer that
  // is large enough. One that is not large enough for a take is given back to the
  // system, so what is kept stays what one round needed.
  char* take(size_t bytes);
  // Every buffer is free again (the round's group has run).
  void recycle();
  size_t keptBytes() const;
  size_t buffers() const { return kept_.size(); }

 private:
  struct Buffer {
    std::unique_ptr<char[]> mem;
    size_t bytes;
    bool taken;
  };
  std::vector<Buffer> kept_;
};

}  // namespace strata::core
