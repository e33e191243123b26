#include "core/post_office.h"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "base/clock.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "core/wire.h"

namespace strata::core {
namespace {

std::string refusedText(const SockAddr& root) {
  return format("the bootstrap root at %s refused this rank: its unique id does not match the one the root issued "
                "(stale or corrupted ncclUniqueId?)",
                root.str().c_str());
}

}  // namespace

bool MsgKey::operator<(const MsgKey& o) const {
  return std::tie(magic, kind, src, dst, seq) < std::tie(o.magic, o.kind, o.src, o.dst, o.seq);
}

// A thread waiting in receive (one key) or receiveAny (a magic and kind): a message
// filed wakes its own waiters only, so a process with thousands of ranks waiting
// does not wake them all for each message.
// `signaled` (under the mutex) keeps a wake that comes while the waiter runs its
// check with the mutex released: it then does not sleep through it.
struct Waiter {
  std::condition_variable cv;
  bool signaled = false;
  void wake() {
    signaled = true;
    cv.notify_one();
  }
};

// A waiter's entry in a wait list for as long as it waits; removed with the mutex
// held, which a check that threw (run with the mutex released) no longer holds.
template <typename List>
struct Listed {
  std::unique_lock<std::mutex>& lock;
  List& list;
  typename List::iterator at;
  ~Listed() {
    if (!lock.owns_lock()) lock.lock();
    list.erase(at);
  }
};

struct PostOffice::State {
  std::mutex mutex;
  std::map<MsgKey, std::deque<std::string>> mailbox;
  std::multimap<MsgKey, Waiter*> waiting;                                // receive
  std::multimap<std::pair<uint64_t, MsgKind>, Waiter*> waitingAny;  // receiveAny
  std::set<uint64_t> roots;
  std::atomic<bool> listening{false};  // started; addr is set for good (read without the mutex)
  int listenFd = -1;
  int wakePipe[2] = {-1, -1};
  SockAddr addr;
  std::mutex sendMutex;
  std::map<SockAddr, int> outgoing;  // cached connections, by destination

  void start();
  void serve();
  bool deliver(int fd, FrameReader& in);
  bool accepts(const MsgKey& key);                       // with mutex held
  void file(const MsgKey& key, std::string payload);     // with mutex held
  bool local(const SockAddr& to);                        // this process's own office
  void wakeAll();                                        // with mutex held
  void pruneClosed();  // with sendMutex held
};

namespace {
PostOffice::State* gState = nullptr;
}

PostOffice& PostOffice::instance() {
  static PostOffice office;
  static std::once_flag once;
  std::call_once(once, [] {
    gState = new PostOffice::State();
    // A forked child has none of the parent's threads: give it a fresh, unstarted office.
    pthread_atfork(nullptr, nullptr, [] {
      if (gState) {
        if (gState->listenFd >= 0) close(gState->listenFd);
        for (auto& [addr, fd] : gState->outgoing) close(fd);
      }
      gState = new PostOffice::State();  // the old one's mutexes may be held: leave it
    });
  });
  return office;
}

PostOffice::State& PostOffice::state() { return *gState; }

void PostOffice::State::start() {
  std::string ifname;
  addr = chooseInterfaceAddress(config().socketIfname, &ifname);
  listenFd = listenOn(&addr);
  if (pipe(wakePipe) != 0) failErrno("pipe");
  STRATA_INFO(kSubsysBootstrap, -1, "Bootstrap: listening on %s (%s)", addr.str().c_str(), ifname.c_str());
  std::thread([this] { serve(); }).detach();
  listening.store(true, std::memory_order_release);
}

namespace {

// Reads what is there; false when the connection is finished (closed, reset, or
// sent something no rank sends). Stops at the end of a complete message.
bool readSome(int fd, FrameReader& in) {
  while (!in.complete()) {
    auto [at, room] = in.space();
    if (!at) return false;
    ssize_t n = recv(fd, at, room, 0);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    in.commit(static_cast<size_t>(n));
    in.lastByte = nowSec();
  }
  return true;
}

}  // namespace

// Accepts connections and files every complete message under its key.
void PostOffice::State::serve() {
  std::map<int, FrameReader> conns;
  for (;;) {
    std::vector<pollfd> fds{{listenFd, POLLIN, 0}};
    for (auto& [c, in] : conns) fds.push_back({c, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 1000) < 0) continue;
    if (fds[0].revents & POLLIN) {
      int c = accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0) conns[c].lastByte = nowSec();
    }
    double now = nowSec();
    for (size_t i = 1; i < fds.size(); ++i) {
      int c = fds[i].fd;
      FrameReader& in = conns[c];
      bool open = true;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        open = readSome(c, in);
        if (open && in.complete()) {
          open = deliver(c, in);
          in.lastByte = now;
        }
      }
      bool stalled = in.started() && now - in.lastByte > config().timeoutSec;  // mid-message, silent
      if (!open || stalled) {
        close(c);
        conns.erase(c);
      }
    }
  }
}

