#include "core/bootstrap.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "base/clock.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"

namespace strata::core {
namespace {

constexpr uint32_t kUniqueIdTag = 0x53545241;  // "STRA"

uint64_t randomMagic() {
  std::random_device rd;
  uint64_t m = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return m ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

// "rank 2" or "ranks 2,3" (at most 16 named).
std::string describeMissing(const std::vector<bool>& arrived) {
  std::string s;
  int shown = 0;
  for (size_t r = 0; r < arrived.size(); ++r) {
    if (arrived[r]) continue;
    if (shown++ >= 16) continue;
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  if (shown > 16) s += format(" and %d more", shown - 16);
  return (shown == 1 ? "rank " : "ranks ") + s;
}

// Collects hellos until `expected` ranks have arrived (or the deadline passes).
struct Collection {
  HelloHeader first{};
  std::vector<PeerInfo> table;
  std::vector<bool> arrived;
  int count = 0;
  std::string error;
};

void collect(uint64_t magic, Collection* c) {
  PostOffice& po = PostOffice::instance();
  Deadline deadline(config().timeoutSec);
  while (c->count == 0 || c->count < c->first.expected) {
    MsgKey key{magic, MsgKind::kRootHello};
    std::string msg;
    try {
      msg = po.receiveAny(&key, deadline);
    } catch (const Error&) {
      c->error = format("bootstrap timed out after %.0f s: %s never reached the root (STRATA_TIMEOUT)",
                        config().timeoutSec, describeMissing(c->arrived).c_str());
      return;
    }
    HelloHeader h;
    auto entries = unpackPeers(msg, &h);
    if (c->count == 0) {
      c->first = h;
      c->table.resize(h.nranks);
      c->arrived.assign(h.nranks, false);
    }
    if (h.nranks != c->first.nranks) {
      c->error = format("ranks disagree on the communicator size (%d and %d)", c->first.nranks, h.nranks);
      return;
    }
    for (const PeerInfo& p : entries) {
      if (p.rank < 0 || p.rank >= h.nranks || c->arrived[p.rank]) {
        c->error = format("rank %d reached the bootstrap root twice or is out of range [0, %d)", p.rank, h.nranks);
        return;
      }
      c->table[p.rank] = p;
      c->arrived[p.rank] = true;
      ++c->count;
    }
  }
}

// One root thread. The first root (or the only one) answers every rank with the
// full table; other roots of a scalable init forward their ranks to the first.
void runRoot(uint64_t magic) {
  PostOffice& po = PostOffice::instance();
  Collection c;
  try {
    collect(magic, &c);
  } catch (const Error& e) {
    c.error = e.what();
  }
  po.closeRoot(magic);
  std::vector<PeerInfo> collected;
  for (size_t r = 0; r < c.arrived.size(); ++r)
    if (c.arrived[r]) collected.push_back(c.table[r]);
  if (c.error.empty() && c.first.forward) {
    HelloHeader h = c.first;
    h.expected = h.nranks;
    h.forward = 0;
    try {
      po.send(h.firstRoot, MsgKey{h.firstMagic, MsgKind::kRootHello, -1, -1, 0}, packPeers(h, collected),
              Deadline(config().timeoutSec));
      return;
    } catch (const Error& e) {
      c.error = format("could not forward ranks to the first root at %s: %s", h.firstRoot.str().c_str(), e.what());
    }
  }
  uint64_t replyMagic = c.first.forward ? c.first.firstMagic : magic;
  std::string reply(1, c.error.empty() ? 'T' : 'E');
  reply += c.error.empty() ? packPeers(c.first, c.table) : c.error;
  if (!c.error.empty()) STRATA_WARN(-1, "Bootstrap root: %s", c.error.c_str());
  // Ranks in this process last: one that gets an error may end the process, and the root thread with it.
  SockAddr here = po.address();
  std::stable_partition(collected.begin(), collected.end(), [&](const PeerInfo& p) { return p.listenAddr < here || here < p.listenAddr; });
  for (const PeerInfo& p : collected) {
    try {
      po.send(p.listenAddr, MsgKey{replyMagic, MsgKind::kRootTable, -1, p.rank, 0}, reply, Deadline(10));
    } catch (const Error& e) {
      STRATA_WARN(-1, "Bootstrap root: could not answer rank %d at %s: %s", p.rank, p.listenAddr.str().c_str(),
                  e.what());
    }
  }
}

}  // namespace

std::string packPeers(HelloHeader h, const std::vector<PeerInfo>& peers) {
  h.entries = static_cast<int32_t>(peers.size());
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  if (!peers.empty()) out.append(reinterpret_cast<const char*>(peers.data()), peers.size() * sizeof(PeerInfo));
  return out;
}

std::vector<PeerInfo> unpackPeers(const std::string& msg, HelloHeader* h) {
  STRATA_REQUIRE(msg.size() >= sizeof(*h), ncclRemoteError, "bootstrap: truncated hello (%zu bytes)", msg.size());
  memcpy(h, msg.data(), sizeof(*h));
  STRATA_REQUIRE(h->nranks > 0 && h->nranks <= kMaxRanks, ncclRemoteError,
                 "bootstrap: a hello for %d ranks (at most %d)", h->nranks, kMaxRanks);
  STRATA_REQUIRE(h->entries >= 0 && h->entries <= h->nranks && h->expected >= 0 && h->expected <= h->nranks &&
                     msg.size() == sizeof(*h) + static_cast<size_t>(h->entries) * sizeof(PeerInfo),
                 ncclRemoteError, "bootstrap: a hello of %zu bytes that does not hold %d of %d entries", msg.size(),
                 h->entries, h->nranks);
  std::vector<PeerInfo> peers(h->entries);
  if (!peers.empty())  // memcpy of nothing into an empty vector's null data() is undefined (found by fuzz_peer_table)
    memcpy(static_cast<void*>(peers.data()), msg.data() + sizeof(*h), peers.size() * sizeof(PeerInfo));
  for (PeerInfo& p : peers) {  // names from another process end inside their arrays, whatever it sent
    p.busId[sizeof p.busId - 1] = 0;
    p.hostname[sizeof p.hostname - 1] = 0;
    p.bellName[sizeof p.bellName - 1] = 0;
  }
  return peers;
}

ncclUniqueId createUniqueId() {
  UniqueIdLayout id{};
  id.tag = kUniqueIdTag;
  id.magic = randomMagic();
  PostOffice& po = PostOffice::instance();
  id.root = po.address();
  po.openRoot(id.magic);
  std::thread(runRoot, id.magic).detach();
  ncclUniqueId out;
  memset(&out, 0, sizeof(out));
  memcpy(out.internal, &id, sizeof(id));
  STRATA_INFO(kSubsysBootstrap, -1, "Bootstrap: unique id %016llx, root %s", static_cast<unsigned long long>(id.magic),
              id.root.str().c_str());
  return out;
}

UniqueIdLayout parseUniqueId(const ncclUniqueId& raw, int rank) {
  UniqueIdLayout id;
  memcpy(&id, raw.internal, sizeof(id));
  STRATA_REQUIRE(id.tag == kUniqueIdTag && id.root.len > 0, ncclInvalidArgument,
                 "rank %d: the ncclUniqueId was not made by ncclGetUniqueId of this library (uninitialised, "
                 "corrupted, or from another NCCL)",
                 rank);
  return id;
}

std::vector<PeerInfo> rendezvous(const std::vector<UniqueIdLayout>& ids, int nranks, const PeerInfo& self) {
  int nIds = static_cast<int>(ids.size());
  auto rootOf = [&](int r) { return static_cast<int>(static_cast<int64_t>(r) * nIds / nranks); };
  int mine = rootOf(self.rank);
  int count = 0;
  for (int r = 0; r < nranks; ++r) count += rootOf(r) == mine ? 1 : 0;
  const UniqueIdLayout& first = ids[0];
  HelloHeader h{nranks, 1, mine == 0 ? nranks : count, mine != 0, first.magic, first.root};
  PostOffice& po = PostOffice::instance();
  Deadline deadline(config().timeoutSec);
  try {
    po.send(ids[mine].root, MsgKey{ids[mine].magic, MsgKind::kRootHello, self.rank, -1, 0}, packPeers(h, {self}),
            deadline);
  } catch (const Error& e) {
    fail(e.code(), "rank %d: cannot reach the bootstrap root at %s (has the process that called ncclGetUniqueId "
         "exited?): %s", self.rank, ids[mine].root.str().c_str(), e.what());
  }
  // The root's process exiting closes the connection the hello went over: fail then, not at the deadline.
  WaitCheck rootAlive = [&] {
    for (int k : {0, mine})
      if (po.peerGone(ids[k].root))
        fail(ncclRemoteError, "rank %d: the bootstrap root at %s exited before it answered (the process that "
             "called ncclGetUniqueId died during init)", self.rank, ids[k].root.str().c_str());
  };
  std::string reply;
  try {
    // Wait a little longer than the root does, so that its report of missing ranks arrives first.
    reply = po.receive(MsgKey{first.magic, MsgKind::kRootTable, -1, self.rank, 0}, Deadline(config().timeoutSec + 5),
                       rootAlive);
  } catch (const Error& e) {
    if (e.code() != ncclSystemError) throw;
    fail(ncclSystemError,
         "rank %d: no answer from the bootstrap root at %s within %.0f s (STRATA_TIMEOUT); the root names the "
         "ranks that did not arrive in its log",
         self.rank, first.root.str().c_str(), config().timeoutSec);
  }
  STRATA_REQUIRE(!reply.empty() && reply[0] == 'T', ncclSystemError, "rank %d: bootstrap failed at the root: %s",
                 self.rank, reply.empty() ? "empty reply" : reply.c_str() + 1);
  HelloHeader got;
  auto table = unpackPeers(reply.substr(1), &got);
  STRATA_REQUIRE(got.nranks == nranks && static_cast<int>(table.size()) == nranks, ncclInternalError,
                 "rank %d: bootstrap table has %zu entries, expected %d", self.rank, table.size(), nranks);
  return table;
}

Bootstrap::Bootstrap(uint64_t magic, int rank, std::vector<SockAddr> addrs, WaitCheck check)
    : magic_(magic), rank_(rank), addrs_(std::move(addrs)), check_(std::move(check)) {}

WaitCheck Bootstrap::waitCheck() const {
  if (!stopEpoch_) return check_;
  uint64_t start = stopEpoch_->load();
  return [this, start] {
    if (check_) check_();
    if (stopEpoch_->load() != start)
      fail(ncclInvalidUsage, "rank %d: the communicator was stopped while it waited for its peers: %s", rank_,
           stopWhy_().c_str());
  };
}

void Bootstrap::send(int peer, MsgKind kind, uint64_t seq, const std::string& payload) {
  try {
    PostOffice::instance().send(addrs_[peer], MsgKey{magic_, kind, rank_, peer, seq}, payload,
                                Deadline(config().timeoutSec));
  } catch (const Error& e) {
    FailureNote note;
    if (takeFailure(&note, 0.1))  // it gave up (and said why) before it exited
      fail(ncclRemoteError, "rank %d: could not reach rank %d (%s), after: %s", rank_, peer, e.what(),
           note.why.c_str());
    // This rank is the first to know: the others (which may be waiting on this rank,
    // not on the one it could not reach) learn why before this rank goes away.
    std::string msg =
        format("rank %d: could not reach rank %d at %s: %s", rank_, peer, addrs_[peer].str().c_str(), e.what());
    tellFailure(msg, peer, 1.0);
    throw Error(e.code(), msg);
  }
}

bool Bootstrap::peerGone(int peer) const { return PostOffice::instance().peerGone(addrs_[peer]); }

void Bootstrap::checkAlive(int peer) {
  FailureNote note;  // the rank this one waits for (or one it waits for) gave up, and said why
  if (takeFailure(&note))
    fail(ncclRemoteError, "rank %d: stopped waiting for rank %d, after: %s", rank_, peer, note.why.c_str());
  // In an all-gather any member that exited dooms the exchange, not only the awaited
  // one (whose process this one may never have had a connection to): every 100 ms, all
  // of them. Point-to-point exchanges wait on their peer alone (others may be done).
  if (collective_ && !PostOffice::instance().peerGone(addrs_[peer]) && nowSec() >= nextMemberCheck_) {
    nextMemberCheck_ = nowSec() + 0.1;
    for (int r : otherProcesses())
      if (PostOffice::instance().peerGone(addrs_[r])) {
        peer = r;
        break;
      }
  }
  if (PostOffice::instance().peerGone(addrs_[peer])) {
    if (takeFailure(&note, 0.1))  // it gave up (and said why) before it exited
      fail(ncclRemoteError, "rank %d: rank %d exited while this rank waited for it, after: %s", rank_, peer,
           note.why.c_str());
    std::string msg = format("rank %d: rank %d (at %s) exited while this rank waited for it: its bootstrap "
                             "connection closed", rank_, peer, addrs_[peer].str().c_str());
    tellFailure(msg, peer, 1.0);
    throw Error(ncclRemoteError, msg);
  }
}

// Members share a process's post office (its address): one look per process, and
// none at this process, which is not gone while it looks.
const std::vector<int>& Bootstrap::otherProcesses() {
  if (otherProcessesKnown_) return otherProcesses_;
  SockAddr own = PostOffice::instance().address();
  std::set<SockAddr> seen{own};
  for (int r = 0; r < size(); ++r)
    if (seen.insert(addrs_[r]).second) otherProcesses_.push_back(r);
  otherProcessesKnown_ = true;
  return otherProcesses_;
}

std::string Bootstrap::recv(int peer, MsgKind kind, uint64_t seq, const WaitCheck& extra, double graceSec) {
  try {
    WaitCheck check = waitCheck();
    WaitCheck all = [&] {
      if (check) check();
      if (extra) extra();
      checkAlive(peer);
    };
    return PostOffice::instance().receive(MsgKey{magic_, kind, peer, rank_, seq},
                                          Deadline(config().timeoutSec + graceSec), all);
  } catch (const Error& e) {
    if (e.code() != ncclSystemError || strcmp(e.what(), "timed out") != 0) throw;
    std::string msg = format("rank %d: rank %d did not answer a bootstrap exchange within %.0f s (STRATA_TIMEOUT)",
                             rank_, peer, config().timeoutSec);
    tellFailure(msg, peer, 1.0);
    throw Error(ncclSystemError, msg);
  }
}

std::vector<std::string> Bootstrap::allGather(const std::string& mine) {
  uint64_t seq = ++collectiveSeq_;
  int n = size();
  if (n == 1) return {mine};
  struct Collective {
    bool& flag;
    explicit Collective(bool& f) : flag(f) { flag = true; }
    ~Collective() { flag = false; }
  } during(collective_);
  if (rank_ != 0) {
    send(0, MsgKind::kGather, seq, mine);
    return unpackBlobs(recv(0, MsgKind::kScatter, seq, {}, 2.0));
  }
  std::vector<std::string> all(n);
  all[0] = mine;
  Deadline deadline(config().timeoutSec);
  std::vector<bool> arrived(n, false);
  arrived[0] = true;
  WaitCheck check = waitCheck();
  for (int r = 1; r < n; ++r) {
    WaitCheck both = [&] {
      if (check) check();
      checkAlive(r);
    };
    try {
      all[r] = PostOffice::instance().receive(MsgKey{magic_, MsgKind::kGather, r, 0, seq}, deadline, both);
      arrived[r] = true;
    } catch (const Error& e) {
      if (strcmp(e.what(), "timed out") != 0) throw;
      for (int q = r + 1; q < n; ++q) {  // see who else is missing, without waiting further
        try {
          PostOffice::instance().receive(MsgKey{magic_, MsgKind::kGather, q, 0, seq}, Deadline(0));
          arrived[q] = true;
        } catch (const Error&) {
        }
      }
      std::string msg = format("rank 0: %s did not reach a bootstrap all-gather within %.0f s (STRATA_TIMEOUT)",
                               describeMissing(arrived).c_str(), config().timeoutSec);
      tellFailure(msg, r, 1.0);
      throw Error(ncclSystemError, msg);
    }
  }
  std::string packed = packBlobs(all);
  for (int r = 1; r < n; ++r)
    send(r, MsgKind::kScatter, seq, packed);  // on failure, send() tells the ranks still waiting why
  return all;
}

std::string packBlobs(const std::vector<std::string>& blobs) {
  std::string out;
  for (const std::string& b : blobs) {
    uint64_t len = b.size();
    out.append(reinterpret_cast<const char*>(&len), sizeof(len));
    out.append(b);
  }
  return out;
}

std::vector<std::string> unpackBlobs(const std::string& packed) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos + sizeof(uint64_t) <= packed.size()) {
    uint64_t len;
    memcpy(&len, packed.data() + pos, sizeof(len));
    pos += sizeof(len);
    STRATA_REQUIRE(pos + len <= packed.size(), ncclInternalError, "bootstrap: truncated blob list");
    out.push_back(packed.substr(pos, len));
    pos += len;
  }
  return out;
}

}  // namespace strata::core
