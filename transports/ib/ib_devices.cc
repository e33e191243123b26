#include "transports/ib/ib_devices.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "transports/ib/gid_choice.h"
#include "transports/ib/hca_filter.h"

namespace strata::transport::ib {
namespace {

constexpr size_t kRegistrationLimit = size_t(64) << 30;  // pinned at once per device

bool zeroGid(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

// Relaxed ordering, decided as NCCL decides it: asked for (NCCL_IB_PCI_RELAXED_ORDERING
// 1, or 2: where supported, the default) and the library has ibv_reg_mr_iova2
// (IBVERBS_1.8), the registration that takes IBV_ACCESS_RELAXED_ORDERING; a device
// without support ignores that flag, as it is optional.
bool relaxedOrdering(const Verbs& v) {
  int mode = config().ibPciRelaxedOrdering;
  if (mode == 0) return false;
  if (v.regMrIova2) return true;
  static std::once_flag warned;
  if (mode == 1)
    std::call_once(warned, [&] {
      STRATA_WARN(-1, "IB: NCCL_IB_PCI_RELAXED_ORDERING=1, but %s has no ibv_reg_mr_iova2 (rdma-core before "
                  "IBVERBS_1.8): registering without relaxed ordering", v.file.c_str());
    });
  return false;
}

// As NCCL probes it: a registration of no buffer (fd -1) fails with EOPNOTSUPP or
// EPROTONOSUPPORT where the kernel or driver has no dma-buf support, and with another
// error (EBADF, EINVAL) where it has.
bool dmabufSupported(const Verbs& v, ibv_pd* pd) {
  if (!v.regDmabufMr) return false;
  errno = 0;
  ibv_mr* mr = v.regDmabufMr(pd, 0, 0, 0, -1, 0);
  if (mr) {
    v.deregMr(mr);
    return true;
  }
  return errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
}

// The device's PCI function in sysfs (<ibdev_path>/device, resolved), "" when unknown.
std::string pciPathOf(ibv_device* dev) {
  std::string link = std::string(dev->ibdev_path) + "/device";
  char* real = dev->ibdev_path[0] ? realpath(link.c_str(), nullptr) : nullptr;
  std::string path = real ? real : "";
  free(real);
  return path;
}

// What ibv_fork_init did, once per process (discovery runs once).
void logForkProtection(const Verbs& v) {
  if (v.forkInit == 0 && v.forkStatus == IBV_FORK_UNNEEDED) {
    STRATA_INFO(kSubsysNet, -1, "IB: fork protection not needed: the kernel copies registered pages into forked "
                                "children (5.13 or later)");
  } else if (v.forkInit == 0) {
    STRATA_INFO(kSubsysNet, -1, "IB: fork protection on (ibv_fork_init): registered pages are left out of forked "
                                "children (MADV_DONTFORK)");
  } else if (v.forkInit > 0) {
    STRATA_WARN(-1, "IB: ibv_fork_init failed: %s%s; a fork() (a DataLoader worker, a subprocess) may then corrupt "
                "RDMA buffers on kernels before 5.13", strerror(v.forkInit),
                v.forkInit == EINVAL ? " (another user of libibverbs in this process registered memory or made "
                                       "queues first; RDMAV_FORK_SAFE=1 makes libibverbs protect from its first call)"
                                     : "");
  } else {
    STRATA_WARN(-1, "IB: no fork protection (%s has no ibv_fork_init); a fork() (a DataLoader worker, a "
                "subprocess) may then corrupt RDMA buffers on kernels before 5.13", v.file.c_str());
  }
}

// Opens one device's selected active ports; appends them to `out`.
void openDevice(const Verbs& v, ibv_device* dev, const HcaFilter& filter, std::vector<Port>* out) {
  std::string name = v.getDeviceName(dev);
  ibv_context* ctx = v.openDevice(dev);
  if (!ctx) {
    STRATA_INFO(kSubsysNet, -1, "IB: cannot open %s", name.c_str());
    return;
  }
  ibv_device_attr da{};
  if (v.queryDevice(ctx, &da) != 0) {
    v.closeDevice(ctx);
    return;
  }
  ibv_pd* pd = nullptr;
  std::shared_ptr<MrCache> mrs;
  for (int p = 1; p <= da.phys_port_cnt; ++p) {
    ibv_port_attr pa{};
    if (v.queryPort(ctx, static_cast<uint8_t>(p), &pa) != 0) continue;
    if (!filter.selects(name, p)) {
      STRATA_INFO(kSubsysNet, -1, "IB: %s:%d not selected by NCCL_IB_HCA=%s", name.c_str(), p, config().ibHca.c_str());
      continue;
    }
    if (pa.state != IBV_PORT_ACTIVE) {
      STRATA_INFO(kSubsysNet, -1, "IB: %s:%d is not active (state %d)", name.c_str(), p, static_cast<int>(pa.state));
      continue;
    }
    if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND && pa.link_layer != IBV_LINK_LAYER_ETHERNET) continue;
    if (!pd && !(pd = v.allocPd(ctx))) break;
    bool ro = relaxedOrdering(v);
    if (!mrs) {
      const Verbs* vp = &v;
      ibv_pd* domain = pd;
      int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
      mrs = std::make_shared<MrCache>([vp, domain, access, ro](void* b, size_t n) -> void* {
        if (ro)  // the entry point that takes IBV_ACCESS_RELAXED_ORDERING (an optional flag)
          return vp->regMrIova2(domain, b, n, reinterpret_cast<uintptr_t>(b), access | IBV_ACCESS_RELAXED_ORDERING);
        return vp->regMr(domain, b, n, access);
      }, [vp](void* mr) { vp->deregMr(static_cast<ibv_mr*>(mr)); }, kRegistrationLimit);
    }
    Port port;
    port.device = name;
    port.pciPath = pciPathOf(dev);
    port.port = p;
    port.ctx = ctx;
    port.pd = pd;
    port.attr = pa;
    port.roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    port.gidIndex = chooseGidIndex(v, ctx, name, p, pa);
    if (v.queryGid(ctx, static_cast<uint8_t>(p), port.gidIndex, &port.gid) != 0 || (port.roce && zeroGid(port.gid))) {
      // Said, not silent: a job whose NCCL_IB_GID_INDEX names no address would otherwise
      // lose its NICs without a word and run over TCP, or fail as having no IB.
      STRATA_WARN(-1, "IB: %s:%d has no GID at index %d%s: the port is not used", name.c_str(), p, port.gidIndex,
                  port.roce && config().ibGidIndex >= 0 ? format(" (NCCL_IB_GID_INDEX=%d)", config().ibGidIndex).c_str()
                                                         : "");
      continue;
    }
    port.rateMbps = portRateMbps(pa.active_speed, pa.active_width);
    if (port.rateMbps == 0) {
      port.rateMbps = sysfsRateMbps(dev->ibdev_path, p);
      STRATA_INFO(kSubsysNet, -1, "IB: %s:%d has speed code %d, width code %d: %d Mbit/s from sysfs", name.c_str(), p,
                  static_cast<int>(pa.active_speed), static_cast<int>(pa.active_width), port.rateMbps);
    }
    port.relaxedOrdering = ro;
    port.dmabuf = dmabufSupported(v, pd);
    port.guid = da.node_guid;
    port.mrs = mrs;
    STRATA_INFO(kSubsysNet, -1, "IB: using %s:%d (%s, %d Mbit/s, GID index %d: %s, MTU %d%s%s)", name.c_str(), p,
                port.roce ? "RoCE" : "InfiniBand", port.rateMbps, port.gidIndex, gidText(port.gid).c_str(),
                128 << pa.active_mtu,
                ro ? ", relaxed ordering" : "", port.dmabuf ? ", dma-buf (GPUDirect RDMA)" : "");
    out->push_back(std::move(port));
  }
  // A device with no port in use stays open: closing needs its PD gone, and it is one per process.
}

std::vector<Port> discover() {
  std::vector<Port> out;
  if (config().ibDisable) {
    STRATA_INFO(kSubsysNet, -1, "IB: disabled (NCCL_IB_DISABLE=1)");
    return out;
  }
  std::string why;
  const Verbs* v = verbs(&why);
  if (!v) {
    STRATA_INFO(kSubsysNet, -1, "IB: no verbs library (%s)", why.c_str());
    return out;
  }
  logForkProtection(*v);
  int n = 0;
  ibv_device** list = v->getDeviceList(&n);
  if (!list) {
    STRATA_INFO(kSubsysNet, -1, "IB: %s lists no devices", v->file.c_str());
    return out;
  }
  HcaFilter filter(config().ibHca);
  for (int i = 0; i < n; ++i) openDevice(*v, list[i], filter, &out);
  v->freeDeviceList(list);
  if (out.empty()) STRATA_INFO(kSubsysNet, -1, "IB: %d devices from %s, no active port selected", n, v->file.c_str());
  return out;
}

}  // namespace

bool adaptiveRouting(const Port& p) {
  return config().ibAdaptiveRouting < 0 ? !p.roce : config().ibAdaptiveRouting == 1;
}

const std::vector<Port>& ports() {
  // Never destroyed, like the contexts and protection domains it holds: connections
  // may still close while the process exits.
  static const std::vector<Port>* list = new std::vector<Port>(discover());
  return *list;
}

}  // namespace strata::transport::ib
