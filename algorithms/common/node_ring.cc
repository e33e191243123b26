#include "algorithms/common/node_ring.h"

namespace strata::algorithms {

NodeRing useNodeRing(PlanContext& ctx) {
  const RankLayout& l = ctx.layout();
  const std::vector<int>& local = l.nodeRanks(l.node());
  NodeRing r;
  r.size = static_cast<int>(local.size());
  int li = l.localRank;
  r.prev = local[(li + r.size - 1) % r.size];
  r.next = local[(li + 1) % r.size];
  r.rsFrom = {r.prev, linkId("node.rs")};
  r.rsTo = {r.next, linkId("node.rs")};
  r.agFrom = {r.prev, linkId("node.ag")};
  r.agTo = {r.next, linkId("node.ag")};
  if (r.size > 1) {
    ctx.needRecv(r.rsFrom);
    ctx.needSend(r.rsTo);
    ctx.needRecv(r.agFrom);
    ctx.needSend(r.agTo);
  }
  return r;
}

}  // namespace strata::algorithms
