// The pairwise transfer task over a loopback connection, in each of its modes:
// exact data, and a task that waits reports no progress (the executor yields and
// sleeps only then; a waiting task that claims progress spins a core away from
// the peer it waits for).
#include <gtest/gtest.h>
#include <unistd.h>

#include <numeric>
#include <vector>

#include "algorithms/pairwise/p2p_task.h"
#include "base/peer_info.h"
#include "base/socket.h"
#include "transports/transport.h"

namespace strata::algorithms::pairwise {
namespace {

using Mode = P2pTaskArgs::Mode;

PeerInfo peer(int rank, Doorbell& bell) {
  PeerInfo p;
  p.rank = rank;
  p.pid = getpid();
  p.hostHash = hostIdentity(nullptr);
  p.processHash = processIdentity();
  p.machineHash = machineIdentity();
  snprintf(p.bellName, sizeof p.bellName, "%s", bell.name().c_str());
  return p;
}

class P2pTaskTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    t_ = transport::findTransport("loopback");
    ASSERT_NE(t_, nullptr);
    a_ = peer(0, *bellA_);
    b_ = peer(1, *bellB_);
    transport::ConnectRequest rq{&b_, &a_, 4096, 4};  // rank 1 receives from rank 0
    std::string handle;
    recv_ = t_->listen(rq, &handle);
    transport::ConnectRequest sq{&a_, &b_, 4096, 4};
    send_ = t_->connect(sq, handle);
  }

  std::unique_ptr<Task> task(bool sending, char* buf, size_t bytes) {
    P2pTaskArgs args{"test", sending ? 0 : 1, sending ? 1 : 0, buf, bytes, nullptr, nullptr};
    args.mode = GetParam();
    if (sending) args.send = send_.get();
    else args.recv = recv_.get();
    bool registers = (GetParam() == Mode::kPut && !sending) || (GetParam() == Mode::kGet && sending);
    if (registers) args.reg = t_->registerMemory(buf, bytes);
    return makeP2pTask(args);
  }

  transport::Transport* t_ = nullptr;
  std::shared_ptr<Doorbell> bellA_ = Doorbell::create(), bellB_ = Doorbell::create();
  PeerInfo a_, b_;
  std::unique_ptr<transport::RecvConnection> recv_;
  std::unique_ptr<transport::SendConnection> send_;
};

TEST_P(P2pTaskTest, WaitingIsNotProgressAndTheDataArrivesExactly) {
  constexpr size_t kBytes = 10000;  // not a multiple of the slot size
  std::vector<char> src(kBytes), dst(kBytes, 0);
  std::iota(src.begin(), src.end(), 1);
  auto receiver = task(false, dst.data(), kBytes);
  auto sender = task(true, src.data(), kBytes);

  // The first side to act may post something (an offer); after that it waits.
  Task& first = GetParam() == Mode::kPut ? *receiver : *sender;
  Task& other = GetParam() == Mode::kPut ? *sender : *receiver;
  if (GetParam() != Mode::kSlots) {
    first.progress();
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(first.progress()) << "poll " << i << " of a task with nothing to do";
    EXPECT_FALSE(first.done());
  } else {
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(receiver->progress()) << "a receive with nothing sent yet";
  }
  for (int i = 0; i < 1000 && !(sender->done() && receiver->done()); ++i) {
    other.progress();
    first.progress();
  }
  ASSERT_TRUE(receiver->done());
  ASSERT_TRUE(sender->done());
  EXPECT_EQ(dst, src);
  EXPECT_FALSE(receiver->progress());
  EXPECT_FALSE(sender->progress());
}

// The end a peer waits on (a write's receiver offers its memory, a read's sender
// exposes its buffer) posts that from startEarly(), which the executor calls on every
// lane's head before any lane copies: the peer's copy then starts at once, not after
// this rank's own long copies on its other lanes. Nothing completes early.
TEST_P(P2pTaskTest, TheEndAPeerWaitsOnPostsBeforeItProgresses) {
  constexpr size_t kBytes = 10000;
  std::vector<char> src(kBytes), dst(kBytes, 0);
  std::iota(src.begin(), src.end(), 7);
  auto receiver = task(false, dst.data(), kBytes);
  auto sender = task(true, src.data(), kBytes);
  if (GetParam() == Mode::kSlots) {  // nothing to post: the sender's messages are the transfer
    EXPECT_FALSE(sender->startEarly());
    EXPECT_FALSE(receiver->startEarly());
    return;
  }
  Task& waitedOn = GetParam() == Mode::kPut ? *receiver : *sender;
  Task& copier = GetParam() == Mode::kPut ? *sender : *receiver;
  EXPECT_FALSE(copier.startEarly()) << "the copying end has nothing to post";
  ASSERT_TRUE(waitedOn.startEarly());
  EXPECT_FALSE(waitedOn.startEarly()) << "posted twice";
  EXPECT_FALSE(waitedOn.done());
  for (int i = 0; i < 1000 && !copier.done(); ++i) copier.progress();  // no progress() on the waited-on end
  ASSERT_TRUE(copier.done());
  for (int i = 0; i < 1000 && !waitedOn.done(); ++i) waitedOn.progress();
  ASSERT_TRUE(waitedOn.done());
  EXPECT_EQ(dst, src);
}

INSTANTIATE_TEST_SUITE_P(Modes, P2pTaskTest, ::testing::Values(Mode::kSlots, Mode::kPut, Mode::kGet),
                         [](const auto& info) {
                           return info.param == Mode::kSlots ? "Slots" : info.param == Mode::kPut ? "Put" : "Get";
                         });

}  // namespace
}  // namespace strata::algorithms::pairwise
