#include "transports/net/plugin.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdarg>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "transports/net/nccl_net.h"

namespace strata::transport::net {
namespace {

// What a plugin logs goes to Strata's log (subsystem NET), at its level.
void pluginLog(int level, unsigned long /*flags*/, const char* file, int line, const char* fmt, ...) {
  LogLevel l = level <= 0 ? LogLevel::kNone : level == 1 ? LogLevel::kVersion : level == 2 ? LogLevel::kWarn
               : level == 5 ? LogLevel::kTrace : LogLevel::kInfo;
  if (l == LogLevel::kNone || !logEnabled(l, kSubsysNet)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  logLine(l, kSubsysNet, -1, "net plugin: %s (%s:%d)", buf, file ? file : "?", line);
}

constexpr const char* kNoDeviceNetwork =
    "its receives must be unpacked by GPU kernels (NCCL's netDeviceType UNPACK, as the GPUDirect TCPX and FasTrak "
    "plugins need), which Strata does not implement";

// One loaded plugin table, whichever version, behind the Network interface.
class PluginNet final : public Network {
 public:
  // The library stays loaded for the process (its threads or atexit handlers may still run).
  PluginNet(int version, const void* table, std::string file) : version_(version), file_(std::move(file)) {
    memcpy(&t_, table, version == 8 ? sizeof(abi::NetV8) : version == 9 ? sizeof(abi::NetV9)
                       : version == 10 ? sizeof(abi::NetV10) : sizeof(abi::NetV11));
    name_ = t_.v8.name ? t_.v8.name : file_;
  }
  ~PluginNet() override {
    if (version_ == 11 && t_.v11.finalize && ctx_) t_.v11.finalize(ctx_);
    // The library stays loaded: its threads or atexit handlers may still run.
  }

  // Initialises the plugin; false (logged) when it fails.
  bool init() {
    ncclResult_t r;
    if (version_ == 11) {
      abi::CommConfig cfg{-1};
      r = t_.v11.init(&ctx_, 0, &cfg, pluginLog, nullptr);
    } else if (version_ == 10) {
      r = t_.v10.init(pluginLog, nullptr);
    } else {
      r = t_.v8.init(pluginLog);  // v8 and v9 share the signature
    }
    if (r != ncclSuccess) STRATA_INFO(kSubsysNet, -1, "net plugin %s (%s, v%d): init failed (%d)", name_.c_str(),
                                      file_.c_str(), version_, static_cast<int>(r));
    return r == ncclSuccess;
  }

  const std::string& name() const override { return name_; }
  int version() const { return version_; }
  const std::string& file() const { return file_; }

  int devices() override {
    int n = 0;
    check(t_.v8.devices(&n), "devices");
    return n;
  }

  DeviceProperties properties(int dev) override {
    abi::PropertiesBuffer p;
    memset(&p, 0, sizeof(p));
    DeviceProperties d;
    if (version_ == 8) {
      check(t_.v8.getProperties(dev, &p.v8), "getProperties");
      fill(&d, p.v8.name, p.v8.pciPath, p.v8.guid, p.v8.ptrSupport, p.v8.speed, p.v8.port, p.v8.latency,
           p.v8.maxComms, p.v8.maxRecvs);
      d.deviceType = p.v8.netDeviceType;
    } else {
      auto get = version_ == 9 ? t_.v9.getProperties : version_ == 10 ? t_.v10.getProperties : t_.v11.getProperties;
      check(get(dev, &p.v9), "getProperties");
      fill(&d, p.v9.name, p.v9.pciPath, p.v9.guid, p.v9.ptrSupport, p.v9.speed, p.v9.port, p.v9.latency,
           p.v9.maxComms, p.v9.maxRecvs);
      d.deviceType = p.v9.netDeviceType;
    }
    return d;
  }

  void* listen(int dev, void* handle) override {
    void* comm = nullptr;
    check(version_ == 11 ? t_.v11.listen(ctx_, dev, handle, &comm) : t_.v8.listen(dev, handle, &comm), "listen");
    return comm;
  }

  void* connect(int dev, void* handle) override {
    void* comm = nullptr;
    abi::DeviceHandle* devComm = nullptr;  // no device offload
    ncclResult_t r;
    if (version_ == 11) {
      r = t_.v11.connect(ctx_, dev, handle, &comm, &devComm);
    } else if (version_ == 10) {
      abi::CommConfig cfg{-1};
      r = t_.v10.connect(dev, &cfg, handle, &comm, &devComm);
    } else {
      r = t_.v8.connect(dev, handle, &comm, &devComm);
    }
    check(r, "connect");
    refuseDeviceHandle(comm, devComm, "connect", &abi::NetV8::closeSend);
    return comm;
  }

  void* accept(void* listenComm) override {
    void* comm = nullptr;
    abi::DeviceHandle* devComm = nullptr;
    check(t_.v8.accept(listenComm, &comm, &devComm), "accept");
    refuseDeviceHandle(comm, devComm, "accept", &abi::NetV8::closeRecv);
    return comm;
  }

  void* regMr(void* comm, void* data, size_t bytes, int ptrType) override {
    void* mh = nullptr;
    check(t_.v8.regMr(comm, data, bytes, ptrType, &mh), "regMr");
    return mh;
  }
  void deregMr(void* comm, void* mhandle) override { check(t_.v8.deregMr(comm, mhandle), "deregMr"); }
  void* regMrDmaBuf(void* comm, void* data, size_t bytes, int ptrType, uint64_t offset, int fd) override {
    STRATA_REQUIRE(t_.v8.regMrDmaBuf, ncclInvalidUsage, "net plugin %s has no regMrDmaBuf", name_.c_str());
    void* mh = nullptr;
    check(t_.v8.regMrDmaBuf(comm, data, bytes, ptrType, offset, fd, &mh), "regMrDmaBuf");
    return mh;
  }
  bool iflush(void* comm, void* data, size_t bytes, void* mh, void** request) override {
    *request = nullptr;
    if (!t_.v8.iflush) return true;
    STRATA_REQUIRE(bytes <= INT32_MAX, ncclInternalError, "net plugin: a flush of %zu bytes", bytes);
    int size = static_cast<int>(bytes);
    check(t_.v8.iflush(comm, 1, &data, &size, &mh, request), "iflush");
    return true;
  }

  void* isend(void* comm, void* data, size_t bytes, int tag, void* mh) override {
    void* req = nullptr;
    ncclResult_t r;
    if (version_ == 8) {
      STRATA_REQUIRE(bytes <= INT32_MAX, ncclInternalError, "net plugin v8: a send of %zu bytes", bytes);
      r = t_.v8.isend(comm, data, static_cast<int>(bytes), tag, mh, &req);
    } else if (version_ == 9) {
      r = t_.v9.isend(comm, data, bytes, tag, mh, &req);
    } else {
      r = (version_ == 10 ? t_.v10.isend : t_.v11.isend)(comm, data, bytes, tag, mh, nullptr, &req);
    }
    check(r, "isend");
    return req;
  }

  void* irecv(void* comm, int n, const RecvBuffer* b) override {
    STRATA_REQUIRE(n >= 1 && n <= kMaxRecvs, ncclInternalError, "net plugin %s: a grouped receive of %d", name_.c_str(),
                   n);
    void* data[kMaxRecvs];
    void* mh[kMaxRecvs];
    size_t sizes[kMaxRecvs];
    int tags[kMaxRecvs], sizes32[kMaxRecvs];
    for (int i = 0; i < n; ++i) {
      data[i] = b[i].data, mh[i] = b[i].mhandle, sizes[i] = b[i].bytes, tags[i] = b[i].tag;
      STRATA_REQUIRE(version_ != 8 || b[i].bytes <= INT32_MAX, ncclInternalError,
                     "net plugin v8: a receive of %zu bytes", b[i].bytes);
      sizes32[i] = static_cast<int>(b[i].bytes);
    }
    void* req = nullptr;
    ncclResult_t r;
    if (version_ == 8) {
      r = t_.v8.irecv(comm, n, data, sizes32, tags, mh, &req);
    } else if (version_ == 9) {
      r = t_.v9.irecv(comm, n, data, sizes, tags, mh, &req);
    } else {
      void* ph[kMaxRecvs] = {};
      r = (version_ == 10 ? t_.v10.irecv : t_.v11.irecv)(comm, n, data, sizes, tags, mh, ph, &req);
    }
    check(r, "irecv");
    if (req && n > 1) {
      std::lock_guard<std::mutex> lock(groupsMu_);
      groups_[req] = n;
    }
    return req;
  }

  // A plugin writes one size per receive of the request (NCCL's test() contract).
  bool test(void* request, size_t* bytes) override {
    int done = 0, sizes[kMaxRecvs] = {};
    check(t_.v8.test(request, &done, sizes), "test");
    if (!done) return false;
    int n = 1;
    {
      std::lock_guard<std::mutex> lock(groupsMu_);
      auto it = groups_.find(request);
      if (it != groups_.end()) n = it->second, groups_.erase(it);
    }
    for (int i = 0; bytes && i < n; ++i) bytes[i] = static_cast<size_t>(sizes[i]);
    return true;
  }

  void closeSend(void* comm) override { check(t_.v8.closeSend(comm), "closeSend"); }
  void closeRecv(void* comm) override { check(t_.v8.closeRecv(comm), "closeRecv"); }
  void closeListen(void* comm) override { check(t_.v8.closeListen(comm), "closeListen"); }

 private:
  static void fill(DeviceProperties* d, const char* name, const char* pci, uint64_t guid, int ptr, int speed, int port,
                   float latency, int maxComms, int maxRecvs) {
    d->name = name ? name : "";
    d->pciPath = pci ? pci : "";
    d->guid = guid;
    d->ptrSupport = ptr;
    d->speedMbps = speed;
    d->port = port;
    d->latencyUs = latency;
    d->maxComms = maxComms;
    d->maxRecvs = maxRecvs > 0 ? std::min(maxRecvs, kMaxRecvs) : 1;  // Strata groups at most kMaxRecvs
  }
  // A connection whose receives the plugin wants unpacked on the GPU (it handed back
  // a device handle): closed, and refused.
  void refuseDeviceHandle(void* comm, const abi::DeviceHandle* devComm, const char* call,
                          ncclResult_t (*abi::NetV8::*close)(void*)) {
    if (!comm || !devComm || devComm->netDeviceType == 0) return;  // none, or a host one: nothing to unpack
    int type = devComm->netDeviceType;
    (t_.v8.*close)(comm);
    fail(ncclInvalidUsage, "net plugin %s: %s returned a device handle (netDeviceType %d): %s", name_.c_str(), call,
         type, kNoDeviceNetwork);
  }
  void check(ncclResult_t r, const char* call) const {
    if (r != ncclSuccess)
      fail(r == ncclRemoteError ? ncclRemoteError : ncclSystemError, "net plugin %s: %s failed (%s)", name_.c_str(),
           call, r == ncclRemoteError ? "remote error: the peer exited or the network failed" : "system error");
  }

  int version_;
  std::mutex groupsMu_;
  std::map<void*, int> groups_;  // grouped receives in flight: their n
  std::string file_, name_;
  void* ctx_ = nullptr;
  union {
    abi::NetV8 v8;
    abi::NetV9 v9;
    abi::NetV10 v10;
    abi::NetV11 v11;
  } t_{};
};

// The newest table `lib` exports, or null.
std::unique_ptr<PluginNet> openTable(const std::string& file) {
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    STRATA_INFO(kSubsysNet | kSubsysInit, -1, "net plugin: cannot load %s: %s", file.c_str(), dlerror());
    return nullptr;
  }
  for (int v = 11; v >= 8; --v) {
    std::string sym = "ncclNetPlugin_v" + std::to_string(v);
    if (const void* table = dlsym(lib, sym.c_str())) return std::make_unique<PluginNet>(v, table, file);
  }
  STRATA_WARN(-1, "net plugin %s exports none of ncclNetPlugin_v11 .. _v8 (older interfaces are not supported)",
              file.c_str());
  dlclose(lib);
  return nullptr;
}

std::unique_ptr<Network> load() {
  const Config& c = config();
  for (const std::string& file : pluginCandidates(c.netPlugin, c.netPluginSet)) {
    int version = 0;
    std::unique_ptr<Network> p = openPlugin(file, &version);
    if (!p) continue;
    int n = p->devices();
    if (!c.netName.empty() && strcasecmp(c.netName.c_str(), p->name().c_str()) != 0) {
      STRATA_INFO(kSubsysNet | kSubsysInit, -1, "net plugin %s (%s) skipped: NCCL_NET=%s", p->name().c_str(),
                  file.c_str(), c.netName.c_str());
      continue;
    }
    if (n <= 0) {
      STRATA_INFO(kSubsysNet | kSubsysInit, -1, "net plugin %s (%s) has no devices", p->name().c_str(), file.c_str());
      continue;
    }
    std::string why;
    try {
      why = unservable(*p);
    } catch (const Error& e) {
      why = e.what();
    }
    if (!why.empty()) {
      STRATA_WARN(-1, "net plugin %s (%s) not used: %s; the built-in networks are", p->name().c_str(), file.c_str(),
                  why.c_str());
      continue;
    }
    STRATA_INFO(kSubsysNet | kSubsysInit, -1, "NET/Plugin: using %s (%s, interface v%d, %d devices; first: %s, %d Mbit/s)",
                p->name().c_str(), file.c_str(), version, n, p->properties(0).name.c_str(),
                p->properties(0).speedMbps);
    return p;
  }
  if (c.netPluginSet && c.netPlugin != "none")
    STRATA_WARN(-1, "NCCL_NET_PLUGIN=%s: no plugin loaded (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET says why); using "
                "the built-in networks", c.netPlugin.c_str());
  return nullptr;
}

}  // namespace

std::unique_ptr<Network> openPlugin(const std::string& file, int* version) {
  std::unique_ptr<PluginNet> p = openTable(file);
  if (!p || !p->init()) return nullptr;
  if (version) *version = p->version();
  return p;
}

std::string unservable(Network& net) {
  int n = net.devices();
  for (int d = 0; d < n; ++d) {
    DeviceProperties p = net.properties(d);
    if (p.deviceType != 0)
      return format("device %d (%s) is of netDeviceType %d: %s", d, p.name.c_str(), p.deviceType, kNoDeviceNetwork);
  }
  return {};
}

std::vector<std::string> pluginCandidates(const std::string& value, bool set) {
  if (!set || value.empty()) return {"libnccl-net.so"};
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find(',', start);
    std::string item = value.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? value.size() + 1 : end + 1;
    if (item.empty()) continue;
    if (item == "none") return {};
    bool file = item.find('/') != std::string::npos || (item.size() > 3 && item.compare(item.size() - 3, 3, ".so") == 0);
    out.push_back(file ? item : "libnccl-net-" + item + ".so");
  }
  return out;
}

Network* pluginNetwork() {
  static std::once_flag once;
  static std::unique_ptr<Network> net;
  std::call_once(once, [] { net = load(); });
  return net.get();
}

}  // namespace strata::transport::net
