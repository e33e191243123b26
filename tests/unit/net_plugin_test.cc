// The network seam over an external NCCL net plugin (transports/net/plugin.h):
// NCCL_NET_PLUGIN's value as NCCL reads it, loading (newest interface first), and
// one connection driven through the Network interface against the tests' own
// TCP plugin, built with the v8 and with the v11 interface.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "transports/net/nccl_net.h"
#include "transports/net/plugin.h"

namespace strata::transport::net {
namespace {

using Strings = std::vector<std::string>;

TEST(NetPluginNames, AsNcclReadsThem) {
  EXPECT_EQ(pluginCandidates("", false), Strings{"libnccl-net.so"});  // unset: the default library
  EXPECT_EQ(pluginCandidates("none", true), Strings{});
  EXPECT_EQ(pluginCandidates("aws-ofi", true), Strings{"libnccl-net-aws-ofi.so"});
  EXPECT_EQ(pluginCandidates("libnccl-net-x.so", true), Strings{"libnccl-net-x.so"});
  EXPECT_EQ(pluginCandidates("/opt/p/libnet.so", true), Strings{"/opt/p/libnet.so"});
  EXPECT_EQ(pluginCandidates("a,/b/c.so,,d", true), (Strings{"libnccl-net-a.so", "/b/c.so", "libnccl-net-d.so"}));
  EXPECT_EQ(pluginCandidates("a,none", true), Strings{});
}

TEST(NetPluginLoading, RefusesWhatIsNotAPlugin) {
  EXPECT_EQ(openPlugin("/nonexistent/libnccl-net-nothing.so"), nullptr);
  EXPECT_EQ(openPlugin("libm.so.6"), nullptr);  // loads, exports no ncclNetPlugin_vN
}

class NetPlugin : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    std::string file = std::string(STRATA_TEST_PLUGIN_DIR) + "/libnccl-net-strata-test-v" +
                       std::to_string(GetParam()) + ".so";
    int version = 0;
    net_ = openPlugin(file, &version);
    ASSERT_NE(net_, nullptr) << file;
    EXPECT_EQ(version, GetParam());
    EXPECT_EQ(net_->name(), "StrataTestTCP");
  }
  // Polls `f` until it returns non-null; fails after 10 s.
  template <typename F>
  void* until(F f) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      if (void* p = f()) return p;
      if (std::chrono::steady_clock::now() > deadline) return nullptr;
      std::this_thread::yield();
    }
  }
  std::unique_ptr<Network> net_;
};

TEST_P(NetPlugin, PropertiesAndOneConnection) {
  ASSERT_EQ(net_->devices(), 1);
  DeviceProperties p = net_->properties(0);
  EXPECT_EQ(p.name, "tcp0");
  EXPECT_EQ(p.speedMbps, 10000);
  EXPECT_EQ(p.ptrSupport, abi::kPtrHost);
  EXPECT_EQ(p.maxRecvs, 1);

  char handle[kHandleBytes] = {};
  void* listen = net_->listen(0, handle);
  void* send = nullptr;
  void* recv = nullptr;
  // connect and accept both need calling again until the connection is up
  ASSERT_NE(until([&] {
              if (!send) send = net_->connect(0, handle);
              if (!recv) recv = net_->accept(listen);
              return send && recv ? send : nullptr;
            }),
            nullptr);
  std::vector<char> out(1 << 20), in(1 << 20, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i * 7 + 3);
  void* smh = net_->regMr(send, out.data(), out.size(), abi::kPtrHost);
  void* rmh = net_->regMr(recv, in.data(), in.size(), abi::kPtrHost);
  void* rr = until([&] { return net_->irecv(recv, in.data(), in.size(), 0, rmh); });
  void* sr = until([&] { return net_->isend(send, out.data(), out.size() - 5, 0, smh); });
  ASSERT_TRUE(rr && sr);
  size_t got = 0, sent = 0;
  bool rdone = false, sdone = false;
  ASSERT_NE(until([&]() -> void* {
              if (!sdone) sdone = net_->test(sr, &sent);
              if (!rdone) rdone = net_->test(rr, &got);
              return sdone && rdone ? sr : nullptr;
            }),
            nullptr);
  EXPECT_EQ(got, out.size() - 5);
  EXPECT_EQ(sent, out.size() - 5);
  EXPECT_EQ(memcmp(in.data(), out.data(), got), 0);

  // A send from memory outside its registration is the plugin's error, named.
  try {
    net_->isend(send, out.data() + 10, out.size(), 0, smh);
    FAIL() << "an unregistered range was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("StrataTestTCP: isend failed"), std::string::npos) << e.what();
  }
  // The peer's close is a remote error on the other end's next receive.
  net_->deregMr(send, smh);
  net_->closeSend(send);
  void* late = until([&] { return net_->irecv(recv, in.data(), 16, 0, rmh); });
  try {
    size_t n = 0;
    until([&]() -> void* { return net_->test(late, &n) ? late : nullptr; });
    FAIL() << "a receive from a closed peer completed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ncclRemoteError) << e.what();
  }
  net_->deregMr(recv, rmh);
  net_->closeRecv(recv);
  net_->closeListen(listen);
}

// A plugin whose devices want their receives unpacked by GPU kernels (TCPX/FasTrak
// style, netDeviceType UNPACK): Strata says it cannot serve it, and refuses a
// connection that hands back a device handle (closing it) rather than misread data.
TEST_P(NetPlugin, AnUnpackDeviceIsRefusedByName) {
  EXPECT_EQ(unservable(*net_), "");
  setenv("STRATA_TEST_PLUGIN_DEVICE_TYPE", "1", 1);
  std::string why = unservable(*net_);
  EXPECT_NE(why.find("device 0 (tcp0) is of netDeviceType 1"), std::string::npos) << why;
  EXPECT_NE(why.find("UNPACK"), std::string::npos) << why;
  char handle[kHandleBytes] = {};
  void* listen = net_->listen(0, handle);
  std::string connectError, acceptError;
  until([&]() -> void* {
    try {
      if (connectError.empty()) net_->connect(0, handle);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ncclInvalidUsage);
      connectError = e.what();
    }
    try {
      if (acceptError.empty()) net_->accept(listen);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ncclInvalidUsage);
      acceptError = e.what();
    }
    return connectError.empty() || acceptError.empty() ? nullptr : listen;
  });
  unsetenv("STRATA_TEST_PLUGIN_DEVICE_TYPE");
  EXPECT_NE(connectError.find("connect returned a device handle (netDeviceType 1)"), std::string::npos)
      << connectError;
  EXPECT_NE(acceptError.find("accept returned a device handle (netDeviceType 1)"), std::string::npos) << acceptError;
  net_->closeListen(listen);
}

INSTANTIATE_TEST_SUITE_P(Interfaces, NetPlugin, ::testing::Values(8, 11),
                         [](const auto& info) {
                           std::string name = "v";  // (not "v" + ...: GCC 12 warns falsely, -Wrestrict)
                           name += std::to_string(info.param);
                           return name;
                         });

}  // namespace
}  // namespace strata::transport::net
