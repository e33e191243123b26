// The topology model, XML reader/writer, planner and predictions, on every preset
// and on this machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "algorithms/predict.h"
#include "algorithms/rank_layout.h"
#include "topo/report.h"
#include "topology/discover.h"
#include "topology/local.h"

namespace strata::topology {
namespace {

using algorithms::Collective;
using algorithms::predict;
using algorithms::predictAll;
using algorithms::Prediction;
using tools::compareReport;
using tools::jsonReport;
using tools::textReport;

const char* kPresets[] = {"a100-sxm-8gpu", "a800-sxm-8gpu", "h100-sxm-8gpu",
                          "h800-sxm-8gpu", "rtx4090-pcie-8gpu", "cpu-2socket"};

System preset(const std::string& name) {
  std::string path = resolvePreset(name);
  return System::fromXml(loadXmlFile(path), path);
}

Plan planOf(const std::string& name, PlanOptions opts = {}) { return planNode(preset(name), opts); }

std::string errorOf(const std::string& xml) {
  try {
    System::fromXml(parseXml(xml, "t.xml"), "t.xml");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ncclInvalidUsage);
    return e.what();
  }
  return "no error";
}

TEST(TopologyXml, EveryPresetRoundTrips) {
  for (const char* name : kPresets) {
    XmlElement first = loadXmlFile(resolvePreset(name));
    std::string dumped = writeXml(first);
    XmlElement second = parseXml(dumped, "dump");
    EXPECT_EQ(first, second) << name;
    EXPECT_EQ(dumped, writeXml(second)) << name;  // load -> dump -> load -> dump is byte-identical
  }
}

TEST(TopologyXml, EntitiesCommentsAndQuotes) {
  XmlElement e = parseXml("<?xml version=\"1.0\"?>\n<!-- c -->\n<system version='1'>\n<cpu numaid=\"0\" vendor=\"a&amp;b&quot;\"/>\n</system>\n", "x");
  ASSERT_EQ(e.children.size(), 1u);
  EXPECT_EQ(e.children[0].attrOr("vendor", ""), "a&b\"");
  EXPECT_EQ(e.children[0].line, 4);
  EXPECT_EQ(parseXml(writeXml(e), "y"), e);
}

TEST(TopologyXml, MalformedFilesNameTheLine) {
  EXPECT_NE(errorOf("<system>\n<cpu numaid=\"0\">\n</system>").find("t.xml:3: </system> closes <cpu> opened on line 2"), std::string::npos);
  EXPECT_NE(errorOf("<system>\n<cpu numaid=\"0\"/>\n").find("t.xml:3: <system> opened on line 1 is never closed"), std::string::npos);
  EXPECT_NE(errorOf("<system>\n\n<cpu numaid=0/>\n</system>").find("t.xml:3: expected a quoted attribute value"), std::string::npos);
  EXPECT_NE(errorOf("<system>\n<cpu a=\"1\" a=\"2\"/>\n</system>").find("t.xml:2: attribute 'a' given twice"), std::string::npos);
  EXPECT_NE(errorOf("<system>\nhello\n</system>").find("t.xml:2: text content"), std::string::npos);
  EXPECT_NE(errorOf("<system>\n<cpu numaid=\"zero\"/>\n</system>").find("t.xml:2: <cpu numaid=\"zero\"> is not a number"), std::string::npos);
  EXPECT_NE(errorOf("<system>\n<cpu numaid=\"0\">\n  <pci class=\"0x060400\"/>\n</cpu>\n</system>").find("t.xml:3: <pci> needs a busid"), std::string::npos);
  EXPECT_NE(errorOf("<system>\n<cpu numaid=\"0\" affinity=\"zz\"/>\n</system>").find("t.xml:2: <cpu affinity=\"zz\"> is not a CPU mask"), std::string::npos);
  EXPECT_NE(errorOf("<system>\n<cpu numaid=\"0\" affinity=\"ffffffff,\"/>\n</system>").find("is not a CPU mask"), std::string::npos);
  EXPECT_NE(errorOf("<system>\n<cpu numaid=\"0\" affinity=\"123456789\"/>\n</system>").find("is not a CPU mask"), std::string::npos);
  EXPECT_NE(errorOf("<system>\n<cpu numaid=\"0\">\n  <pci busid=\"nothex\"/>\n</cpu>\n</system>").find("t.xml:3: <pci busid=\"nothex\"> is not a PCI address"), std::string::npos);
  for (const char* bad : {"0000:17:00", "0000:17:00.10", "00:17:00.0", "0000:1g:00.0", ":17:00.0", "0000:17:00.0x"})
    EXPECT_NE(errorOf(std::string("<system>\n<cpu numaid=\"0\">\n  <pci busid=\"") + bad + "\"/>\n</cpu>\n</system>")
                  .find("is not a PCI address"), std::string::npos) << bad;
  EXPECT_NE(errorOf("<graphs version=\"1\"/>").find("t.xml:1: the root element is <graphs>"), std::string::npos);
  EXPECT_NE(errorOf("<system version=\"1\"/>").find("has no <cpu>"), std::string::npos);
  EXPECT_NE(errorOf("<system>\n<cpu numaid=\"0\" v=\"&nbsp;\"/>\n</system>").find("t.xml:2: unknown entity"), std::string::npos);
}

TEST(TopologyXml, MissingFileAndUnknownPreset) {
  EXPECT_THROW(loadXmlFile("/nonexistent/topo.xml"), Error);
  try {
    resolvePreset("b200");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a100-sxm-8gpu"), std::string::npos) << e.what();
  }
  EXPECT_EQ(resolvePreset("h800"), presetDir() + "/h800-sxm-8gpu.xml");
}

// A preset as cloud images ship their NCCL_TOPO_FILE: the PCI tree only, every
// <gpu> and <nic> removed (GPUs and NICs are bare <pci> elements with class codes).
void stripDevices(XmlElement& e) {
  e.children.erase(std::remove_if(e.children.begin(), e.children.end(),
                                  [](const XmlElement& c) { return c.name == "gpu" || c.name == "nic"; }),
                   e.children.end());
  for (XmlElement& c : e.children) stripDevices(c);
}

// NCCL_TOPO_FILE as a base that discovery completes: the discovered GPUs (with their
// NVLinks) and NICs land at the file's PCI positions, and the machine plans as
// described; read alone, the PCI-only file has no GPU at all.
TEST(TopologyMerge, PciOnlyFileGetsDiscoveredGpusNvlinksAndNics) {
  for (const char* name : {"h100-sxm-8gpu", "a800-sxm-8gpu", "rtx4090-pcie-8gpu"}) {
    XmlElement full = loadXmlFile(resolvePreset(name));
    XmlElement file = full;
    stripDevices(file);
    std::vector<std::string> alone;
    XmlElement bare = file;
    XmlElement nothing;
    nothing.name = "system";
    mergeDiscovered(bare, nothing, &alone);  // nothing discovered: the bare GPUs are left out
    EXPECT_TRUE(System::fromXml(bare, name).ofType(NodeType::kGpu).empty()) << name;
    EXPECT_EQ(alone.size(), 8u) << name << ": one warning per GPU left out";
    std::vector<std::string> warnings;
    mergeDiscovered(file, full, &warnings);
    EXPECT_EQ(writeXml(file), writeXml(full)) << name;
    EXPECT_TRUE(warnings.empty()) << name << ": " << (warnings.empty() ? "" : warnings[0]);
    System merged = System::fromXml(file, name), original = System::fromXml(full, name);
    EXPECT_EQ(merged.describe(), original.describe()) << name;
  }
}

TEST(TopologyMerge, ACompleteFileIsKept) {
  XmlElement h100 = loadXmlFile(resolvePreset("h100")), a100 = loadXmlFile(resolvePreset("a100"));
  XmlElement file = h100;
  std::vector<std::string> warnings;
  mergeDiscovered(file, a100, &warnings);  // another machine's discovery changes nothing the file describes
  EXPECT_EQ(writeXml(file), writeXml(h100));
}

// Short bus ids (no domain, upper case) match discovery's; a GPU the file lists bare
// but discovery did not find is left out, and NVLinks to it with it.
TEST(TopologyMerge, ShortBusIdsAndGpusDiscoveryDidNotFind) {
  const char* pciOnly = R"(<system version="1">
  <cpu numaid="0" affinity="ffffffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:07:00.0" class="0x060400" vendor="0x1000" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="08:00.0" class="0x030200" vendor="0x10de" link_speed="32.0 GT/s PCIe" link_width="16"/>
      <pci busid="0000:09:00.0" class="0x030200" vendor="0x10de" link_speed="32.0 GT/s PCIe" link_width="16"/>
      <pci busid="0000:0A:00.0" class="0x020700" vendor="0x15b3" link_speed="32.0 GT/s PCIe" link_width="16"/>
      <pci busid="0000:0c:00.0" class="0x030200" vendor="0x10de" link_speed="32.0 GT/s PCIe" link_width="16"/>
    </pci>
  </cpu>
</system>
)";
  const char* found = R"(<system version="1">
  <cpu numaid="0">
    <pci busid="0000:08:00.0"><gpu dev="0" sm="90" gdr="1">
      <nvlink target="0000:09:00.0" count="18" tclass="0x030200"/>
      <nvlink target="0000:0c:00.0" count="2" tclass="0x030200"/></gpu></pci>
    <pci busid="0000:09:00.0"><gpu dev="1" sm="90" gdr="1"><nvlink target="0000:08:00.0" count="18" tclass="0x030200"/></gpu></pci>
    <pci busid="0000:0a:00.0"><nic><net name="mlx5_0" dev="0" speed="400000" port="1" gdr="1"/></nic></pci>
  </cpu>
</system>
)";
  XmlElement file = parseXml(pciOnly, "pci-only.xml");
  std::vector<std::string> warnings;
  mergeDiscovered(file, parseXml(found, "discovered"), &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("0000:0c:00.0"), std::string::npos) << warnings[0];
  System s = System::fromXml(file, "pci-only.xml");
  std::vector<int> gpus = s.ofType(NodeType::kGpu), nets = s.ofType(NodeType::kNet);
  ASSERT_EQ(gpus.size(), 2u);
  ASSERT_EQ(nets.size(), 1u);
  EXPECT_EQ(s.node(gpus[0]).id, "0000:08:00.0");  // as ranks name their GPUs
  EXPECT_EQ(s.node(gpus[1]).id, "0000:09:00.0");
  EXPECT_EQ(s.path(gpus[0], gpus[1]).type, PathType::kNvl);
  EXPECT_TRUE(s.ofType(NodeType::kNvs).empty()) << "the link to the missing GPU became an NVSwitch";
  EXPECT_EQ(s.path(gpus[0], nets[0]).type, PathType::kPix);
}

