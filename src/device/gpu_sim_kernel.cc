// The device-driven point-to-point kernel (kernel_p2p.h) on a simulated GPU: the
// same protocol code, with host atomics for the primitives and each block as host
// threads with a real barrier (sim_prims.h); STRATA_GPU_SIM_JITTER and
// STRATA_GPU_SIM_WEAK make them harsher. (The collective kernel's simulation is sim_pipe.cc.)
#include "base/config.h"
#include "device/gpu_sim_state.h"
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"
#include "device/sim_prims.h"

namespace strata::device::sim {

// Every block of a point-to-point kernel runs as `threads` host threads of its own
// (STRATA_GPU_SIM_THREADS), as a GPU runs all blocks at once: a lane's sends may wait
// for a peer whose receives are in another lane, and the blocks of one lane may be at
// different chunks. Block b starts once b - room blocks have ended (a GPU starts a
// grid's blocks in order, as room frees).
void runKernelP2p(const KernelP2p& k, int device) {
  BlockRoom room(device, k.blocks());
  const int threads = config().gpuSimThreads;
  std::atomic<int> ended{0};
  std::vector<std::unique_ptr<SimBlock>> blocks;
  for (int b = 0; b < k.blocks(); ++b) blocks.push_back(std::make_unique<SimBlock>(threads));
  std::vector<std::thread> running;
  for (int b = 0; b < k.blocks(); ++b)
    for (int t = 0; t < threads; ++t)
      running.emplace_back([&k, &ended, &blocks, b, t, held = room.held()] {
        while (b >= held + ended.load()) usleep(50);
        {
          HostPrims p(k, *blocks[b], t, config().gpuSimJitter, config().gpuSimWeak);
          kernel::runP2pBlock(k, p, b);
          p.barrierOr(0);  // the block ends when all its threads have
          p.publish();
        }
        if (t == 0) ended.fetch_add(1);
      });
  for (std::thread& t : running) t.join();
}

}  // namespace strata::device::sim
