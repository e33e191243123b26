// What reaches the socket transport's data port: a connection from anywhere.
// Mode 0: any bytes from a stranger (the listener must drop what is not a
// hello, without crashing or handing it to a connection). Mode 1: a valid
// hello with the connection's token, then any bytes as the message stream
// (8-byte lengths and payloads): the receiver must deliver only messages that
// fit its slots, or fail the connection; never read past a slot, never hang.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/peer_info.h"
#include "base/socket.h"
#include "transports/socket/data_listener.h"
#include "transports/socket/socket_transport.h"

namespace {

using namespace strata;
using namespace strata::transport;

constexpr size_t kSlotBytes = 4096;

void sendBytes(int fd, const void* p, size_t n) {
  try {
    sendAll(fd, p, n, Deadline(5));
  } catch (const Error&) {  // the receiver may already have given up on this stream
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static PeerInfo self, peer;
  static socket::SocketTransport transport;
  static bool once = [] {
    std::string ifname;
    self.listenAddr = chooseInterfaceAddress("lo", &ifname);
    self.rank = 0;
    peer = self;
    peer.rank = 1;
    return true;
  }();
  (void)once;
  bool stranger = data[0] % 2 == 0;
  ++data;
  --size;
  ConnectRequest req{&self, &peer, kSlotBytes, 2};
  std::string raw;
  auto conn = transport.listen(req, &raw);
  socket::SocketHandle h;
  memcpy(static_cast<void*>(&h), raw.data(), sizeof(h));
  std::vector<int> fds;
  for (uint32_t s = 0; s < (stranger ? 1 : h.streams); ++s) {
    int fd = connectTo(h.addr, Deadline(5));
    fds.push_back(fd);
    if (!stranger) {
      socket::StreamHello hello{socket::kHelloMagic, h.token, s, h.streams};
      sendBytes(fd, &hello, sizeof(hello));
    }
    if (s == 0) sendBytes(fd, data, size);
    shutdown(fd, SHUT_WR);
  }
  // Drain until the connection ends (every stream closed, or failed); bounded, in
  // case a stranger's connection never becomes one.
  uint64_t sum = 0;
  for (int i = 0; i < (stranger ? 200 : 2000000) && !conn->peerAborted(); ++i) {
    size_t bytes = 0;
    const void* msg = conn->tryData(&bytes);
    if (!msg) continue;
    if (bytes > kSlotBytes) __builtin_trap();
    const unsigned char* p = static_cast<const unsigned char*>(msg);
    for (size_t k = 0; k < bytes; ++k) sum += p[k];  // ASan: reads the whole message
    conn->release();
  }
  if (!stranger && !conn->peerAborted()) __builtin_trap();  // closed streams must end the connection
  for (int fd : fds) close(fd);
  return static_cast<int>(sum & 0);
}
