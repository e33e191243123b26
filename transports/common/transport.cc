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

namespace strata::transport {
namespace {

std::string sizeText(uint64_t bytes) {
  if (bytes >= (1ull << 20)) return format("%.1f MiB", bytes / double(1ull << 20));
  if (bytes >= 1024) return format("%.1f KiB", bytes / 1024.0);
  return format("%llu B", static_cast<unsigned long long>(bytes));
}

}  // namespace

Activity Activity::since(const Activity& b) const {
  Activity d;
  d.messages = messages - b.messages;
  d.bytes = bytes - b.bytes;
  d.puts = puts - b.puts;
  d.putBytes = putBytes - b.putBytes;
  d.bounceBytes = bounceBytes - b.bounceBytes;
  d.registrations = registrations - b.registrations;
  d.wire = wire;
  d.dataWrites = dataWrites - b.dataWrites;
  d.fifoWrites = fifoWrites - b.fifoWrites;
  d.nicRegistrations = nicRegistrations - b.nicRegistrations;
  d.cacheHits = cacheHits - b.cacheHits;
  d.dmabufRegistrations = dmabufRegistrations - b.dmabufRegistrations;
  d.flushes = flushes - b.flushes;
  return d;
}

std::string Activity::str() const {
  auto n = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::string s = format("%llu messages (%s) through the slots, %llu puts (%s", n(messages), sizeText(bytes).c_str(),
                         n(puts), sizeText(putBytes).c_str());
  if (bounceBytes) s += format("; %s copied through registered buffers", sizeText(bounceBytes).c_str());
  s += format("), %llu registrations", n(registrations));
  if (wire)
    s += format("; on the wire %llu data writes, %llu FIFO writes; %llu new registrations with the NIC, %llu "
                "found in its cache",
                n(dataWrites), n(fifoWrites), n(nicRegistrations), n(cacheHits));
  if (dmabufRegistrations || flushes)
    s += format("; GPUDirect RDMA: %llu dma-buf registrations, %llu flushes", n(dmabufRegistrations), n(flushes));
  return s;
}

}  // namespace strata::transport
