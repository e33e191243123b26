// Strata's TCP network through the network seam, in one process, held to what the
// IB network and NCCL plugins are held to: messages of odd sizes exact over
// several streams, requests served in order with a bound on those in flight, a
// message larger than its receive refused naming both sizes, tags checked, a peer
// that closes reported within a second (as a close, not a fault), a receiver whose
// process is gone refused at once.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "base/socket.h"
#include "transports/net/nccl_net.h"
#include "transports/socket/socket_network.h"
#include "transports/socket/stream_comm.h"
#include "network_link.h"

namespace strata::transport::socket {
namespace {

const int kEnv = [] {
  setenv("NCCL_SOCKET_IFNAME", "=lo", 0);
  return 0;
}();

struct Link : net::Link {
  Link() : net::Link(socketNetwork()) {}
};

// Streams per connection as NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD say, for one test.
struct Streams {
  explicit Streams(int perThread) {
    setenv("NCCL_NSOCKS_PERTHREAD", std::to_string(perThread).c_str(), 1);
    reloadConfig();
  }
  ~Streams() {
    unsetenv("NCCL_NSOCKS_PERTHREAD");
    reloadConfig();
  }
};

TEST(SocketNetwork, OddSizesExactOverEveryStreamInOrder) {
  Streams four(2);  // 2 threads x 2 sockets
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  EXPECT_EQ(l.net->name(), "Socket");
  EXPECT_EQ(l.net->properties(0).name, "lo");
  EXPECT_EQ(l.net->properties(0).ptrSupport, net::abi::kPtrHost);
  std::vector<size_t> sizes{1000003, 0, 1, 65535, 65536, 65537, 4 * 65536 + 3, 513};
  std::vector<std::vector<char>> src, dst;
  for (size_t i = 0; i < sizes.size(); ++i) {
    src.emplace_back(sizes[i]);
    for (size_t k = 0; k < sizes[i]; ++k) src[i][k] = static_cast<char>(k * 31 + i * 7 + 1);
    dst.emplace_back(1 << 20, 0);
  }
  // Every receive and every send in flight at once: the streams serve them in order.
  std::vector<void*> recvs, sends;
  for (size_t i = 0; i < sizes.size(); ++i)
    recvs.push_back(l.net->irecv(l.recv, dst[i].data(), dst[i].size(), 5, nullptr));
  for (size_t i = 0; i < sizes.size(); ++i) sends.push_back(l.post(src[i].data(), sizes[i], 5, nullptr));
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_NE(recvs[i], nullptr);
    ASSERT_NE(sends[i], nullptr);
    size_t got = 99, sent = 99;
    ASSERT_TRUE(l.wait(recvs[i], &got)) << "message " << i;
    ASSERT_TRUE(l.wait(sends[i], &sent)) << "message " << i;
    EXPECT_EQ(got, sizes[i]);
    EXPECT_EQ(sent, sizes[i]);
    EXPECT_TRUE(std::equal(src[i].begin(), src[i].end(), dst[i].begin())) << "message " << i;
  }
}

TEST(SocketNetwork, RequestsInFlightAreBounded) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  std::vector<char> buf(64);
  std::vector<void*> recvs;
  for (size_t i = 0; i < StreamComm::kMaxRequests; ++i) {
    recvs.push_back(l.net->irecv(l.recv, buf.data(), buf.size(), 0, nullptr));
    ASSERT_NE(recvs.back(), nullptr);
  }
  EXPECT_EQ(l.net->irecv(l.recv, buf.data(), buf.size(), 0, nullptr), nullptr);  // declined: not now
  void* s = l.post(buf.data(), 8, 0, nullptr);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(l.wait(recvs[0], nullptr));
  EXPECT_NE(l.net->irecv(l.recv, buf.data(), buf.size(), 0, nullptr), nullptr);  // room again
}

TEST(SocketNetwork, AMessageLargerThanTheReceiveIsRefusedWithBothSizes) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  std::vector<char> src(4096), dst(100);
  void* r = l.net->irecv(l.recv, dst.data(), dst.size(), 0, nullptr);
  ASSERT_NE(l.post(src.data(), 1000, 0, nullptr), nullptr);
  try {
    l.wait(r, nullptr);
    FAIL() << "received 1000 bytes into a receive of 100";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ncclInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("1000 bytes to a receive of 100"), std::string::npos) << e.what();
  }
  EXPECT_THROW(l.net->test(r, nullptr), Error);  // the connection stays failed
}

TEST(SocketNetwork, AMessageWithAnotherTagIsRefused) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  char b[8] = {};
  void* r = l.net->irecv(l.recv, b, sizeof b, 1, nullptr);
  ASSERT_NE(l.post(b, sizeof b, 2, nullptr), nullptr);
  try {
    l.wait(r, nullptr);
    FAIL() << "a message with tag 2 completed a receive with tag 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tag 2 to a receive with tag 1"), std::string::npos) << e.what();
  }
}

TEST(SocketNetwork, APeerThatClosesBetweenMessagesIsACloseWithinASecond) {
  Streams four(2);
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  char last[70000] = {};
  last[69999] = 42;
  void* r1 = l.net->irecv(l.recv, last, sizeof last, 0, nullptr);
  ASSERT_TRUE(l.wait(l.post(last, sizeof last, 0, nullptr), nullptr));  // split over the 4 streams
  l.net->closeSend(l.send);  // as a sender that is done (or exits) does
  l.send = nullptr;
  size_t got = 0;
  ASSERT_TRUE(l.wait(r1, &got));  // what came before the close is delivered
  EXPECT_EQ(got, sizeof last);
  void* r2 = l.net->irecv(l.recv, last, sizeof last, 0, nullptr);
  auto start = std::chrono::steady_clock::now();
  try {
    l.wait(r2, nullptr, 3);
    FAIL() << "a receive outlived its sender";
  } catch (const net::PeerClosed& e) {
    EXPECT_EQ(e.code(), ncclRemoteError);
    EXPECT_NE(std::string(e.what()).find("closed the connection"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(SocketNetwork, APeerThatClosesInTheMiddleOfAMessageIsAFault) {
  Link l;
  ASSERT_TRUE(l.send && l.recv);
  std::vector<char> big(64 << 20);
  void* r = l.net->irecv(l.recv, big.data(), big.size(), 0, nullptr);
  void* s = l.post(big.data(), big.size(), 0, nullptr);
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 100; ++i) l.net->test(r, nullptr);  // part of it has arrived
  l.net->closeSend(l.send);
  l.send = nullptr;
  try {
    l.wait(r, nullptr, 3);
    FAIL() << "a message cut short completed";
  } catch (const net::PeerClosed&) {
    FAIL() << "a message cut short was taken for an orderly close";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ncclRemoteError);
  }
}

TEST(SocketNetwork, AReceiverThatIsGoneIsRefusedAtOnce) {
  char handle[net::kHandleBytes] = {};
  net::Network* n = socketNetwork();
  void* listen = n->listen(0, handle);
  // The handle's address (after its magic, socket_network.cc), with a port nothing
  // listens on: a receiving process that has exited.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);  // bound, never listened: connects are refused
  SockAddr* addr = reinterpret_cast<SockAddr*>(handle + sizeof(uint64_t));
  addr->setPort(ntohs(a.sin_port));
  auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 100000 && !n->connect(0, handle); ++i) {
    }
    FAIL() << "connected to a closed port";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ncclRemoteError);
    EXPECT_NE(std::string(e.what()).find("refused the connection"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  n->cancelConnect(handle);
  n->closeListen(listen);
}

}  // namespace
}  // namespace strata::transport::socket