TEST(TopologyModel, BandwidthsComeFromCounts) {
  EXPECT_DOUBLE_EQ(nvlinkBwPerLink(80), 20.0);
  EXPECT_DOUBLE_EQ(nvlinkBwPerLink(90), 20.6);
  EXPECT_DOUBLE_EQ(pciBw("16.0 GT/s PCIe", "16"), 24.0);
  EXPECT_DOUBLE_EQ(pciBw("32 GT/s", "16"), 48.0);
  EXPECT_DOUBLE_EQ(pciBw("8.0 GT/s PCIe", "8"), 6.0);
  EXPECT_DOUBLE_EQ(pciBw("", ""), 12.0);  // NCCL's default: Gen3 x16
  // Same board, same GPU generation: only the link count differs.
  EXPECT_DOUBLE_EQ(planOf("a100").ringGBps, 240.0);
  EXPECT_DOUBLE_EQ(planOf("a800").ringGBps, 160.0);
  EXPECT_NEAR(planOf("h100").ringGBps, 370.8, 1e-9);
  EXPECT_NEAR(planOf("h800").ringGBps, 164.8, 1e-9);
}

TEST(TopologyModel, PathClasses) {
  System s = preset("a100");
  std::vector<int> gpus = s.ofType(NodeType::kGpu), nets = s.ofType(NodeType::kNet), cpus = s.ofType(NodeType::kCpu);
  ASSERT_EQ(gpus.size(), 8u);
  ASSERT_EQ(nets.size(), 8u);
  EXPECT_EQ(s.path(gpus[0], gpus[7]).type, PathType::kNvl);
  EXPECT_EQ(s.path(gpus[0], nets[0]).type, PathType::kPix);   // same PCIe switch
  EXPECT_EQ(s.path(gpus[0], nets[2]).type, PathType::kPhb);   // other switch, same socket
  EXPECT_EQ(s.path(gpus[0], nets[7]).type, PathType::kSys);   // other socket
  EXPECT_EQ(s.path(gpus[0], cpus[1]).type, PathType::kSys);
  EXPECT_DOUBLE_EQ(s.path(gpus[0], nets[7]).bw, 16.0);        // AMD inter-socket
  System p = preset("rtx4090");
  std::vector<int> g = p.ofType(NodeType::kGpu);
  EXPECT_EQ(p.path(g[0], g[1]).type, PathType::kPhb);
  EXPECT_EQ(p.path(g[0], g[4]).type, PathType::kSys);
  EXPECT_DOUBLE_EQ(p.path(g[0], g[4]).bw, 10.0);  // Intel Ice Lake inter-socket
  PathType t;
  EXPECT_TRUE(parsePathType("pxb", &t));
  EXPECT_EQ(t, PathType::kPxb);
  EXPECT_TRUE(parsePathType("3", &t));
  EXPECT_EQ(t, PathType::kPhb);
  EXPECT_FALSE(parsePathType("fast", &t));
}

