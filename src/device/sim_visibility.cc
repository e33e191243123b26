#include "device/sim_visibility.h"

#include "device/sim_barrier.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace strata::device::sim::visibility {
namespace {

struct Record {
  uint64_t seq;
  char* dst;
  std::vector<char> old;
};

struct Log {
  std::mutex mutex;
  uint64_t seq = 0;
  std::deque<Record> records;  // oldest first
  size_t bytes = 0;
  std::unordered_map<const uint64_t*, uint64_t> releases;
  std::unordered_set<Reader*> readers;

  // Under the lock: drops the records every reader's epoch already covers.
  void trim() {
    if (readers.empty()) {  // a reader that joins later starts at `seq`
      records.clear();
      releases.clear();
      bytes = 0;
      return;
    }
    uint64_t oldest = seq;
    for (const Reader* r : readers) oldest = std::min(oldest, r->epoch);
    while (!records.empty() && records.front().seq <= oldest) {
      bytes -= records.front().old.size();
      records.pop_front();
    }
  }
};

Log& log() {
  static Log* l = new Log;  // never destroyed: kernels' threads may outlive statics
  return *l;
}

}  // namespace

void join(Reader* r) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  r->epoch = l.seq;
  l.readers.insert(r);
}

void leave(Reader* r) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.readers.erase(r);
  l.trim();
}

void land(char* dst, const char* src, size_t bytes) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.records.push_back({++l.seq, dst, std::vector<char>(dst, dst + bytes)});
  l.bytes += bytes;
  memcpy(dst, src, bytes);
  if (l.records.size() % 64 == 0) l.trim();
}

void released(const uint64_t* word) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.releases[word] = l.seq;
}

void acquired(Reader* r, const uint64_t* word, uint64_t value) {
  if (word == r->lastWord && value == r->lastValue) return;
  r->lastWord = word;
  r->lastValue = value;
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  auto it = l.releases.find(word);
  if (it != l.releases.end()) r->epoch = std::max(r->epoch, it->second);
}

void raise(Reader* r, uint64_t epoch) {
  if (epoch <= r->epoch) return;
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  r->epoch = std::max(r->epoch, epoch);
}

void read(char* to, const char* src, size_t bytes, const Reader& r) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  memcpy(to, src, bytes);
  const char* end = src + bytes;
  for (auto it = l.records.rbegin(); it != l.records.rend() && it->seq > r.epoch; ++it) {
    const char* lo = std::max<const char*>(src, it->dst);
    const char* hi = std::min<const char*>(end, it->dst + it->old.size());
    if (lo < hi) memcpy(to + (lo - src), it->old.data() + (lo - it->dst), static_cast<size_t>(hi - lo));
  }
}

void HeldStores::hold(char* dst, const void* src, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* from = static_cast<const char*>(src);
  held_.push_back(Held{dst, std::vector<char>(from, from + bytes)});
}

void HeldStores::publish(bool logged) {
  constexpr size_t kPiece = 4096;
  std::lock_guard<std::mutex> lock(mutex_);
  struct Piece {
    char* dst;
    const char* src;
    size_t bytes;
  };
  std::vector<Piece> pieces;
  for (const Held& h : held_)
    for (size_t at = 0; at < h.bytes.size(); at += kPiece)
      pieces.push_back({h.dst + at, h.bytes.data() + at, std::min(kPiece, h.bytes.size() - at)});
  for (size_t i = pieces.size(); i > 1; --i) {  // Fisher-Yates
    std::swap(pieces[i - 1], pieces[xorshift(&rng_) % i]);
  }
  for (const Piece& p : pieces) {
    if (logged) land(p.dst, p.src, p.bytes);
    else memcpy(p.dst, p.src, p.bytes);
  }
  held_.clear();
}

size_t recordedBytes() {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  return l.bytes;
}

}  // namespace strata::device::sim::visibility
