// NCCL's documented behaviours beyond the data path: errors, groups,
// point-to-point, split and shrink, nonblocking init, bootstrap failures.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <numeric>
#include <thread>
#include <vector>

#include "harness/ranks.h"
#include "verify/reference.h"

namespace strata::test {
namespace {

std::string lastError() { return ncclGetLastError(nullptr); }



class OneRank : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(ncclCommInitAll(&comm_, 1, nullptr), ncclSuccess); }
  void TearDown() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  ncclComm_t comm_ = nullptr;
};

TEST(Api, VersionAndErrorStrings) {
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_STREQ(ncclGetErrorString(ncclRemoteError), "remote process exited or there was a network error");
  EXPECT_STREQ(ncclGetErrorString(static_cast<ncclResult_t>(42)), "unknown result code");
}

TEST_F(OneRank, BadArgumentsNameTheArgument) {
  float buf[4] = {};
  EXPECT_EQ(ncclAllReduce(nullptr, buf, 4, ncclFloat, ncclSum, comm_, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("sendbuff is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(ncclAllReduce(buf, nullptr, 4, ncclFloat, ncclSum, comm_, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("recvbuff is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, static_cast<ncclDataType_t>(99), ncclSum, comm_, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("datatype"), std::string::npos) << lastError();
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, static_cast<ncclRedOp_t>(77), comm_, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("op 77"), std::string::npos) << lastError();
  EXPECT_EQ(ncclBroadcast(buf, buf, 4, ncclFloat, 5, comm_, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("root 5"), std::string::npos) << lastError();
  EXPECT_EQ(ncclSend(buf, 4, ncclFloat, -1, comm_, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("peer -1"), std::string::npos) << lastError();
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("comm is NULL"), std::string::npos) << lastError();
}

TEST_F(OneRank, CountZeroAcceptsNullBuffers) {
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, comm_, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllGather(nullptr, nullptr, 0, ncclInt8, comm_, nullptr), ncclSuccess);
}

TEST_F(OneRank, GroupNestingMustBalance) {
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(lastError().find("no ncclGroupStart"), std::string::npos);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  float a = 3, b = 0;
  ASSERT_EQ(ncclAllReduce(&a, &b, 1, ncclFloat, ncclSum, comm_, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(b, 0) << "ran before the outermost group end";
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(b, 3);
}

TEST_F(OneRank, FailedCallFailsItsGroup) {
  float a = 3, b = 0;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&a, &b, 1, ncclFloat, ncclSum, comm_, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&a, nullptr, 1, ncclFloat, ncclSum, comm_, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_EQ(b, 0);
}

TEST_F(OneRank, DestroyedCommunicatorIsRejected) {
  ASSERT_EQ(ncclCommDestroy(comm_), ncclSuccess);
  float a = 1;
  EXPECT_EQ(ncclAllReduce(&a, &a, 1, ncclFloat, ncclSum, comm_, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("not a live communicator"), std::string::npos) << lastError();
  comm_ = nullptr;
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);
}

TEST_F(OneRank, RevokedCommunicatorRefusesWork) {
  EXPECT_EQ(ncclCommRevoke(comm_, 7), ncclInvalidArgument);
  ASSERT_EQ(ncclCommRevoke(comm_, NCCL_REVOKE_DEFAULT), ncclSuccess);
  float a = 1;
  EXPECT_EQ(ncclAllReduce(&a, &a, 1, ncclFloat, ncclSum, comm_, nullptr), ncclInvalidUsage);
  EXPECT_NE(lastError().find("revoked"), std::string::npos) << lastError();
}

TEST_F(OneRank, PreMulSumOps) {
  double scalar = 3;
  ncclRedOp_t op;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat64, ncclScalarHostImmediate, comm_), ncclSuccess);
  EXPECT_GE(op, ncclNumOps);
  scalar = 100;  // host-immediate: the value was read at creation
  double in = 2, out = 0;
  ASSERT_EQ(ncclAllReduce(&in, &out, 1, ncclFloat64, op, comm_, nullptr), ncclSuccess);
  EXPECT_EQ(out, 6);
  float f = 1;
  EXPECT_EQ(ncclAllReduce(&f, &f, 1, ncclFloat, op, comm_, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("created for double"), std::string::npos) << lastError();
  ASSERT_EQ(ncclRedOpDestroy(op, comm_), ncclSuccess);
  EXPECT_EQ(ncclRedOpDestroy(op, comm_), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat, ncclScalarDevice, comm_), ncclInvalidArgument);
}

TEST_F(OneRank, QueriesRegistrationAndMemory) {
  int n = -1, r = -1, d = -9;
  EXPECT_EQ(ncclCommCount(comm_, &n), ncclSuccess);
  EXPECT_EQ(ncclCommUserRank(comm_, &r), ncclSuccess);
  EXPECT_EQ(ncclCommCuDevice(comm_, &d), ncclSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(d, 0);  // ncclCommInitAll labels communicators with their index
  void* p = nullptr;
  ASSERT_EQ(ncclMemAlloc(&p, 1 << 20), ncclSuccess);
  memset(p, 1, 1 << 20);
  void* h = nullptr;
  ASSERT_EQ(ncclCommRegister(comm_, p, 1 << 20, &h), ncclSuccess);
  EXPECT_NE(h, nullptr);
  EXPECT_EQ(ncclCommDeregister(comm_, h), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(comm_, h), ncclInvalidArgument);
  ncclWindow_t w;
  ASSERT_EQ(ncclCommWindowRegister(comm_, p, 1 << 20, &w, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  EXPECT_EQ(ncclCommWindowDeregister(comm_, w), ncclSuccess);
  EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  EXPECT_EQ(ncclMemFree(p), ncclInvalidArgument);
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(comm_, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(ncclCommFinalize(comm_), ncclSuccess);
}

// NCCL 2.28's device-API host functions: not in Strata's header (API level 2.27),
// exported for binaries built against 2.28, and every call refused by name.
extern "C" {
struct ncclDevComm;
ncclResult_t ncclDevCommCreate(ncclComm_t, const void* reqs, ncclDevComm* out);
ncclResult_t ncclDevCommDestroy(ncclComm_t, const ncclDevComm*);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t, size_t, void** outPtr);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t, size_t, int, void** outPtr);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t, size_t, int, void** outPtr);
}

TEST_F(OneRank, DeviceApiHostCallsAreExportedAndRefused) {
  EXPECT_EQ(ncclDevCommCreate(comm_, nullptr, nullptr), ncclInvalidUsage);
  EXPECT_NE(lastError().find("ncclDevCommCreate: NCCL's device API"), std::string::npos) << lastError();
  EXPECT_EQ(ncclDevCommDestroy(comm_, nullptr), ncclInvalidUsage);
  EXPECT_EQ(ncclDevCommCreate(nullptr, nullptr, nullptr), ncclInvalidArgument);
  int x = 0;
  void* p = &x;
  EXPECT_EQ(ncclGetLsaMultimemDevicePointer(nullptr, 0, &p), ncclInvalidUsage);
  EXPECT_EQ(p, nullptr);
  p = &x;
  EXPECT_EQ(ncclGetLsaDevicePointer(nullptr, 0, 0, &p), ncclInvalidUsage);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(ncclGetPeerDevicePointer(nullptr, 0, 0, nullptr), ncclInvalidUsage);
  EXPECT_NE(lastError().find("ncclGetPeerDevicePointer"), std::string::npos) << lastError();
}

TEST_F(OneRank, SimulateEstimatesWithoutRunning) {
  std::vector<float> a(1 << 20, 1), b(1 << 20, 0);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat, ncclSum, comm_, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess);
  EXPECT_GT(sim.estimatedTime, 0);
  EXPECT_EQ(b[0], 0);
}

TEST(Api, ConfigMustBeInitialised) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  ncclComm_t comm;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInvalidArgument);
  EXPECT_NE(lastError().find("NCCL_CONFIG_INITIALIZER"), std::string::npos) << lastError();
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  EXPECT_NE(lastError().find("rank 2 is out of range"), std::string::npos) << lastError();
}

