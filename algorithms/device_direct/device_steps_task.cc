#include "algorithms/device_direct/device_steps_task.h"

#include "device/gpu.h"

namespace strata::algorithms::device_direct {
namespace {

class DeviceStepsTask final : public Task {
 public:
  explicit DeviceStepsTask(DeviceStepsArgs a)
      : a_(std::move(a)), sent_(a_.to.size(), false), got_(a_.from.size(), false) {}

  bool progress() override {
    bool moved = false;
    while (cur_ < a_.steps.size()) {
      if (!launched_) {
        a_.steps[cur_]();
        launched_ = moved = true;
      }
      if (!idle_ && !(idle_ = device::streamIdle(a_.stream))) return moved;
      if (!barrier()) return moved;
      std::fill(sent_.begin(), sent_.end(), false);
      std::fill(got_.begin(), got_.end(), false);
      launched_ = idle_ = false;
      ++cur_;
      moved = true;
    }
    return moved;
  }
  bool done() const override { return cur_ == a_.steps.size(); }
  int waitingOn() const override { return blocked_.peer; }
  const char* fn() const override { return a_.fn; }
  bool peerAborted() const override { return blocked_.aborted(); }
  std::string connectionFailure() const override { return blocked_.failure(); }

 private:
  // A token to every peer, then one from every peer: all ranks finished this step.
  bool barrier() {
    bool all = true;
    for (size_t j = 0; j < a_.to.size(); ++j) {
      if (!a_.to[j] || sent_[j]) continue;
      if (!a_.to[j]->trySlot()) {
        blocked_.on(static_cast<int>(j), a_.to[j]);
        all = false;
        continue;
      }
      a_.to[j]->post(0);
      sent_[j] = true;
    }
    for (size_t j = 0; j < a_.from.size(); ++j) {
      if (!a_.from[j] || got_[j]) continue;
      size_t bytes = 0;
      if (!a_.from[j]->tryData(&bytes)) {
        blocked_.on(static_cast<int>(j), a_.from[j]);
        all = false;
        continue;
      }
      a_.from[j]->release();
      got_[j] = true;
    }
    return all;
  }

  DeviceStepsArgs a_;
  size_t cur_ = 0;
  bool launched_ = false, idle_ = false;
  std::vector<bool> sent_, got_;
  Blocker blocked_;
};

}  // namespace

std::unique_ptr<Task> makeDeviceStepsTask(DeviceStepsArgs args) {
  return std::make_unique<DeviceStepsTask>(std::move(args));
}

}  // namespace strata::algorithms::device_direct
