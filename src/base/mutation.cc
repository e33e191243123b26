#include "base/mutation.h"

#include <cstring>
#include <string>

#include "base/config.h"

namespace strata {
namespace {

constexpr const char* kNames[kMutationCount] = {"",           "ring_chunk_shift", "reduce_scatter_rotate",
                                                "slot_skip",  "gather_swap",      "alltoall_untransposed",
                                                "kernel_relaxed_flag",            "tree_child_twice",
                                                "kernel_skip_barrier",            "kernel_ll_one_flag",
                                                "ib_no_fork_init",                "net_bounce_shift",
                                                "ib_own_mtu",                     "ib_no_gdr_flush",
                                                "kernel_skip_acquire"};

Mutation parse(const std::string& name) {
  for (int m = 1; m < kMutationCount; ++m)
    if (name == kNames[m]) return static_cast<Mutation>(m);
  return Mutation::kNone;
}

}  // namespace

const char* mutationName(Mutation m) { return kNames[static_cast<int>(m)]; }

#ifdef STRATA_MUTATIONS
Mutation activeMutation() {
  static const Mutation active = parse(config().mutation);
  return active;
}
#endif

const char* mutationProblem() {
  const std::string& name = config().mutation;
  if (name.empty()) return "";
  if (!kMutationsBuilt) return "STRATA_MUTATION is set, but this build has no mutations (configure with STRATA_MUTATIONS=ON)";
  if (parse(name) == Mutation::kNone) return "STRATA_MUTATION names no mutation (base/mutation.h lists them)";
  return "";
}

}  // namespace strata
