#include "core/op_order.h"

namespace strata::core {

int OpOrder::add(const OpDesc& op, int rank, int nranks) {
  if (op.kind != OpKind::kCollective) return -1;
  auto range = [](const void* p, size_t bytes) {
    auto b = reinterpret_cast<uintptr_t>(p);
    return Range{b, b + bytes};
  };
  Range reads = readsSendBuffer(op, rank) ? range(op.sendbuff, sendBytes(op, nranks)) : Range{};
  Range writes = writesRecvBuffer(op, rank) ? range(op.recvbuff, recvBytes(op, nranks)) : Range{};
  int after = -1;
  for (int e = static_cast<int>(after_.size()) - 1; e >= 0 && after < 0; --e)
    if (writes_[e].overlaps(reads) || writes_[e].overlaps(writes) || reads_[e].overlaps(writes)) after = e;
  reads_.push_back(reads);
  writes_.push_back(writes);
  after_.push_back(after);
  left_.push_back(0);
  ordered_ = ordered_ || after >= 0;
  return static_cast<int>(after_.size()) - 1;
}

bool OpOrder::readsEarlierWrites(int op) const {
  for (int e = 0; op >= 0 && e < op; ++e)
    if (writes_[e].overlaps(reads_[op])) return true;
  return false;
}

void OpOrder::clear() {
  reads_.clear();
  writes_.clear();
  after_.clear();
  left_.clear();
  doneThrough_ = -1;
  ordered_ = false;
}

void OpOrder::taskDone(int op) {
  if (op >= 0 && --left_[op] == 0) advance();
}

void OpOrder::advance() {
  while (doneThrough_ + 1 < static_cast<int>(left_.size()) && left_[doneThrough_ + 1] == 0) ++doneThrough_;
}

}  // namespace strata::core
