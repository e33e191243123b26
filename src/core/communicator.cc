#include "core/communicator.h"

#include "core/comm_plan.h"

#include "algorithms/algorithm.h"
#include "algorithms/predict.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "core/device_proxy.h"
#include "core/device_watch.h"
#include "core/kept_call.h"
#include "core/post_office.h"
#include "device/gpu.h"
#include "transports/transport.h"

namespace strata::core {

algorithms::TuneRequest Communicator::tuneRequest(Collective coll, size_t bytes, bool device, bool streamOrdered) const {
  algorithms::TuneRequest r = tuneBasis_;
  r.coll = coll;
  r.bytes = bytes;
  r.deviceBuffers = device;
  r.streamOrdered = streamOrdered;
  return r;
}

uint32_t* Communicator::deviceWords() {
  std::lock_guard<std::mutex> lock(stopMutex_);
  if (!deviceWords_) {
    device::RelaxedCapture relaxed;
    auto* w = static_cast<uint32_t*>(device::pinnedAlloc(2 * sizeof(uint32_t)));
    w[0] = abortRequested_.load() ? 1 : 0;
    w[1] = 0;
    deviceWords_.reset(w, [](uint32_t* p) {
      try {
        device::pinnedFree(p);
      } catch (const Error& e) {
        STRATA_WARN(-1, "freeing a communicator's device words: %s", e.what());
      }
    });
    watchDevicePeersLocked();
  }
  return deviceWords_.get();
}

// Peers in other processes may die while this rank's kernels wait for them, which
// nothing on the device can tell: device_watch.h.
void Communicator::watchDevicePeersLocked() {
  const PeerInfo& self = peer(rank());
  bool others = false;
  for (const PeerInfo& p : peers_) others |= !p.sameProcess(self);
  if (!others) return;
  DeviceWatched w;
  w.exitedPeer = [this] {
    const PeerInfo& me = peer(rank());
    for (int r = 0; r < nranks(); ++r) {
      const PeerInfo& p = peer(r);
      if (p.sameProcess(me)) continue;
      if ((p.sameHost(me) && !processAlive(p.pid)) || bootstrap_->peerGone(r)) return r;
    }
    return -1;
  };
  w.stop = [this](int r) {
    exitedPeer_.store(r);
    STRATA_WARN(rank(), "rank %d (pid %d) exited: this rank's device-driven kernels that wait for a peer stop, and "
                "the communicator reports ncclRemoteError", r, peer(r).pid);
    __atomic_store_n(&deviceWords_.get()[0], 1u, __ATOMIC_RELEASE);
  };
  deviceWatch_ = watchDevicePeers(std::move(w));
}

ncclResult_t Communicator::asyncError() const {
  ncclResult_t r = asyncError_.load();
  uint32_t failure = deviceWords_ ? __atomic_load_n(&deviceWords_.get()[1], __ATOMIC_ACQUIRE) : 0;
  if (r != ncclSuccess || failure == 0) return r;
  uint32_t why = failure >> 8;
  int peer = static_cast<int>(failure & 0xff);
  if (!deviceFailureLogged_.exchange(true)) {
    using K = device::KernelColl;
    if (why == K::kPoisoned)
      STRATA_WARN(rank(), "a device-driven kernel found the communicator failed by rank %d: it stopped without "
                  "reading or writing anything (no step goes on after a failure)", peer);
    else
      STRATA_WARN(rank(), "a device-driven kernel gave up on rank %d: %s", peer,
                  why == K::kTimedOut ? format("nothing arrived within STRATA_DEVICE_TIMEOUT=%gs (or STRATA_TIMEOUT=%gs "
                                               "for point-to-point)", config().deviceTimeoutSec, config().timeoutSec)
                                            .c_str()
                  : why == K::kSizeMismatch ? "its send and this rank's receive differ in size (NCCL requires them equal)"
                  : exitedPeer_.load() >= 0 ? format("rank %d (pid %d) exited", exitedPeer_.load(),
                                                     peers_[exitedPeer_.load()].pid).c_str()
                                            : ("the communicator was stopped: " + stopReason()).c_str());
  }
  if (why == device::KernelColl::kSizeMismatch) return ncclInvalidUsage;
  if (why == device::KernelColl::kStopped && exitedPeer_.load() >= 0) return ncclRemoteError;  // not an abort here
  return why == device::KernelColl::kStopped ? ncclInvalidUsage : ncclRemoteError;
}

bool Communicator::deviceCapable(Collective coll, size_t bytes, bool streamOrdered) {
  algorithms::Choice c;
  return tryChoose(coll, bytes, true, streamOrdered, &c);
}

bool Communicator::devicePuts(int peer, size_t bytes) const {
  size_t least = config().putBytes;
  if (!peers_[rank()].gdr) return false;  // its GPU is too far from its NIC (NCCL_NET_GDR_LEVEL), or none
  if (peer < 0 || peer >= nranks() || peer == rank() || least == 0 || bytes < least) return false;
  try {
    // The transport the plan links them with (comm_plan.cc), not merely one that could put.
    return transport::selectTransport(peers_[rank()], peers_[peer]).has(transport::kPut | transport::kDevicePut);
  } catch (const Error&) {
    return false;  // no transport links them
  }
}

bool Communicator::tryChoose(Collective coll, size_t bytes, bool device, bool streamOrdered, algorithms::Choice* out) {
  const Config& cfg = config();
  CachedChoice& c = choices_[(bytes * 31 + static_cast<size_t>(coll) * 4 + device * 2 + streamOrdered) % choices_.size()];
  if (c.config != &cfg || c.coll != coll || c.bytes != bytes || c.device != device || c.streamOrdered != streamOrdered) {
    algorithms::TuneRequest req = tuneRequest(coll, bytes, device, streamOrdered);
    c.found = algorithms::tryChoose(req, cfg.algo, cfg.proto, &c.choice);
    if (!c.found && streamOrdered) warnFilteredKernels(req);
    if (c.found && logEnabled(LogLevel::kInfo, kSubsysTuning))
      STRATA_INFO(kSubsysTuning, rank(), "%s (%d ranks, %d node(s))",
                  algorithms::predictionLine(algorithms::predict(plan_, req, cfg.algo, cfg.proto)).c_str(), nranks(),
                  layout_.numNodes());
    c.config = &cfg;
    c.coll = coll;
    c.bytes = bytes;
    c.device = device;
    c.streamOrdered = streamOrdered;
  }
  *out = c.choice;
  return c.found;
}

// NCCL_ALGO or NCCL_PROTO left out the device-driven kernels where they would run
// (they have Simple, and LL for the mesh's all-reduce, all-gather and reduce-scatter;
// no LL128): device buffers then go through host staging, which is slower and refuses
// graph capture. Said once per communicator, as a warning.
void Communicator::warnFilteredKernels(const algorithms::TuneRequest& req) {
  const Config& cfg = config();
  algorithms::Choice unfiltered;
  if ((cfg.algo.empty() && cfg.proto.empty()) || !algorithms::tryChoose(req, "", "", &unfiltered)) return;
  if (filteredKernelsWarned_.exchange(true)) return;
  std::string set = cfg.algo.empty() ? "" : "NCCL_ALGO=" + cfg.algo;
  if (!cfg.proto.empty()) set += (set.empty() ? "" : " and ") + std::string("NCCL_PROTO=") + cfg.proto;
  STRATA_WARN(rank(),
              "%s leave out the device-driven kernels (%s, protocol %s; Strata's kernels have Simple, LL only "
              "for the mesh's all-reduce, all-gather and reduce-scatter, and no LL128) for %s on device buffers: "
              "they go through host staging by a proxy thread instead, which is slower and cannot be captured in "
              "a CUDA graph",
              set.c_str(), unfiltered.name(), algorithms::protocolName(unfiltered.proto),
              algorithms::collectiveName(req.coll));
}

algorithms::Choice Communicator::choose(Collective coll, size_t bytes, bool device, bool streamOrdered) {
  algorithms::Choice c;
  if (!tryChoose(coll, bytes, device, streamOrdered, &c))  // throws, naming NCCL_ALGO / NCCL_PROTO
    algorithms::choose(tuneRequest(coll, bytes, device, streamOrdered), config().algo, config().proto);
  return c;
}

void Communicator::stop(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(stopMutex_);
    if (stopReason_.empty()) stopReason_ = why;
    abortRequested_.store(true);
    if (deviceWords_) __atomic_store_n(&deviceWords_.get()[0], 1u, __ATOMIC_RELEASE);  // device-side waits end
  }
  stopEpoch_.fetch_add(1);
  PostOffice::instance().wakeAll();  // its bootstrap waits see the stop now
  if (pool_) pool_->abortAll();
  if (bell_) bell_->ring();  // a rank asleep in a collective wakes and sees the request
}

