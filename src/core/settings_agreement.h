// Settings every rank reads from its own environment but must share with the others:
// each rank plans a collective on its own (the tuner's algorithm and protocol, the
// channels, the slots, where transfers turn one-sided), so ranks whose settings differ
// plan different exchanges and wait on each other until STRATA_TIMEOUT. The ranks
// exchange hashes of them at init (PeerInfo::settings) and every rank fails its init
// alike, naming the setting and the two ranks, where one differs. NCCL does not check.
#pragma once

#include <string>
#include <vector>

#include "base/config.h"
#include "base/peer_info.h"
#include "core/communicator.h"

namespace strata::core {

struct AgreedSetting {
  const char* name;   // what the user sets
  std::string value;  // this rank's, as the plan uses it
  bool perHost;       // only ranks of one host must agree (transports between them)
};

// Ring channels per communicator: NCCL_MAX_NCHANNELS within ncclConfig_t's minCTAs and
// maxCTAs, 1 to 64.
int channelCount(const Config& cfg, const CommOptions& opts);
// A connection's slots: STRATA_NSLOTS (at most 64) splitting NCCL_BUFFSIZE, each at
// least 4 KiB, 64-byte aligned.
struct StagingShape {
  int slots;
  size_t slotBytes;
};
StagingShape stagingShape(const Config& cfg);
// This rank's settings for a communicator with options `opts`, in PeerInfo::settings order.
std::vector<AgreedSetting> agreedSettings(const CommOptions& opts);
void hashSettings(const std::vector<AgreedSetting>& settings, PeerInfo* self);
// Throws ncclInvalidUsage naming the first setting on which some rank differs from the
// lowest rank it must agree with. `peers` is the exchanged table; `rank` this rank.
void checkSettingsAgreed(const std::vector<PeerInfo>& peers, int rank, const std::vector<AgreedSetting>& mine);

}  // namespace strata::core
