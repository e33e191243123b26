#include "transports/ib/verbs_lib.h"

#include <dlfcn.h>

#include <mutex>

#include "base/config.h"
#include "base/error.h"
#include "base/mutation.h"

namespace strata::transport::ib {
namespace {

template <typename F>
bool bind(void* lib, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out && missing->empty()) *missing = name;
  return *out != nullptr;
}

struct Loaded {
  Verbs v{};
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded l;
  const std::string& file = config().ibverbsLib;
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    l.why = format("cannot load %s: %s", file.c_str(), dlerror());
    return l;
  }
  std::string missing;
  Verbs& v = l.v;
  bind(lib, "ibv_get_device_list", &v.getDeviceList, &missing);
  bind(lib, "ibv_free_device_list", &v.freeDeviceList, &missing);
  bind(lib, "ibv_get_device_name", &v.getDeviceName, &missing);
  bind(lib, "ibv_open_device", &v.openDevice, &missing);
  bind(lib, "ibv_close_device", &v.closeDevice, &missing);
  bind(lib, "ibv_query_device", &v.queryDevice, &missing);
  bind(lib, "ibv_query_port", &v.queryPort, &missing);
  bind(lib, "ibv_query_gid", &v.queryGid, &missing);
  bind(lib, "ibv_alloc_pd", &v.allocPd, &missing);
  bind(lib, "ibv_dealloc_pd", &v.deallocPd, &missing);
  bind(lib, "ibv_reg_mr", &v.regMr, &missing);
  bind(lib, "ibv_dereg_mr", &v.deregMr, &missing);
  bind(lib, "ibv_create_cq", &v.createCq, &missing);
  bind(lib, "ibv_destroy_cq", &v.destroyCq, &missing);
  bind(lib, "ibv_create_qp", &v.createQp, &missing);
  bind(lib, "ibv_modify_qp", &v.modifyQp, &missing);
  bind(lib, "ibv_destroy_qp", &v.destroyQp, &missing);
  bind(lib, "ibv_wc_status_str", &v.wcStatusStr, &missing);
  std::string optional;
  bind(lib, "_ibv_query_gid_ex", &v.queryGidEx, &optional);
  bind(lib, "ibv_reg_dmabuf_mr", &v.regDmabufMr, &optional);
  bind(lib, "ibv_reg_mr_iova2", &v.regMrIova2, &optional);
  if (!missing.empty()) {
    l.why = format("%s has no %s", file.c_str(), missing.c_str());
    dlclose(lib);
    return l;
  }
  v.file = file;
  // Fork protection: without it a fork() (a DataLoader worker, a subprocess) turns the
  // registered pages copy-on-write on kernels before 5.13, and the NIC goes on with the
  // pages the parent no longer uses. With it every registration is MADV_DONTFORK.
  int (*forkInit)() = nullptr;
  if (bind(lib, "ibv_fork_init", &forkInit, &optional) && !mutated(Mutation::kIbNoForkInit)) v.forkInit = forkInit();
  int (*forkStatus)() = nullptr;  // rdma-core 35+: UNNEEDED where the kernel copies pinned pages (5.13+)
  if (bind(lib, "ibv_is_fork_initialized", &forkStatus, &optional)) v.forkStatus = forkStatus();
  l.ok = true;  // stays loaded for the life of the process
  return l;
}

}  // namespace

const Verbs* verbs(std::string* why) {
  static const Loaded loaded = load();
  if (why) *why = loaded.why;
  return loaded.ok ? &loaded.v : nullptr;
}

}  // namespace strata::transport::ib
