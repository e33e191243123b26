#include "algorithms/common/local_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace strata::algorithms {
namespace {

constexpr size_t kChunkBytes = 256 << 10;  // about 20 us of copying here: peers' offers are answered between chunks

class LocalCopyTask final : public Task {
 public:
  LocalCopyTask(const char* fn, char* dst, const char* src, size_t bytes)
      : fn_(fn), dst_(dst), src_(src), bytes_(bytes) {}

  bool progress() override {
    if (done()) return false;
    auto d = reinterpret_cast<uintptr_t>(dst_), s = reinterpret_cast<uintptr_t>(src_);
    if (d < s + bytes_ && s < d + bytes_) {  // overlapping: one move
      memmove(dst_, src_, bytes_);
      offset_ = bytes_;
      return true;
    }
    size_t n = std::min(kChunkBytes, bytes_ - offset_);
    memcpy(dst_ + offset_, src_ + offset_, n);
    offset_ += n;
    return true;
  }
  bool done() const override { return offset_ == bytes_; }
  bool reusable() const override { return true; }
  void rearm() override { offset_ = 0; }
  int waitingOn() const override { return -1; }
  bool peerAborted() const override { return false; }
  const char* fn() const override { return fn_; }

 private:
  const char* fn_;
  char* dst_;
  const char* src_;
  size_t bytes_;
  size_t offset_ = 0;
};

}  // namespace

void addLocalCopy(PlanContext& ctx, const char* fn, void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  // A task even when small (its lane runs it in the first sweep, after the peers'
  // pieces went out): nothing of the operation is done as it plans, so the same call
  // made again reruns it (Task::reusable), and it waits for an earlier collective of
  // the group that shares its memory (an in-place all-reduce, then an all-gather of
  // its result).
  auto* d = static_cast<char*>(dst);
  auto* s = static_cast<const char*>(src);
  ctx.addTask({linkId("local.copy"), 0}, [=](Links&) { return std::make_unique<LocalCopyTask>(fn, d, s, bytes); });
}

}  // namespace strata::algorithms
