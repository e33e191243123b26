// Communicator creation, splitting, teardown and queries.
#include <algorithm>
#include <cstring>
#include <vector>

#include "api/api_boundary.h"
#include "base/config.h"
#include "base/log.h"
#include "core/bootstrap.h"
#include "core/comm_handle.h"
#include "core/group.h"
#include "device/gpu.h"

using namespace strata;
using core::CommOptions;

namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

// Reads an ncclConfig_t of any NCCL version >= 2.14 (fields it lacks keep their defaults).
CommOptions parseConfig(const ncclConfig_t* user, const char* fn, const CommOptions& inherited) {
  CommOptions o = inherited;
  if (user) {
    STRATA_REQUIRE(user->magic == kConfigMagic, ncclInvalidArgument,
                   "%s: config was not initialised with NCCL_CONFIG_INITIALIZER (bad magic 0x%x)", fn, user->magic);
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    memcpy(&c, user, std::min(user->size, sizeof(c)));
    if (c.blocking != NCCL_CONFIG_UNDEF_INT) {
      STRATA_REQUIRE(c.blocking == 0 || c.blocking == 1, ncclInvalidArgument, "%s: config.blocking=%d is not 0 or 1",
                     fn, c.blocking);
      o.blocking = c.blocking == 1;
    }
    if (c.commName) o.name = c.commName;
    if (c.netName) {
      STRATA_REQUIRE(strlen(c.netName) < sizeof(PeerInfo{}.netName), ncclInvalidArgument,
                     "%s: config.netName \"%.40s...\" is longer than %zu characters", fn, c.netName,
                     sizeof(PeerInfo{}.netName) - 1);
      o.netName = c.netName;
    }
    if (c.minCTAs != NCCL_CONFIG_UNDEF_INT) {
      STRATA_REQUIRE(c.minCTAs >= 1 && c.minCTAs <= 64, ncclInvalidArgument, "%s: config.minCTAs=%d", fn, c.minCTAs);
      o.minChannels = c.minCTAs;
    }
    if (c.maxCTAs != NCCL_CONFIG_UNDEF_INT) {
      STRATA_REQUIRE(c.maxCTAs >= 1 && c.maxCTAs <= 64, ncclInvalidArgument, "%s: config.maxCTAs=%d", fn, c.maxCTAs);
      o.maxChannels = c.maxCTAs;
    }
    STRATA_REQUIRE(c.splitShare == NCCL_CONFIG_UNDEF_INT || c.splitShare == 0 || c.splitShare == 1,
                   ncclInvalidArgument, "%s: config.splitShare=%d is not 0 or 1", fn, c.splitShare);
  }
  if (config().commBlocking >= 0) o.blocking = config().commBlocking == 1;  // NCCL_COMM_BLOCKING wins
  return o;
}

// Runs an init job now, in a background thread (nonblocking), or at group end.
ncclResult_t launchInit(ncclComm* h, std::function<std::unique_ptr<core::Communicator>()> job) {
  auto run = [h, job] { core::runInit(h, job); };
  if (core::group::active()) {
    core::group::deferInit(h, run);
    return h->opts.blocking ? ncclSuccess : ncclInProgress;
  }
  if (!h->opts.blocking) {
    h->initThread = std::thread(run);
    return ncclInProgress;
  }
  run();
  return h->initState.load();
}

