#include <algorithm>
#include <atomic>
#include <cstring>

#include "algorithms/one_shot/one_shot_task.h"
#include "base/error.h"
#include "device/dtypes.h"

namespace strata::algorithms::one_shot {
namespace {

inline uint64_t loadWord(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
inline void storeWord(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

// One-shot collectives over the LL protocol: each 8-byte word carries 4 bytes of data
// and the round number, so a receiver polls the data itself, with no separate head,
// tail or size to fetch. Each word is written and read with one 8-byte store or load,
// which x86-64 and AArch64 make atomic, so a word whose flag matches holds valid data.
// Slots alternate by round parity: a rank writes round r+1 only after it has finished
// round r, which means every peer has sent round r and so has finished reading round
// r-1, the slot's previous contents. That holds only if every rank hears from every
// peer each round, so a rank with nothing for a peer (a broadcast's non-root, a
// reduce's ranks to each other) still sends it one word.
class LlOneShotTask final : public Task {
 public:
  LlOneShotTask(OneShotArgs a, LlMesh* ll)
      : a_(std::move(a)), x_(a_.x), ll_(*ll), got_(ll->got), inputs_(ll->inputs) {
    chunk_ = std::max<size_t>(1, kLlWordsPerSlot * 4 / x_.es);
    rearm();
  }

  // Its state is the chunk it is at; the mesh's rounds go on from call to call.
  bool reusable() const override { return true; }
  void rearm() override {
    chunkIndex_ = 0;
    sent_ = false;
    blocked_ = Blocker();
    got_.assign(x_.n, 0);  // no allocation after the first call: the mesh keeps them
    inputs_.assign(x_.n, nullptr);
  }

  bool progress() override {
    bool moved = false;
    while (!done()) {
      size_t begin = chunkIndex_ * chunk_;
      size_t count = std::min(chunk_, x_.count - begin);
      size_t words = (count * x_.es + 3) / 4;
      uint64_t round = ll_.round + 1;
      if (!sent_) {
        sendAll(begin, count, words, round);
        moved = true;
      }
      if (!receiveAll(words, round)) break;
      x_.finish(a_.recvbuff, inputs_.data(), begin, count, a_.type, a_.op);
      ll_.round = round;
      std::fill(got_.begin(), got_.end(), 0);
      sent_ = false;
      ++chunkIndex_;
      moved = true;
    }
    return moved;
  }
  bool done() const override { return chunkIndex_ * chunk_ >= x_.count; }
  int waitingOn() const override { return blocked_.peer; }
  const char* fn() const override { return a_.fn; }
  // LL waits only for words from peers; the mesh FIFO from the peer carries its abort flag.
  bool peerAborted() const override { return blocked_.aborted(); }
  std::string connectionFailure() const override { return blocked_.failure(); }

 private:
  char* staging(int j) { return ll_.staging.data() + j * kLlWordsPerSlot * 4; }
  char* outgoing() { return staging(x_.n); }
  size_t slotOffset(uint64_t round) const { return (round & 1) * kLlWordsPerSlot; }
  // Words rank `from` sends rank `to` this round: the chunk, or one word to keep the rounds.
  size_t wordsFor(int from, int to, size_t words) const {
    Exchange pair = x_;
    pair.rank = from;
    return pair.sendsTo(to) ? words : 1;
  }

  // This rank's contribution for `to` (prepared for reductions) in `into`.
  void stage(char* into, int to, size_t begin, size_t count) {
    const char* src = x_.source(a_.sendbuff, to, begin);
    if (x_.reduces())
      device::prepare(into, src, count, a_.type, a_.op);
    else
      memcpy(into, src, count * x_.es);
  }

  void sendAll(size_t begin, size_t count, size_t words, uint64_t round) {
    if (x_.keepsOwn()) {
      stage(staging(x_.rank), x_.rank, begin, count);
      inputs_[x_.rank] = staging(x_.rank);
    }
    uint64_t flag = static_cast<uint64_t>(static_cast<uint32_t>(round)) << 32;
    for (int k = 1; k < x_.n; ++k) {
      int j = (x_.rank + k) % x_.n;
      char* data = outgoing();
      if (x_.sendsTo(j)) stage(data, j, begin, count);
      else memset(data, 0, 4);
      uint64_t* dst = ll_.out[j] + slotOffset(round);
      for (size_t i = 0, w = wordsFor(x_.rank, j, words); i < w; ++i) {
        uint32_t v = 0;
        memcpy(&v, data + 4 * i, std::min<size_t>(4, count * x_.es - std::min(count * x_.es, 4 * i)));
        storeWord(dst + i, flag | v);
      }
      ll_.outBells[j]->ring();
    }
    sent_ = true;
  }

  bool receiveAll(size_t words, uint64_t round) {
    uint32_t flag = static_cast<uint32_t>(round);
    bool all = true;
    for (int j = 0; j < x_.n; ++j) {
      if (j == x_.rank) continue;
      const uint64_t* src = ll_.in[j] + slotOffset(round);
      char* into = staging(j);
      size_t& got = got_[j];
      size_t want = wordsFor(j, x_.rank, words);
      for (; got < want; ++got) {
        uint64_t w = loadWord(src + got);
        if (static_cast<uint32_t>(w >> 32) != flag) break;
        uint32_t v = static_cast<uint32_t>(w);
        memcpy(into + 4 * got, &v, 4);
      }
      if (got < want) {
        blocked_.on(j, (*a_.from)[j]);
        all = false;
      } else if (x_.getsFrom(j)) {
        inputs_[j] = into;
      }
    }
    return all;
  }

  OneShotArgs a_;
  const Exchange& x_;
  LlMesh& ll_;
  size_t chunk_ = 0;
  size_t chunkIndex_ = 0;
  bool sent_ = false;
  std::vector<size_t>& got_;           // the mesh's: words received from each rank this round
  std::vector<const void*>& inputs_;  // the mesh's: every rank's staged contribution, by rank
  Blocker blocked_;
};

}  // namespace

std::unique_ptr<Task> makeLlOneShotTask(OneShotArgs args, LlMesh* ll) {
  return std::make_unique<LlOneShotTask>(std::move(args), ll);
}

}  // namespace strata::algorithms::one_shot
