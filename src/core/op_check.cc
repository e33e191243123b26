#include "core/op_check.h"

#include "base/error.h"
#include "device/dtypes.h"
#include "device/gpu.h"

namespace strata::core {

size_t opBytes(const OpDesc& op, int nranks) {
  return operationBytes(opCollective(op), op.count, device::dtypeSize(op.type), nranks);
}

size_t sendBytes(const OpDesc& op, int nranks) {
  if (op.kind == OpKind::kRecv) return 0;
  return sendElements(opCollective(op), op.count, nranks) * device::dtypeSize(op.type);
}

void* opStream(const OpDesc& op) { return op.stream ? op.stream : device::kLegacyStream; }

size_t recvBytes(const OpDesc& op, int nranks) {
  if (op.kind == OpKind::kSend) return 0;
  return recvElements(opCollective(op), op.count, nranks) * device::dtypeSize(op.type);
}

bool readsSendBuffer(const OpDesc& op, int rank) {
  return op.kind != OpKind::kRecv && readsSend(opCollective(op), rank, op.root);
}

bool writesRecvBuffer(const OpDesc& op, int rank) {
  return op.kind != OpKind::kSend && writesRecv(opCollective(op), rank, op.root);
}

void validateOp(const Communicator& comm, const OpDesc& op) {
  int r = comm.rank(), n = comm.nranks();
  STRATA_REQUIRE(op.rawType >= 0 && op.rawType < ncclNumTypes, ncclInvalidArgument, "%s: rank %d: invalid datatype %d",
                 op.fn, r, op.rawType);
  bool rooted = op.kind != OpKind::kCollective || traits(op.coll).rooted;
  const char* rootName = op.kind == OpKind::kCollective ? "root" : "peer";
  STRATA_REQUIRE(!rooted || (op.root >= 0 && op.root < n), ncclInvalidArgument,
                 "%s: rank %d: %s %d is out of range [0, %d)", op.fn, r, rootName, op.root, n);
  if (reduces(op)) {
    STRATA_REQUIRE(op.op >= 0 && (op.op < ncclNumOps || comm.redops().isUserOp(op.op)), ncclInvalidArgument,
                   "%s: rank %d: invalid reduction op %d", op.fn, r, static_cast<int>(op.op));
    comm.redops().resolve(op.op, op.type, op.fn);  // checks a user op's datatype
  }
  size_t esize = device::dtypeSize(op.type);
  STRATA_REQUIRE(op.count <= SIZE_MAX / esize / n, ncclInvalidArgument, "%s: rank %d: count %zu is too large", op.fn,
                 r, op.count);
  if (op.count == 0) return;  // NCCL allows NULL buffers with nothing to move
  bool readsSend = readsSendBuffer(op, r), writesRecv = writesRecvBuffer(op, r);
  STRATA_REQUIRE(!readsSend || op.sendbuff, ncclInvalidArgument, "%s: rank %d: sendbuff is NULL with count %zu", op.fn,
                 r, op.count);
  STRATA_REQUIRE(!writesRecv || op.recvbuff, ncclInvalidArgument, "%s: rank %d: recvbuff is NULL with count %zu",
                 op.fn, r, op.count);
}

}  // namespace strata::core
