// What the tuner would choose on a planned machine, and what it predicts.
#pragma once

#include <string>
#include <vector>

#include "topology/planner.h"

namespace strata::topology {

struct Prediction {
  algorithms::Collective coll = algorithms::Collective::kAllReduce;
  size_t bytes = 0;
  std::string algorithm, protocol;
  double us = 0, algbwGBps = 0, busbwGBps = 0;
  std::string bound;  // what most of the time goes to: "latency", the ring's bottleneck, "network ..."
};

// 8 B to 8 GiB, every factor of 8.
std::vector<size_t> predictionSizes();

// The tuner's choice (NCCL_ALGO / NCCL_PROTO syntax in algo/proto) and its cost.
Prediction predict(const Plan& plan, int nodes, algorithms::Collective coll, size_t bytes,
                   const std::string& algo = "", const std::string& proto = "");

// Every collective at every size; algo/proto as NCCL_ALGO / NCCL_PROTO (a
// collective the lists leave nothing for is left out).
std::vector<Prediction> predictAll(const Plan& plan, int nodes, const std::string& algo = "",
                                   const std::string& proto = "");

}  // namespace strata::topology
