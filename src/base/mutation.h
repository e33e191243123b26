// Deliberate faults, for proving that the tests see data in the wrong place.
//
// A build with STRATA_MUTATIONS=ON (scripts/build.sh builds the tests so) reads
// STRATA_MUTATION=<name> and makes one named place in the library misbehave; the
// mutation stage (tests/mutation_check.sh, label "mutation") runs the suite under
// each and fails if any survives. Other builds (release, installed) compile every
// check to a constant false and refuse the variable at init.
#pragma once

namespace strata {

enum class Mutation {
  kNone,
  kRingChunkShift,         // a ring all-reduce's all-gather steps write one segment further on
  kReduceScatterRotate,    // reduce-scatter's outputs rotated by one rank
  kSlotSkip,               // a pipelined ring step's second slot is not copied out
  kGatherSwap,             // a gather's root stores two ranks' pieces in each other's places
  kAllToAllUntransposed,   // one all-to-all block stays in place instead of crossing to its peer
  kKernelRelaxedFlag,      // a pipelined kernel raises its ready flags relaxed: its data may land after them
  kTreeChildTwice,         // a tree rank counts its first child's partial result twice
  kKernelSkipBarrier,      // a device kernel posts a message (pipelined) or a chunk (point-to-point) without the block barrier after its data
  kKernelLLOneFlag,        // an LL reader trusts a unit once its first line's flags match
  kIbNoForkInit,           // the IB network never calls ibv_fork_init: forks leave registered pages copy-on-write
  kNetBounceShift,         // a put received through the library's registered buffer is copied out one byte further on
  kIbOwnMtu,               // an IB connection's path MTU is its own port's, not the smaller of the two ends'
  kIbNoGdrFlush,           // a receive into device memory over IB is not flushed before the GPU reads it
  kKernelSkipAcquire,      // a pipelined kernel reads a slot after a relaxed poll of its flag, with no acquire
};

// The names STRATA_MUTATION takes, in enum order (kNone is "").
const char* mutationName(Mutation m);
constexpr int kMutationCount = 15;

#ifdef STRATA_MUTATIONS
constexpr bool kMutationsBuilt = true;
// The active mutation (from the configuration, once); kNone when unset.
Mutation activeMutation();
inline bool mutated(Mutation m) { return activeMutation() == m; }
#else
constexpr bool kMutationsBuilt = false;
inline Mutation activeMutation() { return Mutation::kNone; }
constexpr bool mutated(Mutation) { return false; }
#endif

// "" when STRATA_MUTATION is unset or names a mutation this build carries out, else
// why it cannot (an unknown name, or a build without mutations).
const char* mutationProblem();

}  // namespace strata