TEST(TopologyPlan, ChannelsAndRailsFollowTheLinks) {
  Plan a100 = planOf("a100"), a800 = planOf("a800"), h100 = planOf("h100"), h800 = planOf("h800");
  EXPECT_EQ(a100.channels, 12);
  EXPECT_EQ(a800.channels, 8);
  EXPECT_EQ(h100.channels, 9);
  EXPECT_EQ(h800.channels, 4);
  EXPECT_DOUBLE_EQ(a100.netGBps, 8 * 24.0);  // 8 rails, each min(HDR 25, PCIe Gen4 24)
  EXPECT_DOUBLE_EQ(a800.netGBps, 4 * 24.0);  // two GPUs per NIC
  EXPECT_EQ(a800.rails[0], a800.rails[1]);
  EXPECT_NE(a100.rails[0], a100.rails[1]);
  EXPECT_DOUBLE_EQ(h100.netGBps, 8 * 48.0);  // NDR 50 limited by Gen5 x16 48
  for (const Plan* p : {&a100, &a800, &h100, &h800}) {
    EXPECT_FALSE(p->staged);
    EXPECT_EQ(p->ringPath, PathType::kNvl);
  }
}

TEST(TopologyPlan, NoPeerToPeerStagesThroughHostAndCrossesSocketsTwice) {
  Plan p = planOf("rtx4090");
  EXPECT_TRUE(p.staged);
  EXPECT_EQ(p.ringPath, PathType::kSys);
  EXPECT_DOUBLE_EQ(p.ringGBps, 10.0);
  // The ring keeps each socket's GPUs together: two socket crossings, one each way.
  int crossings = 0;
  for (size_t i = 0; i < p.ring.size(); ++i) crossings += (p.ring[i] < 4) != (p.ring[(i + 1) % p.ring.size()] < 4);
  EXPECT_EQ(crossings, 2);
  // NCCL_P2P_DISABLE on an NVLink box stages through host memory too.
  PlanOptions off;
  off.p2pDisable = true;
  Plan a = planOf("a100", off);
  EXPECT_TRUE(a.staged);
  EXPECT_LT(a.ringGBps, 24.0 + 1e-9);
}

