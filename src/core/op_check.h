// Argument checks for every operation, with NCCL's error codes and messages that name the argument.
#pragma once

#include "core/communicator.h"
#include "core/op.h"

namespace strata::core {

// Throws ncclInvalidArgument for a bad datatype, op, root/peer or buffer.
void validateOp(const Communicator& comm, const OpDesc& op);

}  // namespace strata::core
