// Claims on the chunks of one large one-sided read that both ends of a FIFO copy
// at once: the receiver takes chunks from the front, the sender (once its own work
// is done) from the back, until the claims meet. One word in shared memory holds
// the read's generation and both counts, so a claim is one compare-and-swap and a
// claimant left over from an earlier read can never take a chunk of the next.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace strata::transport {

// 1 MiB: process_vm_readv moves 1 MiB pieces as fast as whole buffers on the 2-core
// VM (64 KiB pieces are about half as fast: the system call and page pinning).
constexpr size_t kSharedChunkBytes = size_t{1} << 20;

class ChunkClaims {
 public:
  // Whether a read of `bytes` is split: four chunks at least, and countable in 20 bits.
  static bool shareable(size_t bytes);
  static size_t chunks(size_t bytes);
  // The generation tag of the read of exposure `exposure` (counted from 0); never 0,
  // the value of a word no read has opened.
  static uint64_t generation(uint64_t exposure);

  // The receiver opens read `gen` with no chunk claimed. Release: what it wrote
  // before (where the chunks go) is visible to whoever claims one.
  void open(uint64_t gen);
  // The next chunk of read `gen` from the front or the back, or -1 when the claims
  // have met or `gen` is not the open read.
  long claim(uint64_t gen, size_t chunks, bool front);
  // Chunks claimed from the back so far: final once a claim from the front failed.
  size_t back() const;
  // Ends the open read: no claim succeeds until the next open (a sender's stale
  // generation can then never match a word left behind, even after the tags wrap).
  // Returns the chunks claimed from the back, final from here on.
  size_t close();

 private:
  std::atomic<uint64_t> word_{0};
};

}  // namespace strata::transport
