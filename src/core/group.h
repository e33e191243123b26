// ncclGroupStart / ncclGroupEnd: per-thread aggregation of inits and operations.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "core/comm_handle.h"
#include "core/op.h"

namespace strata::core::group {

void start();
// Closes one level; at the outermost level runs the deferred inits, then the
// operations (or, with `sim`, only estimates them). Throws the first error.
void end(ncclSimInfo_t* sim = nullptr);
bool active();
// Defers a communicator init to the outermost ncclGroupEnd (several run in parallel).
void deferInit(ncclComm* h, std::function<void()> job);
// Runs the operation now, or queues it when a group is open.
void enqueue(ncclComm* h, const OpDesc& op);
// Records that a call inside the group failed: the group end drops the group and reports it.
void markFailed(ncclResult_t code, const std::string& msg);

}  // namespace strata::core::group