TEST(Api, ForeignUniqueIdIsRejected) {
  ncclUniqueId id;
  memset(&id, 0x33, sizeof(id));
  ncclComm_t comm;
  EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidArgument);
}

TEST(Api, WrongMagicIsRefusedAtOnce) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  id.internal[8] ^= 0x5a;  // the magic
  ncclComm_t comm;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidArgument);
  EXPECT_NE(lastError().find("refused"), std::string::npos) << lastError();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// The TCP endpoints this process listens on (its post office, its data listener):
// the sockets among its open files that /proc/net/tcp{,6} lists as listening, as
// addresses to connect to (a wildcard address as loopback).
std::vector<sockaddr_storage> listeningEndpoints() {
  std::set<std::string> inodes;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char target[256];
      ssize_t n = readlink((std::string("/proc/self/fd/") + e->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = 0;
      if (strncmp(target, "socket:[", 8) == 0) inodes.insert(std::string(target + 8, strlen(target) - 9));
    }
    closedir(d);
  }
  std::vector<sockaddr_storage> out;
  for (int v6 = 0; v6 < 2; ++v6) {
    std::ifstream in(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;
      std::string hex = local.substr(0, local.find(':'));
      int port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      sockaddr_storage a{};
      if (!v6) {  // the kernel prints the address as one host-order word
        auto* s4 = reinterpret_cast<sockaddr_in*>(&a);
        s4->sin_family = AF_INET;
        s4->sin_port = htons(static_cast<uint16_t>(port));
        s4->sin_addr.s_addr = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
        if (s4->sin_addr.s_addr == 0) s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      } else {  // four such words
        auto* s6 = reinterpret_cast<sockaddr_in6*>(&a);
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(static_cast<uint16_t>(port));
        for (int w = 0; w < 4; ++w) {
          uint32_t word = static_cast<uint32_t>(std::stoul(hex.substr(8 * w, 8), nullptr, 16));
          memcpy(&s6->sin6_addr.s6_addr[4 * w], &word, 4);
        }
        if (IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr)) s6->sin6_addr = in6addr_loopback;
      }
      out.push_back(a);
    }
  }
  return out;
}

