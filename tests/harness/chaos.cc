#include "harness/chaos.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <thread>

#include "harness/ranks.h"

namespace strata::test {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Reads exactly n bytes, waiting at most timeoutMs in all; false otherwise.
bool readFor(int fd, void* buf, size_t n, int timeoutMs) {
  auto start = Clock::now();
  size_t got = 0;
  while (got < n) {
    int left = timeoutMs - static_cast<int>(msSince(start));
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return false;
    ssize_t r = read(fd, static_cast<char*>(buf) + got, n - got);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

struct Child {
  pid_t pid = -1;
  int resultFd = -1;  // the rank's outcome: "<code>\n<message>"
  int goFd = -1;      // the parent's end of the rank's go pipe
  bool exited = false;
  int status = 0;
  double exitMs = -1;  // after the signal
};

// The bootstrap root's own process: makes the id, hands it out, then waits to be killed.
[[noreturn]] void rootMain(int idWrite, int nranks) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) _exit(4);
  for (int k = 0; k < nranks; ++k)
    if (write(idWrite, &id, sizeof(id)) != sizeof(id)) _exit(5);
  for (;;) pause();
}

[[noreturn]] void rankMain(const ChaosCase& c, int rank, int nranks, int idPipe[2], int markWrite, int goRead,
                           int resultWrite, const ChaosBody& body) {
  RankContext ctx{rank, {}, markWrite, goRead};
  if (c.enter) {
    std::string err = c.enter(rank);
    if (!err.empty()) {
      std::string out = std::to_string(ncclSystemError) + "\nsetup: " + err;
      if (write(resultWrite, out.data(), out.size()) < 0) _exit(3);
      _exit(1);
    }
  }
  if (c.victim != kRootVictim && rank == 0) {  // rank 0 makes the id after the fork (no threads inherited)
    if (ncclGetUniqueId(&ctx.id) != ncclSuccess) _exit(4);
    for (int k = 1; k < nranks; ++k)
      if (write(idPipe[1], &ctx.id, sizeof(ctx.id)) != sizeof(ctx.id)) _exit(5);
  } else if (!readFor(idPipe[0], &ctx.id, sizeof(ctx.id), 60000)) {
    _exit(6);
  }
  RankOutcome o = body(ctx);
  std::string out = std::to_string(o.ok ? ncclSuccess : o.code) + "\n" + o.message;
  if (write(resultWrite, out.data(), out.size()) < 0) _exit(3);
  _exit(0);
}

std::string defaultCulprit(const ChaosCase& c) {
  return c.victim == kRootVictim ? "root" : "rank " + std::to_string(c.victim);
}

// Whether msg names `culprit` ("rank 2", or "root"): as "rank 2" (not "rank 21"), or in a list "ranks 1,2,3".
// "rank 2|rank 3": either.
bool names(const std::string& msg, const std::string& culprit) {
  if (size_t bar = culprit.find('|'); bar != std::string::npos)
    return names(msg, culprit.substr(0, bar)) || names(msg, culprit.substr(bar + 1));
  if (culprit.rfind("rank ", 0) != 0) return msg.find(culprit) != std::string::npos;
  std::string num = culprit.substr(5);
  static const std::regex list("ranks? ([0-9]+(,[0-9]+)*)");
  for (std::sregex_iterator it(msg.begin(), msg.end(), list), end; it != end; ++it) {
    std::string ids(1, ',');
    ids += (*it)[1].str();
    ids += ',';
    if (ids.find("," + num + ",") != std::string::npos) return true;
  }
  return false;
}

// How long a survivor may take: the OS tells us about a killed process at once;
// a stopped process or a silent network only the timeout finds, and after it come
// up to 1.3 s of failure reports and following who waits for whom, then up to half
// a second aborting connections that never came up (docs/reliability.md).
double boundMs(const ChaosCase& c) {
  bool silent = c.signal == SIGSTOP || c.strike || c.phase == Phase::kInit;  // a rank that never said hello is silent
  return silent ? kChaosTimeoutSec * 1000.0 + 3000 : 1500;
}

void judge(const ChaosCase& c, int rank, Child& ch, ChaosReport& rep) {
  std::string who = "rank " + std::to_string(rank) + ": ";
  if (!ch.exited) {
    rep.problems += who + "still running " + std::to_string(static_cast<int>(ch.exitMs)) + " ms after the strike\n";
    return;
  }
  if (!WIFEXITED(ch.status) || WEXITSTATUS(ch.status) != 0) {
    rep.problems += who + (WIFSIGNALED(ch.status) ? "crashed (signal " + std::to_string(WTERMSIG(ch.status)) + ")"
                                                  : "exit status " + std::to_string(WEXITSTATUS(ch.status))) +
                    "\n";
    return;
  }
  std::string out = readAll(ch.resultFd);
  size_t nl = out.find('\n');
  int code = atoi(out.substr(0, nl).c_str());
  std::string msg = nl == std::string::npos ? "" : out.substr(nl + 1);
  rep.detectMs.push_back(ch.exitMs);
  if (!c.survivorsFail) {
    if (code != ncclSuccess) rep.problems += who + "failed (" + std::to_string(code) + "): " + msg + "\n";
    return;
  }
  std::string culprit = c.culprit ? c.culprit(rank) : defaultCulprit(c);
  if (rep.sample.empty()) rep.sample = msg;
  if (code != ncclRemoteError && code != ncclSystemError)
    rep.problems += who + "returned " + std::to_string(code) + ", not a remote or system error: " + msg + "\n";
  else if (!names(msg, culprit))
    rep.problems += who + "error does not name " + culprit + ": " + msg + "\n";
  if (ch.exitMs > boundMs(c))
    rep.problems += who + "took " + std::to_string(static_cast<int>(ch.exitMs)) + " ms (bound " +
                    std::to_string(static_cast<int>(boundMs(c))) + ")\n";
}

}  // namespace

