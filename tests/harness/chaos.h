// The chaos matrix's harness: forks the ranks (and, where the case kills it, a
// separate bootstrap root), lets them reach the case's moment, kills or stops
// the victim, and times how long each survivor takes to fail (or finish) on
// its own. Every wait is bounded; whatever is still running at the end is killed.
#pragma once

#include <signal.h>

#include <functional>
#include <string>
#include <vector>

#include "nccl.h"

namespace strata::test {

enum class Phase { kInit, kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kSendRecv, kGroup, kSplit,
                   kDestroy };
const char* phaseName(Phase p);

constexpr int kRootVictim = -1;  // the victim is the bootstrap root's process, not a rank
constexpr int kNoVictim = -2;    // nothing is signalled: the case's strike breaks the network

struct ChaosCase {
  std::string name;
  Phase phase;
  int signal;            // SIGKILL or SIGSTOP
  int victim;            // a rank, or kRootVictim
  int delayMs;           // from the moment (see marksBeforeSignal) to the signal
  bool survivorsFail;    // else they must succeed
  // Optional: done at the moment instead of a signal (a link taken down), and in
  // each forked rank before anything else (entering its node's namespace).
  std::function<void()> strike = {};
  std::function<std::string(int rank)> enter = {};
  // What a survivor's error must name; by default "rank <victim>" (or "root").
  std::function<std::string(int survivor)> culprit = {};
};

// What the ranks signal: 'I' just before init, 'R' when ready (the case's moment).
// The victim is signalled once this many marks arrived: the victim's own 'I' when a
// rank dies in init, every other rank's 'I' when the root dies in init, else every rank's 'R'.
int marksBeforeSignal(const ChaosCase& c, int nranks);

struct RankOutcome {
  bool ok = true;
  ncclResult_t code = ncclSuccess;
  std::string message;
  static RankOutcome failed(ncclResult_t r, const char* msg) { return {false, r, msg ? msg : ""}; }
  static RankOutcome failed(ncclResult_t r, const std::string& msg) { return {false, r, msg}; }
  static RankOutcome success() { return {}; }
};

struct RankContext {
  int rank;
  ncclUniqueId id;
  int markFd, goFd;
  void mark(char what);  // tells the parent this rank reached a moment
  void waitGo();         // waits (at most 60 s) until the parent has signalled the victim
};

using ChaosBody = std::function<RankOutcome(RankContext&)>;

struct ChaosReport {
  std::string problems;           // "" when every survivor behaved as the case expects
  std::vector<double> detectMs;   // per survivor: from the signal to its exit
  std::string sample;             // one survivor's error message
  double maxDetectMs() const;
};

// STRATA_TIMEOUT for the chaos cases (seconds): a stopped rank is found by it.
constexpr int kChaosTimeoutSec = 4;

ChaosReport runChaos(const ChaosCase& c, int nranks, const ChaosBody& body);

// One line for docs/reliability.md's table: "[chaos] case | outcome | detection".
void printChaosRow(const ChaosCase& c, const ChaosReport& rep);

}  // namespace strata::test