size_t openDescriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// What each descriptor is (for a failure message): "3 -> socket:[1234]" ...
std::string describeDescriptors() {
  std::string out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    out += e.path().filename().string() + " -> " + std::filesystem::read_symlink(e.path(), ec).string() + "\n";
  }
  return out;
}

int connectTo(const sockaddr_storage& a) {
  int fd = socket(a.ss_family, SOCK_STREAM, 0);
  socklen_t len = a.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a), len) == 0) return fd;
  close(fd);
  return -1;
}

// Strangers on every port this process listens on (half a header and silence, a
// header that claims a 1 GiB message and nothing after it, garbage, an idle
// connection) neither delay nor break the init and all-reduce of ranks (forked
// processes) whose root is this process's post office; before the serve thread read without blocking, the
// first half-header held up every message to this process for STRATA_TIMEOUT.
// Rank 0 here (its root is this process's post office), rank 1 a forked child
// that reaches it over TCP, as every rank of another process does: init, an
// exact all-reduce, destroy. Returns rank 0's error, or rank 1's failure.
std::string initPairAcrossProcesses() {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return "ncclGetUniqueId: " + lastError();
  auto rank = [&id](int r) -> std::string {
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 2, id, r) != ncclSuccess) return "init: " + lastError();
    std::vector<float> buf(1024, static_cast<float>(r + 1));
    if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
      return "all-reduce: " + lastError();
    ncclCommDestroy(comm);
    return buf[7] == 3.0f ? "" : "wrong sum";
  };
  pid_t child = fork();
  if (child == 0) _exit(rank(1).empty() ? 0 : 1);
  std::string err = rank(0);
  int status = 0;
  waitpid(child, &status, 0);
  if (err.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) err = "rank 1 failed";
  return err;
}

