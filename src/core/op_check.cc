#include "core/op_check.h"

#include "base/error.h"
#include "device/dtypes.h"

namespace strata::core {

size_t opBytes(const OpDesc& op, int nranks) {
  size_t b = op.count * device::dtypeSize(op.type);
  switch (op.coll) {
    case algorithms::Collective::kAllGather:
    case algorithms::Collective::kReduceScatter:
    case algorithms::Collective::kAllToAll:
    case algorithms::Collective::kGather:
    case algorithms::Collective::kScatter:
      return op.kind == OpKind::kCollective ? b * nranks : b;
    default:
      return b;
  }
}

void validateOp(const Communicator& comm, const OpDesc& op) {
  int r = comm.rank(), n = comm.nranks();
  STRATA_REQUIRE(op.rawType >= 0 && op.rawType < ncclNumTypes, ncclInvalidArgument, "%s: rank %d: invalid datatype %d",
                 op.fn, r, op.rawType);
  bool rooted = op.kind != OpKind::kCollective || op.coll == algorithms::Collective::kBroadcast ||
                op.coll == algorithms::Collective::kReduce || op.coll == algorithms::Collective::kGather ||
                op.coll == algorithms::Collective::kScatter;
  const char* rootName = op.kind == OpKind::kCollective ? "root" : "peer";
  STRATA_REQUIRE(!rooted || (op.root >= 0 && op.root < n), ncclInvalidArgument,
                 "%s: rank %d: %s %d is out of range [0, %d)", op.fn, r, rootName, op.root, n);
  bool reduces = op.kind == OpKind::kCollective && (op.coll == algorithms::Collective::kAllReduce ||
                                                    op.coll == algorithms::Collective::kReduceScatter ||
                                                    op.coll == algorithms::Collective::kReduce);
  if (reduces) {
    STRATA_REQUIRE(op.op >= 0 && (op.op < ncclNumOps || comm.isUserOp(op.op)), ncclInvalidArgument,
                   "%s: rank %d: invalid reduction op %d", op.fn, r, static_cast<int>(op.op));
    comm.resolveOp(op.op, op.type, op.fn);  // checks a user op's datatype
  }
  size_t esize = device::dtypeSize(op.type);
  STRATA_REQUIRE(op.count <= SIZE_MAX / esize / n, ncclInvalidArgument, "%s: rank %d: count %zu is too large", op.fn,
                 r, op.count);
  if (op.count == 0) return;  // NCCL allows NULL buffers with nothing to move
  bool isRoot = r == op.root;
  bool readsSend = true, writesRecv = true;
  switch (op.kind) {
    case OpKind::kSend: writesRecv = false; break;
    case OpKind::kRecv: readsSend = false; break;
    case OpKind::kCollective:
      if (op.coll == algorithms::Collective::kBroadcast || op.coll == algorithms::Collective::kScatter)
        readsSend = isRoot;
      if (op.coll == algorithms::Collective::kReduce || op.coll == algorithms::Collective::kGather)
        writesRecv = isRoot;
      break;
  }
  STRATA_REQUIRE(!readsSend || op.sendbuff, ncclInvalidArgument, "%s: rank %d: sendbuff is NULL with count %zu", op.fn,
                 r, op.count);
  STRATA_REQUIRE(!writesRecv || op.recvbuff, ncclInvalidArgument, "%s: rank %d: recvbuff is NULL with count %zu",
                 op.fn, r, op.count);
}

}  // namespace strata::core
