// Tree: the double binary tree all-reduce (each tree carries half the elements),
// and one tree rooted at the root for broadcast and reduce. Positions follow the
// ring order, so neighbouring leaves sit on one node.
#include "algorithms/algorithm.h"
#include "algorithms/common/cost_model.h"
#include "algorithms/tree/tree.h"
#include "algorithms/tree/tree_task.h"
#include "device/dtypes.h"

namespace strata::algorithms::tree {
namespace {

class Tree final : public Algorithm {
 public:
  const char* name() const override { return "Tree"; }
  bool serves(Collective c) const override {
    return c == Collective::kAllReduce || c == Collective::kBroadcast || c == Collective::kReduce;
  }

  // An inner node sends to two children, so the busiest link carries twice what a
  // ring's does, for log2(n) hops instead of n.
  double costUs(const TuneRequest& r, Protocol) const override {
    const LinkModel l = slowestLink(r);
    double levels = treeDepth(r.nranks) - 1;
    double hops = r.coll == Collective::kAllReduce ? 2 * levels : levels;
    return l.latencyUs * (hops * (r.nodes > 1 ? kTreeStepHops : 1.0) + 1) + transferUs(2.0 * r.bytes, l);
  }

  void plan(PlanContext& ctx, const CollectiveOp& op, Protocol) const override {
    const RankLayout& l = ctx.layout();
    int n = l.nranks, pos = l.ringPos[l.rank];
    bool allReduce = op.coll == Collective::kAllReduce;
    TreeMode mode = allReduce ? TreeMode::kAllReduce
                    : op.coll == Collective::kReduce ? TreeMode::kReduce
                                                     : TreeMode::kBroadcast;
    int trees = allReduce && n > 1 ? 2 : 1;
    for (int t = 0; t < trees; ++t) {
      TreeLinks links = allReduce ? doubleTree(n, pos, t) : rootedTree(n, pos, l.ringPos[op.root]);
      uint64_t id = linkId("tree", t);
      bool up = mode != TreeMode::kBroadcast, down = mode != TreeMode::kReduce;
      TreeTaskArgs a{op.fn, l.rank, mode, links.parent < 0 ? -1 : l.ringOrder[links.parent], {}, nullptr, nullptr, {},
                     {}, static_cast<const char*>(op.sendbuff), static_cast<char*>(op.recvbuff), 0, 0,
                     ctx.slotBytes() / device::dtypeSize(op.type), op.type, op.op};
      a.begin = op.count * t / trees;
      a.length = op.count * (t + 1) / trees - a.begin;
      for (int k = 0; k < links.nchildren; ++k) a.children.push_back(l.ringOrder[links.children[k]]);
      if (a.parent >= 0) {
        if (up) ctx.needSend({a.parent, id});
        if (down) ctx.needRecv({a.parent, id});
      }
      for (int child : a.children) {
        if (up) ctx.needRecv({child, id});
        if (down) ctx.needSend({child, id});
      }
      ctx.addTask({linkId("tree"), t}, [a, id, up, down](Links& ln) mutable {
        if (a.parent >= 0) {
          if (up) a.toParent = &ln.send({a.parent, id});
          if (down) a.fromParent = &ln.recv({a.parent, id});
        }
        for (int child : a.children) {
          if (up) a.fromChildren.push_back(&ln.recv({child, id}));
          if (down) a.toChildren.push_back(&ln.send({child, id}));
        }
        return makeTreeTask(a);
      });
    }
  }
};

}  // namespace

const Algorithm& algorithm() {
  static const Tree tree;
  return tree;
}

}  // namespace strata::algorithms::tree
