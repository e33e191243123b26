// Every environment variable Strata reads, parsed once into one struct.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace strata {

enum class LogLevel { kNone = 0, kVersion, kWarn, kInfo, kTrace };

// Log subsystems, as NCCL_DEBUG_SUBSYS names them.
enum LogSubsys : uint32_t {
  kSubsysInit = 1u << 0,
  kSubsysColl = 1u << 1,
  kSubsysP2p = 1u << 2,
  kSubsysShm = 1u << 3,
  kSubsysNet = 1u << 4,
  kSubsysGraph = 1u << 5,
  kSubsysTuning = 1u << 6,
  kSubsysEnv = 1u << 7,
  kSubsysAlloc = 1u << 8,
  kSubsysBootstrap = 1u << 9,
  kSubsysAll = ~0u,
};

// The parsed environment. Field comments name the variable and its default.
struct Config {
  LogLevel debugLevel = LogLevel::kNone;    // NCCL_DEBUG: VERSION|WARN|INFO|TRACE (unset: silent, as NCCL)
  uint32_t debugSubsys = kSubsysInit | kSubsysEnv;  // NCCL_DEBUG_SUBSYS: comma list, ^ excludes (NCCL's default INIT,ENV)
  std::string debugFile;                    // NCCL_DEBUG_FILE: log file; %h host, %p pid
  std::string hostId;                       // NCCL_HOSTID: overrides hostname+boot id as the node identity
  std::string socketIfname;                 // NCCL_SOCKET_IFNAME: bootstrap interface (prefix, ^ exclude, = exact)
  bool shmDisable = false;                  // NCCL_SHM_DISABLE=1: no shared-memory transport between processes
  bool cma = true;                          // STRATA_CMA=0: no Cross Memory Attach; one-sided writes between
                                            //   processes only into ncclMemAlloc buffers, else through the slots
  size_t cmaBulkBytes = 0;                  // STRATA_CMA_BULK_BYTES: a ring's writes into private memory of another
                                            //   process whose registration (its output, or a larger buffer
                                            //   registered around it) has this many bytes go through the
                                            //   slots, not by CMA, and so do balanced reads (DirectRead's
                                            //   all-gather, a 2-rank broadcast) out of registrations this
                                            //   large (0 or unset: 256 KiB)
  size_t putBytes = 16 << 10;               // STRATA_PUT_BYTES: operations of this size and more move data with
                                            //   one-sided writes (one copy) where the links allow; 0 never
  bool putBytesSet = false;                 //   given (else a host with more ranks than cores starts at
                                            //   NCCL_BUFFSIZE: comm_setup.cc)
  int socketThreads = 2;                    // NCCL_SOCKET_NTHREADS (1-16) x NCCL_NSOCKS_PERTHREAD (1-64), at most 64:
  int socksPerThread = 1;                   //   TCP streams per socket connection (progressed by the rank's thread)
  std::string algo;                         // NCCL_ALGO: allowed algorithms (NCCL list syntax)
  std::string proto;                        // NCCL_PROTO: allowed protocols (NCCL list syntax)
  int minChannels = 1;                      // NCCL_MIN_NCHANNELS
  int maxChannels = 2;                      // NCCL_MAX_NCHANNELS
  size_t buffSize = 1 << 20;                // NCCL_BUFFSIZE: bytes of staging per connection (host default 1 MiB)
  int commBlocking = -1;                    // NCCL_COMM_BLOCKING: 0/1 overrides ncclConfig_t.blocking
  double timeoutSec = 300;                  // STRATA_TIMEOUT: seconds any wait may last before it fails
  int slots = 8;                            // STRATA_NSLOTS: slots per connection (buffSize / slots per step)
  double netGBps = 0;                       // STRATA_NET_GBPS: network rate per node for the tuner (0: the NIC's speed)
  std::string topoFile;                     // NCCL_TOPO_FILE: NCCL topology XML used instead of discovery
  std::string topoDumpFile;                 // NCCL_TOPO_DUMP_FILE: where one rank writes the node's topology XML
  int topoDumpRank = 0;                     // NCCL_TOPO_DUMP_FILE_RANK: the rank that writes it
  bool p2pDisable = false;                  // NCCL_P2P_DISABLE=1: GPUs never talk directly (planner, cuda_ipc)
  std::string p2pLevel;                     // NCCL_P2P_LEVEL: worst path class for direct GPU traffic (default PXB)
  std::string presetDir;                    // STRATA_PRESET_DIR: where strata-topo finds presets (unset: the source tree's)
  int gpuSim = 0;                           // STRATA_GPU_SIM=N: N GPUs simulated in host memory (tests of the device path)
  int cudaMaxConnections = 8;               // CUDA_DEVICE_MAX_CONNECTIONS: simulated GPUs share this many hardware queues per device
  bool gpuSimStrict = false;                // STRATA_GPU_SIM_STRICT=1: CUDA calls on a thread with no device set fail
  bool gpuSimJitter = false;                // STRATA_GPU_SIM_JITTER=1: simulated kernels pause at random between steps
  bool gpuSimWeak = false;                  // STRATA_GPU_SIM_WEAK=1: simulated kernels publish stores to peers only at fences
  int gpuSimBlocks = 528;                   // STRATA_GPU_SIM_BLOCKS: blocks a simulated GPU holds at once (an H200's 132 SMs x 4)
  int gpuSimThreads = 2;                    // STRATA_GPU_SIM_THREADS: host threads per block of a simulated pipelined kernel
  int gpuSimChannels = 4;                   // STRATA_GPU_SIM_CHANNELS: most channels (blocks) of a pipelined kernel on a
                                            //   simulated GPU (a block is host threads: a few keep tests quick)
  double deviceTimeoutSec = 0;              // STRATA_DEVICE_TIMEOUT: seconds a pipelined kernel's wait may last (0: no
                                            //   bound, as NCCL's kernels; the stop word and peers' failures end waits)
  int spinCount = 2000;                     // STRATA_SPIN: polls before a waiting rank yields, then sleeps
  std::string netPlugin;                    // NCCL_NET_PLUGIN: net plugins to load (name, file, path; comma list;
  bool netPluginSet = false;                //   "none"); unset: libnccl-net.so if there is one
  std::string netName;                      // NCCL_NET: the network to use, by name (a plugin's, "IB" or "Socket")
  bool ibDisable = false;                   // NCCL_IB_DISABLE=1: no InfiniBand/RoCE network
  std::string ibHca;                        // NCCL_IB_HCA: devices to use (prefix list, ^ excludes, = exact, :port)
  int ibGidIndex = -1;                      // NCCL_IB_GID_INDEX: RoCE GID (-1: the first of NCCL_IB_ROCE_VERSION_NUM)
  int ibRoutableFlidGidIndex = 1;           // NCCL_IB_ROUTABLE_FLID_GID_INDEX: InfiniBand GID taken when it has an FLID
  int ibRoceVersion = 2;                    // NCCL_IB_ROCE_VERSION_NUM: RoCE version the GID is chosen for (1, 2)
  std::string ibAddrFamily = "AF_INET";     // NCCL_IB_ADDR_FAMILY: address family the GID is chosen for (AF_INET, AF_INET6)
  std::string ibAddrRange;                  // NCCL_IB_ADDR_RANGE: the GID's address within this prefix ("10.0.0.0/8")
  int ibTc = 0;                             // NCCL_IB_TC: traffic class (GRH)
  int ibFifoTc = -1;                        // NCCL_IB_FIFO_TC: a RoCE receiver's control messages' (-1: ibTc)
  int ibSl = 0;                             // NCCL_IB_SL: service level (InfiniBand)
  int ibTimeout = 20;                       // NCCL_IB_TIMEOUT: QP ack timeout, 4.096 us x 2^N (NCCL's default 20)
  int ibRetryCnt = 7;                       // NCCL_IB_RETRY_CNT: QP retries
  int ibQpsPerConnection = 1;               // NCCL_IB_QPS_PER_CONNECTION: queue pairs per connection (1-16)
  bool ibSplitDataOnQps = false;            // NCCL_IB_SPLIT_DATA_ON_QPS=1: each message split over them (else round robin)
  int ibPciRelaxedOrdering = 2;             // NCCL_IB_PCI_RELAXED_ORDERING: 0 off, 1 on, 2 where supported
  int ibAdaptiveRouting = -1;               // NCCL_IB_ADAPTIVE_ROUTING: 0 off, 1 on, -1 (unset) on InfiniBand only
  size_t ibArThreshold = 8192;              // NCCL_IB_AR_THRESHOLD: messages above this split for adaptive routing
  std::string netGdrLevel;                  // NCCL_NET_GDR_LEVEL: worst path for GPUDirect RDMA (LOC..SYS; unset PXB)
  std::string ibverbsLib = "libibverbs.so.1";  // STRATA_IBVERBS_LIB: the verbs library (tests: the emulator)
  std::string mutation;                     // STRATA_MUTATION: a deliberate fault (base/mutation.h); read only by
                                            //   builds with STRATA_MUTATIONS=ON (the tests' build), else refused

  std::vector<std::string> warnings;        // problems met while parsing; logged once logging is up
  std::vector<std::string> confFiles;       // NCCL configuration files read (NCCL_CONF_FILE, ~/.nccl.conf, /etc/nccl.conf)

  // Parses from a lookup (getenv in production, a map in tests).
  static Config parse(const std::function<const char*(const char*)>& lookup);
  // STRATA_CMA_BULK_BYTES, else 256 KiB: from there a ring's write or a balanced read
  // by CMA took up to 2x the time of two copies through the slots, in the caches or
  // not (docs/perf.md, "Exchanges through the slots from 256 KiB"). A constant, so
  // every rank agrees.
  size_t bulkBytes() const { return cmaBulkBytes ? cmaBulkBytes : size_t{256} << 10; }
};

// The process-wide configuration, parsed from the environment on first use.
const Config& config();

// Re-reads the environment (ncclResetDebugInit). Threads that read the previous
// configuration keep a valid one; new reads see the new one.
void reloadConfig();

}  // namespace strata