const char* phaseName(Phase p) {
  switch (p) {
    case Phase::kInit: return "init";
    case Phase::kAllReduce: return "all_reduce";
    case Phase::kBroadcast: return "broadcast";
    case Phase::kReduce: return "reduce";
    case Phase::kAllGather: return "all_gather";
    case Phase::kReduceScatter: return "reduce_scatter";
    case Phase::kSendRecv: return "send_recv";
    case Phase::kGroup: return "group";
    case Phase::kSplit: return "split";
    case Phase::kDestroy: return "destroy";
  }
  return "?";
}

int marksBeforeSignal(const ChaosCase& c, int nranks) {
  if (c.phase == Phase::kInit && c.victim >= 0) return 1;
  if (c.victim == kRootVictim && c.survivorsFail) return nranks - 1;
  return nranks;
}

void RankContext::mark(char what) {
  char msg[2] = {static_cast<char>(rank), what};
  if (write(markFd, msg, 2) != 2) _exit(7);
}

void RankContext::waitGo() {
  char c;
  if (!readFor(goFd, &c, 1, 60000)) _exit(8);
}

double ChaosReport::maxDetectMs() const {
  return detectMs.empty() ? 0 : *std::max_element(detectMs.begin(), detectMs.end());
}

ChaosReport runChaos(const ChaosCase& c, int nranks, const ChaosBody& body) {
  ChaosReport rep;
  setenv("STRATA_TIMEOUT", std::to_string(kChaosTimeoutSec).c_str(), 1);
  int idPipe[2], markPipe[2];
  if (pipe(idPipe) != 0 || pipe(markPipe) != 0) return {"pipe failed", {}, ""};
  pid_t rootPid = -1;
  if (c.victim == kRootVictim) {
    rootPid = fork();
    if (rootPid == 0) rootMain(idPipe[1], nranks);
  }
  std::vector<Child> kids(nranks);
  for (int r = 0; r < nranks; ++r) {
    int res[2], go[2];
    if (pipe(res) != 0 || pipe(go) != 0) return {"pipe failed", {}, ""};
    pid_t pid = fork();
    if (pid == 0) {
      close(res[0]);
      close(go[1]);
      rankMain(c, r, nranks, idPipe, markPipe[1], go[0], res[1], body);
    }
    close(res[1]);
    close(go[0]);
    kids[r] = {pid, res[0], go[1]};
  }
  close(markPipe[1]);
  for (int m = 0; m < marksBeforeSignal(c, nranks); ++m) {
    char mark[2];
    if (!readFor(markPipe[0], mark, 2, 60000)) {
      rep.problems += "the ranks did not reach the case's moment within 60 s\n";
      break;
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(c.delayMs));
  pid_t victimPid = c.victim == kRootVictim ? rootPid : c.victim >= 0 ? kids[c.victim].pid : -1;
  auto strike = Clock::now();
  if (c.strike) c.strike();
  if (victimPid > 0) kill(victimPid, c.signal);
  if (c.victim == kRootVictim) waitpid(rootPid, nullptr, 0);  // gone before the late rank tries it
  auto oldPipe = signal(SIGPIPE, SIG_IGN);  // a rank that already exited reads no go
  for (Child& ch : kids) {
    char go = 1;
    ssize_t ignored = write(ch.goFd, &go, 1);
    (void)ignored;
  }
  signal(SIGPIPE, oldPipe);
  double limit = boundMs(c) + 10000;  // judged against boundMs; this only ends a hang
  int left = nranks - (c.victim >= 0 ? 1 : 0);
  while (left > 0 && msSince(strike) < limit) {
    for (int r = 0; r < nranks; ++r) {
      Child& ch = kids[r];
      if (r == c.victim || ch.exited) continue;
      if (waitpid(ch.pid, &ch.status, WNOHANG) == ch.pid) {
        ch.exited = true;
        ch.exitMs = msSince(strike);
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < nranks; ++r) {
    Child& ch = kids[r];
    if (r == c.victim) {
      kill(ch.pid, SIGKILL);
      waitpid(ch.pid, nullptr, 0);
    } else {
      if (!ch.exited) {
        ch.exitMs = msSince(strike);
        kill(ch.pid, SIGKILL);
        waitpid(ch.pid, nullptr, 0);
      }
      judge(c, r, ch, rep);
    }
    close(ch.resultFd);
    close(ch.goFd);
  }
  close(markPipe[0]);
  close(idPipe[0]);
  close(idPipe[1]);
  unsetenv("STRATA_TIMEOUT");
  return rep;
}

void printChaosRow(const ChaosCase& c, const ChaosReport& rep) {
  std::string sample = rep.sample.substr(0, 160);
  printf("[chaos] %s | %s | %s | detection max %.0f ms over %zu survivors | %s\n", c.name.c_str(),
         c.strike ? "network" : strsignal(c.signal), rep.problems.empty() ? "as expected" : "FAILED",
         rep.maxDetectMs(), rep.detectMs.size(), sample.c_str());
}

}  // namespace strata::test
