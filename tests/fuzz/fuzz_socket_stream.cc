// What reaches the TCP network's data port: a connection from anywhere.
// Mode 0: any bytes from a stranger (the listener must drop what is not a
// hello, without crashing or handing it to a connection). Mode 1: a valid
// hello with the connection's token, then any bytes as the message stream
// (16-byte headers and payloads) into receives of 4 KiB: the receiving end must
// deliver only messages that fit and carry the header, or fail the connection;
// never write past a receive, never hang.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/socket.h"
#include "transports/socket/data_listener.h"
#include "transports/socket/socket_network.h"

namespace {

using namespace strata;
using namespace strata::transport;

constexpr size_t kRecvBytes = 4096;

// The listen handle's leading fields (socket_network.cc).
struct HandleHead {
  uint64_t magic;
  SockAddr addr;
  uint64_t token;
  uint32_t streams;
};

void sendBytes(int fd, const void* p, size_t n) {
  try {
    sendAll(fd, p, n, Deadline(5));
  } catch (const Error&) {  // the receiver may already have given up on this stream
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static net::Network* network = [] {
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
    return socket::socketNetwork();
  }();
  bool stranger = data[0] % 2 == 0;
  ++data;
  --size;
  char raw[net::kHandleBytes] = {};
  void* listenComm = network->listen(0, raw);
  HandleHead h;
  memcpy(static_cast<void*>(&h), raw, sizeof(h));
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
  // Receive until the connection ends (every stream closed, or failed); bounded, in
  // case a stranger's connection never becomes one.
  void* comm = nullptr;
  for (int i = 0; i < (stranger ? 200 : 2000000) && !comm; ++i) comm = network->accept(listenComm);
  if (!stranger && !comm) __builtin_trap();  // a valid hello on every stream makes a connection
  uint64_t sum = 0;
  bool ended = false;
  std::vector<unsigned char> buf(kRecvBytes + 64, 0xa5);  // 64 guard bytes after the receive
  for (int i = 0; comm && i < 2000000 && !ended; ++i) {
    void* r = network->irecv(comm, buf.data(), kRecvBytes, 0, nullptr);
    if (!r) __builtin_trap();  // one receive in flight at a time: there is always room
    size_t bytes = 0;
    try {
      while (!network->test(r, &bytes)) {
      }
    } catch (const Error&) {
      ended = true;  // failed, or closed by the peer
      break;
    }
    if (bytes > kRecvBytes) __builtin_trap();
    for (size_t k = 0; k < bytes; ++k) sum += buf[k];  // ASan: reads the whole message
    for (size_t k = kRecvBytes; k < buf.size(); ++k)
      if (buf[k] != 0xa5) __builtin_trap();
  }
  if (comm && !ended) __builtin_trap();  // closed streams must end the connection
  if (comm) network->closeRecv(comm);
  network->closeListen(listenComm);
  for (int fd : fds) close(fd);
  return static_cast<int>(sum & 0);
}
