// The executor's side of planning for one communicator of a group: what the
// algorithms asked for (links, regions, tasks by lane, self copies, scratch),
// then the links opened through the communicator's pool.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "core/communicator.h"
#include "core/op_order.h"
#include "core/scratch_arena.h"

namespace strata::core {

class CommPlan final : public algorithms::PlanContext, public algorithms::Links {
 public:
  // `deviceStream`: the stream of this group's device-memory work, if any.
  explicit CommPlan(Communicator& comm, void* deviceStream = nullptr) : comm_(comm), deviceStream_(deviceStream) {}
  // Empties the plan for the communicator's next call, keeping the containers'
  // memory (a call in a loop then allocates nothing for its plan).
  void reset(void* deviceStream);

  // PlanContext
  const algorithms::RankLayout& layout() const override { return comm_.layout(); }
  size_t slotBytes() const override { return comm_.slotBytes(); }
  int slots() const override { return comm_.slots(); }
  int maxChannels() const override { return comm_.numChannels(); }
  int minChannels() const override;
  uint32_t linkCapabilities(int a, int b) const override;
  bool reachable(int a, int b, uint32_t caps) const override;
  void* deviceStream() override;
  uint32_t* deviceWords() override { return comm_.deviceWords(); }
  int device() const override { return comm_.peer(comm_.rank()).device; }
  uint64_t commId() const override { return comm_.magic(); }
  std::shared_ptr<Doorbell> doorbell() override { return comm_.sharedBell(); }
  int kernelBlocks() const override { return comm_.kernelBlocks(); }
  int pipeChannels() const override { return comm_.pipeChannels(); }
  using PlanContext::linkCapabilities;
  size_t putBytes() const override;
  bool waitsForEarlier() const override { return order_.waits(op_); }
  void needSend(const LinkKey& k, LinkShape shape) override { sends_.push_back({k, shape}); }
  void needRecv(const LinkKey& k, LinkShape shape) override { recvs_.push_back({k, shape}); }
  void needRegion(const LinkKey& k, size_t bytes, bool device) override { regions_.push_back({k, {bytes, device}}); }
  void addTask(algorithms::LaneKey lane, algorithms::TaskFactory make) override;
  void selfSend(const char* fn, const void* buf, size_t bytes) override;
  void selfRecv(const char* fn, void* buf, size_t bytes) override;
  char* scratch(size_t bytes) override;
  void workedWhilePlanning() override { worked_ = true; }

  // Links
  transport::SendConnection& send(const LinkKey& k) override { return comm_.pool().send(k); }
  transport::RecvConnection& recv(const LinkKey& k) override { return comm_.pool().recv(k); }
  transport::SharedRegion& regionIn(const LinkKey& k) override { return comm_.pool().regionIn(k); }
  transport::SharedRegion& regionOut(const LinkKey& k) override { return comm_.pool().regionOut(k); }
  std::shared_ptr<transport::Registration> registration(const LinkKey& k, void* base, size_t bytes) override {
    return comm_.pool().registration(k, base, bytes);
  }

  Communicator& comm() { return comm_; }
  // Phase 1 and 2 of opening what the plans need (see ConnectionPool).
  void listen() { comm_.pool().listen(sortedUnique(recvs_), sortedUnique(regions_)); }
  void connect() { comm_.pool().connect(sortedUnique(sends_), sortedUnique(regions_)); }
  void openLinks() {
    listen();
    connect();
  }
  // Copies a rank's sends to itself into its receives from itself, in call order.
  void matchSelfCopies();
  // Whether running the plan's tasks again repeats all of its work: nothing done as
  // it planned, and no copies to self (made while links open).
  bool repeatable() const { return !worked_ && selfSends_.empty() && selfRecvs_.empty(); }
  // The tasks, by lane, in call order; made once the links are open.
  struct Pending {
    algorithms::LaneKey lane;
    algorithms::TaskFactory make;
    int op;  // the collective it belongs to (OpOrder), or -1
  };
  std::vector<Pending>& pending() { return pending_; }
  // The collective (OpOrder's index, or -1) that the tasks added from now on belong to.
  void beginOp(int op) { op_ = op; }
  // The order of this communicator's collectives in the group.
  OpOrder& order() { return order_; }

 protected:
  std::shared_ptr<void>& stateSlot(std::type_index type) override { return comm_.algorithmState(type); }

 private:
  struct SelfCopy {
    const char* fn;
    char* ptr;
    size_t bytes;
  };
  // Sorts by key and keeps each key's last request (what a map assigned to would hold).
  template <typename V>
  static const std::vector<std::pair<LinkKey, V>>& sortedUnique(std::vector<std::pair<LinkKey, V>>& v) {
    auto before = [](const auto& a, const auto& b) { return a.first < b.first; };
    if (v.size() > 16) {
      std::stable_sort(v.begin(), v.end(), before);
    } else {  // the usual few links: an insertion sort, without stable_sort's buffer allocation
      for (size_t i = 1; i < v.size(); ++i)
        for (size_t j = i; j > 0 && before(v[j], v[j - 1]); --j) std::swap(v[j], v[j - 1]);
    }
    size_t out = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (i + 1 < v.size() && !(v[i].first < v[i + 1].first)) continue;  // a later request for the same key
      v[out++] = v[i];
    }
    v.resize(out);
    return v;
  }

  Communicator& comm_;
  void* deviceStream_;
  LinkNeeds sends_, recvs_;
  RegionNeeds regions_;
  std::vector<Pending> pending_;
  int op_ = -1;
  bool worked_ = false;  // workedWhilePlanning()
  OpOrder order_;
  std::vector<SelfCopy> selfSends_, selfRecvs_;
  ScratchArena scratch_;  // kept across resets (scratch_arena.h)
};

}  // namespace strata::core