// Strangers on every port this process listens on (its post office, and the socket
// transport's data listener: ranks here talk over TCP) - half a header and silence,
// a header that claims a 1 GiB message and nothing after it, garbage, an idle
// connection, the data port's magic with a token nobody issued, a port scan -
// neither delay nor break init and an all-reduce across processes, and leave nothing
// behind once gone (a hello with an unknown token used to keep its descriptor forever).
// Before both read without blocking, a half-header held up every bootstrap message
// to this process for STRATA_TIMEOUT, and each silent connection to the data port
// cost a connecting rank 5 s.
TEST(Api, StrangersOnTheListeningPortsDoNotDelayInit) {
  setenv("STRATA_TIMEOUT", "10", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  reloadEnvironment();
  ASSERT_EQ(initPairAcrossProcesses(), "");  // starts the post office and the data listener
  size_t fdsAfterFirst = openDescriptors();
  std::string fdsFirstList = describeDescriptors();
  std::vector<sockaddr_storage> ports = listeningEndpoints();
  std::vector<int> strangers;
  for (const sockaddr_storage& port : ports) {
    if (int fd = connectTo(port); fd >= 0) {
      ASSERT_EQ(send(fd, "STRATA", 6, 0), 6);  // half a header
      strangers.push_back(fd);
    }
    if (int fd = connectTo(port); fd >= 0) {
      uint64_t header[5] = {0x1234, 3, 0, 1ull << 30, 1ull << 30};  // a magic, kind, ranks, seq, length 1 GiB
      ASSERT_EQ(send(fd, header, sizeof header, 0), static_cast<ssize_t>(sizeof header));
      strangers.push_back(fd);
    }
    if (int fd = connectTo(port); fd >= 0) {
      std::string junk(4096, '\xa5');
      send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
      strangers.push_back(fd);
    }
    if (int fd = connectTo(port); fd >= 0) strangers.push_back(fd);  // idle
    if (int fd = connectTo(port); fd >= 0) {  // the data port's magic, a token nobody issued, a body of junk
      uint64_t hello[4] = {0x53545241544b3031ull, 0xdeadbeefcafeull, 0x100000000ull, 0};
      send(fd, hello, sizeof hello, MSG_NOSIGNAL);
      strangers.push_back(fd);
    }
    for (int k = 0; k < 50; ++k)  // a port scan: connect, close
      if (int fd = connectTo(port); fd >= 0) close(fd);
  }
  auto start = std::chrono::steady_clock::now();
  std::string err = initPairAcrossProcesses();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int fd : strangers) close(fd);
  // Nothing of theirs is kept: once they have gone and the next ranks are done, this
  // process holds as many descriptors as after the first pair (the listeners, the
  // post office's connections to its peers).
  std::string again = initPairAcrossProcesses();
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);  // the post office closes its ends as it reads
  while (openDescriptors() > fdsAfterFirst && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  size_t fdsAtEnd = openDescriptors();
  unsetenv("STRATA_TIMEOUT");
  unsetenv("NCCL_SHM_DISABLE");
  reloadEnvironment();
  EXPECT_EQ(err, "");
  EXPECT_EQ(again, "");
  EXPECT_GE(ports.size(), 2u) << "the post office and the data listener";
  ASSERT_EQ(strangers.size(), 5 * ports.size()) << "not every stranger got in";
  EXPECT_LT(seconds, 1.0) << strangers.size() << " stranger connections on " << ports.size() << " listening ports";
  EXPECT_LE(fdsAtEnd, fdsAfterFirst) << "descriptors of strangers kept; after the first pair:\n"
                                      << fdsFirstList << "now:\n" << describeDescriptors();
}

TEST(Api, BootstrapTimeoutNamesMissingRanks) {
  setenv("STRATA_TIMEOUT", "1.5", 1);
  reloadEnvironment();
  auto results = runRanks(Mode::kThreads, 2, [](int rank, int, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, 4, id, rank);  // ranks 2 and 3 never come
    std::string err = ncclGetLastError(nullptr);
    if (r == ncclSuccess) return "init succeeded without ranks 2 and 3";
    if (err.find("ranks 2,3 never reached the root") == std::string::npos) return "unexpected error: " + err;
    return "";
  });
  unsetenv("STRATA_TIMEOUT");
  reloadEnvironment();
  EXPECT_EQ(failures(results), "");
}

