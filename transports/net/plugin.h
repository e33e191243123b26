// External NCCL net plugins, found and loaded as NCCL does: NCCL_NET_PLUGIN names
// them (a name N means libnccl-net-N.so, else a file name or path; a comma list
// is tried in order; "none" loads nothing); unset, libnccl-net.so is tried. The
// newest interface a library exports (ncclNetPlugin_v11 down to _v8) is used, and
// the first plugin that initialises and reports devices (and, with NCCL_NET set,
// has that name) wins.
#pragma once

#include <string>
#include <vector>

#include "transports/net/network.h"

namespace strata::transport::net {

// The plugin this process uses, or null; loaded once, on first use.
Network* pluginNetwork();

// The libraries NCCL_NET_PLUGIN's value names, in the order they are tried.
std::vector<std::string> pluginCandidates(const std::string& value, bool set);

// Loads one plugin library and initialises the newest interface it exports; null
// (logged) when it cannot be loaded, exports none of v11..v8, or fails to start.
// *version gets the interface used.
std::unique_ptr<Network> openPlugin(const std::string& file, int* version = nullptr);

// Why Strata cannot use a loaded plugin (empty: it can): a device whose receives the
// plugin unpacks with GPU kernels (netDeviceType UNPACK). Such a plugin is skipped
// with a warning, and a connection that returns a device handle is refused.
std::string unservable(Network& net);

}  // namespace strata::transport::net
