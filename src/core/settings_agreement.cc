#include "core/settings_agreement.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "base/error.h"

namespace strata::core {
namespace {

// NCCL's list syntax ignores case and spaces: "Ring, Tree" and "ring,tree" agree.
std::string normalized(const std::string& list) {
  std::string out;
  for (char c : list)
    if (!isspace(static_cast<unsigned char>(c))) out += static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string orUnset(bool set, size_t value) { return set ? std::to_string(value) : "unset"; }

}  // namespace

int channelCount(const Config& cfg, const CommOptions& opts) {
  int nch = cfg.maxChannels;
  if (opts.maxChannels > 0) nch = std::min(nch, opts.maxChannels);
  if (opts.minChannels > 0) nch = std::max(nch, opts.minChannels);
  return std::max(1, std::min(nch, 64));
}

StagingShape stagingShape(const Config& cfg) {
  int slots = std::min(cfg.slots, 64);
  return {slots, std::max<size_t>(4096, (cfg.buffSize / slots) & ~size_t{63})};
}

std::vector<AgreedSetting> agreedSettings(const CommOptions& opts) {
  const Config& c = config();
  // Host-memory communicators use no GPU peer-to-peer: its settings cannot differ there.
  const bool gpu = opts.device >= 0;
  StagingShape shape = stagingShape(c);
  std::vector<AgreedSetting> s = {
      {"NCCL_ALGO", normalized(c.algo), false},
      {"NCCL_PROTO", normalized(c.proto), false},
      {"the slots (NCCL_BUFFSIZE / STRATA_NSLOTS)", std::to_string(shape.slots) + " x " + std::to_string(shape.slotBytes),
       false},
      {"the channel count (NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, ncclConfig_t minCTAs/maxCTAs)",
       std::to_string(channelCount(c, opts)) + " of at least " + std::to_string(c.minChannels), false},
      {"STRATA_PUT_BYTES", orUnset(c.putBytesSet, c.putBytes), false},
      {"STRATA_CMA_BULK_BYTES", std::to_string(c.bulkBytes()), false},
      // Global, not per host: a ring's rank asks whether every hop, on every host, can
      // write one-sided, and answers for other hosts from its own setting.
      {"NCCL_SHM_DISABLE", c.shmDisable ? "1" : "0", false},
      {"NCCL_P2P_DISABLE", gpu && c.p2pDisable ? "1" : "0", true},
      {"NCCL_P2P_LEVEL", gpu ? normalized(c.p2pLevel.empty() ? "PXB" : c.p2pLevel) : "", true},
  };
  STRATA_REQUIRE(s.size() == PeerInfo::kSettings, ncclInternalError, "%zu agreed settings for %d hashes", s.size(),
                 PeerInfo::kSettings);
  return s;
}

void hashSettings(const std::vector<AgreedSetting>& settings, PeerInfo* self) {
  for (size_t i = 0; i < settings.size(); ++i)
    self->settings[i] = hashBytes(settings[i].value.data(), settings[i].value.size());
}

void checkSettingsAgreed(const std::vector<PeerInfo>& peers, int rank, const std::vector<AgreedSetting>& mine) {
  std::unordered_map<uint64_t, const PeerInfo*> hostFirst;  // each host's lowest rank
  for (const PeerInfo& p : peers) hostFirst.emplace(p.hostHash, &p);
  for (const PeerInfo& p : peers) {
    for (int i = 0; i < PeerInfo::kSettings; ++i) {
      const PeerInfo* ref = mine[i].perHost ? hostFirst.at(p.hostHash) : &peers[0];
      STRATA_REQUIRE(p.settings[i] == ref->settings[i], ncclInvalidUsage,
                     "rank %d: ranks %d and %d differ in %s (this rank's: \"%s\"); every rank%s plans from its own "
                     "settings, so they must be alike or the ranks would wait on each other",
                     rank, ref->rank, p.rank, mine[i].name, mine[i].value.c_str(),
                     mine[i].perHost ? " of a host" : "");
    }
  }
}

}  // namespace strata::core
