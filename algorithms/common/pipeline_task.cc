#include "algorithms/task.h"

namespace strata::algorithms {
namespace {

class PipelineTask final : public Task {
 public:
  explicit PipelineTask(std::vector<std::vector<std::unique_ptr<Task>>> tasks)
      : tasks_(std::move(tasks)), next_(tasks_.empty() ? 0 : tasks_[0].size(), 0) {}

  bool progress() override {
    bool moved = false;
    for (size_t k = 0; k < next_.size(); ++k) {
      while (next_[k] < tasks_.size() && (k == 0 || next_[k] < next_[k - 1])) {
        Task& t = *tasks_[next_[k]][k];
        moved |= t.progress();
        if (!t.done()) break;
        ++next_[k];
      }
    }
    return moved;
  }
  bool done() const override { return next_.empty() || next_.back() == tasks_.size(); }
  int waitingOn() const override { return current() ? current()->waitingOn() : -1; }
  bool peerAborted() const override {
    for (size_t k = 0; k < next_.size(); ++k)
      if (next_[k] < tasks_.size() && tasks_[next_[k]][k]->peerAborted()) return true;
    return false;
  }
  // The connection of the peer waitingOn() names (the earliest unfinished phase's).
  std::string connectionFailure() const override {
    const Task* t = current();
    return t ? t->connectionFailure() : std::string();
  }
  const char* fn() const override { return tasks_[0][0]->fn(); }

 private:
  // The earliest unfinished phase task: what the pipeline waits for.
  const Task* current() const {
    for (size_t k = 0; k < next_.size(); ++k)
      if (next_[k] < tasks_.size()) return tasks_[next_[k]][k].get();
    return nullptr;
  }

  std::vector<std::vector<std::unique_ptr<Task>>> tasks_;
  std::vector<size_t> next_;  // per phase: the first piece not done
};

}  // namespace

std::unique_ptr<Task> makePipelineTask(std::vector<std::vector<std::unique_ptr<Task>>> tasks) {
  return std::make_unique<PipelineTask>(std::move(tasks));
}

}  // namespace strata::algorithms
