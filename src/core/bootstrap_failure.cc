// Failure reports between the ranks of a communicator: the first rank to give up
// on an operation tells the others why (MsgKind::kFailure), before its links
// close, so that ranks which only see it stop can name the real cause; and ranks
// that time out together follow each other's reports to the one that is silent.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "core/bootstrap.h"

namespace strata::core {
namespace {

constexpr size_t kStoredKin = 64;  // a job that splits without end keeps the most recent
constexpr double kPerPeerSec = 0.25;

std::string packNote(int waitingFor, const std::string& why) {
  int32_t w = waitingFor;
  std::string out(reinterpret_cast<const char*>(&w), sizeof(w));
  return out + why;
}

bool unpackNote(const std::string& msg, int from, Bootstrap::FailureNote* note) {
  int32_t w;
  if (msg.size() < sizeof(w)) return false;  // nothing a rank sends: ignore it
  memcpy(&w, msg.data(), sizeof(w));
  *note = {from, w, msg.substr(sizeof(w))};
  return true;
}

}  // namespace

void Bootstrap::tellFailure(const std::string& why, int skip, double budgetSec, int waitingFor) {
  Deadline deadline(budgetSec);
  std::string payload = packNote(waitingFor, why);
  for (int r = 0; r < size() && !deadline.expired(); ++r) {
    if (r == rank_ || r == skip) continue;
    // A live post office acknowledges within milliseconds (its own thread does); a
    // stopped process, or one behind a dead link, never does: it gets a quarter second.
    Deadline one(std::min(kPerPeerSec, deadline.remainingMs(1000000) / 1000.0));
    try {
      PostOffice::instance().send(addrs_[r], MsgKey{magic_, MsgKind::kFailure, rank_, r, 0}, payload, one);
    } catch (const Error& e) {  // gone or silent: it has its own way to find out
      STRATA_INFO(kSubsysBootstrap, rank_, "could not tell rank %d why this rank failed: %s", r, e.what());
    }
  }
}

bool Bootstrap::takeFailure(FailureNote* note, double waitSec) {
  PostOffice& po = PostOffice::instance();
  Deadline deadline(waitSec);
  for (;;) {
    std::string msg;
    int from = -1;
    if (po.tryTake(magic_, MsgKind::kFailure, rank_, &msg, &from)) return unpackNote(msg, from, note);
    for (const Kin& k : kin())
      if (po.tryTake(k.magic, MsgKind::kFailure, k.rank, &msg, &from))
        return unpackNote(msg, -1, note);  // its sender is a rank of another communicator
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string Bootstrap::describeWait(int peer, double windowSec) {
  std::map<int, int> waits;  // reporting rank -> whom it waits for (this communicator's reports only)
  std::map<int, std::string> whys;  // reporting rank -> what it said
  waits[rank_] = peer;
  Deadline window(windowSec);
  PostOffice& po = PostOffice::instance();
  for (;;) {
    std::string msg;
    int from = -1;
    FailureNote note;
    while (po.tryTake(magic_, MsgKind::kFailure, rank_, &msg, &from))
      if (unpackNote(msg, from, &note) && from >= 0) {
        waits[from] = note.waitingFor;
        whys[from] = note.why;
      }
    // Follow the chain from `peer`: it ends at a rank with no report (the silent one) or closes a cycle.
    std::string chain = format("rank %d", peer);
    std::map<int, bool> seen{{rank_, true}};
    int at = peer;
    for (;;) {
      auto it = waits.find(at);
      if (it == waits.end()) break;
      if (it->second < 0) return chain + ", which failed itself: " + whys[at];  // its cause, naming whom it blames
      if (seen[at]) return chain + " (the ranks wait for each other in a cycle: do they call the same operations?)";
      seen[at] = true;
      at = it->second;
      chain += format(", which waits for rank %d", at);
    }
    if (window.expired()) return at == peer ? chain : chain + ", which sent no report (stopped or stalled?)";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Bootstrap::addKin(const Kin& k) {
  std::lock_guard<std::mutex> lock(kinMutex_);
  if (kin_.size() == kStoredKin) kin_.erase(kin_.begin());
  kin_.push_back(k);
}

std::vector<Bootstrap::Kin> Bootstrap::kin() const {
  std::lock_guard<std::mutex> lock(kinMutex_);
  return kin_;
}

}  // namespace strata::core
