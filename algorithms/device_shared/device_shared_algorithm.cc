// DeviceShared: the collectives of ranks that are threads of one process on one
// GPU (Strata allows it; NCCL refuses "duplicate GPU"), on the callers' streams,
// with no host in the data path and no device-side wait for a host. Each rank
// records an event on its stream and posts its buffers (board.h); rank 0, once
// every rank has posted, makes its stream wait for those events, enqueues the
// whole operation (one reduce kernel over every input writing every output, or
// the copies) and records an event the others' streams wait for. A CUDA graph may
// capture it when every rank's stream is in that one capture (one thread driving
// every rank). Before it, such ranks waited in the call for their streams and
// staged through host memory (DeviceProxy::runBlocking): on an H200, 26 us for
// 8 bytes and 0.6 GB/s busbw at 128 MiB.
#include <exception>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/device_shared/board.h"
#include "algorithms/device_shared/shared_run.h"
#include "base/error.h"
#include "base/log.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::algorithms::device_shared {
namespace {

constexpr double kLaunchUs = 3.0;          // a kernel launch or an event, enqueued
constexpr double kCopyBytesPerUs = 2.0e6;  // bytes read plus written per microsecond (H200 about 4e6)
constexpr int kMaxRanks = 8;
constexpr uint64_t kLane = linkId("device.shared");

// Per communicator: its board, its events (the board's), and rank 0's scratch memory
// (its own for each operation a CUDA graph captured: the graph's replays use it).
struct SharedState {
  std::shared_ptr<Board> board;
  int rank = -1;
  uint64_t seq = 0;
  void* ready = nullptr;       // this rank's
  void* done = nullptr;        // rank 0's
  void* graphDone = nullptr;   // rank 0's, in captures
  Scratch scratch, temp;
  std::vector<std::unique_ptr<Scratch>> graphScratch;
  SharedState() = default;
  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;
  ~SharedState() {
    if (board) board->leave(rank);
  }
};

bool served(Collective c) {
  return c != Collective::kSendRecv;  // sends and receives pair up in groups, not by operation number
}

class SharedTask final : public Task {
 public:
  SharedTask(const char* fn, int device, void* stream, int nranks, SharedState* st, const SharedPost& mine)
      : fn_(fn), device_(device), stream_(stream), n_(nranks), st_(st), mine_(mine) {}

  bool progress() override {
    if (done_) return false;
    device::OnDevice on(device_);
    bool moved = false;
    if (!posted_) {
      post();
      moved = true;
    }
    return (st_->rank == 0 ? lead() : follow()) || moved;
  }
  bool done() const override { return done_; }
  int waitingOn() const override { return done_ ? -1 : st_->rank == 0 ? missing_ : 0; }
  bool peerAborted() const override { return !done_ && st_->board->gone(waitingOn()); }
  const char* fn() const override { return fn_; }

 private:
  void post() {
    posted_ = true;
    mine_.seq = ++st_->seq;
    mine_.capture = stream_ == device::kLegacyStream ? 0 : device::streamCaptureId(stream_);
    if (st_->rank != 0) device::eventRecord(st_->ready, stream_);
    mine_.ready = st_->ready;
    st_->board->post(st_->rank, mine_);
  }

  // Rank 0: once every rank posted, the whole operation on its stream.
  bool lead() {
    std::vector<SharedPost> posts;
    if (!st_->board->collect(mine_.seq, &posts, &missing_)) {
      if (!st_->board->gone(missing_)) return false;
      std::string why = format("%s: rank 0: rank %d left the communicator (destroyed or aborted) before this "
                               "operation", fn_, missing_);
      done_ = true;
      st_->board->publish(mine_.seq, nullptr, ncclRemoteError, why);  // the others stop too
      fail(ncclRemoteError, "%s", why.c_str());
    }
    done_ = true;
    const bool captured = mine_.capture != 0;
    void* doneEvent = captured ? st_->graphDone : st_->done;
    try {
      checkAlike(posts, fn_);  // captures included: a stream waits only for events of its own capture
      Scratch* scratch = &st_->scratch;
      Scratch* temp = &st_->temp;
      if (captured) {  // memory of this graph alone, kept while the communicator lives
        scratch = st_->graphScratch.emplace_back(std::make_unique<Scratch>(true)).get();
        temp = st_->graphScratch.emplace_back(std::make_unique<Scratch>(true)).get();
      }
      for (int r = 1; r < n_; ++r) device::streamWaitEvent(stream_, posts[r].ready);
      enqueueShared(posts, stream_, *scratch, *temp);
      device::eventRecord(doneEvent, stream_);
    } catch (const Error& e) {  // the others fail alike, whatever the cause
      st_->board->publish(mine_.seq, nullptr, e.code(), e.what());
      throw;
    } catch (const std::exception& e) {
      st_->board->publish(mine_.seq, nullptr, ncclInternalError, e.what());
      throw;
    }
    st_->board->publish(mine_.seq, doneEvent, ncclSuccess, "", captured);
    return true;
  }

