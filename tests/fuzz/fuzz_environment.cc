// Every environment variable Strata reads, from outside the process: the input is
// lines of NAME=VALUE (any bytes), parsed into the one config struct, and NCCL's list
// syntax (NCCL_ALGO / NCCL_PROTO, scopes per function) evaluated for every name.
// Bad values must become warnings and defaults, never a crash or sanitizer report.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "algorithms/tuner.h"
#include "base/config.h"
#include "base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> env;
  std::string text(reinterpret_cast<const char*>(data), size);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  try {
    strata::Config c = strata::Config::parse([&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    for (const char* name : {"Ring", "Tree", "OneShot", "Simple", "LL", ""})
      for (const char* func : {"allreduce", "broadcast", ""}) {
        (void)strata::algorithms::listAllows(c.algo, name, func);
        (void)strata::algorithms::listAllows(c.proto, name, func);
      }
  } catch (const strata::Error&) {
  }
  return 0;
}
