#include "base/conf_file.h"

#include <fstream>

#include "base/error.h"

namespace strata {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

void readOne(const std::string& path, ConfFiles* out) {
  std::ifstream f(path);
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    size_t eq = line.find('=');
    std::string name = eq == std::string::npos ? "" : trim(line.substr(0, eq));
    if (name.empty() || name.find_first_of(" \t") != std::string::npos) {
      out->warnings.push_back(format("%s:%d: not NAME=VALUE, ignored: %s", path.c_str(), n, line.c_str()));
      continue;
    }
    out->values.emplace(name, trim(line.substr(eq + 1)));  // emplace: an earlier (more important) file keeps its value
  }
}

}  // namespace

std::vector<std::string> confFilePaths(const char* confFileVar, const char* home) {
  if (confFileVar && *confFileVar) return {confFileVar};
  std::vector<std::string> paths;
  if (home && *home) paths.push_back(std::string(home) + "/.nccl.conf");
  paths.push_back("/etc/nccl.conf");
  return paths;
}

ConfFiles readConfFiles(const std::vector<std::string>& paths, bool required) {
  ConfFiles out;
  for (const std::string& p : paths) {
    if (!std::ifstream(p).good()) {
      if (required) out.warnings.push_back("NCCL_CONF_FILE=" + p + " cannot be read; no configuration file used");
      continue;
    }
    readOne(p, &out);
    out.read.push_back(p);
  }
  return out;
}

}  // namespace strata