TEST(TopologyPlan, HostRanksAreGroupedByNumaDomain) {
  Plan p = planOf("cpu-2socket");
  ASSERT_EQ(p.devices.size(), 8u);
  EXPECT_FALSE(p.gpus);
  int crossings = 0;
  for (size_t i = 0; i < p.ring.size(); ++i)
    crossings += p.devices[p.ring[i]] != p.devices[p.ring[(i + 1) % p.ring.size()]];
  EXPECT_EQ(crossings, 2);
  // Interleaved placement (rank r on socket r % 2): the ring still crosses only twice.
  System s = preset("cpu-2socket");
  PlanOptions opts;
  std::vector<int> cpus = s.ofType(NodeType::kCpu);
  for (int r = 0; r < 8; ++r) opts.rankDevices.push_back(cpus[r % 2]);
  Plan q = planNode(s, opts);
  crossings = 0;
  for (size_t i = 0; i < q.ring.size(); ++i) crossings += (q.ring[i] % 2) != (q.ring[(i + 1) % q.ring.size()] % 2);
  EXPECT_EQ(crossings, 2);
}

double busbw(const Plan& p, int nodes, size_t bytes, const char* algo = "") {
  return predict(p, nodes, Collective::kAllReduce, bytes, algo).busbwGBps;
}

