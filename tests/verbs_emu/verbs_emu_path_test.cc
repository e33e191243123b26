// The emulated fabric delivers only what a real one would: a path MTU over a
// port's, GIDs of different types (RoCE v1 and v2), RoCE v2 between an IPv4 and an
// IPv6 GID, a GID or LID that is not the peer's, or one end routing by GID and the
// other by LID: the requester's retries run out (IBV_WC_RETRY_EXC_ERR), as packets
// a fabric drops would make them. InfiniBand ports are addressed by LID.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu_testing.h"

namespace {

using namespace emu_testing;

// Sets an environment variable of the emulator for one test (it reads them per call).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

ibv_gid gidAt(Node& n, int index) {
  ibv_gid g{};
  EXPECT_EQ(ibv_query_gid(n.ctx, 1, index, &g), 0) << index;
  return g;
}

// Writes 8 KiB (position-unique bytes) from a to b, with a's retries short (timeout
// 12: about 0.13 s); the completion's status, and whether the bytes landed.
struct Outcome {
  ibv_wc_status status;
  bool landed;
};
Outcome writeAToB(Node& a, Node& b) {
  EXPECT_EQ(toRts(a, 7, 12), 0);
  EXPECT_EQ(toRts(b, 7, 12), 0);
  std::vector<char> src(8192), dst(8192, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = byteOf(2, i);
  ibv_mr* s = ibv_reg_mr(a.pd, src.data(), src.size(), kAll);
  ibv_mr* d = ibv_reg_mr(b.pd, dst.data(), dst.size(), kAll);
  EXPECT_EQ(postWrite(a, IBV_WR_RDMA_WRITE, src.data(), 8192, s->lkey, reinterpret_cast<uint64_t>(dst.data()),
                      d->rkey),
            0);
  Outcome o{next(a.cq).status, false};
  o.landed = memcmp(src.data(), dst.data(), dst.size()) == 0;
  ibv_destroy_qp(a.qp);
  ibv_destroy_qp(b.qp);
  ibv_dereg_mr(s);
  ibv_dereg_mr(d);
  return o;
}

// RoCE: a's GRH from its GID `aIndex` to b's GID `toB`, b's from `bIndex` to a's `toA`.
Outcome roce(int aIndex, int toB, int bIndex, int toA) {
  Node a = open(), b = open();
  ibv_gid dgidA = gidAt(b, toB), dgidB = gidAt(a, toA);
  EXPECT_EQ(toRtrPath(a, b.qp->qp_num, &dgidA, aIndex, 0), 0);
  EXPECT_EQ(toRtrPath(b, a.qp->qp_num, &dgidB, bIndex, 0), 0);
  return writeAToB(a, b);
}

TEST(Path, TheDriverRefusesRtrWithoutWhatThePortNeeds) {
  Node a = open(), b = open();
  ibv_gid g = gidAt(b, 1);
  EXPECT_EQ(toRtrPath(a, b.qp->qp_num, nullptr, 0, 5), EINVAL);  // RoCE: a GRH always
  EXPECT_EQ(toRtrPath(a, b.qp->qp_num, &g, 4, 0), EINVAL);       // no GID 4
  EXPECT_EQ(toRtrPath(a, b.qp->qp_num, &g, 1, 0, static_cast<ibv_mtu>(0)), EINVAL);
  EXPECT_EQ(toRtrPath(a, b.qp->qp_num, &g, 1, 0, static_cast<ibv_mtu>(6)), EINVAL);
  EXPECT_EQ(toRtrPath(a, b.qp->qp_num, &g, 1, 0), 0);
}

TEST(Path, RoceDeliversBetweenGidsOfOneTypeAndFamily) {
  for (int i : {0, 1, 2, 3}) {
    Outcome o = roce(i, i, i, i);
    EXPECT_EQ(o.status, IBV_WC_SUCCESS) << "GID " << i;
    EXPECT_TRUE(o.landed) << "GID " << i;
  }
}

TEST(Path, RoceDropsWhatNoFabricCouldCarry) {
  struct Case {
    const char* what;
    int aIndex, toB, bIndex, toA;
  } cases[] = {
      {"RoCE v1 to v2", 0, 1, 1, 0},
      {"RoCE v2 from IPv4 to IPv6", 3, 1, 1, 3},
      {"a destination GID that is not the peer's source", 3, 1, 3, 3},
      {"a source GID that is not the peer's destination", 3, 3, 3, 1},
  };
  for (const Case& c : cases) {
    Outcome o = roce(c.aIndex, c.toB, c.bIndex, c.toA);
    EXPECT_EQ(o.status, IBV_WC_RETRY_EXC_ERR) << c.what << ": " << ibv_wc_status_str(o.status);
    EXPECT_FALSE(o.landed) << c.what;
  }
}

TEST(Path, APathMtuOverAPortsOrThePeersIsDropped) {
  ScopedEnv mtu("STRATA_VERBS_EMU_MTU", "1024");
  struct Case {
    ibv_mtu a, b;
    ibv_wc_status want;
  } cases[] = {
      {IBV_MTU_4096, IBV_MTU_4096, IBV_WC_RETRY_EXC_ERR},  // over both ports' 1024
      {IBV_MTU_1024, IBV_MTU_512, IBV_WC_RETRY_EXC_ERR},   // over the peer's path
      {IBV_MTU_1024, IBV_MTU_1024, IBV_WC_SUCCESS},
      {IBV_MTU_512, IBV_MTU_1024, IBV_WC_SUCCESS},
  };
  for (const Case& c : cases) {
    Node a = open(), b = open();
    ibv_port_attr pa{};
    ASSERT_EQ(ibv_query_port(a.ctx, 1, &pa), 0);
    EXPECT_EQ(pa.active_mtu, IBV_MTU_1024);
    ASSERT_EQ(toRtrPath(a, b.qp->qp_num, &b.gid, 1, 0, c.a), 0);
    ASSERT_EQ(toRtrPath(b, a.qp->qp_num, &a.gid, 1, 0, c.b), 0);
    Outcome o = writeAToB(a, b);
    EXPECT_EQ(o.status, c.want) << "paths " << (128 << c.a) << " and " << (128 << c.b);
    EXPECT_EQ(o.landed, c.want == IBV_WC_SUCCESS);
  }
}

TEST(Path, InfinibandPortsAreAddressedByLid) {
  ScopedEnv ib("STRATA_VERBS_EMU_LINK_LAYER", "ib");
  auto lidOf = [](Node& n) {
    ibv_port_attr pa{};
    EXPECT_EQ(ibv_query_port(n.ctx, 1, &pa), 0);
    EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
    EXPECT_EQ(pa.gid_tbl_len, 2);
    return pa.lid;
  };
  {
    Node a = open(kAll, 0), b = open(kAll, 0);
    uint16_t lid = lidOf(a);
    EXPECT_NE(lid, 0);
    EXPECT_EQ(a.gid.raw[0], 0xfe);  // fe80::, the default subnet prefix, and the port GUID
    ibv_gid_entry e{};
    ASSERT_EQ(ibv_query_gid_ex(a.ctx, 1, 0, &e, 0), 0);
    EXPECT_EQ(e.gid_type, IBV_GID_TYPE_IB);
    EXPECT_EQ(ibv_query_gid_ex(a.ctx, 1, 1, &e, 0), ENODATA);  // unused: one subnet, no routable GID
    EXPECT_EQ(toRtrPath(a, b.qp->qp_num, nullptr, 0, 0), EINVAL);  // no GRH and no LID
    ASSERT_EQ(toRtrPath(a, b.qp->qp_num, nullptr, 0, lidOf(b)), 0);
    ASSERT_EQ(toRtrPath(b, a.qp->qp_num, nullptr, 0, lid), 0);
    Outcome o = writeAToB(a, b);
    EXPECT_EQ(o.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(o.landed);
  }
  {  // a LID that is not the peer's port
    Node a = open(kAll, 0), b = open(kAll, 0);
    ASSERT_EQ(toRtrPath(a, b.qp->qp_num, nullptr, 0, static_cast<uint16_t>(lidOf(b) + 1)), 0);
    ASSERT_EQ(toRtrPath(b, a.qp->qp_num, nullptr, 0, lidOf(a)), 0);
    EXPECT_EQ(writeAToB(a, b).status, IBV_WC_RETRY_EXC_ERR);
  }
  {  // with a GRH (between subnets) on both ends
    Node a = open(kAll, 0), b = open(kAll, 0);
    ASSERT_EQ(toRtrPath(a, b.qp->qp_num, &b.gid, 0, lidOf(b)), 0);
    ASSERT_EQ(toRtrPath(b, a.qp->qp_num, &a.gid, 0, lidOf(a)), 0);
    EXPECT_EQ(writeAToB(a, b).status, IBV_WC_SUCCESS);
  }
  {  // a GRH on one end only
    Node a = open(kAll, 0), b = open(kAll, 0);
    ASSERT_EQ(toRtrPath(a, b.qp->qp_num, &b.gid, 0, lidOf(b)), 0);
    ASSERT_EQ(toRtrPath(b, a.qp->qp_num, nullptr, 0, lidOf(a)), 0);
    EXPECT_EQ(writeAToB(a, b).status, IBV_WC_RETRY_EXC_ERR);
  }
}

TEST(Path, EachProcessItsOwnSubnetWhenAsked) {
  ScopedEnv ib("STRATA_VERBS_EMU_LINK_LAYER", "ib");
  ScopedEnv subnet("STRATA_VERBS_EMU_SUBNET", "process");
  Node a = open(kAll, 1);  // GID 1: routable, fec0:0:<FLID>:<slot>
  EXPECT_EQ(a.gid.raw[0], 0xfe);
  EXPECT_EQ(a.gid.raw[1], 0xc0);
  EXPECT_NE(a.gid.raw[6] | a.gid.raw[7], 0);  // the slot: differs between processes
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(a.ctx, 1, &pa), 0);
  EXPECT_EQ(a.gid.raw[4] << 8 | a.gid.raw[5], 0x4000 + pa.lid);  // the FLID
}

}  // namespace
