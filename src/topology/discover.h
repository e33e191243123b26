// Where a node's topology comes from: NCCL_TOPO_FILE, a preset, or discovery
// (hwloc for CPUs, NUMA, the PCI tree and NICs; NVML for GPUs and NVLinks).
#pragma once

#include <string>
#include <vector>

#include "topology/xml.h"

namespace strata::topology {

// This machine in NCCL's XML format. Never throws for a machine that hides
// parts of itself (containers, VMs): what is missing is said in `warnings`.
XmlElement discoverLocalTopology(std::vector<std::string>* warnings);

// hwloc's part: <system> with one <cpu> per NUMA domain and, under them, the PCI
// paths to GPUs and NICs (GPUs as bare <pci> elements; NVML fills them in).
XmlElement hwlocTopology(std::vector<std::string>* warnings);

// NCCL_TOPO_FILE as NCCL reads it: a base that discovery completes. Cloud images
// ship PCI-only files (GPUs and NICs as bare <pci> elements with class codes); each
// GPU (with its NVLinks) and NIC that `discovered` has is put under the file's <pci>
// of the same bus id when that element is bare. Elements the file describes already
// stay as they are, so a complete file comes out unchanged. GPUs the file lists
// that discovery did not find are left out, with a warning each.
void mergeDiscovered(XmlElement& file, const XmlElement& discovered, std::vector<std::string>* warnings);

// A path that exists, or a preset's name: "a100" or "a100-sxm-8gpu" finds
// presets/a100-sxm-8gpu.xml. Throws listing the presets when nothing matches.
std::string resolvePreset(const std::string& nameOrPath);
// The preset directory: STRATA_PRESET_DIR if set, else the source tree's.
std::string presetDir();

}  // namespace strata::topology