// Published NCCL all-reduce bus bandwidths (docs/topology.md lists the sources).
TEST(TopologyPredict, LargeAllReduceWithinFifteenPercentOfPublished) {
  struct Case {
    const char* preset;
    int nodes;
    double published;
  } cases[] = {{"a100", 1, 231}, {"a800", 1, 156}, {"h100", 1, 365}, {"h800", 1, 160}, {"a100", 2, 188}};
  for (const Case& c : cases) {
    Plan p = planOf(c.preset);
    for (size_t gib : {1, 8}) {
      // Ring is what NCCL runs at these sizes; the comparison is like for like.
      double got = busbw(p, c.nodes, gib << 30, "Ring");
      EXPECT_LT(std::fabs(got / c.published - 1), 0.15) << c.preset << " x" << c.nodes << " " << gib << " GiB: " << got;
    }
  }
  // On one node the tuner's own choice is the ring at these sizes.
  for (const char* name : {"a100", "a800", "h100", "h800"})
    EXPECT_EQ(predict(planOf(name), 1, Collective::kAllReduce, size_t{1} << 30).algorithm, "Ring") << name;
}

// The device-driven path (device buffers on one node, one rank per GPU): one
// pipelined kernel and no proxy, so a small all-reduce is a launch and the mesh's
// three flag round trips (NCCL's own model gives about 15 us for 8 B on 8x H100 with
// LL), and a large one moves 2 (n - 1) / n of the data through each GPU at the link's
// rate less what the per-message flags take (docs/gpu.md, the model).
TEST(TopologyPredict, DeviceDrivenPathOnOneNode) {
  Plan h100 = planOf("h100");
  PlanOptions shared;
  shared.ranksPerNode = 16;
  EXPECT_TRUE(algorithms::deviceDriven(h100, 1));
  EXPECT_FALSE(algorithms::deviceDriven(h100, 2));                // across nodes: the proxy
  EXPECT_FALSE(algorithms::deviceDriven(planOf("rtx4090"), 1));   // no P2P: staged through host memory
  EXPECT_FALSE(algorithms::deviceDriven(planOf("h100", shared), 1));  // ranks share GPUs
  EXPECT_TRUE(algorithms::predictDevicePath(planOf("rtx4090")).empty());
  auto find = [](const std::vector<Prediction>& ps, Collective c, size_t bytes) {
    for (const Prediction& p : ps)
      if (p.coll == c && p.bytes == bytes) return p;
    ADD_FAILURE() << collectiveName(c) << " " << bytes << " missing";
    return Prediction{};
  };
  std::vector<Prediction> d = algorithms::predictDevicePath(h100);
  EXPECT_EQ(find(d, Collective::kAllToAll, 8).algorithm, "DeviceMesh");
  Prediction small = find(d, Collective::kAllReduce, 8);
  EXPECT_EQ(small.algorithm, "DeviceMesh");
  EXPECT_LE(small.us, 10.0);  // 8 B on 8 GPUs: a launch and three flag round trips
  EXPECT_EQ(small.bound, "latency");
  Prediction big = find(d, Collective::kAllReduce, size_t{1} << 30);
  EXPECT_GE(big.busbwGBps, 340.0);  // NCCL's ring: ~370 (docs/gpu.md, the model)
  EXPECT_LT(big.busbwGBps, predict(h100, 1, Collective::kAllReduce, size_t{1} << 30, "Ring").busbwGBps);
  // The ring's chain: the root of a broadcast sends each byte once, not n - 1 times.
  EXPECT_GT(find(d, Collective::kBroadcast, size_t{1} << 30).busbwGBps, 0.7 * h100.ringGBps);
  EXPECT_GT(find(d, Collective::kReduce, size_t{1} << 30).busbwGBps, 0.7 * h100.ringGBps);
  // H800's NVLink, cut to 8 links: NCCL measures ~156-160 GB/s.
  Prediction h800 = find(algorithms::predictDevicePath(planOf("h800")), Collective::kAllReduce, size_t{1} << 30);
  EXPECT_GE(h800.busbwGBps, 150.0);
  EXPECT_NE(textReport("h100", preset("h100"), h100, 1, predictAll(h100, 1)).find("== Device-driven path"),
            std::string::npos);
  EXPECT_EQ(textReport("h100", preset("h100"), h100, 2, predictAll(h100, 2)).find("== Device-driven path"),
            std::string::npos);
}

