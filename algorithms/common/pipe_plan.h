// What the pipelined device algorithms (DeviceRing, DeviceMesh) share: one region per
// rank that every peer maps, cut into a ring part and a mesh part, the message counts
// in device memory, and the planning of one kernel (device/kernel_pipe.h).
//
// Geometry. Channels: the fewest any rank's GPU takes (PlanContext::pipeChannels; a
// channel per SM up to 32 on a GPU, a few on simulated ones), fewer for small
// operations (kChannelBytes each at least). Ring: 4 slots of 128 KiB per channel
// (512 KiB of a channel in flight); mesh: 2 slots of 32 KiB per channel and peer; LL:
// 8 channels at most (kLLChannelBytes each at least), two 16 KiB buffers per channel
// and peer. On 8 GPUs with 32 channels that is 16 MiB of ring, 16 MiB of mesh and 2 MiB
// of LL per rank.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "algorithms/algorithm.h"
#include "algorithms/common/kernel_task.h"
#include "device/kernel_ll.h"
#include "device/kernel_pipe.h"

namespace strata::algorithms {

struct PipeGeometry {
  static constexpr int kRingDepth = 4;
  static constexpr size_t kRingSlot = 128 << 10;
  static constexpr int kMeshDepth = 2;
  static constexpr size_t kMeshSlot = 32 << 10;
  static constexpr size_t kChannelBytes = 64 << 10;  // fewer channels below this much data each
  static constexpr size_t kLLChannelBytes = 4 << 10;  // the same for LL
  static constexpr size_t kHeader = 4096;           // the poison word's page
  int n = 0, channels = 0;
  bool mesh = false;  // the region has a mesh part (n <= KernelPipe::kMaxMesh)
  size_t ringBytes() const { return device::KernelPipe::regionBytes(channels, 1, kRingDepth, kRingSlot); }
  size_t meshBytes() const {
    return mesh ? device::KernelPipe::regionBytes(channels, n, kMeshDepth, kMeshSlot) : 0;
  }
  // The mesh's LL part (device/kernel_ll.h): up to ll::kMaxChannels channels, a 16 KiB
  // buffer per sender and parity each (2 MiB per rank on 8 GPUs).
  int llChannels() const { return mesh ? std::min(channels, device::ll::kMaxChannels) : 0; }
  size_t llBytes() const { return mesh ? device::ll::regionBytes(llChannels(), n) : 0; }
  size_t regionBytes() const { return kHeader + ringBytes() + meshBytes() + llBytes(); }
  size_t stateWords() const {
    return device::KernelPipe::stateWords(channels, 1) +
           (mesh ? device::KernelPipe::stateWords(channels, n) + device::ll::stateWords(llChannels()) : 0);
  }
};

// The geometry every rank computes alike; channels 0 when the communicator has none.
PipeGeometry pipeGeometry(const PlanContext& ctx);

// Opens the regions (with every peer for a mesh, else with the ring's neighbours) and
// the counts; false when the communicator cannot run pipelined kernels (no GPU per
// rank, peers not mapped).
bool pipeWarmUp(PlanContext& ctx);

// One kernel for `op` on the caller's stream: `algo` (KernelPipe::Algo) on the
// regions pipeWarmUp opened.
void planPipe(PlanContext& ctx, const CollectiveOp& op, int algo);

// The collectives the LL kernel runs: all-reduce, all-gather, reduce-scatter (every
// rank sends every peer a part each round, which lets its buffers go without credits).
bool llServes(Collective c);

// The cost model of all three (docs/gpu.md derives it): a launch, a flag round trip
// per step (LL: a one-way trip per round, with no fence), and the bytes through the
// busiest link at the lower of its rate and what the channels move.
double pipeCostUs(const TuneRequest& r, int algo);

}  // namespace strata::algorithms
