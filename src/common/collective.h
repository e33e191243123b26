// The collective operations and their rules, in one table: how large each rank's
// buffers are, who reads and writes them, what "in place" means, whether a
// reduction op applies, and nccl-tests' bus-bandwidth factor. Validation,
// device staging, planning, the tuner and the perf tools all read this table.
// Header-only plain data.
#pragma once

#include <cstddef>

namespace strata {

enum class Collective {
  kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce,  // ring schedules
  kAllToAll, kGather, kScatter, kSendRecv,                      // pairwise transfers
};
constexpr int kNumCollectives = 9;

// Which buffer holds count x nranks elements (the rest hold count).
enum class Wide { kNone, kSend, kRecv, kBoth };
// Which ranks read sendbuff or write recvbuff.
enum class Who { kEveryRank, kRootOnly };
// What in place means, per NCCL: the same pointer, the send buffer at
// recvbuff + rank x count (all-gather, gather), or the receive buffer at
// sendbuff + rank x count (reduce-scatter, scatter).
enum class InPlace { kSamePointer, kSendInsideRecv, kRecvInsideSend };

struct CollectiveTraits {
  const char* name;  // NCCL's: "AllReduce", ...
  bool reducing;     // takes a reduction op
  bool rooted;       // takes a root
  bool scheduled;    // planned by NCCL_ALGO's algorithms (else pairwise transfers)
  Wide wide;
  Who readsSend, writesRecv;
  InPlace inPlace;
};

inline const CollectiveTraits& traits(Collective c) {
  static const CollectiveTraits table[kNumCollectives] = {
      {"AllReduce", true, false, true, Wide::kNone, Who::kEveryRank, Who::kEveryRank, InPlace::kSamePointer},
      {"AllGather", false, false, true, Wide::kRecv, Who::kEveryRank, Who::kEveryRank, InPlace::kSendInsideRecv},
      {"ReduceScatter", true, false, true, Wide::kSend, Who::kEveryRank, Who::kEveryRank, InPlace::kRecvInsideSend},
      {"Broadcast", false, true, true, Wide::kNone, Who::kRootOnly, Who::kEveryRank, InPlace::kSamePointer},
      {"Reduce", true, true, true, Wide::kNone, Who::kEveryRank, Who::kRootOnly, InPlace::kSamePointer},
      {"AlltoAll", false, false, false, Wide::kBoth, Who::kEveryRank, Who::kEveryRank, InPlace::kSamePointer},
      {"Gather", false, true, false, Wide::kRecv, Who::kEveryRank, Who::kRootOnly, InPlace::kSendInsideRecv},
      {"Scatter", false, true, false, Wide::kSend, Who::kRootOnly, Who::kEveryRank, InPlace::kRecvInsideSend},
      {"SendRecv", false, false, false, Wide::kNone, Who::kEveryRank, Who::kEveryRank, InPlace::kSamePointer},
  };
  return table[static_cast<int>(c)];
}

// NCCL's names: "AllReduce", "AllGather", ...
inline const char* collectiveName(Collective c) { return traits(c).name; }

// Elements in one rank's send and receive buffers for the call's count.
inline size_t sendElements(Collective c, size_t count, int nranks) {
  Wide w = traits(c).wide;
  return w == Wide::kSend || w == Wide::kBoth ? count * static_cast<size_t>(nranks) : count;
}
inline size_t recvElements(Collective c, size_t count, int nranks) {
  Wide w = traits(c).wide;
  return w == Wide::kRecv || w == Wide::kBoth ? count * static_cast<size_t>(nranks) : count;
}

// Whether `rank` reads its send buffer and writes its receive buffer (NCCL leaves
// a reduce's or gather's non-root output untouched, and reads a broadcast's or
// scatter's input only at the root).
inline bool readsSend(Collective c, int rank, int root) {
  return traits(c).readsSend == Who::kEveryRank || rank == root;
}
inline bool writesRecv(Collective c, int rank, int root) {
  return traits(c).writesRecv == Who::kEveryRank || rank == root;
}

// Element offsets that make a call in place: the send buffer inside the receive
// buffer, or the receive buffer inside the send buffer (0 for the other).
inline size_t inPlaceSendOffset(Collective c, size_t count, int rank) {
  return traits(c).inPlace == InPlace::kSendInsideRecv ? count * static_cast<size_t>(rank) : 0;
}
inline size_t inPlaceRecvOffset(Collective c, size_t count, int rank) {
  return traits(c).inPlace == InPlace::kRecvInsideSend ? count * static_cast<size_t>(rank) : 0;
}

// nccl-tests' "size" of an operation: bytes of the larger of one rank's buffers.
inline size_t operationBytes(Collective c, size_t count, size_t esize, int nranks) {
  size_t s = sendElements(c, count, nranks), r = recvElements(c, count, nranks);
  return (s > r ? s : r) * esize;
}

// nccl-tests' bus-bandwidth factor on n ranks.
inline double busFactor(Collective c, int n) {
  if (n <= 1) return 1;
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kBroadcast: case Collective::kReduce: case Collective::kSendRecv: return 1;
    default: return static_cast<double>(n - 1) / n;
  }
}

}  // namespace strata
