// libibverbs, loaded at run time: libnccl.so.2 has no DT_NEEDED on it and works
// where rdma-core is absent. The table holds the entry points the IB transport
// uses; ibv_post_send / ibv_post_recv / ibv_poll_cq are inline in verbs.h and
// dispatch through the device context's ops, so they need no symbol.
// STRATA_IBVERBS_LIB names another library with the same API (the tests'
// user-space verbs device, tests/verbs_emu).
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace strata::transport::ib {

struct Verbs {
  ibv_device** (*getDeviceList)(int*);
  void (*freeDeviceList)(ibv_device**);
  const char* (*getDeviceName)(ibv_device*);
  ibv_context* (*openDevice)(ibv_device*);
  int (*closeDevice)(ibv_context*);
  int (*queryDevice)(ibv_context*, ibv_device_attr*);
  int (*queryPort)(ibv_context*, uint8_t, ibv_port_attr*);
  int (*queryGid)(ibv_context*, uint8_t, int, ibv_gid*);
  int (*queryGidEx)(ibv_context*, uint32_t, uint32_t, ibv_gid_entry*, uint32_t, size_t);  // may be null
  ibv_pd* (*allocPd)(ibv_context*);
  int (*deallocPd)(ibv_pd*);
  ibv_mr* (*regMr)(ibv_pd*, void*, size_t, int);
  ibv_mr* (*regDmabufMr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int);  // may be null
  ibv_mr* (*regMrIova2)(ibv_pd*, void*, size_t, uint64_t, unsigned);  // IBVERBS_1.8 (relaxed ordering); may be null
  int (*deregMr)(ibv_mr*);
  ibv_cq* (*createCq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroyCq)(ibv_cq*);
  ibv_qp* (*createQp)(ibv_pd*, ibv_qp_init_attr*);
  int (*modifyQp)(ibv_qp*, ibv_qp_attr*, int);
  int (*destroyQp)(ibv_qp*);
  const char* (*wcStatusStr)(ibv_wc_status);
  std::string file;  // the library loaded
  // ibv_fork_init's result, called once as the library loads (before any registration,
  // as NCCL's ncclIbInit does): 0, the error it returned, or -1 when not called (the
  // library lacks it, or the mutation stage left it out).
  int forkInit = -1;
  int forkStatus = -1;  // ibv_is_fork_initialized's answer after that (IBV_FORK_*), -1 if the library lacks it
};

// The loaded library, or null (with the reason in *why) when it cannot be loaded
// or lacks an entry point. Loaded once per process.
const Verbs* verbs(std::string* why = nullptr);

}  // namespace strata::transport::ib
