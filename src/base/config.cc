#include "base/config.h"

#include "base/conf_file.h"

#include <strings.h>

#include <cstdlib>
#include <atomic>
#include <memory>
#include <mutex>

#include "base/error.h"

namespace strata {
namespace {

struct Subsys {
  const char* name;
  uint32_t bit;
};
constexpr Subsys kSubsystems[] = {
    {"INIT", kSubsysInit},   {"COLL", kSubsysColl},   {"P2P", kSubsysP2p},         {"SHM", kSubsysShm},
    {"NET", kSubsysNet},     {"GRAPH", kSubsysGraph}, {"TUNING", kSubsysTuning},   {"ENV", kSubsysEnv},
    {"ALLOC", kSubsysAlloc}, {"BOOTSTRAP", kSubsysBootstrap}, {"ALL", kSubsysAll},
};

bool parseLevel(const char* v, LogLevel* out) {
  struct { const char* name; LogLevel level; } levels[] = {
      {"VERSION", LogLevel::kVersion}, {"WARN", LogLevel::kWarn}, {"INFO", LogLevel::kInfo},
      {"TRACE", LogLevel::kTrace},     {"NONE", LogLevel::kNone},
  };
  for (auto& l : levels) {
    if (strcasecmp(v, l.name) == 0) {
      *out = l.level;
      return true;
    }
  }
  return false;
}

// "INIT,COLL" sets exactly those; "^INIT" means everything but INIT.
uint32_t parseSubsys(const std::string& v, std::vector<std::string>* warnings) {
  bool invert = !v.empty() && v[0] == '^';
  uint32_t mask = 0;
  size_t pos = invert ? 1 : 0;
  while (pos <= v.size()) {
    size_t comma = v.find(',', pos);
    std::string tok = v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!tok.empty()) {
      bool known = false;
      for (auto& s : kSubsystems) {
        if (strcasecmp(tok.c_str(), s.name) == 0) {
          mask |= s.bit;
          known = true;
        }
      }
      if (!known) warnings->push_back("NCCL_DEBUG_SUBSYS: unknown subsystem '" + tok + "' ignored");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return invert ? ~mask : mask;
}

// Integers with an optional K/M/G suffix (binary multiples), as NCCL_BUFFSIZE users write them.
bool parseInt(const char* v, long long* out) {
  char* end = nullptr;
  long long n = strtoll(v, &end, 0);
  if (end == v) return false;
  switch (*end) {
    case 'k': case 'K': n <<= 10; ++end; break;
    case 'm': case 'M': n <<= 20; ++end; break;
    case 'g': case 'G': n <<= 30; ++end; break;
    default: break;
  }
  if (*end != '\0') return false;
  *out = n;
  return true;
}

class Parser {
 public:
  Parser(const std::function<const char*(const char*)>& lookup, Config* cfg) : lookup_(lookup), cfg_(cfg) {}

  const char* get(const char* name) {
    const char* v = lookup_(name);
    return (v && *v) ? v : nullptr;
  }
  void str(const char* name, std::string* field) {
    if (const char* v = get(name)) *field = v;
  }
  template <typename T>
  void integer(const char* name, T* field, long long lo, long long hi) {
    const char* v = get(name);
    if (!v) return;
    long long n;
    if (!parseInt(v, &n) || n < lo || n > hi) {
      cfg_->warnings.push_back(format("%s=%s is not an integer in [%lld, %lld]; using %lld", name, v, lo, hi,
                                      static_cast<long long>(*field)));
      return;
    }
    *field = static_cast<T>(n);
  }
  void flag(const char* name, bool* field) {
    int n = *field;
    integer(name, &n, 0, 1);
    *field = n != 0;
  }
  void positive(const char* name, double* field, const char* what) {
    const char* v = get(name);
    if (!v) return;
    char* end = nullptr;
    double d = strtod(v, &end);
    if (end == v || *end != '\0' || d <= 0) {
      cfg_->warnings.push_back(format("%s=%s is not a positive number of %s; using %g", name, v, what, *field));
      return;
    }
    *field = d;
  }

 private:
  const std::function<const char*(const char*)>& lookup_;
  Config* cfg_;
};

// The current configuration. A reload publishes a new one and keeps the old
// alive (reloads are rare), so threads still reading the old one stay safe.
std::atomic<Config*> gCurrent{nullptr};
std::mutex gReloadMutex;

// The environment, then NCCL's configuration files for what it does not set.
Config* parseEnvironment() {
  const char* confVar = getenv("NCCL_CONF_FILE");
  ConfFiles files = readConfFiles(confFilePaths(confVar, getenv("HOME")), confVar && *confVar);
  auto* c = new Config(Config::parse([&files](const char* n) -> const char* {
    if (const char* v = getenv(n)) return v;
    auto it = files.values.find(n);
    return it == files.values.end() ? nullptr : it->second.c_str();
  }));
  c->confFiles = files.read;
  c->warnings.insert(c->warnings.end(), files.warnings.begin(), files.warnings.end());
  return c;
}

}  // namespace

Config Config::parse(const std::function<const char*(const char*)>& lookup) {
  Config c;
  Parser p(lookup, &c);
  if (const char* v = p.get("NCCL_DEBUG")) {
    if (!parseLevel(v, &c.debugLevel)) c.warnings.push_back(format("NCCL_DEBUG=%s is not VERSION|WARN|INFO|TRACE", v));
  }
  if (const char* v = p.get("NCCL_DEBUG_SUBSYS")) c.debugSubsys = parseSubsys(v, &c.warnings);
  p.str("NCCL_DEBUG_FILE", &c.debugFile);
  p.str("NCCL_HOSTID", &c.hostId);
  p.str("NCCL_SOCKET_IFNAME", &c.socketIfname);
  p.flag("NCCL_SHM_DISABLE", &c.shmDisable);
  p.flag("STRATA_CMA", &c.cma);
  p.integer("STRATA_CMA_BULK_BYTES", &c.cmaBulkBytes, 0, 1ll << 50);
  p.integer("STRATA_PUT_BYTES", &c.putBytes, 0, 1ll << 40);
  c.putBytesSet = p.get("STRATA_PUT_BYTES") != nullptr;
  p.integer("NCCL_SOCKET_NTHREADS", &c.socketThreads, 1, 16);
  p.integer("NCCL_NSOCKS_PERTHREAD", &c.socksPerThread, 1, 64);
  if (c.socketThreads * c.socksPerThread > 64) {
    c.warnings.push_back("NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD exceeds 64; using " +
                         std::to_string(64 / c.socketThreads) + " sockets per thread");
    c.socksPerThread = 64 / c.socketThreads;
  }
  p.str("NCCL_ALGO", &c.algo);
  p.str("NCCL_PROTO", &c.proto);
  p.integer("NCCL_MIN_NCHANNELS", &c.minChannels, 1, 64);
  p.integer("NCCL_MAX_NCHANNELS", &c.maxChannels, 1, 64);
  p.integer("NCCL_BUFFSIZE", &c.buffSize, 4096, 1ll << 30);
  p.integer("NCCL_COMM_BLOCKING", &c.commBlocking, 0, 1);
  p.positive("STRATA_TIMEOUT", &c.timeoutSec, "seconds");
  p.positive("STRATA_NET_GBPS", &c.netGBps, "GB/s");
  p.integer("STRATA_NSLOTS", &c.slots, 2, 64);
  p.integer("STRATA_SPIN", &c.spinCount, 0, 1 << 24);
  p.integer("STRATA_GPU_SIM", &c.gpuSim, 0, 64);
  p.flag("STRATA_GPU_SIM_STRICT", &c.gpuSimStrict);
  p.flag("STRATA_GPU_SIM_JITTER", &c.gpuSimJitter);
  p.flag("STRATA_GPU_SIM_WEAK", &c.gpuSimWeak);
  p.integer("STRATA_GPU_SIM_BLOCKS", &c.gpuSimBlocks, 1, 1 << 20);
  p.integer("STRATA_GPU_SIM_THREADS", &c.gpuSimThreads, 1, 64);
  p.integer("STRATA_GPU_SIM_CHANNELS", &c.gpuSimChannels, 1, 32);
  p.positive("STRATA_DEVICE_TIMEOUT", &c.deviceTimeoutSec, "seconds");
  p.integer("CUDA_DEVICE_MAX_CONNECTIONS", &c.cudaMaxConnections, 1, 32);
  p.str("STRATA_PRESET_DIR", &c.presetDir);
  p.str("NCCL_TOPO_FILE", &c.topoFile);
  p.str("NCCL_TOPO_DUMP_FILE", &c.topoDumpFile);
  p.integer("NCCL_TOPO_DUMP_FILE_RANK", &c.topoDumpRank, 0, 1 << 30);
  p.flag("NCCL_P2P_DISABLE", &c.p2pDisable);
  p.str("NCCL_P2P_LEVEL", &c.p2pLevel);
  c.netPluginSet = p.get("NCCL_NET_PLUGIN") != nullptr;
  p.str("NCCL_NET_PLUGIN", &c.netPlugin);
  p.str("NCCL_NET", &c.netName);
  p.flag("NCCL_IB_DISABLE", &c.ibDisable);
  p.str("NCCL_IB_HCA", &c.ibHca);
  p.integer("NCCL_IB_GID_INDEX", &c.ibGidIndex, -1, 1 << 16);
  p.integer("NCCL_IB_ROUTABLE_FLID_GID_INDEX", &c.ibRoutableFlidGidIndex, 0, 1 << 16);
  p.integer("NCCL_IB_ROCE_VERSION_NUM", &c.ibRoceVersion, 1, 2);
  p.str("NCCL_IB_ADDR_FAMILY", &c.ibAddrFamily);
  if (c.ibAddrFamily != "AF_INET" && c.ibAddrFamily != "AF_INET6") {
    c.warnings.push_back(format("NCCL_IB_ADDR_FAMILY=%s is neither AF_INET nor AF_INET6; using AF_INET",
                                c.ibAddrFamily.c_str()));
    c.ibAddrFamily = "AF_INET";
  }
  p.str("NCCL_IB_ADDR_RANGE", &c.ibAddrRange);
  p.integer("NCCL_IB_TC", &c.ibTc, 0, 255);
  p.integer("NCCL_IB_FIFO_TC", &c.ibFifoTc, -1, 255);
  p.integer("NCCL_IB_SL", &c.ibSl, 0, 15);
  p.integer("NCCL_IB_TIMEOUT", &c.ibTimeout, 1, 31);
  p.integer("NCCL_IB_RETRY_CNT", &c.ibRetryCnt, 0, 7);
  p.integer("NCCL_IB_QPS_PER_CONNECTION", &c.ibQpsPerConnection, 1, 16);
  p.flag("NCCL_IB_SPLIT_DATA_ON_QPS", &c.ibSplitDataOnQps);
  p.integer("NCCL_IB_PCI_RELAXED_ORDERING", &c.ibPciRelaxedOrdering, 0, 2);
  p.integer("NCCL_IB_ADAPTIVE_ROUTING", &c.ibAdaptiveRouting, -1, 1);
  p.integer("NCCL_IB_AR_THRESHOLD", &c.ibArThreshold, 0, 1ll << 40);
  p.str("NCCL_NET_GDR_LEVEL", &c.netGdrLevel);
  p.str("STRATA_IBVERBS_LIB", &c.ibverbsLib);
  p.str("STRATA_MUTATION", &c.mutation);
  if (c.minChannels > c.maxChannels) {
    c.warnings.push_back(format("NCCL_MIN_NCHANNELS=%d exceeds NCCL_MAX_NCHANNELS=%d; using %d", c.minChannels,
                                c.maxChannels, c.maxChannels));
    c.minChannels = c.maxChannels;
  }
  return c;
}

const Config& config() {
  Config* c = gCurrent.load(std::memory_order_acquire);
  if (c) return *c;
  std::lock_guard<std::mutex> lock(gReloadMutex);
  if (!gCurrent.load()) gCurrent.store(parseEnvironment(), std::memory_order_release);
  return *gCurrent.load();
}

void reloadConfig() {
  static std::vector<std::unique_ptr<Config>> retired;  // kept, and reachable, for readers still using them
  std::lock_guard<std::mutex> lock(gReloadMutex);
  if (Config* old = gCurrent.exchange(parseEnvironment(), std::memory_order_acq_rel)) retired.emplace_back(old);
}

}  // namespace strata
