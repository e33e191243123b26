// strata_torch._C: the creator function torch.distributed.Backend.register_backend
// takes, and the library's version. The ProcessGroup it returns is torch's own
// Python type (torch._C._distributed_c10d.ProcessGroup), so every torch.distributed
// call works on it unchanged.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "Strata's torch.distributed backend (CPU tensors)";
  pybind11::module::import("torch.distributed");  // registers the Store and ProcessGroup types
  m.def("create_process_group", &strata::torch_backend::createProcessGroupStrata, pybind11::arg("store"),
        pybind11::arg("rank"), pybind11::arg("world_size"), pybind11::arg("timeout"),
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "Creates the Strata process group of `world_size` ranks; the unique id travels through `store`.");
  m.def("nccl_version", [] {
    int v = 0;
    ncclGetVersion(&v);
    return v;
  });
}