class MultiRank : public ::testing::TestWithParam<Mode> {};

TEST_P(MultiRank, PointToPointInAnyOrderNeverDeadlocks) {
  auto results = runRanks(GetParam(), 4, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    // Every pair exchanges count = 1000 * (src + 1) + dst ints, the reference data tagged
    // (src, dst); odd ranks post in reverse order; every rank also sends twice to itself
    // and receives in order.
    auto message = [](int src, int dst, size_t count) {
      std::vector<int> v(count);
      verify::fillBuffer(ncclInt32, v.data(), count, [&](size_t i) { return verify::movedValue(src * 16 + dst, i, ncclInt32); });
      return v;
    };
    std::vector<std::vector<int>> out(n), in(n);
    std::vector<int> self1 = message(rank, rank, 5), self2 = message(rank, 64 + rank, 7), got1(5), got2(7);
    RANK_NCCL(ncclGroupStart());
    for (int k = 0; k < n; ++k) {
      int p = rank % 2 ? n - 1 - k : k;
      if (p == rank) continue;
      out[p] = message(rank, p, 1000 * (rank + 1) + p);
      in[p].assign(1000 * (p + 1) + rank, -1);
      RANK_NCCL(ncclRecv(in[p].data(), in[p].size(), ncclInt32, p, comm, nullptr));
      RANK_NCCL(ncclSend(out[p].data(), out[p].size(), ncclInt32, p, comm, nullptr));
    }
    RANK_NCCL(ncclSend(self1.data(), 5, ncclInt32, rank, comm, nullptr));
    RANK_NCCL(ncclSend(self2.data(), 7, ncclInt32, rank, comm, nullptr));
    RANK_NCCL(ncclRecv(got1.data(), 5, ncclInt32, rank, comm, nullptr));
    RANK_NCCL(ncclRecv(got2.data(), 7, ncclInt32, rank, comm, nullptr));
    RANK_NCCL(ncclGroupEnd());
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      std::vector<int> want = message(p, rank, in[p].size());
      std::string e = verify::compareBuffers(ncclInt32, in[p].data(), want.data(), want.size(), "from rank " + std::to_string(p));
      if (!e.empty()) return e;
    }
    if (got1 != self1 || got2 != self2) return "self send/recv out of order";
    // Ring shift of a large buffer, several times on the same connections.
    std::vector<float> s(1 << 20), r(1 << 20), want(1 << 20);
    for (int it = 0; it < 3; ++it) {
      verify::fillBuffer(ncclFloat32, s.data(), s.size(), [&](size_t i) { return verify::movedValue(rank, i + it * s.size(), ncclFloat32); });
      RANK_NCCL(ncclGroupStart());
      RANK_NCCL(ncclSend(s.data(), s.size(), ncclFloat, (rank + 1) % n, comm, nullptr));
      RANK_NCCL(ncclRecv(r.data(), r.size(), ncclFloat, (rank + n - 1) % n, comm, nullptr));
      RANK_NCCL(ncclGroupEnd());
      int prev = (rank + n - 1) % n;
      verify::fillBuffer(ncclFloat32, want.data(), want.size(), [&](size_t i) { return verify::movedValue(prev, i + it * want.size(), ncclFloat32); });
      std::string e = verify::compareBuffers(ncclFloat32, r.data(), want.data(), r.size(), "ring shift " + std::to_string(it));
      if (!e.empty()) return e;
    }
    ncclCommDestroy(comm);
    return "";
  });
  EXPECT_EQ(failures(results), "");
}