TEST(TopologyPredict, ReducedNvlinkPartsGetTheirOwnPlan) {
  Plan a100 = planOf("a100"), a800 = planOf("a800");
  std::vector<Prediction> pa = predictAll(a100, 2), pb = predictAll(a800, 2);
  int differ = 0;
  for (size_t i = 0; i < pa.size(); ++i) differ += pa[i].algorithm != pb[i].algorithm;
  EXPECT_GT(differ, 0);
  std::string why = compareReport("a800", a800, pb, "a100", a100, pa);
  EXPECT_NE(why.find("channels: 8 here, 12 there"), std::string::npos) << why;
  EXPECT_NE(why.find("choices that differ"), std::string::npos) << why;
  EXPECT_NE(why.find("NVL x8"), std::string::npos) << why;
}

TEST(TopologyPredict, JsonHasEveryPrediction) {
  Plan p = planOf("h800");
  std::string json = jsonReport("h800", preset("h800"), p, 2, predictAll(p, 2));
  EXPECT_NE(json.find("\"predictions\": ["), std::string::npos);
  EXPECT_NE(json.find("{\"collective\": \"AllReduce\", \"bytes\": 8589934592, \"algorithm\": "), std::string::npos);
  EXPECT_NE(json.find("\"busbw_gbps\": "), std::string::npos);
}

// Each preset's devices, paths, plan and predictions, on 1 and 2 nodes, against
// tests/golden/topology. STRATA_UPDATE_GOLDEN=1 rewrites them (review the diff).
TEST(TopologyGolden, PresetsMatchTheirGoldenFiles) {
  for (const char* name : kPresets)
    for (int nodes : {1, 2}) {
      System s = preset(name);
      Plan p = planNode(s, {});
      std::string got = textReport(name, s, p, nodes, predictAll(p, nodes));
      std::string path = std::string(STRATA_GOLDEN_DIR) + "/" + name + "-" + std::to_string(nodes) + "node.txt";
      if (getenv("STRATA_UPDATE_GOLDEN")) {
        std::ofstream(path) << got;
        continue;
      }
      std::ifstream in(path);
      ASSERT_TRUE(in) << path << " missing; run with STRATA_UPDATE_GOLDEN=1";
      std::stringstream want;
      want << in.rdbuf();
      EXPECT_EQ(got, want.str()) << path;
    }
}

TEST(TopologyDiscovery, ThisMachineLoadsAndDumpsBack) {
  std::vector<std::string> warnings;
  XmlElement xml = discoverLocalTopology(&warnings);
  System s = System::fromXml(xml, "discovered");
  EXPECT_FALSE(s.ofType(NodeType::kCpu).empty());
  XmlElement again = parseXml(writeXml(xml), "dump");
  EXPECT_EQ(again, xml);
  Plan p = planNode(System::fromXml(again, "dump"), {});
  EXPECT_GE(p.devices.size(), 1u);
  for (const std::string& w : warnings) std::cout << "discovery warning (expected on VMs): " << w << "\n";
}

}  // namespace
}  // namespace strata::topology

namespace strata::topology {
namespace {

// What a communicator plans for its node (comm_setup.cc): each rank's CPU by its
// NUMA domain, then planNode's ring, which visits each domain's ranks together.
TEST(CommunicatorTopology, NodeRingFollowsNumaDomains) {
  System sys = preset("cpu-2socket");
  std::vector<int> numa = {1, 0, 1, 0, 0, 1};
  PlanOptions opts;
  opts.ranksPerNode = 6;
  opts.rankDevices = rankDevices(sys, {"", "", "", "", "", ""}, numa);
  Plan p = planNode(sys, opts);
  ASSERT_EQ(p.ring.size(), 6u);
  int changes = 0;
  for (size_t i = 0; i < 6; ++i) changes += numa[p.ring[i]] != numa[p.ring[(i + 1) % 6]];
  EXPECT_EQ(changes, 2) << "the ring crosses between the sockets once each way";
}

TEST(CommunicatorTopology, NodeNetworkSumsDistinctRails) {
  std::vector<double> rate = {24, 24, 20, 1.25};
  std::vector<int> rail = {7, 8, 7, -1};
  EXPECT_DOUBLE_EQ(algorithms::nodeNetworkGBps({0, 1, 2}, rate, rail), 20 + 24);  // rail 7 at its slowest user's rate
  EXPECT_DOUBLE_EQ(algorithms::nodeNetworkGBps({0, 1, 2, 3}, rate, rail), 20 + 24 + 1.25);
  EXPECT_DOUBLE_EQ(algorithms::nodeNetworkGBps({3}, rate, rail), 1.25);
}

}  // namespace
}  // namespace strata::topology
