// The planner's output as text tables, as one JSON object, and as a comparison
// of two topologies' plans.
#pragma once

#include <string>
#include <vector>

#include "algorithms/predict.h"
#include "topology/system.h"

namespace strata::tools {

using algorithms::Prediction;
using topology::Plan;
using topology::System;

std::string textReport(const std::string& source, const System& sys, const Plan& plan, int nodes,
                       const std::vector<Prediction>& preds);
std::string jsonReport(const std::string& source, const System& sys, const Plan& plan, int nodes,
                       const std::vector<Prediction>& preds);
// Where plan `b` (and its choices) differ from plan `a`, with each side's reason.
std::string compareReport(const std::string& aName, const Plan& a, const std::vector<Prediction>& aPreds,
                          const std::string& bName, const Plan& b, const std::vector<Prediction>& bPreds);


}  // namespace strata::tools
