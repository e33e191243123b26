// The order of one communicator's collectives within a group. The algorithms of one
// group run side by side on their own lanes, so a collective that uses memory an
// earlier one of the same communicator writes (or writes memory it reads) would
// otherwise race with it: an all-reduce in place and then an all-gather out of its
// result, where the all-reduce runs on the ring's lanes and the all-gather on
// DirectRead's. Such a collective starts only when every earlier collective of its
// communicator up to the last one it shares memory with is done on this rank (its
// exposures read, its writes landed: a task is done only then). Collectives that
// share no memory still run at once. Sends and receives are not ordered, as in NCCL,
// where a group's point-to-point operations are concurrent.
//
// No rank waits for a later collective than its own, so this cannot deadlock: the
// first collective of every rank is never held, and by induction each one after it
// is released once the ones before it are done on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/op.h"

namespace strata::core {

class OpOrder {
 public:
  // Records this rank's next collective; its index, or -1 for a send or receive
  // (not ordered).
  int add(const OpDesc& op, int rank, int nranks);
  // One more task of collective `op`; one of its tasks is done.
  void taskAdded(int op) { ++left_[op]; }
  void taskDone(int op);
  // Forgets every collective, keeping the memory (a plan reused call after call).
  void clear();
  // Once every task is added: collectives without tasks count as done.
  void start() { advance(); }
  // Whether collective `op` shares memory with an earlier one (it waits for it).
  bool waits(int op) const { return op >= 0 && after_[op] >= 0; }
  // Whether collective `op` reads memory an earlier collective writes.
  bool readsEarlierWrites(int op) const;
  // Whether collective `op` (or -1) may start.
  bool ready(int op) const { return op < 0 || after_[op] <= doneThrough_; }
  // Whether any collective must wait for another (otherwise nothing need be checked).
  bool ordered() const { return ordered_; }

 private:
  void advance();
  struct Range {
    uintptr_t begin = 0, end = 0;
    bool overlaps(const Range& o) const { return begin < o.end && o.begin < end; }
  };
  std::vector<Range> reads_, writes_;
  std::vector<int> after_;      // per collective: the last earlier one it shares memory with, or -1
  std::vector<size_t> left_;    // per collective: tasks not done
  int doneThrough_ = -1;        // collectives 0..doneThrough_ are all done
  bool ordered_ = false;
};

}  // namespace strata::core
