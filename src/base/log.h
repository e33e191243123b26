// NCCL-style log lines: "host:pid:tid [rank] NCCL INFO message", filtered by NCCL_DEBUG(_SUBSYS).
#pragma once

#include "base/config.h"

namespace strata {

// True when a message at this level and subsystem would be printed.
bool logEnabled(LogLevel level, uint32_t subsys);

// Prints one line; rank < 0 prints no rank field.
void logLine(LogLevel level, uint32_t subsys, int rank, const char* fmt, ...) __attribute__((format(printf, 4, 5)));

// Prints the configuration warnings and the version banner once per process.
void logStartup();

// Forgets that startup was logged and reopens the log (ncclResetDebugInit).
void resetLogging();

}  // namespace strata

#define STRATA_LOG(level, subsys, rank, ...)                                                          \
  do {                                                                                               \
    if (::strata::logEnabled(level, subsys)) ::strata::logLine(level, subsys, rank, __VA_ARGS__);    \
  } while (0)
#define STRATA_WARN(rank, ...) STRATA_LOG(::strata::LogLevel::kWarn, ::strata::kSubsysAll, rank, __VA_ARGS__)
#define STRATA_INFO(subsys, rank, ...) STRATA_LOG(::strata::LogLevel::kInfo, subsys, rank, __VA_ARGS__)
#define STRATA_TRACE(subsys, rank, ...) STRATA_LOG(::strata::LogLevel::kTrace, subsys, rank, __VA_ARGS__)
