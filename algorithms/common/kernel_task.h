// Stream-ordered algorithms' common parts: the device state a communicator's
// kernels share (a counter in device memory, the stop and error words, an event),
// and the task that enqueues one kernel on the caller's stream.
#pragma once

#include <cstdint>
#include <functional>

#include "algorithms/algorithm.h"
#include "algorithms/task.h"
#include "base/error.h"
#include "base/log.h"
#include "device/gpu.h"

namespace strata::algorithms {

// Per communicator and algorithm: the device words its kernels share. Kernels that
// share them must run one at a time: a group's kernels go on its stream in order, and
// one on another stream than the communicator's last device work waits for it
// (core/group.cc: Communicator::orderStreamWork, as NCCL orders a communicator's work
// across streams); inside a graph capture nothing is waited for (a capture cannot
// wait for work outside it): a graph must capture a communicator's operations on one
// stream.
class KernelState {
 public:
  KernelState() = default;
  KernelState(const KernelState&) = delete;
  KernelState& operator=(const KernelState&) = delete;
  ~KernelState() {
    try {
      if (words_) device::gpuFree(words_);
    } catch (const Error& e) {
      STRATA_WARN(-1, "freeing a device-driven kernel's state: %s", e.what());
    }
  }
  bool ready() const { return words_ != nullptr; }
  // `words` zeroed 64-bit words of device memory, and the stop and error words as
  // kernels address them; once, even when a step throws and a later warm-up retries.
  // On the current device.
  void init(size_t words, uint32_t* communicatorWords) {
    if (words_) return;
    hostWords_ = static_cast<uint32_t*>(device::mappedPointer(communicatorWords));
    auto* w = static_cast<uint64_t*>(device::gpuAlloc(words * sizeof(uint64_t)));
    try {
      device::memsetSync(w, 0, words * sizeof(uint64_t));
    } catch (const Error&) {
      device::gpuFree(w);
      throw;
    }
    words_ = w;
  }
  uint64_t* words() const { return words_; }
  const volatile uint32_t* stopWord() const { return hostWords_; }
  volatile uint32_t* errorWord() const { return hostWords_ + 1; }

 private:
  uint64_t* words_ = nullptr;
  uint32_t* hostWords_ = nullptr;
};

// Enqueues its kernel at its first progress, on the caller's thread and device.
class KernelTask final : public Task {
 public:
  KernelTask(const char* fn, int device, std::function<void()> launch)
      : fn_(fn), device_(device), launch_(std::move(launch)) {}
  bool progress() override {
    if (launched_) return false;
    device::OnDevice on(device_);
    launch_();
    return launched_ = true;
  }
  bool done() const override { return launched_; }
  int waitingOn() const override { return -1; }
  bool peerAborted() const override { return false; }
  const char* fn() const override { return fn_; }

 private:
  const char* fn_;
  int device_;
  std::function<void()> launch_;
  bool launched_ = false;
};

// The blocks one device-driven kernel of a communicator may take: every block of it
// must be running at once, and the communicator's collective kernel and its
// point-to-point kernel may run at once (on two streams), so each gets half of what
// every rank's GPU holds. The same on every rank (PlanContext::kernelBlocks).
inline int kernelRoom(const PlanContext& ctx) { return ctx.kernelBlocks() / 2; }

// Whether this communicator can run device-driven kernels of up to `blocks` blocks
// (the fewest a kernel may take): a GPU with room for them on every rank, 2 to
// `maxRanks` ranks, device memory mapped between every pair.
inline bool devicePeers(PlanContext& ctx, int maxRanks, int blocks) {
  const RankLayout& l = ctx.layout();
  if (l.nranks < 2 || l.nranks > maxRanks || ctx.device() < 0 || kernelRoom(ctx) < blocks) return false;
  for (int a = 0; a < l.nranks; ++a)
    for (int b = 0; b < l.nranks; ++b)
      if (a != b && !ctx.reachable(a, b, transport::kDeviceMemory)) return false;
  return true;
}

// A device region of `bytes` with every peer (link id `id`): opened at warm-up, so
// asking again in a plan registers nothing new.
inline void needPeerRegions(PlanContext& ctx, uint64_t id, size_t bytes) {
  const RankLayout& l = ctx.layout();
  for (int j = 0; j < l.nranks; ++j)
    if (j != l.rank) ctx.needRegion({j, id}, bytes, true);
}

// STRATA_TIMEOUT as a kernel's bound in nanoseconds (no bound past ~570 years).
inline uint64_t kernelTimeoutNs(double seconds) {
  return seconds < 1.8e10 ? static_cast<uint64_t>(seconds * 1e9) : UINT64_MAX;
}

}  // namespace strata::algorithms
