// The device-driven collective kernel (kernel_coll.h) on a simulated GPU: the same
// protocol code, with host atomics for the primitives and each block run as one
// thread, blocks one after another (a block waits only for the same block of its
// peers, which run theirs in the same order). Data moves with the CPU functions
// (sim_prims.h); STRATA_GPU_SIM_JITTER and STRATA_GPU_SIM_WEAK make them harsher.
#include "base/config.h"
#include "device/gpu_sim_state.h"
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"
#include "device/sim_prims.h"

namespace strata::device::sim {

void runKernelColl(const KernelColl& given, int device) {
  KernelColl k = given;
  if (k.op.scalarAt) loadScalar(k.op.scalarAt, k.type, &k.op);  // now, as the kernel runs
  HostPrims p(k, config().gpuSimJitter, config().gpuSimWeak);
  BlockRoom room(device, k.blocks);
  for (int b = 0; b < k.blocks; ++b) {
    kernel::runBlock(k, p, b);
    p.publish();  // the block is done: everything it stored is visible
  }
}

// Every block of a point-to-point kernel runs on a thread of its own, as a GPU runs
// them at once: a lane's sends may wait for a peer whose receives are in another
// lane, and the blocks of one lane may be at different chunks. Block b starts once
// b - room blocks have ended (a GPU starts a grid's blocks in order, as room frees).
void runKernelP2p(const KernelP2p& k, int device) {
  BlockRoom room(device, k.blocks());
  std::atomic<int> ended{0};
  std::vector<std::thread> blocks;
  for (int b = 0; b < k.blocks(); ++b)
    blocks.emplace_back([&k, &ended, b, held = room.held()] {
      while (b >= held + ended.load()) usleep(50);
      HostPrims p(k, config().gpuSimJitter, config().gpuSimWeak);
      kernel::runP2pBlock(k, p, b);
      p.publish();
      ended.fetch_add(1);
    });
  for (std::thread& t : blocks) t.join();
}

}  // namespace strata::device::sim
