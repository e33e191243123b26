// Stale loads for the simulated GPUs' weak memory mode: a thread's loads of
// memory that other blocks published see it as it was at the thread's last
// acquire that synchronised with a release, as a GPU's may (a load may be served
// early, or from a line cached before the data arrived) until an acquire orders it.
//
// Every publish of held stores (sim_pipe.cc) goes through `land`, which keeps the
// bytes it overwrites with a sequence number; a release records the sequence its
// word was raised at; an acquire that reads the word raises the thread's epoch to
// it; a block barrier gives its threads the largest epoch among them (bar.sync
// orders one thread's acquire before the others' later loads). `read` gives the
// bytes of a range as of an epoch: the current bytes, with every newer overwrite
// undone, newest first. Records no registered reader can need are dropped.
//
// Threads of one process only: a publish in another process (ranks as processes
// sharing memfd-backed GPUs) is not recorded, so its data reads fresh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace strata::device::sim::visibility {

// One thread's view. Its epoch changes only under the log's lock (the log reads every
// reader's to drop what none needs); its own thread may read it at any time.
struct Reader {
  uint64_t epoch = 0;
  // The word and value of its last acquire (its own thread's alone): a poll that
  // reads them again synchronises with no newer release.
  const uint64_t* lastWord = nullptr;
  uint64_t lastValue = 0;
};

// Registers a reader, its epoch the current sequence (a kernel sees what was
// published before it began); `leave` unregisters it.
void join(Reader* r);
void leave(Reader* r);

// Stores `bytes` from `src` at `dst`, keeping what they overwrite.
void land(char* dst, const char* src, size_t bytes);

// Records that the word at `word` is being raised by a release now (after `land`
// of everything the release publishes).
void released(const uint64_t* word);
// An acquire by `r` read `value` at `word`: its epoch rises to the sequence of the
// word's release (a poll that reads the same value again costs no lock).
void acquired(Reader* r, const uint64_t* word, uint64_t value);
// `r`'s epoch rises to `epoch` (a barrier passed on another thread's).
void raise(Reader* r, uint64_t epoch);

// Copies `bytes` at `src` into `to` as `r` sees them.
void read(char* to, const char* src, size_t bytes, const Reader& r);

// The published bytes still recorded (tests: the log stays bounded).
size_t recordedBytes();

// A block's stores held back under weak memory, shared by its threads.
class HeldStores {
 public:
  // Keeps a copy of `bytes` from `src`, to go to `dst` at the next publish. Copied
  // under the lock: a thread of a block whose barrier is missing may publish (and
  // free) the list while another still stores.
  void hold(char* dst, const void* src, size_t bytes);
  // Every held store, in 4 KiB pieces in shuffled order (a GPU's stores land in any
  // order), through `land` when `logged` (weak memory's stale loads).
  void publish(bool logged);

 private:
  struct Held {
    char* dst;
    std::vector<char> bytes;
  };
  std::mutex mutex_;
  std::vector<Held> held_;
  uint64_t rng_ = 0x9e3779b97f4a7c15ull;
};

}  // namespace strata::device::sim::visibility