ncclResult_t initRank(ncclComm_t* out, int nranks, const ncclUniqueId* ids, int nIds, int rank,
                      ncclConfig_t* config, const char* fn) {
  return api::guarded([&]() -> ncclResult_t {
    logStartup();
    STRATA_REQUIRE(out, ncclInvalidArgument, "%s: comm is NULL", fn);
    *out = nullptr;
    STRATA_REQUIRE(nranks >= 1, ncclInvalidArgument, "%s: nranks %d is less than 1", fn, nranks);
    STRATA_REQUIRE(rank >= 0 && rank < nranks, ncclInvalidArgument, "%s: rank %d is out of range [0, %d)", fn, rank,
                   nranks);
    STRATA_REQUIRE(ids && nIds >= 1 && nIds <= nranks, ncclInvalidArgument, "%s: %d unique ids for %d ranks", fn,
                   nIds, nranks);
    std::vector<core::UniqueIdLayout> layouts;
    for (int i = 0; i < nIds; ++i) layouts.push_back(core::parseUniqueId(ids[i], rank));
    CommOptions opts = parseConfig(config, fn, CommOptions{});
    opts.device = device::currentDevice();  // as NCCL: the GPU current at init (-1 without one)
    ncclComm* h = core::newHandle(rank, nranks, opts);
    ncclResult_t r = launchInit(h, [h, layouts, nranks, rank] {
      return core::Communicator::fromRoot(layouts, nranks, rank, h->opts, &h->abortedBy);
    });
    if (r != ncclSuccess && r != ncclInProgress) {
      std::string msg = h->initError;
      core::discardHandle(h);
      fail(r, "%s", msg.c_str());
    }
    *out = h;
    return r;
  });
}

}  // namespace

STRATA_API ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  return api::guarded([&] {
    logStartup();
    STRATA_REQUIRE(uniqueId, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    *uniqueId = core::createUniqueId();
  });
}

STRATA_API ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return initRank(comm, nranks, &commId, 1, rank, nullptr, "ncclCommInitRank");
}

STRATA_API ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                ncclConfig_t* config) {
  return initRank(comm, nranks, &commId, 1, rank, config, "ncclCommInitRankConfig");
}

STRATA_API ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                  ncclUniqueId* commIds, ncclConfig_t* config) {
  return initRank(newcomm, nranks, commIds, nId, myrank, config, "ncclCommInitRankScalable");
}

// The devices in devlist only label the communicators: host memory needs no GPU.
STRATA_API ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return api::guarded([&] {
    STRATA_REQUIRE(comms, ncclInvalidArgument, "ncclCommInitAll: comm is NULL");
    STRATA_REQUIRE(ndev >= 1, ncclInvalidArgument, "ncclCommInitAll: ndev %d is less than 1", ndev);
    logStartup();
    ncclUniqueId id = core::createUniqueId();
    std::vector<core::UniqueIdLayout> layouts{core::parseUniqueId(id, 0)};
    std::vector<ncclComm*> handles;
    for (int i = 0; i < ndev; ++i) {
      CommOptions opts;
      opts.device = devlist ? devlist[i] : i;
      handles.push_back(core::newHandle(i, ndev, opts));
    }
    std::vector<std::thread> threads;
    for (int i = 0; i < ndev; ++i) {
      ncclComm* h = handles[i];
      threads.emplace_back([h, layouts, ndev, i] {
        core::runInit(h, [&] { return core::Communicator::fromRoot(layouts, ndev, i, h->opts, &h->abortedBy); });
      });
    }
    for (std::thread& t : threads) t.join();
    for (ncclComm* h : handles) {
      if (h->initState.load() == ncclSuccess) continue;
      ncclResult_t code = h->initState.load();
      std::string msg = h->initError;
      for (ncclComm* g : handles) core::discardHandle(g);
      fail(code, "ncclCommInitAll: %s", msg.c_str());
    }
    for (int i = 0; i < ndev; ++i) comms[i] = handles[i];
  });
}

