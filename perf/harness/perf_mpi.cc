#include "harness/perf_mpi.h"

#include <cstring>

#ifdef STRATA_PERF_MPI
#include <mpi.h>
#endif

namespace strata::perf {

#ifdef STRATA_PERF_MPI
namespace {

MPI_Datatype mpiType(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpiOp(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_OP_NULL;
  }
}

}  // namespace

std::string mpiUnsupported(Coll coll, ncclDataType_t type, ncclRedOp_t op, bool inPlace, bool launchedByMpi) {
  if (!launchedByMpi) return "--backend mpi needs the tool to be started by mpirun";
  if (mpiType(type) == MPI_DATATYPE_NULL) return "MPI has no datatype for this type";
  bool reduces = coll == Coll::kAllReduce || coll == Coll::kReduce || coll == Coll::kReduceScatter;
  if (reduces && mpiOp(op) == MPI_OP_NULL) return "MPI has no built-in op for this op";
  // MPI_IN_PLACE means what NCCL's in-place means only for these.
  bool inPlaceMatches = coll == Coll::kAllReduce || coll == Coll::kAllGather || coll == Coll::kBroadcast ||
                        coll == Coll::kReduce;
  if (inPlace && !inPlaceMatches) return "in-place differs between MPI and NCCL for this collective";
  return "";
}

bool mpiCollective(Coll coll, const CallArgs& a, bool inPlace) {
  MPI_Datatype dt = mpiType(a.type);
  MPI_Op op = mpiOp(a.op);
  int n = static_cast<int>(a.count);
  void* recv = a.recv;
  const void* send = inPlace ? MPI_IN_PLACE : a.send;
  int rc = MPI_SUCCESS;
  switch (coll) {
    case Coll::kAllReduce: rc = MPI_Allreduce(send, recv, n, dt, op, MPI_COMM_WORLD); break;
    case Coll::kAllGather: rc = MPI_Allgather(send, n, dt, recv, n, dt, MPI_COMM_WORLD); break;
    case Coll::kReduceScatter: rc = MPI_Reduce_scatter_block(a.send, recv, n, dt, op, MPI_COMM_WORLD); break;
    case Coll::kBroadcast:
      // Broadcast is always in place in MPI: the root's data is copied first when the buffers differ.
      if (!inPlace && a.rank == a.root) {
        int size = 0;
        MPI_Type_size(dt, &size);
        memcpy(recv, a.send, a.count * static_cast<size_t>(size));
      }
      rc = MPI_Bcast(recv, n, dt, a.root, MPI_COMM_WORLD);
      break;
    case Coll::kReduce:
      rc = MPI_Reduce(inPlace && a.rank != a.root ? a.send : send, recv, n, dt, op, a.root, MPI_COMM_WORLD);
      break;
    case Coll::kAllToAll: rc = MPI_Alltoall(a.send, n, dt, recv, n, dt, MPI_COMM_WORLD); break;
    case Coll::kGather: rc = MPI_Gather(a.send, n, dt, recv, n, dt, a.root, MPI_COMM_WORLD); break;
    case Coll::kScatter: rc = MPI_Scatter(a.send, n, dt, recv, n, dt, a.root, MPI_COMM_WORLD); break;
    case Coll::kSendRecv:
      rc = MPI_Sendrecv(a.send, n, dt, (a.rank + 1) % a.nranks, 0, recv, n, dt, (a.rank + a.nranks - 1) % a.nranks, 0,
                        MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      break;
  }
  return rc == MPI_SUCCESS;
}

#else

std::string mpiUnsupported(Coll, ncclDataType_t, ncclRedOp_t, bool, bool) {
  return "this build has no MPI (install libopenmpi-dev and rebuild)";
}
bool mpiCollective(Coll, const CallArgs&, bool) { return false; }

#endif

}  // namespace strata::perf
