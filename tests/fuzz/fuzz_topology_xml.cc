// Topology XML from outside the process (NCCL_TOPO_FILE): parse it, build the
// machine graph and plan a node from it. Malformed input must end in a strata::Error
// (the message names the file and line), never a crash, hang or sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"
#include "topology/planner.h"
#include "topology/system.h"
#include "topology/xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    strata::topology::XmlElement root = strata::topology::parseXml(text, "fuzz.xml");
    strata::topology::System sys = strata::topology::System::fromXml(root, "fuzz.xml");
    strata::topology::PlanOptions opts;
    (void)strata::topology::planNode(sys, opts);
    (void)strata::topology::writeXml(root);
  } catch (const strata::Error&) {
  }
  return 0;
}
