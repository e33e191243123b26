// strata-topo: shows a machine's topology, the plan Strata makes on it, and what
// the tuner predicts per collective and size. Works on the local machine or on a
// topology file (NCCL's XML, e.g. a preset), so clusters can be reasoned about
// without having them.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/tree/tree.h"
#include "base/error.h"
#include "topology/discover.h"
#include "algorithms/predict.h"
#include "topo/report.h"

using namespace strata;
using namespace strata::topology;
using namespace strata::algorithms;
using namespace strata::tools;

namespace {

const char kUsage[] =
    "usage: strata-topo [--topo FILE|PRESET] [--nodes N] [--ranks-per-node R] [--threads] [--json] [--dump FILE]\n"
    "                   [--compare FILE|PRESET] [--algo LIST] [--proto LIST] [--p2p-level LEVEL] [--p2p-disable]\n"
    "  --topo        NCCL topology XML, or a preset name (a100, a800, h100, h800, rtx4090, cpu-2socket);\n"
    "                default: this machine, discovered with hwloc and NVML\n"
    "  --nodes       nodes alike (default 1)\n"
    "  --ranks-per-node  ranks on each node (default: one per GPU; without GPUs one per core, at most 8)\n"
    "  --threads     host ranks are threads of one process (as all_reduce_perf -t); default: processes\n"
    "  --json        one JSON object instead of tables\n"
    "  --dump        write the topology as NCCL XML to FILE\n"
    "  --compare     show where the plan and choices differ from another topology's, and why\n"
    "  --algo/--proto  restrict the tuner as NCCL_ALGO / NCCL_PROTO do (e.g. --algo Ring)\n"
    "  --p2p-level   NCCL_P2P_LEVEL for the plan (LOC NVL NVB PIX PXB PHB SYS; default PXB)\n"
    "  --p2p-disable plan as under NCCL_P2P_DISABLE=1 (GPU traffic through host memory)\n";

struct Args {
  std::string topo, dump, compare, algo, proto;
  int nodes = 1;
  bool json = false;
  PlanOptions plan;
};

int intArg(const char* flag, const char* v) {
  char* end = nullptr;
  long n = v ? strtol(v, &end, 10) : 0;
  if (!v || *end || n < 1 || n > 1 << 20) fail(ncclInvalidArgument, "%s wants a positive number, got '%s'", flag, v ? v : "");
  return static_cast<int>(n);
}

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto take = [&]() {
      if (!v) fail(ncclInvalidArgument, "%s needs a value\n%s", f.c_str(), kUsage);
      ++i;
      return std::string(v);
    };
    if (f == "--topo") a.topo = take();
    else if (f == "--dump") a.dump = take();
    else if (f == "--compare") a.compare = take();
    else if (f == "--algo") a.algo = take();
    else if (f == "--proto") a.proto = take();
    else if (f == "--nodes") a.nodes = intArg("--nodes", take().c_str());
    else if (f == "--ranks-per-node") a.plan.ranksPerNode = intArg("--ranks-per-node", take().c_str());
    else if (f == "--json") a.json = true;
    else if (f == "--threads") a.plan.threads = true;
    else if (f == "--p2p-disable") a.plan.p2pDisable = true;
    else if (f == "--p2p-level") {
      std::string l = take();
      if (!parsePathType(l, &a.plan.p2pLevel)) fail(ncclInvalidArgument, "--p2p-level: unknown level '%s'", l.c_str());
    } else if (f == "-h" || f == "--help") {
      fputs(kUsage, stdout);
      exit(0);
    } else {
      fail(ncclInvalidArgument, "unknown option '%s'\n%s", f.c_str(), kUsage);
    }
  }
  return a;
}

struct Loaded {
  std::string source;
  System sys;
};

Loaded load(const std::string& topo) {
  if (topo.empty()) {
    std::vector<std::string> warnings;
    XmlElement xml = discoverLocalTopology(&warnings);
    for (const std::string& w : warnings) fprintf(stderr, "strata-topo: warning: %s\n", w.c_str());
    return {"this machine", System::fromXml(xml, "this machine")};
  }
  std::string path = resolvePreset(topo);
  return {path, System::fromXml(loadXmlFile(path), path)};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args = parseArgs(argc, argv);
    Loaded mine = load(args.topo);
    if (!args.dump.empty()) saveXmlFile(args.dump, mine.sys.xml());
    Plan plan = planNode(mine.sys, args.plan);
    std::vector<Prediction> preds = predictAll(plan, args.nodes, args.algo, args.proto);
    if (args.json) {
      fputs(jsonReport(mine.source, mine.sys, plan, args.nodes, preds).c_str(), stdout);
      return 0;
    }
    fputs(textReport(mine.source, mine.sys, plan, args.nodes, preds).c_str(), stdout);
    if (!args.compare.empty()) {
      Loaded other = load(args.compare);
      Plan otherPlan = planNode(other.sys, args.plan);
      fputs(compareReport(mine.source, plan, preds, other.source, otherPlan, predictAll(otherPlan, args.nodes, args.algo, args.proto)).c_str(),
            stdout);
    }
    if (!args.dump.empty()) printf("\nwrote %s\n", args.dump.c_str());
    return 0;
  } catch (const Error& e) {
    fprintf(stderr, "strata-topo: %s\n", e.what());
    return 2;
  }
}
