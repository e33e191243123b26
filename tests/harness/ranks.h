// Runs one function per rank, as threads of this process or as forked
// processes, and gathers what each rank reports. Every run has a deadline.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nccl.h"

namespace strata::test {

enum class Mode { kThreads, kProcesses };

inline const char* modeName(Mode m) { return m == Mode::kThreads ? "threads" : "processes"; }

// A rank's body: returns "" on success, else what went wrong.
using RankFn = std::function<std::string(int rank, int nranks, const ncclUniqueId& id)>;

struct RankResult {
  int rank;
  std::string error;  // "" when the rank succeeded
};

// Runs in a forked rank before anything else (rank 0 makes the unique id after it):
// returns "" or why the rank cannot run. The netns tests move ranks into their node's namespace here.
using EnterFn = std::function<std::string(int rank)>;

// Runs fn on nranks ranks; kills forked ranks still running after timeoutSec.
std::vector<RankResult> runRanks(Mode mode, int nranks, const RankFn& fn, double timeoutSec = 120,
                                 const EnterFn& enter = {});

// Joins the failures into one message ("" when all ranks succeeded).
std::string failures(const std::vector<RankResult>& results);

// Everything a pipe holds until its writers close it.
std::string readAll(int fd);

// Makes this process re-read the environment (ncclResetDebugInit, which NCCL's header deprecates).
void reloadEnvironment();

// In a forked rank: this process is node `node` (NCCL_HOSTID "<prefix><node>") over
// IB on the user-space verbs device at `emuPath`, logging NET lines at INFO to
// <logDir>/net.<pid>.log. The caller reloads the environment after its own settings.
void useEmulatedIb(const std::string& prefix, int node, const char* emuPath, const std::string& logDir);

// The lines of each rank's log (one entry per <logDir>/*.log, as useEmulatedIb writes them).
std::vector<std::vector<std::string>> rankLogs(const std::string& logDir);
// Each rank's "NET counters" lines for groups that begin with `fn`, in order.
std::vector<std::vector<std::string>> counterLines(const std::string& logDir, const std::string& fn);
// The number before `what` in a counters line ("3 puts" -> 3; `what` is a regex), -1 when absent.
long long countOf(const std::string& line, const std::string& what);

// A RankFn: one communicator, one all-reduce of one integer (rank + 1 each), checked.
std::string allReduceOnce(int rank, int nranks, const ncclUniqueId& id);

// Formats a failing NCCL call with its code and ncclGetLastError().
std::string ncclFailure(const char* call, ncclResult_t r);

}  // namespace strata::test

// Inside a RankFn: returns a description of the failed call.
#define RANK_NCCL(call)                                       \
  do {                                                        \
    ncclResult_t r_ = (call);                                 \
    if (r_ != ncclSuccess) return ::strata::test::ncclFailure(#call, r_); \
  } while (0)
