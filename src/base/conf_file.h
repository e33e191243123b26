// NCCL's configuration files, one more source of the variables the config struct
// reads (the environment wins over them): NCCL_CONF_FILE when it is set, else
// ~/.nccl.conf and then /etc/nccl.conf (a name set in both: the user's file wins).
// Lines are NAME=VALUE; '#' starts a comment; blank lines are skipped.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace strata {

struct ConfFiles {
  std::map<std::string, std::string> values;  // by name, from the first file that sets it
  std::vector<std::string> read;              // the files found and read, in precedence order
  std::vector<std::string> warnings;          // lines that are not NAME=VALUE, unreadable NCCL_CONF_FILE
};

// The files NCCL would read, most important first (confFileVar: NCCL_CONF_FILE's value, or null).
std::vector<std::string> confFilePaths(const char* confFileVar, const char* home);
// Reads those that exist; a missing NCCL_CONF_FILE (`required`) is a warning, a missing default is not.
ConfFiles readConfFiles(const std::vector<std::string>& paths, bool required);

}  // namespace strata