void Communicator::failIfStopped() const {
  if (abortRequested_.load())
    fail(ncclInvalidUsage, "rank %d: the communicator was stopped: %s", rank(), stopReason().c_str());
}

std::string Communicator::stopReason() const {
  std::lock_guard<std::mutex> lock(stopMutex_);
  return stopReason_;
}

DeviceProxy& Communicator::deviceProxy() {
  std::lock_guard<std::mutex> lock(proxyMutex_);
  if (!deviceProxy_) deviceProxy_ = std::make_unique<DeviceProxy>(*this);
  hasDeviceProxy_.store(true, std::memory_order_release);
  return *deviceProxy_;
}

void Communicator::drainDevice(double waitSec) {
  if (!hasDeviceProxy_.load(std::memory_order_acquire)) return;  // host-only communicators: no lock per call
  DeviceProxy* proxy = nullptr;
  {
    std::lock_guard<std::mutex> lock(proxyMutex_);
    proxy = deviceProxy_.get();
  }
  if (proxy) proxy->drain(waitSec);
}

void Communicator::releaseDevice(double waitSec) {
  std::unique_ptr<DeviceProxy> proxy;
  {
    std::lock_guard<std::mutex> lock(proxyMutex_);
    proxy = std::move(deviceProxy_);
  }
  if (proxy && !proxy->release(waitSec)) proxy.release();  // jobs still on a stream use it: kept
}

