// What the tuner would choose on a planned machine, and what it predicts: the
// same request a communicator builds, so strata-topo shows what a run does.
#pragma once

#include <string>
#include <vector>

#include "algorithms/tuner.h"
#include "topology/planner.h"

namespace strata::algorithms {

struct Prediction {
  Collective coll = Collective::kAllReduce;
  size_t bytes = 0;
  std::string algorithm, protocol;
  double us = 0, algbwGBps = 0, busbwGBps = 0;
  std::string bound;  // what most of the time goes to: "latency", the ring's bottleneck, "network ..."
};

// The tuner's view of `nodes` nodes planned alike.
TuneRequest requestFor(const topology::Plan& plan, int nodes, Collective coll, size_t bytes);

// 8 B to 8 GiB, every factor of 8.
std::vector<size_t> predictionSizes();

// The tuner's choice on `r` (NCCL_ALGO / NCCL_PROTO syntax in algo/proto) and its cost.
Prediction predict(const topology::Plan& plan, const TuneRequest& r, const std::string& algo = "",
                   const std::string& proto = "");
Prediction predict(const topology::Plan& plan, int nodes, Collective coll, size_t bytes, const std::string& algo = "",
                   const std::string& proto = "");

// Every collective at every size; algo/proto as NCCL_ALGO / NCCL_PROTO (a
// collective the lists leave nothing for is left out).
std::vector<Prediction> predictAll(const topology::Plan& plan, int nodes, const std::string& algo = "",
                                   const std::string& proto = "");

// Whether a communicator on this plan runs collectives on device buffers with the
// device-driven kernels (DeviceRing, DeviceMesh): one node, GPUs with peer access on every
// ring hop, each rank its own GPU, 2 to 8 ranks. Else they go through the proxy.
bool deviceDriven(const topology::Plan& plan, int nodes);
// What those kernels take per collective and size (empty when !deviceDriven).
std::vector<Prediction> predictDevicePath(const topology::Plan& plan);

// One row of strata-topo's predictions table; a communicator logs the same line
// under NCCL_DEBUG_SUBSYS=TUNING.
std::string predictionHeader();
std::string predictionLine(const Prediction& p);
// "8 B", "64 KiB", "8 GiB".
std::string sizeLabel(size_t bytes);

}  // namespace strata::algorithms