TEST_P(MultiRank, SplitByColorAndKey) {
  auto results = runRanks(GetParam(), 7, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm, child;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    int color = rank == 6 ? NCCL_SPLIT_NOCOLOR : rank % 3;
    RANK_NCCL(ncclCommSplit(comm, color, -rank, &child, nullptr));
    if (color == NCCL_SPLIT_NOCOLOR) {
      if (child != nullptr) return "NOCOLOR rank got a communicator";
    } else {
      int cn, cr;
      RANK_NCCL(ncclCommCount(child, &cn));
      RANK_NCCL(ncclCommUserRank(child, &cr));
      std::vector<int> members;
      for (int r = n - 2; r >= 0; --r)
        if (r % 3 == color) members.push_back(r);  // key -rank: highest parent rank first
      if (cn != static_cast<int>(members.size()) || members[cr] != rank) return "wrong child rank or size";
      int v = rank, sum = 0;
      RANK_NCCL(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, child, nullptr));
      if (sum != std::accumulate(members.begin(), members.end(), 0)) return "wrong sum in child";
      ncclCommDestroy(child);
    }
    int one = 1, total = 0;  // the parent still works after the split
    RANK_NCCL(ncclAllReduce(&one, &total, 1, ncclInt32, ncclSum, comm, nullptr));
    ncclCommDestroy(comm);
    return total == n ? "" : "parent broken after split";
  });
  EXPECT_EQ(failures(results), "");
}

TEST_P(MultiRank, ShrinkWithoutAnExcludedRank) {
  auto results = runRanks(GetParam(), 4, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm, child;
    RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    int excluded[] = {1};
    if (rank != 1) {  // rank 1 takes no part, as a failed rank would not
      RANK_NCCL(ncclCommShrink(comm, excluded, 1, &child, nullptr, NCCL_SHRINK_DEFAULT));
      int cn, cr, v = rank, sum = 0;
      RANK_NCCL(ncclCommCount(child, &cn));
      RANK_NCCL(ncclCommUserRank(child, &cr));
      if (cn != 3 || cr != (rank == 0 ? 0 : rank - 1)) return "wrong shrunk rank or size";
      RANK_NCCL(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, child, nullptr));
      if (sum != 0 + 2 + 3) return "wrong sum after shrink";
      ncclCommDestroy(child);
    }
    ncclCommDestroy(comm);
    return "";
  });
  EXPECT_EQ(failures(results), "");
}

TEST_P(MultiRank, NonblockingInitAndScalableInit) {
  auto results = runRanks(GetParam(), 4, [](int rank, int n, const ncclUniqueId& id) -> std::string {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = "nonblocking";
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRankConfig(&comm, n, id, rank, &cfg);
    if (r != ncclInProgress && r != ncclSuccess) return ncclFailure("ncclCommInitRankConfig", r);
    ncclResult_t state = ncclInProgress;
    for (int i = 0; i < 20000 && state == ncclInProgress; ++i) {
      RANK_NCCL(ncclCommGetAsyncError(comm, &state));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (state != ncclSuccess) return "nonblocking init ended in state " + std::to_string(state);
    double v = rank + 0.5, sum = 0;
    RANK_NCCL(ncclAllReduce(&v, &sum, 1, ncclFloat64, ncclSum, comm, nullptr));
    if (sum != 8.0) return "wrong sum on the nonblocking communicator";
    // ncclCommInitRankScalable with two roots, made by ranks 0 and 1 of the first communicator.
    ncclUniqueId ids[2];
    if (rank < 2) RANK_NCCL(ncclGetUniqueId(&ids[rank]));
    RANK_NCCL(ncclBroadcast(&ids[0], &ids[0], sizeof(ncclUniqueId), ncclUint8, 0, comm, nullptr));
    RANK_NCCL(ncclBroadcast(&ids[1], &ids[1], sizeof(ncclUniqueId), ncclUint8, 1, comm, nullptr));
    ncclComm_t scalable;
    RANK_NCCL(ncclCommInitRankScalable(&scalable, n, rank, 2, ids, nullptr));
    int one = 1, total = 0;
    RANK_NCCL(ncclAllReduce(&one, &total, 1, ncclInt32, ncclSum, scalable, nullptr));
    ncclCommDestroy(scalable);
    ncclCommDestroy(comm);
    return total == n ? "" : "scalable init gave a wrong sum";
  });
  EXPECT_EQ(failures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Host, MultiRank, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return std::string(modeName(info.param)); });

}  // namespace
}  // namespace strata::test