Communicator::Communicator() = default;

std::unique_ptr<CommPlan> Communicator::takePlan(void* deviceStream) {
  std::unique_ptr<CommPlan> plan(sparePlan_.exchange(nullptr));
  if (!plan) return std::make_unique<CommPlan>(*this, deviceStream);
  plan->reset(deviceStream);
  return plan;
}

void Communicator::returnPlan(std::unique_ptr<CommPlan> plan) { delete sparePlan_.exchange(plan.release()); }

std::unique_ptr<KeptCall> Communicator::takeKeptCall() { return std::unique_ptr<KeptCall>(keptCall_.exchange(nullptr)); }

void Communicator::keepCall(std::unique_ptr<KeptCall> call) { delete keptCall_.exchange(call.release()); }

void Communicator::orderStreamWork(void* stream) {
  std::lock_guard<std::mutex> lock(streamWorkMutex_);
  if (!streamWorkMarked_ || lastWorkStream_ == stream) return;
  device::streamWaitEvent(stream, streamWork_);  // the stream's device, whichever is current
}

void Communicator::markStreamWork(void* stream) {
  std::lock_guard<std::mutex> lock(streamWorkMutex_);
  if (!streamWork_) {  // made on the communicator's device, as its streams are
    device::OnDevice on(peer(rank()).device);
    streamWork_ = device::eventCreate();
  }
  // One event stands for all of it: this stream was ordered after the last marked
  // one before the call (orderStreamWork).
  device::eventRecord(streamWork_, stream);
  lastWorkStream_ = stream;
  streamWorkMarked_ = true;
}

void Communicator::waitStreamWork(const char* fn) {
  void* event = nullptr;
  if (!streamWorkMarked_.load(std::memory_order_acquire)) return;  // host work only: no lock on each call
  {
    std::lock_guard<std::mutex> lock(streamWorkMutex_);
    if (!streamWorkMarked_) return;
    streamWorkMarked_ = false;
    event = streamWork_;
  }
  device::OnDevice on(peer(rank()).device);
  const double limit = config().timeoutSec;
  if (device::eventSynchronize(event, limit, [this] { return abortRequested(); })) return;
  {
    std::lock_guard<std::mutex> lock(streamWorkMutex_);
    streamWorkMarked_ = true;  // still pending: a later wait (the destroy's) waits again
  }
  failIfStopped();
  fail(ncclSystemError,
       "rank %d: %s waits for the work this communicator enqueued on its stream, which did not finish within %.0f s "
       "(STRATA_TIMEOUT): is that stream blocked by other work?",
       rank(), fn, limit);
}

void Communicator::releaseSharedDeviceMemory(bool workDone) {
  if (!pool_ || !bootstrap_) return;
  std::vector<int> peers = pool_->deviceSharers();
  if (peers.empty()) return;
  // Every rank tells its sharers whether it unmapped their memory ("u") or may
  // still use it ("k"); only when all of them unmapped is this rank's freed.
  std::string why = "this rank's device work did not finish";
  if (workDone) pool_->unmapPeerRegions();
  try {
    for (int p : peers) bootstrap_->send(p, MsgKind::kTeardown, 0, workDone ? "u" : "k");
    if (workDone) {
      for (int p : peers)
        if (bootstrap_->recv(p, MsgKind::kTeardown, 0) != "u") {
          why = format("rank %d may still use it", p);
          workDone = false;
        }
      if (workDone) {
        STRATA_INFO(kSubsysInit, rank(), "teardown: %zu rank(s) of other processes unmapped this rank's device memory",
                    peers.size());
        return;
      }
    }
  } catch (const Error& e) {
    why = e.what();
  }
  pool_->keepDeviceRegions();
  STRATA_WARN(rank(), "teardown: device memory that ranks of other processes map is kept, not freed (%s)",
              why.c_str());
}

Communicator::~Communicator() {
  deviceWatch_.reset();  // before anything its functions read goes
  delete keptCall_.exchange(nullptr);
  delete sparePlan_.exchange(nullptr);
  releaseDevice(0);
  if (streamWork_) {
    try {
      device::eventDestroy(streamWork_);
    } catch (const Error& e) {
      STRATA_WARN(rank(), "destroying the stream-work event: %s", e.what());
    }
  }
  pool_.reset();  // aborts every link: peers still waiting for this rank fail fast
  if (bootstrap_) PostOffice::instance().discard(bootstrap_->magic(), rank());
}

}  // namespace strata::core
