// Every environment variable Strata reads, from outside the process: the input is
// lines of NAME=VALUE (any bytes), parsed into the one config struct, and NCCL's list
// syntax (NCCL_ALGO / NCCL_PROTO, scopes per function) evaluated for every name.
// Bad values must become warnings and defaults, never a crash or sanitizer report.
// The same bytes are also read as an NCCL configuration file (NCCL_CONF_FILE).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "algorithms/tuner.h"
#include "base/conf_file.h"
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
  // In the working directory: run_fuzz.sh runs each target in a scratch one.
  static const std::string conf = "strata-fuzz-conf-" + std::to_string(getpid());
  if (FILE* f = fopen(conf.c_str(), "wb")) {
    fwrite(data, 1, size, f);
    fclose(f);
    strata::ConfFiles files = strata::readConfFiles({conf}, true);
    for (const auto& [name, value] : files.values)  // names and values are trimmed, names never empty
      if (name.empty() || name.find('=') != std::string::npos || name.find('#') != std::string::npos) __builtin_trap();
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
