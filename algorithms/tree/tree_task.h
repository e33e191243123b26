// A tree task: partial results up to the root, the result down, chunk by chunk.
#pragma once

#include <memory>
#include <vector>

#include "algorithms/task.h"
#include "device/cpu_reduce.h"
#include "nccl.h"

namespace strata::algorithms::tree {

// A tree on one lane: partial results flow up from the leaves to the root
// (all-reduce, reduce), then the result flows down (all-reduce, broadcast), in
// slot-sized chunks, so going up and going down overlap.
enum class TreeMode { kAllReduce, kReduce, kBroadcast };
struct TreeTaskArgs {
  const char* fn;
  int rank;
  TreeMode mode;
  int parent;  // rank, or -1 at the root
  std::vector<int> children;
  // Connections: toParent/fromParent are null at the root; one per child in the others.
  transport::SendConnection* toParent;
  transport::RecvConnection* fromParent;
  std::vector<transport::SendConnection*> toChildren;
  std::vector<transport::RecvConnection*> fromChildren;
  const char* sendbuff;
  char* recvbuff;
  size_t begin, length;  // the elements this tree carries
  size_t chunk;          // elements per message
  ncclDataType_t type;
  device::ReduceOp op;
};
std::unique_ptr<Task> makeTreeTask(const TreeTaskArgs& args);

}  // namespace strata::algorithms::tree
