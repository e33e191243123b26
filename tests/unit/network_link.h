// A connected pair over any Network (transports/net/network.h), in one process:
// listen, connect and accept polled to completion, as the net transport does.
#pragma once

#include <chrono>
#include <cstddef>

#include "transports/net/network.h"

namespace strata::transport::net {

struct Link {
  Network* net;
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  explicit Link(Network* n) : net(n) {
    if (!net) return;
    char handle[kHandleBytes] = {};
    listen = net->listen(0, handle);
    for (int i = 0; i < 100000 && !(send && recv); ++i) {
      if (!send) send = net->connect(0, handle);
      if (!recv) recv = net->accept(listen);
    }
  }
  ~Link() {
    if (send) net->closeSend(send);
    if (recv) net->closeRecv(recv);
    if (listen) net->closeListen(listen);
  }
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  // isend until the network takes it (null after `seconds`).
  void* post(void* data, size_t bytes, int tag, void* mh, double seconds = 5) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    void* s = nullptr;
    while (!s && std::chrono::steady_clock::now() < end) s = net->isend(this->send, data, bytes, tag, mh);
    return s;
  }
  bool wait(void* req, size_t* bytes, double seconds = 5) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end)
      if (net->test(req, bytes)) return true;
    return false;
  }
};

}  // namespace strata::transport::net
