// What every rank tells the others about itself at bootstrap.
#pragma once

#include <cstdint>
#include <string>

#include "base/socket.h"

namespace strata {

// Fixed-layout record exchanged between ranks (all ranks run the same build).
struct PeerInfo {
  int rank = -1;
  int pid = 0;
  int device = -1;           // CUDA device, or -1 for host memory
  uint64_t hostHash = 0;     // node identity: hostname + boot id, or NCCL_HOSTID
  uint64_t processHash = 0;  // hostHash + pid + pid namespace: equal means same process
  uint64_t machineHash = 0;  // hostname + boot id even under NCCL_HOSTID: who shares the cores
  SockAddr listenAddr;       // where this rank's process accepts bootstrap messages
  double netGBps = 0;        // its network rate for the tuner (STRATA_NET_GBPS, its rail, or the NIC's speed; 0 unknown)
  int rail = -1;             // the topology's network port it uses (NCCL_TOPO_FILE), -1: the socket interface
  int numaNode = 0;          // the NUMA domain it runs on: ranks of a node are ringed in NUMA order
  char busId[16] = {};       // its GPU's PCI bus id ("0000:07:00.0"), empty without one
  int kernelBlocks = 0;      // blocks of device-driven kernels its GPU runs at once (0: none)
  int pipeChannels = 0;      // most channels of a pipelined kernel on its GPU (0: none)
  char railName[32] = {};    // the NIC port nearest it in the topology ("mlx5_0"): its network device
  char railBusId[16] = {};   // that NIC's PCI bus id, for networks that name devices otherwise
  int railPort = 0;          // that NIC's port (two-port HCAs), 0 when the topology does not say
  bool gdr = false;          // its GPU is near enough its NIC for GPUDirect RDMA (NCCL_NET_GDR_LEVEL)
  char netName[32] = {};     // the network its communicator uses between nodes (ncclConfig_t.netName, else
                             // NCCL_NET); empty: the first that connects
  // Hashes of the settings every rank plans from on its own (core/settings_agreement.h),
  // in that file's order: ranks that differ would plan differently and wait on each other.
  static constexpr int kSettings = 9;
  uint64_t settings[kSettings] = {};
  char hostname[64] = {};
  char bellName[64] = {};    // shared-memory doorbell that peers ring

  bool sameHost(const PeerInfo& o) const { return hostHash == o.hostHash; }
  bool sameProcess(const PeerInfo& o) const { return processHash == o.processHash; }
};

// 64-bit FNV-1a over bytes, chained from `seed`.
uint64_t hashBytes(const void* data, size_t n, uint64_t seed = 0xcbf29ce484222325ull);

// The node identity: hash of NCCL_HOSTID if set, else of hostname and kernel boot id.
uint64_t hostIdentity(std::string* description);
// The physical machine: hostname + boot id, ignoring NCCL_HOSTID (several
// "nodes" of a test bed share one machine's cores).
uint64_t machineIdentity();

// The process identity: host identity, pid and pid namespace.
uint64_t processIdentity();

// False once a process on this host has exited, even while it is an unreaped zombie.
bool processAlive(int pid);

}  // namespace strata
