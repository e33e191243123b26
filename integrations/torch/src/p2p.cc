// Point-to-point operations, all-to-all and barrier of ProcessGroupStrata. NCCL
// has no tags: operations between two ranks match in the order they are posted
// (tags are accepted and ignored, as NCCL's process group does).
#include "process_group.h"
#include "tensors.h"

#include <numeric>

namespace strata::torch_backend {
namespace {

using c10d::OpType;

// Byte offsets of the blocks of dim 0 that `splits` cut `t` into (equal blocks when empty).
std::vector<size_t> blockBytes(const at::Tensor& t, const std::vector<int64_t>& splits, int size, int rank,
                               const char* call) {
  std::vector<size_t> bytes(size);
  size_t total = static_cast<size_t>(t.numel()) * t.element_size();
  if (splits.empty()) {
    if (t.dim() == 0 || t.size(0) % size != 0)
      fail(rank, call, "dim 0 (" + std::to_string(t.dim() ? t.size(0) : 0) + ") does not divide into " +
                           std::to_string(size) + " equal blocks; pass split sizes");
    std::fill(bytes.begin(), bytes.end(), total / size);
    return bytes;
  }
  if (static_cast<int>(splits.size()) != size)
    fail(rank, call, "expects " + std::to_string(size) + " split sizes, got " + std::to_string(splits.size()));
  int64_t rows = std::accumulate(splits.begin(), splits.end(), int64_t{0});
  if (t.dim() == 0 || rows != t.size(0))
    fail(rank, call, "split sizes add up to " + std::to_string(rows) + ", not dim 0 of the tensor");
  size_t rowBytes = t.size(0) ? total / t.size(0) : 0;
  for (int i = 0; i < size; ++i) {
    if (splits[i] < 0) fail(rank, call, "a split size is negative");
    bytes[i] = splits[i] * rowBytes;
  }
  return bytes;
}

// Every rank's block to and from every other, in one NCCL group; this rank's own by a copy.
void exchange(const std::vector<const char*>& src, const std::vector<size_t>& srcBytes, const std::vector<char*>& dst,
              const std::vector<size_t>& dstBytes, int rank, ncclComm_t comm, const char* call) {
  int size = static_cast<int>(src.size());
  if (srcBytes[rank] != dstBytes[rank])
    fail(rank, call, "this rank sends itself " + std::to_string(srcBytes[rank]) + " bytes but expects " +
                         std::to_string(dstBytes[rank]));
  if (srcBytes[rank]) memcpy(dst[rank], src[rank], srcBytes[rank]);
  grouped(rank, call, [&] {
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      if (srcBytes[p]) check(ncclSend(src[p], srcBytes[p], ncclUint8, p, comm, nullptr), rank, call);
      if (dstBytes[p]) check(ncclRecv(dst[p], dstBytes[p], ncclUint8, p, comm, nullptr), rank, call);
    }
  });
}

std::vector<size_t> offsets(const std::vector<size_t>& bytes) {
  std::vector<size_t> off(bytes.size(), 0);
  for (size_t i = 1; i < bytes.size(); ++i) off[i] = off[i - 1] + bytes[i - 1];
  return off;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                 std::vector<int64_t>& outputSplits,
                                                                 std::vector<int64_t>& inputSplits,
                                                                 const c10d::AllToAllOptions& opts) {
  const char* call = "all_to_all_single";
  checkCpu(input, rank_, call);
  checkCpu(output, rank_, call);
  if (input.scalar_type() != output.scalar_type()) fail(rank_, call, "input and output types differ");
  std::vector<size_t> inBytes = blockBytes(input, inputSplits, size_, rank_, call);
  std::vector<size_t> outBytes = blockBytes(output, outputSplits, size_, rank_, call);
  bool equal = inputSplits.empty() && outputSplits.empty();
  if (equal && input.numel() != output.numel()) fail(rank_, call, "input and output differ in size");
  at::Tensor in = input, out = output;
  auto src = std::make_shared<Staged>();
  auto dst = std::make_shared<Staged>();
  int rank = rank_;
  return enqueue(
      OpType::ALLTOALL_BASE, call, {out}, opts.timeout,
      [=](ncclComm_t comm) {
        *src = Staged(in);
        *dst = Staged(out);
        if (equal) {
          check(ncclAlltoAll(src->data(), dst->data(), inBytes[0], ncclUint8, comm, nullptr), rank, call);
          return;
        }
        std::vector<const char*> s;
        std::vector<char*> d;
        std::vector<size_t> so = offsets(inBytes), doff = offsets(outBytes);
        for (size_t i = 0; i < inBytes.size(); ++i) {
          s.push_back(static_cast<const char*>(src->data()) + so[i]);
          d.push_back(static_cast<char*>(dst->data()) + doff[i]);
        }
        exchange(s, inBytes, d, outBytes, rank, comm, call);
      },
      [=] { dst->writeBack(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  const char* call = "all_to_all";
  if (static_cast<int>(inputs.size()) != size_ || static_cast<int>(outputs.size()) != size_)
    fail(rank_, call, "expects " + std::to_string(size_) + " input and output tensors");
  for (int i = 0; i < size_; ++i) {
    checkCpu(inputs[i], rank_, call);
    checkCpu(outputs[i], rank_, call);
    if (inputs[i].scalar_type() != outputs[i].scalar_type()) fail(rank_, call, "input and output types differ");
  }
  auto srcs = std::make_shared<std::vector<Staged>>();
  auto dsts = std::make_shared<std::vector<Staged>>();
  int rank = rank_;
  return enqueue(
      OpType::ALLTOALL, call, outputs, opts.timeout,
      [=](ncclComm_t comm) {
        std::vector<const char*> s;
        std::vector<char*> d;
        std::vector<size_t> sb, db;
        for (size_t i = 0; i < inputs.size(); ++i) {
          srcs->emplace_back(inputs[i]);
          dsts->emplace_back(outputs[i]);
          s.push_back(static_cast<const char*>(srcs->back().data()));
          sb.push_back(srcs->back().bytes());
          d.push_back(static_cast<char*>(dsts->back().data()));
          db.push_back(dsts->back().bytes());
        }
        exchange(s, sb, d, db, rank, comm, call);
      },
      [=] {
        for (const Staged& d : *dsts) d.writeBack();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::send(std::vector<at::Tensor>& tensors, int dstRank, int /*tag*/) {
  const char* call = "send";
  at::Tensor t = single(tensors, rank_, call);
  checkPeer(dstRank, call);
  auto buf = std::make_shared<Staged>();
  int rank = rank_;
  return enqueue(OpType::SEND, call, tensors, c10d::kUnsetTimeout, [=](ncclComm_t comm) {
    *buf = Staged(t);
    check(ncclSend(buf->data(), buf->bytes(), ncclUint8, dstRank, comm, nullptr), rank, call);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::recv(std::vector<at::Tensor>& tensors, int srcRank, int /*tag*/) {
  const char* call = "recv";
  at::Tensor t = single(tensors, rank_, call);
  checkPeer(srcRank, call);
  auto buf = std::make_shared<Staged>();
  int rank = rank_;
  auto work = enqueue(
      OpType::RECV, call, tensors, c10d::kUnsetTimeout,
      [=](ncclComm_t comm) {
        *buf = Staged(t);
        check(ncclRecv(buf->data(), buf->bytes(), ncclUint8, srcRank, comm, nullptr), rank, call);
      },
      [=] { buf->writeBack(); });
  static_cast<StrataWork*>(work.get())->setSourceRank(srcRank);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::recvAnysource(std::vector<at::Tensor>& /*tensors*/, int /*tag*/) {
  fail(rank_, "recv", "receiving from any source is not supported (NCCL has no wildcard receive); pass src");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::barrier(const c10d::BarrierOptions& opts) {
  const char* call = "barrier";
  int rank = rank_;
  auto token = std::make_shared<int32_t>(0);  // lives until the work is done (a coalesced group ends later)
  return enqueue(OpType::BARRIER, call, {}, opts.timeout, [=](ncclComm_t comm) {
    check(ncclAllReduce(token.get(), token.get(), 1, ncclInt32, ncclSum, comm, nullptr), rank, call);
  });
}

}  // namespace strata::torch_backend
