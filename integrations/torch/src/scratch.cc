#include "scratch.h"

#include <algorithm>

namespace strata::torch_backend {

at::Tensor ScratchPool::get(int64_t numel, at::ScalarType dtype) {
  int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  auto fits = [&](const at::Tensor& b) { return b.numel() >= bytes; };
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (fits(*it) && (best == free_.end() || it->numel() < best->numel())) best = it;
  at::Tensor block;
  if (best != free_.end()) {
    block = *best;
    free_.erase(best);
  } else {
    block = at::empty({std::max<int64_t>(bytes, 64)}, at::TensorOptions().dtype(at::kByte));
  }
  used_.push_back(block);
  return block.narrow(0, 0, bytes).view(dtype);
}

void ScratchPool::recycle() {
  free_.insert(free_.end(), used_.begin(), used_.end());
  used_.clear();
  std::sort(free_.begin(), free_.end(), [](const at::Tensor& a, const at::Tensor& b) { return a.numel() > b.numel(); });
  std::vector<at::Tensor> kept;
  size_t bytes = 0;
  for (at::Tensor& b : free_) {
    if (bytes + b.numel() > kKeepBytes) continue;  // released
    bytes += b.numel();
    kept.push_back(std::move(b));
  }
  free_ = std::move(kept);
}

}  // namespace strata::torch_backend
