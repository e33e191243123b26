// A rank dies in the middle of collectives: the others must return an error
// promptly, not hang, and must name what happened.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

namespace {

constexpr int kRanks = 4;
constexpr int kVictim = 2;

// Loops large all-reduces until one fails; reports the failure through the exit status.
[[noreturn]] void rankMain(int rank, int idFd[2], int reportFd) {
  ncclUniqueId id;  // rank 0 makes it, so the test process starts no threads before forking
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) _exit(14);
    for (int k = 1; k < kRanks; ++k)
      if (write(idFd[1], &id, sizeof(id)) != sizeof(id)) _exit(15);
  } else if (read(idFd[0], &id, sizeof(id)) != sizeof(id)) {
    _exit(16);
  }
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, kRanks, id, rank) != ncclSuccess) _exit(10);
  std::vector<float> buf(4 << 20, 1.0f);
  char ready = 1;
  if (write(reportFd, &ready, 1) != 1) _exit(11);
  for (int i = 0; i < 100000; ++i) {
    ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
    if (r != ncclSuccess) {
      std::string err = ncclGetLastError(comm);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm, &async);
      ncclCommAbort(comm);
      bool named = err.find("exited") != std::string::npos || err.find("stopped") != std::string::npos;
      if (r == ncclRemoteError && async == ncclRemoteError && named) _exit(0);
      fprintf(stderr, "rank %d: wrong error: %s (async %s): %s\n", rank, ncclGetErrorString(r),
              ncclGetErrorString(async), err.c_str());
      _exit(12);
    }
  }
  _exit(13);  // never saw the failure
}

TEST(Fault, KilledRankMakesOthersFailFast) {
  setenv("STRATA_TIMEOUT", "120", 1);  // detection must come from liveness checks, not the timeout
  int pipefd[2], idFd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  ASSERT_EQ(pipe(idFd), 0);
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    pid_t pid = fork();
    if (pid == 0) rankMain(r, idFd, pipefd[1]);
    pids.push_back(pid);
  }
  for (int r = 0; r < kRanks; ++r) {  // every rank is in its loop
    char c;
    ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pids[kVictim], SIGKILL);
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < kRanks; ++r) {
    int status = 0;
    for (;;) {  // bounded wait: a hang fails the test instead of blocking it
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) break;
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) {
        for (pid_t p : pids) kill(p, SIGKILL);
        FAIL() << "rank " << r << " still running 30 s after rank " << kVictim << " was killed";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (r == kVictim) continue;
    ASSERT_TRUE(WIFEXITED(status)) << "rank " << r;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "rank " << r << " (10 init, 12 wrong error, 13 no error, 14-16 id)";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  unsetenv("STRATA_TIMEOUT");

  // The killed rank could not clean up its shared memory; the next communicator created
  // on this host removes what dead processes left behind.
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  ncclCommDestroy(comm);
  std::string prefix = "strata-" + std::to_string(pids[kVictim]) + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_NE(entry.path().filename().string().rfind(prefix, 0), 0u) << entry.path() << " left behind";
}

// A rank that has done its part may destroy its communicator while others still
// work: here the broadcast root leaves at once, rank 1 is late, and rank 2 (last
// in the chain) waits for it well past a health check. Rank 2 must not take the
// root's departure for a failure: it no longer needs the root.
TEST(Fault, RankThatFinishedDoesNotFailOthers) {
  auto results = strata::test::runRanks(
      strata::test::Mode::kProcesses, 3,
      [](int rank, int nranks, const ncclUniqueId& id) -> std::string {
        ncclComm_t comm;
        RANK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
        std::vector<int> buf(256 << 10, rank == 0 ? 7 : 0);
        if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
        RANK_NCCL(ncclBroadcast(buf.data(), buf.data(), buf.size(), ncclInt32, 0, comm, nullptr));
        ncclCommDestroy(comm);
        for (int v : buf)
          if (v != 7) return "rank " + std::to_string(rank) + " got " + std::to_string(v);
        return "";
      },
      60);
  EXPECT_EQ(strata::test::failures(results), "");
}

// A peer that sent its last message and destroyed its communicator at once leaves
// its connections aborted behind the message. The receiver must take the message
// first, even when it next looks after a health check is due: here the sender stops
// the receiver (SIGSTOP) while it waits, sends, leaves, and only then lets it go on.
TEST(Fault, WhatAPeerSentBeforeItLeftIsStillTaken) {
  auto results = strata::test::runRanks(
      strata::test::Mode::kProcesses, 2,
      [](int rank, int nranks, const ncclUniqueId& id) -> std::string {
        ncclComm_t comm;
        RANK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
        int pids[2] = {0, static_cast<int>(getpid())};
        RANK_NCCL(ncclAllGather(pids + 1, pids, 1, ncclInt32, comm, nullptr));  // also makes the connections
        int v = rank == 0 ? 42 : 0;
        if (rank == 1) {
          RANK_NCCL(ncclRecv(&v, 1, ncclInt32, 0, comm, nullptr));
          ncclCommDestroy(comm);
          return v == 42 ? "" : "rank 1 got " + std::to_string(v);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 1 sleeps in its wait
        if (kill(pids[1], SIGSTOP) != 0) return "cannot stop rank 1";
        ncclResult_t r = ncclSend(&v, 1, ncclInt32, 1, comm, nullptr);
        ncclCommDestroy(comm);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a health check is due when it wakes
        kill(pids[1], SIGCONT);
        return r == ncclSuccess ? "" : strata::test::ncclFailure("ncclSend", r);
      },
      60);
  EXPECT_EQ(strata::test::failures(results), "");
}

}  // namespace
