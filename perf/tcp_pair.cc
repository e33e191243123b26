// What a plain TCP connection reaches between two hosts (or namespaces): the
// baseline the socket transport is measured against. One process listens, the
// other connects; both then send `bytes` and, with --bidir, receive as much at
// the same time (as a 2-rank all-reduce does), one stream each way.
//
//   tcp_pair --listen PORT [--bytes N] [--bidir]
//   tcp_pair --connect IP:PORT [--bytes N] [--bidir]
// Prints "tcp_pair sent_gbps X recv_gbps Y" (GB/s, 1e9 bytes) on each side.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
  perror(what);
  exit(1);
}

int openConnection(const std::string& listen, const std::string& connectTo) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  int one = 1;
  if (!listen.empty()) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    a.sin_port = htons(static_cast<uint16_t>(atoi(listen.c_str())));
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 1) != 0) die("bind/listen");
    int c = accept(fd, nullptr, nullptr);
    if (c < 0) die("accept");
    close(fd);
    fd = c;
  } else {
    size_t colon = connectTo.rfind(':');
    a.sin_port = htons(static_cast<uint16_t>(atoi(connectTo.c_str() + colon + 1)));
    inet_pton(AF_INET, connectTo.substr(0, colon).c_str(), &a.sin_addr);
    for (int tries = 0; connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0; ++tries) {
      if (tries > 200) die("connect");
      usleep(50000);
    }
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

double sendAll(int fd, size_t bytes) {
  std::vector<char> buf(1 << 20, 1);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t done = 0; done < bytes;) {
    ssize_t n = send(fd, buf.data(), std::min(buf.size(), bytes - done), 0);
    if (n <= 0) die("send");
    done += static_cast<size_t>(n);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double recvAll(int fd, size_t bytes) {
  std::vector<char> buf(1 << 20);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t done = 0; done < bytes;) {
    ssize_t n = recv(fd, buf.data(), std::min(buf.size(), bytes - done), 0);
    if (n <= 0) die("recv");
    done += static_cast<size_t>(n);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen, connectTo;
  size_t bytes = size_t{1} << 30;
  bool bidir = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--listen" && i + 1 < argc) listen = argv[++i];
    else if (a == "--connect" && i + 1 < argc) connectTo = argv[++i];
    else if (a == "--bytes" && i + 1 < argc) bytes = strtoull(argv[++i], nullptr, 0);
    else if (a == "--bidir") bidir = true;
    else {
      fprintf(stderr, "usage: tcp_pair --listen PORT | --connect IP:PORT [--bytes N] [--bidir]\n");
      return 2;
    }
  }
  if (listen.empty() == connectTo.empty()) {
    fprintf(stderr, "tcp_pair: give exactly one of --listen and --connect\n");
    return 2;
  }
  int fd = openConnection(listen, connectTo);
  // The listener receives in the one-way test; both directions run at once with --bidir.
  double sent = 0, got = 0;
  bool sends = bidir || !connectTo.empty(), receives = bidir || !listen.empty();
  std::thread receiver([&] { if (receives) got = recvAll(fd, bytes); });
  if (sends) sent = sendAll(fd, bytes);
  receiver.join();
  char done = 0;  // both sides finish before either closes
  if (write(fd, &done, 1) != 1 || read(fd, &done, 1) != 1) die("final handshake");
  printf("tcp_pair sent_gbps %.3f recv_gbps %.3f\n", sent > 0 ? bytes / sent / 1e9 : 0.0,
         got > 0 ? bytes / got / 1e9 : 0.0);
  close(fd);
  return 0;
}
