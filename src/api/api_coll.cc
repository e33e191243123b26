// Collectives, point-to-point, groups and reduction ops. Host buffers: each
// call (or the group end) returns once the operation is complete. Device
// buffers: the operation is enqueued on the stream and the call returns
// (core/device_proxy.h).
#include "api/api_boundary.h"
#include "core/comm_handle.h"
#include "core/group.h"
#include "core/op_check.h"

using namespace strata;
using algorithms::Collective;
using core::OpDesc;
using core::OpKind;

namespace {

ncclResult_t submit(ncclComm_t comm, OpDesc op, cudaStream_t stream) {
  op.stream = stream;
  return api::guarded([&] {
    try {
      core::CommUse use(comm, op.fn);
      core::validateOp(use.ready(op.fn), op);
      core::group::enqueue(comm, op);
    } catch (const Error& e) {
      core::group::markFailed(e.code(), e.what());
      throw;
    }
  });
}

OpDesc collective(Collective c, const char* fn, const void* sendbuff, void* recvbuff, size_t count,
                  ncclDataType_t type, ncclRedOp_t op, int root) {
  OpDesc d;
  d.kind = OpKind::kCollective;
  d.coll = c;
  d.fn = fn;
  d.sendbuff = sendbuff;
  d.recvbuff = recvbuff;
  d.count = count;
  d.rawType = core::rawEnum(type);
  d.type = d.rawType >= 0 && d.rawType < ncclNumTypes ? static_cast<ncclDataType_t>(d.rawType) : ncclFloat32;
  d.op = op;
  d.root = root;
  return d;
}

}  // namespace

STRATA_API ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, collective(Collective::kAllReduce, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op, 0), stream);
}

STRATA_API ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(comm,
                collective(Collective::kBroadcast, "ncclBroadcast", sendbuff, recvbuff, count, datatype, ncclSum, root), stream);
}

STRATA_API ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
  return submit(comm, collective(Collective::kBroadcast, "ncclBcast", buff, buff, count, datatype, ncclSum, root), stream);
}

STRATA_API ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, collective(Collective::kReduce, "ncclReduce", sendbuff, recvbuff, count, datatype, op, root), stream);
}

STRATA_API ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return submit(comm,
                collective(Collective::kAllGather, "ncclAllGather", sendbuff, recvbuff, sendcount, datatype, ncclSum, 0), stream);
}

STRATA_API ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, collective(Collective::kReduceScatter, "ncclReduceScatter", sendbuff, recvbuff, recvcount,
                                 datatype, op, 0), stream);
}

STRATA_API ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      ncclComm_t comm, cudaStream_t stream) {
  return submit(comm,
                collective(Collective::kAllToAll, "ncclAlltoAll", sendbuff, recvbuff, count, datatype, ncclSum, 0), stream);
}

STRATA_API ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, collective(Collective::kGather, "ncclGather", sendbuff, recvbuff, count, datatype, ncclSum, root), stream);
}

STRATA_API ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                     int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(comm,
                collective(Collective::kScatter, "ncclScatter", sendbuff, recvbuff, count, datatype, ncclSum, root), stream);
}

STRATA_API ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream) {
  OpDesc d = collective(Collective::kSendRecv, "ncclSend", sendbuff, nullptr, count, datatype, ncclSum, peer);
  d.kind = OpKind::kSend;
  return submit(comm, d, stream);
}

STRATA_API ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                  cudaStream_t stream) {
  OpDesc d = collective(Collective::kSendRecv, "ncclRecv", nullptr, recvbuff, count, datatype, ncclSum, peer);
  d.kind = OpKind::kRecv;
  return submit(comm, d, stream);
}

STRATA_API ncclResult_t pncclGroupStart() {
  return api::guarded([] { core::group::start(); });
}

STRATA_API ncclResult_t pncclGroupEnd() {
  return api::guarded([] { core::group::end(); });
}

STRATA_API ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return api::guarded([&] {
    STRATA_REQUIRE(simInfo, ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo is NULL");
    STRATA_REQUIRE(simInfo->magic == 0x74685283, ncclInvalidArgument,
                   "ncclGroupSimulateEnd: simInfo was not initialised with NCCL_SIM_INFO_INITIALIZER");
    core::group::end(simInfo);
  });
}

STRATA_API ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence, ncclComm_t comm) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclRedOpCreatePreMulSum");
    core::Communicator& c = use.ready("ncclRedOpCreatePreMulSum");
    STRATA_REQUIRE(op, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op is NULL");
    STRATA_REQUIRE(scalar, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: scalar is NULL");
    int type = core::rawEnum(datatype), where = core::rawEnum(residence);
    STRATA_REQUIRE(type >= 0 && type < ncclNumTypes, ncclInvalidArgument,
                   "ncclRedOpCreatePreMulSum: invalid datatype %d", type);
    STRATA_REQUIRE(where == ncclScalarDevice || where == ncclScalarHostImmediate, ncclInvalidArgument,
                   "ncclRedOpCreatePreMulSum: invalid residence %d", where);
    *op = c.redops().createPreMulSum(scalar, datatype, residence);
  });
}

STRATA_API ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclRedOpDestroy");
    use.ready("ncclRedOpDestroy", true).redops().destroy(op);
  });
}

STRATA_ALIAS(ncclAllReduce)
STRATA_ALIAS(ncclBroadcast)
STRATA_ALIAS(ncclBcast)
STRATA_ALIAS(ncclReduce)
STRATA_ALIAS(ncclAllGather)
STRATA_ALIAS(ncclReduceScatter)
STRATA_ALIAS(ncclAlltoAll)
STRATA_ALIAS(ncclGather)
STRATA_ALIAS(ncclScatter)
STRATA_ALIAS(ncclSend)
STRATA_ALIAS(ncclRecv)
STRATA_ALIAS(ncclGroupStart)
STRATA_ALIAS(ncclGroupEnd)
STRATA_ALIAS(ncclGroupSimulateEnd)
STRATA_ALIAS(ncclRedOpCreatePreMulSum)
STRATA_ALIAS(ncclRedOpDestroy)
