#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/error.h"
#include "algorithms/one_shot/one_shot_task.h"
#include "device/dtypes.h"

namespace strata::algorithms::one_shot {
namespace {

inline uint64_t loadWord(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
inline void storeWord(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

// One-shot all-reduce over the LL protocol: each 8-byte word carries 4 bytes
// of data and the round number, so a receiver polls the data itself, with no
// separate head, tail or size to fetch. Each word is written and read with one
// 8-byte store or load, which x86-64 and AArch64 make atomic, so a word whose
// flag matches holds valid data. Slots alternate by round parity: a rank writes
// round r+1 only after it has finished round r, which means every peer has sent
// round r and so has finished reading round r-1, the slot's previous contents.
class LlOneShotTask final : public Task {
 public:
  LlOneShotTask(OneShotArgs a, LlMesh* ll)
      : a_(std::move(a)), ll_(*ll), n_(static_cast<int>(ll->in.size())), esize_(device::dtypeSize(a_.type)),
        got_(ll->got), inputs_(ll->inputs) {
    chunk_ = std::max<size_t>(1, kLlWordsPerSlot * 4 / esize_);
    rearm();
  }

  // Its state is the chunk it is at; the mesh's rounds go on from call to call.
  bool reusable() const override { return true; }
  void rearm() override {
    chunkIndex_ = 0;
    sent_ = false;
    blocked_ = Blocker();
    got_.assign(n_, 0);  // no allocation after the first call: the mesh keeps them
    inputs_.resize(n_);
    for (int j = 0; j < n_; ++j) inputs_[j] = staging(j);
  }

  bool progress() override {
    bool moved = false;
    while (!done()) {
      size_t begin = chunkIndex_ * chunk_;
      size_t count = std::min(chunk_, a_.count - begin);
      size_t words = (count * esize_ + 3) / 4;
      uint64_t round = ll_.round + 1;
      if (!sent_) {
        sendAll(begin, count, words, round);
        moved = true;
      }
      if (!receiveAll(words, round)) break;
      device::reduceInOrder(a_.recvbuff + begin * esize_, inputs_.data(), n_, count, a_.type, a_.op);
      ll_.round = round;
      std::fill(got_.begin(), got_.end(), 0);
      sent_ = false;
      ++chunkIndex_;
      moved = true;
    }
    return moved;
  }
  bool done() const override { return chunkIndex_ * chunk_ >= a_.count; }
  int waitingOn() const override { return blocked_.peer; }
  const char* fn() const override { return a_.fn; }
  // LL waits only for words from peers; the mesh FIFO from the peer carries its abort flag.
  bool peerAborted() const override { return blocked_.aborted(); }

 private:
  char* staging(int j) { return ll_.staging.data() + j * kLlWordsPerSlot * 4; }
  size_t slotOffset(uint64_t round) const { return (round & 1) * kLlWordsPerSlot; }

  void sendAll(size_t begin, size_t count, size_t words, uint64_t round) {
    char* mine = staging(a_.rank);
    device::prepare(mine, a_.sendbuff + begin * esize_, count, a_.type, a_.op);
    uint64_t flag = static_cast<uint64_t>(static_cast<uint32_t>(round)) << 32;
    for (int k = 1; k < n_; ++k) {
      int j = (a_.rank + k) % n_;
      uint64_t* dst = ll_.out[j] + slotOffset(round);
      for (size_t i = 0; i < words; ++i) {
        uint32_t v;
        memcpy(&v, mine + 4 * i, 4);
        storeWord(dst + i, flag | v);
      }
      ll_.outBells[j]->ring();
    }
    sent_ = true;
  }

  bool receiveAll(size_t words, uint64_t round) {
    uint32_t flag = static_cast<uint32_t>(round);
    bool all = true;
    for (int j = 0; j < n_; ++j) {
      if (j == a_.rank) continue;
      const uint64_t* src = ll_.in[j] + slotOffset(round);
      char* into = staging(j);
      size_t& got = got_[j];
      for (; got < words; ++got) {
        uint64_t w = loadWord(src + got);
        if (static_cast<uint32_t>(w >> 32) != flag) break;
        uint32_t v = static_cast<uint32_t>(w);
        memcpy(into + 4 * got, &v, 4);
      }
      if (got < words) {
        blocked_.on(j, (*a_.from)[j]);
        all = false;
      }
    }
    return all;
  }

  OneShotArgs a_;
  LlMesh& ll_;
  int n_;
  size_t esize_;
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
