#include "algorithms/device_shared/board.h"

#include <chrono>
#include <map>
#include <thread>

#include "base/clock.h"
#include "base/config.h"
#include "base/doorbell.h"
#include "base/error.h"
#include "base/log.h"
#include "device/gpu.h"

namespace strata::algorithms::device_shared {
namespace {
constexpr double kPublishWaitSec = 10;
}  // namespace

std::shared_ptr<Board> Board::join(uint64_t id, int nranks, int rank, std::shared_ptr<Doorbell> bell) {
  static std::mutex mu;
  static std::map<uint64_t, std::weak_ptr<Board>> boards;  // by communicator, while a rank holds it
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = boards.begin(); it != boards.end();) it = it->second.expired() ? boards.erase(it) : std::next(it);
  std::shared_ptr<Board> b = boards[id].lock();
  if (!b) {
    b = std::make_shared<Board>(nranks);
    boards[id] = b;
  }
  std::lock_guard<std::mutex> own(b->mu_);
  b->bells_.at(rank) = std::move(bell);
  return b;
}

Board::~Board() {
  try {
    for (void* e : ready_)
      if (e) device::eventDestroy(e);
    if (doneEvent_) device::eventDestroy(doneEvent_);
    if (graphDoneEvent_) device::eventDestroy(graphDoneEvent_);
  } catch (const Error& e) {
    STRATA_WARN(-1, "destroying the events of ranks sharing a GPU: %s", e.what());
  }
}

void* Board::readyEvent(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ready_.at(rank)) ready_[rank] = device::eventCreate();
  return ready_[rank];
}

void* Board::doneEvent() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!doneEvent_) doneEvent_ = device::eventCreate();
  return doneEvent_;
}

void* Board::graphDoneEvent() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!graphDoneEvent_) graphDoneEvent_ = device::eventCreate();
  return graphDoneEvent_;
}

void Board::leave(int rank) {
  uint64_t taken = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone_.at(rank) = true;
    bells_.at(rank).reset();
    if (posts_.at(rank).seq != 0 && collected_ >= posts_[rank].seq) taken = posts_[rank].seq;
    posts_[rank] = SharedPost{};
  }
  for (int r = 0; r < static_cast<int>(posts_.size()); ++r) ring(r);
  if (taken) waitForRun(rank, taken);
}

void Board::waitForRun(int rank, uint64_t seq) {
  void* done = nullptr;
  // Rank 0 publishes right after it takes the posts (or its failure): a bound in case it cannot.
  for (Deadline d(kPublishWaitSec); !d.expired(); std::this_thread::sleep_for(std::chrono::milliseconds(1))) {
    std::lock_guard<std::mutex> lock(mu_);
    if (published_ < seq) continue;
    // The last ordinary operation's event covers every earlier one (rank 0's streams
    // are ordered one after another); a captured one runs only when its graph does.
    if (ranOrdinary_) done = doneEvent_;
    break;
  }
  try {
    if (done && !device::eventSynchronize(done, config().timeoutSec))
      STRATA_WARN(rank, "leaving ranks that share a GPU: rank 0's last operation, which writes this rank's buffers, "
                  "did not finish within %.0f s (STRATA_TIMEOUT); leaving anyway", config().timeoutSec);
  } catch (const Error& e) {  // from a destructor: report, never throw
    STRATA_WARN(rank, "leaving ranks that share a GPU: waiting for rank 0's last operation: %s", e.what());
  }
}

bool Board::gone(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return rank >= 0 && rank < static_cast<int>(gone_.size()) && gone_[rank];
}

void Board::post(int rank, const SharedPost& p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    posts_.at(rank) = p;
  }
  ring(0);
}

bool Board::collect(uint64_t seq, std::vector<SharedPost>* out, int* missing) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int r = 0; r < static_cast<int>(posts_.size()); ++r)
    if (gone_[r] || posts_[r].seq != seq) {
      *missing = r;
      return false;
    }
  *out = posts_;
  collected_ = seq;
  return true;
}

void Board::publish(uint64_t seq, void* done, ncclResult_t code, const std::string& error, bool captured) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    published_ = seq;
    done_ = done;
    ranOrdinary_ = ranOrdinary_ || (code == ncclSuccess && !captured);
    code_ = code;
    error_ = error;
  }
  for (int r = 1; r < static_cast<int>(posts_.size()); ++r) ring(r);
}

bool Board::finished(uint64_t seq, void** done, ncclResult_t* code, std::string* error) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (published_ != seq) return false;
  *done = done_;
  *code = code_;
  *error = error_;
  return true;
}

void Board::ring(int rank) const {
  std::shared_ptr<Doorbell> bell;
  {
    std::lock_guard<std::mutex> lock(mu_);
    bell = bells_[rank];
  }
  if (bell) bell->ring();
}

}  // namespace strata::algorithms::device_shared
