#include "core/kept_call.h"

#include "base/config.h"

namespace strata::core {

std::optional<KeptCall::Key> KeptCall::keyOf(const OpDesc& op) {
  if (reduces(op) && rawEnum(op.op) >= ncclNumOps) return std::nullopt;
  return Key{op.kind, op.coll, op.sendbuff, op.recvbuff, op.count, op.rawType, rawEnum(op.op), op.root, &config()};
}

}  // namespace strata::core
