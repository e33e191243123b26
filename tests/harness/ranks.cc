#include "harness/ranks.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <cstdlib>
#include <thread>

namespace strata::test {

std::string readAll(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) s.append(buf, n);
  return s;
}

// Strata's ncclResetDebugInit re-reads every variable; NCCL marks it deprecated.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
void reloadEnvironment() { ncclResetDebugInit(); }
#pragma GCC diagnostic pop

namespace {

// Rank 0's process makes the unique id and hands it to the others through a pipe:
// the parent never starts Strata's threads just before forking, so the children
// never inherit a lock held mid-allocation (which sanitizer allocators do not survive).
std::vector<RankResult> runProcesses(int nranks, const RankFn& fn, double timeoutSec, const EnterFn& enter) {
  std::vector<pid_t> pids(nranks);
  std::vector<int> pipes(nranks);
  int idPipe[2];
  if (pipe(idPipe) != 0) return {{0, "pipe failed"}};
  for (int r = 0; r < nranks; ++r) {
    int p[2];
    if (pipe(p) != 0) return {{r, "pipe failed"}};
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      std::string err;
      try {
        ncclUniqueId id;
        if (enter) err = enter(r);
        if (!err.empty()) {
          if (write(p[1], err.data(), err.size()) < 0) _exit(3);
          _exit(1);
        }
        if (r == 0) {
          if (ncclGetUniqueId(&id) != ncclSuccess) _exit(4);
          for (int k = 1; k < nranks; ++k)  // one atomic write per reader (sizeof(id) < PIPE_BUF)
            if (write(idPipe[1], &id, sizeof(id)) != sizeof(id)) _exit(5);
        } else if (read(idPipe[0], &id, sizeof(id)) != sizeof(id)) {
          _exit(6);
        }
        err = fn(r, nranks, id);
      } catch (const std::exception& e) {
        err = std::string("exception: ") + e.what();
      }
      if (write(p[1], err.data(), err.size()) < 0) _exit(3);
      _exit(err.empty() ? 0 : 1);
    }
    close(p[1]);
    pids[r] = pid;
    pipes[r] = p[0];
  }
  close(idPipe[0]);
  close(idPipe[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSec);
  std::vector<RankResult> results(nranks);
  std::vector<bool> done(nranks, false);
  int remaining = nranks;
  while (remaining > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < nranks; ++r) {
        if (pids[r] != pid) continue;
        results[r].rank = r;
        results[r].error = readAll(pipes[r]);
        close(pipes[r]);
        if (results[r].error.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
          results[r].error = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                 : "exit status " + std::to_string(WEXITSTATUS(status));
        done[r] = true;
        --remaining;
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; ++r) {
        if (done[r]) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        close(pipes[r]);
        results[r] = {r, "did not finish within the test's deadline (killed)"};
        done[r] = true;
        --remaining;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return results;
}

}  // namespace

std::vector<RankResult> runRanks(Mode mode, int nranks, const RankFn& fn, double timeoutSec, const EnterFn& enter) {
  if (mode == Mode::kProcesses) return runProcesses(nranks, fn, timeoutSec, enter);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return {{0, "ncclGetUniqueId failed"}};
  std::vector<RankResult> results(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      results[r].rank = r;
      try {
        results[r].error = fn(r, nranks, id);
      } catch (const std::exception& e) {
        results[r].error = std::string("exception: ") + e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();  // threads cannot be killed: the library's own timeouts bound them
  return results;
}

std::string failures(const std::vector<RankResult>& results) {
  std::string out;
  for (const RankResult& r : results)
    if (!r.error.empty()) out += "rank " + std::to_string(r.rank) + ": " + r.error + "\n";
  return out;
}

void useEmulatedIb(const std::string& prefix, int node, const char* emuPath, const std::string& logDir) {
  setenv("NCCL_HOSTID", (prefix + std::to_string(node)).c_str(), 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("STRATA_IBVERBS_LIB", emuPath, 1);
  setenv("NCCL_NET", "IB", 1);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "NET", 1);
  setenv("NCCL_DEBUG_FILE", (logDir + "/net.%p.log").c_str(), 1);
}

std::vector<std::vector<std::string>> rankLogs(const std::string& logDir) {
  std::vector<std::vector<std::string>> out;
  for (const auto& f : std::filesystem::directory_iterator(logDir)) {
    if (f.path().extension() != ".log") continue;
    std::ifstream in(f.path());
    out.emplace_back();
    for (std::string line; std::getline(in, line);) out.back().push_back(line);
  }
  return out;
}

std::vector<std::vector<std::string>> counterLines(const std::string& logDir, const std::string& fn) {
  auto logs = rankLogs(logDir);
  std::string want = "NET counters, " + fn;
  for (auto& lines : logs)
    lines.erase(std::remove_if(lines.begin(), lines.end(),
                               [&](const std::string& l) { return l.find(want) == std::string::npos; }),
                lines.end());
  return logs;
}

long long countOf(const std::string& line, const std::string& what) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("(\\d+) " + what))) return -1;
  return std::stoll(m[1]);
}

std::string ncclFailure(const char* call, ncclResult_t r) {
  return std::string(call) + " returned " + ncclGetErrorString(r) + ": " + ncclGetLastError(nullptr);
}

std::string allReduceOnce(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
  int v = rank + 1, sum = 0;
  RANK_NCCL(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, comm, nullptr));
  ncclCommDestroy(comm);
  return sum == nranks * (nranks + 1) / 2 ? "" : "wrong sum " + std::to_string(sum);
}

}  // namespace strata::test
