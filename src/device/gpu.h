// The GPU as this build and machine have it, and the device kernels. No CUDA
// type appears here: a build without CUDA implements the same calls (no GPUs,
// host memory only), so callers never need #ifdefs. Streams are cudaStream_t
// passed as void*.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "device/cpu_reduce.h"
#include "device/kernel_coll.h"
#include "device/kernel_p2p.h"
#include "device/kernel_pipe.h"

namespace strata::device {

// GPUs visible to this process; 0 without a driver or a device (never throws).
int gpuCount();
// On simulated GPUs, the calls this thread has made into the GPU runtime through this
// interface, by every copy of it in the process (libnccl.so.2's and a test's): what a
// call costs the host, counted by tests. 0 on CUDA.
uint64_t runtimeCalls();
// Why gpuCount() is 0 ("built without CUDA", "no CUDA driver", ...); empty when it is not.
std::string gpuUnavailableReason();
// True for memory the CUDA runtime knows as device (or managed) memory; `device`
// gets its GPU. Host memory, and everything when gpuCount() is 0, is false.
bool isDevicePointer(const void* p, int* device = nullptr);
// The calling thread's current device, or -1 without GPUs.
int currentDevice();

// Device memory for ncclMemAlloc / ncclMemFree on the current device. Throws
// Error(ncclUnhandledCudaError) with CUDA's message.
// `duringCapture`: the caller's stream is being captured into a CUDA graph, so the
// memory kept by holdFrees is not freed first (cudaFree would synchronise the device).
void* gpuAlloc(size_t bytes, bool duringCapture = false);
void gpuFree(void* p);

// Frees that synchronise a device (cudaFree, cudaFreeHost) wait for every stream on
// it, also another rank's stream that a flag wait holds until this thread's next
// call: with ranks sharing a GPU in one process, a deadlock. From holdFrees() to
// its releaseFrees() (work holding such waits is in flight), gpuFree, pinnedFree
// and ipcFree keep the memory, and a later call frees it once nothing holds; a
// hold waits for a free in progress. releaseFrees makes no CUDA call (CUDA's
// callback thread may call it).
void holdFrees();
void releaseFrees();

// Kernels, enqueued on `stream` (0: the legacy default stream). Same results, to
// the bit, as the CPU functions of the same names (cpu_reduce.h): fp16, bf16 and
// fp8 are computed in float and rounded to nearest even after every step.
// Every one of outputs[0..nOut) = inputs[0] OP ... OP inputs[n-1], then finalize
// (avg's divide); any n >= 1, 1 <= nOut <= kMaxReduceOutputs; with one input, a copy
// of its bits into every output. With n <= kMaxReduceOutputs inputs, each element of
// an output is written after that element of every input was read, so an output
// may be an input at the same position (in place); it must not otherwise overlap an
// input or another output. Beyond that many inputs outputs[0] accumulates across
// launches and must overlap no input.
constexpr int kMaxReduceOutputs = 8;
void gpuReduceInOrder(void* const* outputs, int nOut, const void* const* inputs, int n, size_t count,
                      ncclDataType_t type, const ReduceOp& op, void* stream);
inline void gpuReduceInOrder(void* dst, const void* const* inputs, int n, size_t count, ncclDataType_t type,
                             const ReduceOp& op, void* stream) {
  gpuReduceInOrder(&dst, 1, inputs, n, count, type, op, stream);
}
// dst = src x the op's scalar (pre-multiplied sum), or a copy.
void gpuPrepare(void* dst, const void* src, size_t count, ncclDataType_t type, const ReduceOp& op, void* stream);
// A vectorised copy (16-byte loads and stores where alignment allows).
void gpuCopy(void* dst, const void* src, size_t bytes, void* stream);

// cudaStreamLegacy: the legacy default stream under a handle that is not null.
inline void* const kLegacyStream = reinterpret_cast<void*>(1);
// The device-driven point-to-point kernel (kernel_p2p.h), enqueued on `stream` on the
// current device.
void launchKernelP2p(const KernelP2p& k, void* stream);
// The pipelined collective kernel (kernel_pipe.h), likewise; and the most channels
// (blocks) it takes on `device` (0: no such kernel there).
void launchKernelPipe(const KernelPipe& k, void* stream);
int pipeChannels(int device);
// How many blocks of those kernels `device` runs at once (its SMs times the blocks
// each holds): kernels whose blocks wait for each other must fit in it together.
int kernelBlocksAtOnce(int device);
// The address a kernel uses for memory from pinnedAlloc.
void* mappedPointer(void* pinned);
// Events (cudaEventRecord / cudaStreamWaitEvent, no timing): eventRecord marks the
// stream's work so far; streamWaitEvent holds the stream until the last mark's work is done.
void* eventCreate();
void eventDestroy(void* event);
void eventRecord(void* event, void* stream);
void streamWaitEvent(void* stream, void* event);
// Waits on the host until the event's last mark is reached: true then, false once
// `seconds` passed or `stop` (polled; may be empty) said so first. It polls
// (cudaEventQuery: a few microseconds of spinning, then sleeps of up to 100 us)
// because cudaEventSynchronize could not be ended by a timeout or an abort.
bool eventSynchronize(void* event, double seconds, const std::function<bool()>& stop = {});
// CUDA graphs, for tools and tests: graphBegin captures `stream` in global mode;
// graphEnd ends the capture and returns the instantiated graph, or null with *why
// when the capture failed (an unsafe call during it, ...); graphLaunch replays it.
// On simulated GPUs the stream's work is recorded and replayed.
void graphBegin(void* stream);
void* graphEnd(void* stream, std::string* why);
void graphLaunch(void* graph, void* stream);
void graphDestroy(void* graph);

// Stream-ordered pieces of the host-staged device path (core/device_proxy.h).
// True while `stream` is being captured into a CUDA graph.
bool streamCapturing(void* stream);
// The capture sequence `stream` belongs to (streams joined into one capture share
// it), 0 when it is not being captured.
uint64_t streamCaptureId(void* stream);
// Page-locked host memory, mapped for the GPU and usable from any device.
void* pinnedAlloc(size_t bytes);
void pinnedFree(void* p);
// cudaMemcpyAsync in whichever direction the pointers say.
void copyAsync(void* dst, const void* src, size_t bytes, void* stream);
// Runs fn(arg) on CUDA's callback thread once the stream's earlier work is done.
// fn must not call CUDA and must not block.
void hostCallback(void* stream, void (*fn)(void*), void* arg);
// Holds the stream until *flag >= value: a one-thread kernel polls the pinned word
// the host writes.
void waitHostFlag(void* stream, const uint64_t* flag, uint64_t value);
// Makes `device` current on the calling thread; returns the previous one.
int setCurrentDevice(int device);
// While it lives, `device` is the calling thread's current device; the previous one
// after.
class OnDevice {
 public:
  explicit OnDevice(int device) : device_(device), previous_(setCurrentDevice(device)) {}
  ~OnDevice() {
    if (device_ >= 0 && previous_ != device_) setCurrentDevice(previous_);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int device_;
  int previous_;
};
// Streams and synchronous copies for tools and tests (a non-blocking stream on the
// current device).
void* streamCreate();
void streamDestroy(void* stream);
void streamSynchronize(void* stream);
// True when everything enqueued on the stream so far has finished (never blocks).
bool streamIdle(void* stream);
// The device a created stream belongs to; -1 for the default streams (they follow
// the current device) or when it cannot be told.
int streamDevice(void* stream);
void copySync(void* dst, const void* src, size_t bytes);
void memsetSync(void* dst, int value, size_t bytes);

// CUDA IPC: device memory another process of this node can map.
// Allocates `bytes` on the current device; *handle gets the exportable handle.
void* ipcAlloc(size_t bytes, std::string* handle);
void ipcFree(void* p);
// Maps a peer's allocation (peer access enabled as needed); null with *why on failure.
void* ipcOpen(const std::string& handle, std::string* why);
void ipcClose(void* p);
// GPUDirect RDMA: the dma-buf of the device memory holding [p, p + bytes), for a NIC
// to register (ibv_reg_dmabuf_mr): *fd (the caller closes it) and the offset of p
// in it. False with *why where the driver (or the simulation) cannot export it.
bool exportDmabuf(const void* p, size_t bytes, int* fd, uint64_t* offset, std::string* why);

// While it lives, the calling thread's CUDA calls are relaxed about stream capture
// (cudaThreadExchangeStreamCaptureMode), as NCCL's are: an allocation, a free or a
// synchronous copy would otherwise fail, and invalidate the capture, while another
// thread captures a graph in global mode (PyTorch's default). Every call below that
// CUDA counts as unsafe during a capture is made inside one.
constexpr int kRelaxedCapture = 2;  // cudaStreamCaptureModeRelaxed
class RelaxedCapture {
 public:
  RelaxedCapture();
  ~RelaxedCapture();
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  int previous_;
};
// Simulated GPUs only (tests): the calling thread begins (`begin`) or ends capturing
// `stream` in global mode; the end returns false when another thread's unsafe call
// invalidated the capture. False on real GPUs (use cudaStreamBeginCapture there).
bool simulateCapture(void* stream, bool begin);
// Simulated GPUs only (tests): reduce and pre-multiply kernels launched so far, on
// every simulated device, with a pointer not 16-byte aligned: a GPU runs those
// element by element, off the vector path. 0 on real GPUs.
uint64_t simulatedUnalignedKernels();

// Lets kernels on the current device read and write device `peer`'s memory
// (cudaDeviceEnablePeerAccess; already enabled, or the same device, is fine);
// false with *why where the pair has no peer access.
bool enablePeerAccess(int peer, std::string* why);
// True when kernels on `device` can be given access to `peer`'s memory (cudaDeviceCanAccessPeer).
bool canAccessPeer(int device, int peer);

// The PCI bus id of a device ("0000:07:00.0"), as NVML and the topology name it.
std::string gpuBusId(int device);

}  // namespace strata::device
