// The transport interface's own definitions, beside the transports that derive
// from it (not in the registry above them, so each transport links on its own).
#include "base/error.h"
#include "transports/transport.h"

namespace strata::transport {

std::unique_ptr<RecvConnection> Transport::listen(const ConnectRequest&, std::string*) {
  fail(ncclInvalidUsage, "transport %s has no two-sided slots (it offers regions only)", name());
}

std::unique_ptr<SendConnection> Transport::connect(const ConnectRequest&, const std::string&) {
  fail(ncclInvalidUsage, "transport %s has no two-sided slots (it offers regions only)", name());
}

}  // namespace strata::transport
