// The device-driven collective kernel (kernel_coll.h) on a simulated GPU: the same
// protocol code, with host atomics for the primitives and each block run as one
// thread, blocks one after another (a block waits only for the same block of its
// peers, which run theirs in the same order). Data moves with the CPU functions
// (sim_prims.h); STRATA_GPU_SIM_JITTER and STRATA_GPU_SIM_WEAK make them harsher.
#include "base/config.h"
#include "device/gpu_sim_state.h"
#include <thread>
#include <vector>

#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"
#include "device/sim_prims.h"

namespace strata::device::sim {

void runKernelColl(const KernelColl& given) {
  KernelColl k = given;
  if (k.op.scalarAt) loadScalar(k.op.scalarAt, k.type, &k.op);  // now, as the kernel runs
  HostPrims p(k, config().gpuSimJitter, config().gpuSimWeak);
  for (int b = 0; b < k.blocks; ++b) {
    kernel::runBlock(k, p, b);
    p.publish();  // the block is done: everything it stored is visible
  }
}

// Every block of a point-to-point kernel runs on a thread of its own, as a GPU runs
// them all at once: a lane's sends may wait for a peer whose receives are in another
// lane, and the blocks of one lane may be at different chunks.
void runKernelP2p(const KernelP2p& k) {
  std::vector<std::thread> blocks;
  for (int b = 0; b < k.lanes * KernelP2p::kBlocks; ++b)
    blocks.emplace_back([&k, b] {
      HostPrims p(k, config().gpuSimJitter, config().gpuSimWeak);
      kernel::runP2pBlock(k, p, b);
      p.publish();
    });
  for (std::thread& t : blocks) t.join();
}

}  // namespace strata::device::sim
