#include "process_group.h"

#include <cstring>

#include "tensors.h"

namespace strata::torch_backend {
namespace {

constexpr const char* kUniqueIdKey = "strata_torch/unique_id";

// Rank 0 makes the unique id and puts it in the store; the others wait for it
// there (as long as the store's own timeout allows).
ncclUniqueId exchangeUniqueId(c10d::Store& store, int rank) {
  ncclUniqueId id;
  if (rank == 0) {
    check(ncclGetUniqueId(&id), rank, "ncclGetUniqueId");
    store.set(kUniqueIdKey, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
    return id;
  }
  std::vector<uint8_t> bytes = store.get(kUniqueIdKey);
  if (bytes.size() != sizeof(id.internal))
    fail(rank, "init_process_group", "the store's unique id has " + std::to_string(bytes.size()) + " bytes, not " +
                                         std::to_string(sizeof(id.internal)));
  memcpy(id.internal, bytes.data(), bytes.size());
  return id;
}

}  // namespace

ProcessGroupStrata::ProcessGroupStrata(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size), timeout_(timeout) {
  ncclUniqueId id = exchangeUniqueId(*store, rank);
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, size, id, rank), rank, "ncclCommInitRank");
  worker_ = std::make_unique<Worker>(comm, rank);
}

ProcessGroupStrata::~ProcessGroupStrata() = default;

void ProcessGroupStrata::startCoalescing() {
  if (coalescing_) fail(rank_, "_start_coalescing", "a coalescing block is already open");
  coalescing_ = true;
}

void ProcessGroupStrata::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs*/) {
  if (!coalescing_) fail(rank_, "_end_coalescing", "no coalescing block is open");
  coalescing_ = false;
  if (!coalesced_.empty()) worker_->submit(std::move(coalesced_));
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::enqueue(c10d::OpType type, const char* name,
                                                           std::vector<at::Tensor> outputs,
                                                           std::chrono::milliseconds timeout, Issue issue,
                                                           Finish finish) {
  Worker* worker = worker_.get();
  auto work = c10::make_intrusive<StrataWork>(rank_, type, name, std::move(outputs),
                                              [worker](const std::string& why) { worker->abort(why); });
  Job job{std::move(issue), std::move(finish), work, timeout == c10d::kUnsetTimeout ? timeout_ : timeout};
  if (coalescing_) {
    coalesced_.push_back(std::move(job));
  } else {
    Batch batch;
    batch.push_back(std::move(job));
    worker_->submit(std::move(batch));
  }
  return work;
}

void ProcessGroupStrata::checkRoot(int64_t root, const char* call) const {
  if (root < 0 || root >= size_)
    fail(rank_, call, "root " + std::to_string(root) + " is not a rank of this group of " + std::to_string(size_));
}

void ProcessGroupStrata::checkPeer(int peer, const char* call) const {
  if (peer < 0 || peer >= size_ || peer == rank_)
    fail(rank_, call, "peer " + std::to_string(peer) + " is not another rank of this group of " + std::to_string(size_));
}

c10::intrusive_ptr<c10d::ProcessGroup> createProcessGroupStrata(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                                int size, std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupStrata>(store, rank, size, timeout);
}

}  // namespace strata::torch_backend
