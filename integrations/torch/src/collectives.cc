// The collectives of ProcessGroupStrata: argument checks on the caller's thread
// (errors raise at the call, as with Gloo and NCCL), the NCCL calls on the worker.
#include "process_group.h"
#include "tensors.h"

namespace strata::torch_backend {
namespace {

using c10d::OpType;

void checkSameShape(const at::Tensor& t, const at::Tensor& like, int rank, const char* call) {
  if (t.scalar_type() != like.scalar_type() || t.numel() != like.numel())
    fail(rank, call, "tensors differ in type or size (" + std::string(c10::toString(t.scalar_type())) + "[" +
                         std::to_string(t.numel()) + "] vs " + c10::toString(like.scalar_type()) + "[" +
                         std::to_string(like.numel()) + "])");
}

// A list of `n` tensors like `like` (all-gather's outputs, scatter's inputs, ...).
const std::vector<at::Tensor>& checkList(const std::vector<std::vector<at::Tensor>>& lists, size_t n,
                                         const at::Tensor& like, int rank, const char* call) {
  if (lists.size() != 1) fail(rank, call, "expects one list of tensors, got " + std::to_string(lists.size()));
  if (lists[0].size() != n)
    fail(rank, call, "expects a list of " + std::to_string(n) + " tensors, got " + std::to_string(lists[0].size()));
  for (const at::Tensor& t : lists[0]) {
    checkCpu(t, rank, call);
    checkSameShape(t, like, rank, call);
  }
  return lists[0];
}

// `parts` (all alike) one after another in `flat`.
void flattenInto(const std::vector<at::Tensor>& parts, const at::Tensor& flat) {
  int64_t n = parts.empty() ? 0 : parts[0].numel();
  for (size_t i = 0; i < parts.size(); ++i) flat.narrow(0, i * n, n).copy_(parts[i].reshape({-1}));
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& parts) {
  int64_t n = parts.empty() ? 0 : parts[0].numel();
  for (size_t i = 0; i < parts.size(); ++i) parts[i].copy_(flat.narrow(0, i * n, n).view(parts[i].sizes()));
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const char* call = "all_reduce";
  at::Tensor t = single(tensors, rank_, call);
  ReduceSpec spec = reduceSpec(t.scalar_type(), opts.reduceOp, rank_, call);
  auto wire = std::make_shared<at::Tensor>();
  int rank = rank_;
  return enqueue(
      OpType::ALLREDUCE, call, tensors, opts.timeout,
      [=](ncclComm_t comm) {
        *wire = toWire(t, spec);
        check(ncclAllReduce(wire->data_ptr(), wire->data_ptr(), wire->numel(), spec.type, spec.op, comm, nullptr),
              rank, call);
      },
      [=] { fromWire(t, *wire, spec); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                       const c10d::AllreduceCoalescedOptions& opts) {
  const char* call = "all_reduce_coalesced";
  if (tensors.empty()) fail(rank_, call, "no tensors");
  std::vector<ReduceSpec> specs;
  for (const at::Tensor& t : tensors) {
    checkCpu(t, rank_, call);
    specs.push_back(reduceSpec(t.scalar_type(), opts.reduceOp, rank_, call));
  }
  auto wires = std::make_shared<std::vector<at::Tensor>>();
  int rank = rank_;
  return enqueue(
      OpType::ALLREDUCE_COALESCED, call, tensors, opts.timeout,
      [=](ncclComm_t comm) {
        grouped(rank, call, [&] {
          for (size_t i = 0; i < tensors.size(); ++i) {
            wires->push_back(toWire(tensors[i], specs[i]));
            at::Tensor& w = wires->back();
            check(ncclAllReduce(w.data_ptr(), w.data_ptr(), w.numel(), specs[i].type, specs[i].op, comm, nullptr),
                  rank, call);
          }
        });
      },
      [=] {
        for (size_t i = 0; i < tensors.size(); ++i) fromWire(tensors[i], (*wires)[i], specs[i]);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  const char* call = "broadcast";
  at::Tensor t = single(tensors, rank_, call);
  checkRoot(opts.rootRank, call);
  auto buf = std::make_shared<Staged>();
  int rank = rank_;
  int root = static_cast<int>(opts.rootRank);
  return enqueue(
      OpType::BROADCAST, call, tensors, opts.timeout,
      [=](ncclComm_t comm) {
        *buf = Staged(t);
        check(ncclBroadcast(buf->data(), buf->data(), buf->bytes(), ncclUint8, root, comm, nullptr), rank, call);
      },
      [=] { buf->writeBack(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  const char* call = "reduce";
  at::Tensor t = single(tensors, rank_, call);
  checkRoot(opts.rootRank, call);
  ReduceSpec spec = reduceSpec(t.scalar_type(), opts.reduceOp, rank_, call);
  auto wire = std::make_shared<at::Tensor>();
  int rank = rank_;
  int root = static_cast<int>(opts.rootRank);
  return enqueue(
      OpType::REDUCE, call, tensors, opts.timeout,
      [=](ncclComm_t comm) {
        *wire = toWire(t, spec);
        check(ncclReduce(wire->data_ptr(), wire->data_ptr(), wire->numel(), spec.type, spec.op, root, comm, nullptr),
              rank, call);
      },
      [=] {
        if (rank == root) fromWire(t, *wire, spec);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) {
  const char* call = "all_gather";
  at::Tensor in = single(inputs, rank_, call);
  std::vector<at::Tensor> outs = checkList(outputs, size_, in, rank_, call);
  auto flat = std::make_shared<at::Tensor>();
  auto src = std::make_shared<Staged>();
  int rank = rank_, size = size_;
  ScratchPool* pool = &worker_->scratch();
  return enqueue(
      OpType::ALLGATHER, call, outs, opts.timeout,
      [=](ncclComm_t comm) {
        *src = Staged(in);
        *flat = pool->get(size * in.numel(), in.scalar_type());
        check(ncclAllGather(src->data(), flat->data_ptr(), src->bytes(), ncclUint8, comm, nullptr), rank, call);
      },
      [=] { unflatten(*flat, outs); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions& opts) {
  const char* call = "_allgather_base";
  checkCpu(input, rank_, call);
  checkCpu(output, rank_, call);
  if (output.scalar_type() != input.scalar_type() || output.numel() != size_ * input.numel())
    fail(rank_, call, "the output must hold world_size times the input's elements, of its type");
  at::Tensor in = input, out = output;
  auto src = std::make_shared<Staged>();
  auto dst = std::make_shared<Staged>();
  int rank = rank_;
  return enqueue(
      OpType::_ALLGATHER_BASE, call, {out}, opts.timeout,
      [=](ncclComm_t comm) {
        *src = Staged(in);
        *dst = Staged(out);
        check(ncclAllGather(src->data(), dst->data(), src->bytes(), ncclUint8, comm, nullptr), rank, call);
      },
      [=] { dst->writeBack(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::GatherOptions& opts) {
  const char* call = "gather";
  at::Tensor in = single(inputs, rank_, call);
  checkRoot(opts.rootRank, call);
  int rank = rank_, size = size_;
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (rank == root) {
    outs = checkList(outputs, size, in, rank, call);
  } else if (!outputs.empty() && !outputs[0].empty()) {
    fail(rank, call, "only the root passes output tensors");
  }
  auto flat = std::make_shared<at::Tensor>();
  auto src = std::make_shared<Staged>();
  ScratchPool* pool = &worker_->scratch();
  return enqueue(
      OpType::GATHER, call, outs, opts.timeout,
      [=](ncclComm_t comm) {
        *src = Staged(in);
        if (rank == root) *flat = pool->get(size * in.numel(), in.scalar_type());
        void* dst = rank == root ? flat->data_ptr() : nullptr;
        check(ncclGather(src->data(), dst, src->bytes(), ncclUint8, root, comm, nullptr), rank, call);
      },
      [=] {
        if (rank == root) unflatten(*flat, outs);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  const char* call = "scatter";
  at::Tensor out = single(outputs, rank_, call);
  checkRoot(opts.rootRank, call);
  int rank = rank_, size = size_;
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins;
  if (rank == root) {
    ins = checkList(inputs, size, out, rank, call);
  } else if (!inputs.empty() && !inputs[0].empty()) {
    fail(rank, call, "only the root passes input tensors");
  }
  auto flat = std::make_shared<at::Tensor>();
  auto dst = std::make_shared<Staged>();
  ScratchPool* pool = &worker_->scratch();
  return enqueue(
      OpType::SCATTER, call, outputs, opts.timeout,
      [=](ncclComm_t comm) {
        *dst = Staged(out);
        if (rank == root) {
          *flat = pool->get(size * out.numel(), out.scalar_type());
          flattenInto(ins, *flat);
        }
        const void* src = rank == root ? flat->data_ptr() : nullptr;
        check(ncclScatter(src, dst->data(), dst->bytes(), ncclUint8, root, comm, nullptr), rank, call);
      },
      [=] { dst->writeBack(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  const char* call = "reduce_scatter";
  at::Tensor out = single(outputs, rank_, call);
  std::vector<at::Tensor> ins = checkList(inputs, size_, out, rank_, call);
  ReduceSpec spec = reduceSpec(out.scalar_type(), opts.reduceOp, rank_, call);
  auto wireIn = std::make_shared<at::Tensor>();
  auto wireOut = std::make_shared<at::Tensor>();
  int rank = rank_;
  ScratchPool* pool = &worker_->scratch();
  return enqueue(
      OpType::REDUCE_SCATTER, call, outputs, opts.timeout,
      [=](ncclComm_t comm) {
        int64_t n = out.numel() * wireWidth(spec);
        *wireIn = pool->get(n * static_cast<int64_t>(ins.size()), spec.wire);
        for (size_t i = 0; i < ins.size(); ++i) copyToWire(ins[i], wireIn->narrow(0, i * n, n), spec);
        *wireOut = pool->get(n, spec.wire);
        check(ncclReduceScatter(wireIn->data_ptr(), wireOut->data_ptr(), wireOut->numel(), spec.type, spec.op, comm,
                                nullptr),
              rank, call);
      },
      [=] { fromWire(out, *wireOut, spec); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  const char* call = "_reduce_scatter_base";
  checkCpu(input, rank_, call);
  checkCpu(output, rank_, call);
  if (output.scalar_type() != input.scalar_type() || input.numel() != size_ * output.numel())
    fail(rank_, call, "the input must hold world_size times the output's elements, of its type");
  ReduceSpec spec = reduceSpec(output.scalar_type(), opts.reduceOp, rank_, call);
  at::Tensor in = input, out = output;
  auto wireIn = std::make_shared<at::Tensor>();
  auto wireOut = std::make_shared<at::Tensor>();
  int rank = rank_;
  return enqueue(
      OpType::_REDUCE_SCATTER_BASE, call, {out}, opts.timeout,
      [=](ncclComm_t comm) {
        *wireIn = toWire(in, spec);
        *wireOut = toWire(out, ReduceSpec{spec.type, spec.op, spec.wire, spec.complex});
        check(ncclReduceScatter(wireIn->data_ptr(), wireOut->data_ptr(), wireOut->numel(), spec.type, spec.op, comm,
                                nullptr),
              rank, call);
      },
      [=] { fromWire(out, *wireOut, spec); });
}

}  // namespace strata::torch_backend