STRATA_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) {
  return api::guarded([&]() -> ncclResult_t {
    core::CommUse use(comm, "ncclCommSplit");
    core::Communicator& parent = use.ready("ncclCommSplit", true);
    STRATA_REQUIRE(newcomm, ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
    STRATA_REQUIRE(color >= 0 || color == NCCL_SPLIT_NOCOLOR, ncclInvalidArgument,
                   "ncclCommSplit: rank %d: color %d is negative (use NCCL_SPLIT_NOCOLOR to opt out)", parent.rank(),
                   color);
    *newcomm = nullptr;
    CommOptions opts = parseConfig(config, "ncclCommSplit", parent.options());
    // Everyone takes part in the exchange; ranks with NCCL_SPLIT_NOCOLOR get no communicator.
    ncclComm* h = color == NCCL_SPLIT_NOCOLOR ? nullptr : core::newHandle(-1, -1, opts);
    // The job may run later (nonblocking, or at the group end): it takes its own use
    // of the parent, so an abort of the parent stops it and waits for it.
    auto job = [comm, h, color, key, opts]() -> std::unique_ptr<core::Communicator> {
      core::CommUse parentUse(comm, "ncclCommSplit");
      core::Communicator& parent = parentUse.ready("ncclCommSplit", true);
      int pair[2] = {color, key};
      auto all = parent.bootstrap().allGather(std::string(reinterpret_cast<const char*>(pair), sizeof(pair)));
      uint64_t seq = parent.nextChildSeq();
      if (color == NCCL_SPLIT_NOCOLOR) return nullptr;
      std::vector<std::pair<int, int>> members;  // (key, parent rank)
      for (int r = 0; r < parent.nranks(); ++r) {
        int got[2];
        memcpy(got, all[r].data(), sizeof(got));
        if (got[0] == color) members.push_back({got[1], r});
      }
      std::sort(members.begin(), members.end());
      std::vector<SockAddr> addrs;
      int me = -1;
      for (size_t i = 0; i < members.size(); ++i) {
        addrs.push_back(parent.peer(members[i].second).listenAddr);
        if (members[i].second == parent.rank()) me = static_cast<int>(i);
      }
      uint64_t salt[3] = {parent.magic(), seq, static_cast<uint64_t>(color)};
      uint64_t magic = hashBytes(salt, sizeof(salt), 0x5b1175b1175ull);
      h->rank = me;
      h->nranks = static_cast<int>(members.size());
      return core::Communicator::fromParent(magic, me, std::move(addrs), opts, &h->abortedBy,
                                            parent.adoptChild(magic, me), [comm] { core::throwIfAborted(comm); });
    };
    if (!h) {  // NCCL_SPLIT_NOCOLOR: take part in the exchange, get no communicator
      if (core::group::active())
        core::group::deferInit(comm, [job] { job(); });
      else
        job();
      return ncclSuccess;
    }
    ncclResult_t r = launchInit(h, job);
    if (r != ncclSuccess && r != ncclInProgress) {
      std::string msg = h->initError;
      core::discardHandle(h);
      fail(r, "ncclCommSplit: %s", msg.c_str());
    }
    *newcomm = h;
    return r;
  });
}

STRATA_API ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                        ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return api::guarded([&]() -> ncclResult_t {
    core::CommUse use(comm, "ncclCommShrink");
    core::Communicator& parent = use.ready("ncclCommShrink", true);
    STRATA_REQUIRE(newcomm, ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
    STRATA_REQUIRE(shrinkFlags == NCCL_SHRINK_DEFAULT || shrinkFlags == NCCL_SHRINK_ABORT, ncclInvalidArgument,
                   "ncclCommShrink: unknown shrinkFlags 0x%x", shrinkFlags);
    STRATA_REQUIRE(excludeRanksCount >= 0 && (excludeRanksCount == 0 || excludeRanksList), ncclInvalidArgument,
                   "ncclCommShrink: excludeRanksList is NULL with count %d", excludeRanksCount);
    std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
    std::sort(excluded.begin(), excluded.end());
    excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
    for (int r : excluded)
      STRATA_REQUIRE(r >= 0 && r < parent.nranks(), ncclInvalidArgument,
                     "ncclCommShrink: excluded rank %d is out of range [0, %d)", r, parent.nranks());
    STRATA_REQUIRE(!std::binary_search(excluded.begin(), excluded.end(), parent.rank()), ncclInvalidArgument,
                   "ncclCommShrink: rank %d is in its own exclude list; excluded ranks must not call it",
                   parent.rank());
    STRATA_REQUIRE(static_cast<int>(excluded.size()) < parent.nranks(), ncclInvalidArgument,
                   "ncclCommShrink: every rank is excluded");
    *newcomm = nullptr;
    if (shrinkFlags == NCCL_SHRINK_ABORT)  // stop whatever still runs on the parent
      parent.stop("ncclCommShrink with NCCL_SHRINK_ABORT was called while the call ran");
    CommOptions opts = parseConfig(config, "ncclCommShrink", parent.options());
    std::vector<SockAddr> addrs;
    int me = -1;
    for (int r = 0; r < parent.nranks(); ++r) {
      if (std::binary_search(excluded.begin(), excluded.end(), r)) continue;
      if (r == parent.rank()) me = static_cast<int>(addrs.size());
      addrs.push_back(parent.peer(r).listenAddr);
    }
    std::vector<uint64_t> salt{parent.magic(), parent.nextChildSeq(), 0x5117ull};
    for (int r : excluded) salt.push_back(static_cast<uint64_t>(r));
    uint64_t magic = hashBytes(salt.data(), salt.size() * sizeof(uint64_t));
    ncclComm* h = core::newHandle(me, static_cast<int>(addrs.size()), opts);
    ncclResult_t r = launchInit(h, [h, magic, me, addrs, opts, kin = parent.adoptChild(magic, me)] {
      return core::Communicator::fromParent(magic, me, addrs, opts, &h->abortedBy, kin);
    });
    if (r != ncclSuccess && r != ncclInProgress) {
      std::string msg = h->initError;
      core::discardHandle(h);
      fail(r, "ncclCommShrink: %s", msg.c_str());
    }
    *newcomm = h;
    return r;
  });
}

// Host operations finish before their call returns; device operations are waited for.
STRATA_API ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return api::guarded([&] { core::finalizeHandle(comm); });
}