  // The others: their stream waits for rank 0's.
  bool follow() {
    void* doneEvent = nullptr;
    ncclResult_t code = ncclSuccess;
    std::string error;
    if (!st_->board->finished(mine_.seq, &doneEvent, &code, &error)) return false;
    done_ = true;
    if (code != ncclSuccess)
      fail(code, "%s: rank %d: rank 0 could not run the operation: %s", fn_, st_->rank, error.c_str());
    device::streamWaitEvent(stream_, doneEvent);
    return true;
  }

  const char* fn_;
  int device_;
  void* stream_;
  int n_;
  SharedState* st_;
  SharedPost mine_;
  bool posted_ = false, done_ = false;
  int missing_ = 1;
};

SharedState& stateOf(PlanContext& ctx) {
  SharedState& st = ctx.state<SharedState>();
  if (!st.board) {
    st.rank = ctx.layout().rank;
    st.board = Board::join(ctx.commId(), ctx.layout().nranks, st.rank, ctx.doorbell());
  }
  return st;
}

class DeviceShared final : public Algorithm {
 public:
  const char* name() const override { return "DeviceShared"; }
  bool serves(Collective c) const override { return served(c); }
  bool deviceMemory() const override { return true; }
  bool streamOrdered() const override { return true; }
  bool applies(const TuneRequest& r) const override {
    return r.streamOrdered && r.oneGpuThreads && r.nranks > 1 && r.nranks <= kMaxRanks;
  }
  // The events and launches rank 0 enqueues (a reduction or broadcast is one kernel,
  // an all-gather, gather or scatter one per rank, an all-to-all one per pair), and
  // one pass over every input and output.
  double costUs(const TuneRequest& r, Protocol) const override {
    double n = r.nranks, kernels = 1;
    if (r.coll == Collective::kAllGather || r.coll == Collective::kGather || r.coll == Collective::kScatter) kernels = n;
    if (r.coll == Collective::kAllToAll) kernels = n * n;
    return kLaunchUs * (n + 1 + kernels) + 2.0 * n * static_cast<double>(r.bytes) / kCopyBytesPerUs;
  }
  // Every rank joins its board when the communicator is made, so a rank destroyed
  // or aborted before its first call still releases the others (Board::leave).
  bool warmUp(PlanContext& ctx) const override {
    int n = ctx.layout().nranks;
    if (ctx.device() < 0 || n < 2 || n > kMaxRanks) return false;
    stateOf(ctx);
    return true;
  }

  // (Operations of count zero never get here: the executor drops them on every rank.)
  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    SharedState* st = &stateOf(ctx);
    int dev = ctx.device(), n = ctx.layout().nranks;
    if (!st->ready || (st->rank == 0 && !st->done)) {
      device::OnDevice on(dev);
      st->ready = st->board->readyEvent(st->rank);
      if (st->rank == 0) st->done = st->board->doneEvent();
      if (st->rank == 0) st->graphDone = st->board->graphDoneEvent();
    }
    SharedPost mine;
    static_cast<CollectiveOp&>(mine) = op;
    ctx.addTask({kLane, 0}, [fn = op.fn, dev, stream = ctx.deviceStream(), n, st, mine](Links&) {
      return std::make_unique<SharedTask>(fn, dev, stream, n, st, mine);
    });
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const DeviceShared d;
  return d;
}

}  // namespace strata::algorithms::device_shared