// Acknowledges and files one complete message; false when the connection should close.
bool PostOffice::State::deliver(int fd, FrameReader& in) {
  const WireHeader& h = in.header();
  MsgKey key{h.magic, static_cast<MsgKind>(h.kind), h.src, h.dst, h.seq};
  char ack;
  {
    std::lock_guard<std::mutex> lock(mutex);
    ack = accepts(key) ? 1 : 0;
  }
  // Acknowledge before filing: once filed, the receiving rank may finish and exit
  // at once, and an exit with the ack unsent would reset the connection. A sender
  // waits for the ack before its next message, so one byte always fits.
  if (::send(fd, &ack, 1, MSG_NOSIGNAL) != 1) return false;
  if (!ack) {
    STRATA_WARN(-1, "Bootstrap: refused a rank whose unique id magic %016llx is not one this process issued",
                static_cast<unsigned long long>(key.magic));
    in.takePayload();  // dropped; the reader starts over
    return true;
  }
  std::lock_guard<std::mutex> lock(mutex);
  file(key, in.takePayload());
  return true;
}

bool PostOffice::State::accepts(const MsgKey& key) { return key.kind != MsgKind::kRootHello || roots.count(key.magic); }

void PostOffice::State::file(const MsgKey& key, std::string payload) {
  mailbox[key].push_back(std::move(payload));
  if (key.kind == MsgKind::kFailure) {
    // Every wait of the addressed rank reads these in its check: its waits wake (a
    // note for a child communicator's kin is found by their next poll). Only that
    // rank's, so a failure told to n ranks wakes n waits, not n squared.
    auto first = waiting.lower_bound(MsgKey{key.magic, MsgKind::kRootHello, INT32_MIN, INT32_MIN, 0});
    for (auto it = first; it != waiting.end() && it->first.magic == key.magic; ++it)
      if (it->first.dst == key.dst) it->second->wake();
    return;
  }
  auto [from, to] = waiting.equal_range(key);
  for (auto it = from; it != to; ++it) it->second->wake();
  auto [anyFrom, anyTo] = waitingAny.equal_range({key.magic, key.kind});
  for (auto it = anyFrom; it != anyTo; ++it) it->second->wake();
}

void PostOffice::State::wakeAll() {
  for (auto& [key, w] : waiting) w->wake();
  for (auto& [key, w] : waitingAny) w->wake();
}

void PostOffice::wakeAll() {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().wakeAll();
}

bool PostOffice::State::local(const SockAddr& to) {
  return listening.load(std::memory_order_acquire) && !(to < addr) && !(addr < to);
}

SockAddr PostOffice::address() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.listening.load()) s.start();
  return s.addr;
}

void PostOffice::openRoot(uint64_t magic) {
  address();
  std::lock_guard<std::mutex> lock(state().mutex);
  state().roots.insert(magic);
}

void PostOffice::closeRoot(uint64_t magic) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().roots.erase(magic);
}

void PostOffice::send(const SockAddr& to, const MsgKey& key, const std::string& payload, const Deadline& deadline) {
  State& s = state();
  if (s.local(to)) {  // a rank of this process: filed at once, as the listener would
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.accepts(key)) fail(ncclInvalidArgument, "%s", refusedText(to).c_str());
    s.file(key, payload);
    return;
  }
  std::lock_guard<std::mutex> lock(s.sendMutex);
  s.pruneClosed();
  WireHeader h{key.magic, static_cast<uint32_t>(key.kind), key.src, key.dst, key.seq, payload.size()};
  for (int attempt = 0;; ++attempt) {
    auto it = s.outgoing.find(to);
    // Every address a rank sends to is a post office that was listening before the
    // address was handed out (in the unique id or the rendezvous table): refused means gone.
    if (it == s.outgoing.end()) it = s.outgoing.emplace(to, connectTo(to, deadline, false)).first;
    try {
      sendAll(it->second, &h, sizeof(h), deadline);
      sendAll(it->second, payload.data(), payload.size(), deadline);
      char ack = 0;
      recvAll(it->second, &ack, 1, deadline);
      if (!ack) fail(ncclInvalidArgument, "%s", refusedText(to).c_str());
      return;
    } catch (const Error& e) {
      close(it->second);
      s.outgoing.erase(it);
      // A cached connection may have been closed by a peer that restarted its listener; retry once fresh.
      if (attempt > 0 || e.code() == ncclInvalidArgument) throw;
    }
  }
}

