// One group on device buffers, from enqueue until its last copy back has run
// (device_proxy.h). Shared by the proxy and the staging code.
#pragma once

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "core/op.h"

struct ncclComm;

namespace strata::core {

class DeviceProxy;

// What the proxy runs at once: the whole group, or one chunk of a large staged
// all-reduce, broadcast or reduce (so the copies of the other chunks overlap it).
struct DevicePart {
  std::vector<std::pair<ncclComm*, OpDesc>> ops;  // on staging buffers (or the device buffers, direct)
  uint64_t* flag = nullptr;                        // pinned; raised when the proxy has run it
  std::atomic<int> waiting{0};                     // streams whose inputs for it are not staged yet
  DeviceProxy* home = nullptr;                     // the proxy that runs it
};

struct DeviceJob {
  std::vector<std::unique_ptr<DevicePart>> parts;
  size_t next = 0;                                 // the first part the proxy has not run
  std::vector<std::pair<void*, size_t>> buffers;   // pinned staging, back to the pool at the end
  std::atomic<int> finishing{0};                   // streams whose outputs are not copied back yet, + 1 for the proxy
  std::vector<DeviceProxy*> proxies;               // every communicator the job touches
  DeviceProxy* home = nullptr;                     // the one that runs it
  bool direct = false;                             // on the device buffers, no host staging
};

// One stream's outputs are copied back (CUDA's callback thread; the enqueuing thread
// for a stream whose enqueue failed), or the proxy has run the job's last part: the
// last of these returns the staging, forgets the job and tells every proxy it
// touched (the proxy's share keeps the staging until it is done with it).
void onOutputsCopied(void* job);

}  // namespace strata::core