STRATA_API ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  return api::guarded([&] {
    if (comm) core::destroyHandle(comm);  // as NCCL: destroying NULL is a no-op
  });
}

STRATA_API ncclResult_t pncclCommAbort(ncclComm_t comm) {
  return api::guarded([&] {
    if (comm) core::abortHandle(comm);
  });
}

STRATA_API ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclCommRevoke");
    core::Communicator& c = use.ready("ncclCommRevoke", true);
    STRATA_REQUIRE(revokeFlags == NCCL_REVOKE_DEFAULT, ncclInvalidArgument,
                   "ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT (0), got 0x%x", revokeFlags);
    c.revoke();
    c.stop("ncclCommRevoke was called while the call ran");
  });
}

STRATA_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclCommGetAsyncError");
    STRATA_REQUIRE(asyncError, ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    ncclResult_t st = comm->initState.load();
    *asyncError = st != ncclSuccess ? st : comm->impl->asyncError();
    if (st != ncclSuccess && st != ncclInProgress) api::noteLastError(comm->initError);
  });
}

STRATA_API ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclCommCount");
    core::Communicator& c = use.ready("ncclCommCount", true);
    STRATA_REQUIRE(count, ncclInvalidArgument, "ncclCommCount: count is NULL");
    *count = c.nranks();
  });
}

// The GPU current when ncclCommInitRank ran (the devlist entry for ncclCommInitAll);
// -1 for a communicator made where no GPU is visible.
STRATA_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclCommCuDevice");
    core::Communicator& c = use.ready("ncclCommCuDevice", true);
    STRATA_REQUIRE(device, ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
    *device = c.device();
  });
}

STRATA_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  return api::guarded([&] {
    core::CommUse use(comm, "ncclCommUserRank");
    core::Communicator& c = use.ready("ncclCommUserRank", true);
    STRATA_REQUIRE(rank, ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
    *rank = c.rank();
  });
}

STRATA_ALIAS(ncclGetUniqueId)
STRATA_ALIAS(ncclCommInitRank)
STRATA_ALIAS(ncclCommInitRankConfig)
STRATA_ALIAS(ncclCommInitRankScalable)
STRATA_ALIAS(ncclCommInitAll)
STRATA_ALIAS(ncclCommSplit)
STRATA_ALIAS(ncclCommShrink)
STRATA_ALIAS(ncclCommFinalize)
STRATA_ALIAS(ncclCommDestroy)
STRATA_ALIAS(ncclCommAbort)
STRATA_ALIAS(ncclCommRevoke)
STRATA_ALIAS(ncclCommGetAsyncError)
STRATA_ALIAS(ncclCommCount)
STRATA_ALIAS(ncclCommCuDevice)
STRATA_ALIAS(ncclCommUserRank)