namespace {

// Nothing arrives on a cached connection between a send's acknowledgements: anything
// readable now is its end (the process exited and its kernel closed the socket).
bool closedByPeer(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace

bool PostOffice::peerGone(const SockAddr& to) {
  State& s = state();
  if (s.local(to)) return false;  // this process
  std::unique_lock<std::mutex> lock(s.sendMutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // a send is under way: it will find out itself
  auto it = s.outgoing.find(to);
  return it != s.outgoing.end() && closedByPeer(it->second);
}

// Connections to processes that have exited (peers come and go over a long job):
// closed at the next send, so the cache holds no more than the live peers.
void PostOffice::State::pruneClosed() {
  for (auto it = outgoing.begin(); it != outgoing.end();) {
    if (!closedByPeer(it->second)) {
      ++it;
      continue;
    }
    close(it->second);
    it = outgoing.erase(it);
  }
}

std::string PostOffice::receive(const MsgKey& key, const Deadline& deadline, const WaitCheck& check) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  Waiter self;
  Listed<decltype(s.waiting)> listed{lock, s.waiting, s.waiting.emplace(key, &self)};
  for (;;) {
    self.signaled = false;  // what is filed from here on wakes the wait below
    auto it = s.mailbox.find(key);
    if (it != s.mailbox.end() && !it->second.empty()) {
      std::string msg = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) s.mailbox.erase(it);
      return msg;
    }
    if (deadline.expired()) fail(ncclSystemError, "timed out");
    if (check) {
      lock.unlock();
      check();
      lock.lock();
    }
    // An abort, a stop or a failure note wakes this wait (wakeAll) and its check
    // throws at once; what nothing announces (a peer process that exited) is looked
    // for every 100 ms. Thousands of ranks of one process polling every 20 ms spent
    // most of their initialisation waking each other through this mutex.
    self.cv.wait_for(lock, std::chrono::milliseconds(deadline.remainingMs(100)), [&] { return self.signaled; });
  }
}

namespace {

// The first mailbox entry of this magic and kind (keys sort by magic, kind, source).
template <typename Mailbox>
auto firstOf(Mailbox& box, uint64_t magic, MsgKind kind) {
  return box.lower_bound(MsgKey{magic, kind, INT32_MIN, INT32_MIN, 0});
}

}  // namespace

bool PostOffice::tryTake(uint64_t magic, MsgKind kind, int dst, std::string* msg, int* src) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (auto it = firstOf(s.mailbox, magic, kind); it != s.mailbox.end(); ++it) {
    if (it->first.magic != magic || it->first.kind != kind) break;
    if (it->first.dst != dst || it->second.empty()) continue;
    *msg = std::move(it->second.front());
    if (src) *src = it->first.src;
    it->second.pop_front();
    if (it->second.empty()) s.mailbox.erase(it);
    return true;
  }
  return false;
}

std::string PostOffice::receiveAny(MsgKey* key, const Deadline& deadline) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  Waiter self;
  Listed<decltype(s.waitingAny)> listed{lock, s.waitingAny,
                                        s.waitingAny.emplace(std::make_pair(key->magic, key->kind), &self)};
  for (;;) {
    self.signaled = false;
    for (auto it = firstOf(s.mailbox, key->magic, key->kind); it != s.mailbox.end(); ++it) {
      if (it->first.magic != key->magic || it->first.kind != key->kind) break;
      if (it->second.empty()) continue;
      *key = it->first;
      std::string msg = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) s.mailbox.erase(it);
      return msg;
    }
    if (deadline.expired()) fail(ncclSystemError, "timed out");
    self.cv.wait_for(lock, std::chrono::milliseconds(deadline.remainingMs(100)), [&] { return self.signaled; });
  }
}

void PostOffice::discard(uint64_t magic, int rank) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (auto it = s.mailbox.begin(); it != s.mailbox.end();)
    it = (it->first.magic == magic && it->first.dst == rank) ? s.mailbox.erase(it) : std::next(it);
}

}  // namespace strata::core
