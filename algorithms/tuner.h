// Picks an algorithm and protocol per operation from the algorithms' own cost
// models, and honours NCCL_ALGO / NCCL_PROTO.
#pragma once

#include <cstddef>
#include <string>

#include "algorithms/collective.h"
#include "topology/planner.h"

namespace strata::algorithms {

class Algorithm;

// Cost of moving one message between neighbours: the topology's plain data.
using LinkModel = topology::LinkCost;

struct TuneRequest {
  Collective coll = Collective::kAllReduce;
  size_t bytes = 0;  // nccl-tests' "size": the larger of one rank's input and output
  int nranks = 1;
  int nodes = 1;
  int ranksPerNode = 1;  // 0 when nodes hold different numbers of ranks
  LinkModel intra;       // between ranks of one node (per rank)
  LinkModel net;         // across nodes: per node link, shared by the node's ranks
  bool sharedMemory = false;  // every rank maps every other rank's memory: LL is possible
  double launchUs = 0;        // fixed cost of a proxied operation on GPUs (not of stream-ordered kernels)
  bool deviceBuffers = false;  // the operation's buffers are device memory
  bool streamOrdered = false;  // enqueued by the caller's thread on the caller's stream, no proxy (device-driven kernels)
  bool ownGpus = false;        // every rank drives a GPU no other rank of the communicator uses
  bool oneProcess = false;     // every rank is a thread of one process: peers' memory is read with plain copies
  bool oneGpuThreads = false;  // every rank drives the same GPU, from a thread of one process (peer access unused)
  bool gpuMachine = false;     // a prediction for ranks that drive GPUs (strata-topo): host-only algorithms do not apply
  uint64_t unavailable = 0;    // bit i: registry()[i] cannot run on this communicator (its warm-up failed)
};

// Protocols: "Simple" moves whole slots through staging with a head/tail
// handshake; "LL" stores 4-byte data words tagged with a flag straight into
// the peer's memory (half the bandwidth, a fraction of the latency).
enum class Protocol { kSimple, kLL };
const char* protocolName(Protocol p);

struct Choice {
  const Algorithm* algorithm = nullptr;
  Protocol proto = Protocol::kSimple;
  double estimatedUs = 0;
  const char* name() const;  // the algorithm's name
};

// Above this many ranks a mesh (Algorithm::linksEveryRank) is not preferred: its
// n - 1 links per rank (one-shot: 256 KiB of slots each) cost memory and first-call
// setup that grow with the communicator, while a tree's latency grows with log n.
// One thread driving 128 host ranks spent 10 s and 6.6 GB opening one-shot meshes
// for its first 8-byte all-reduce. NCCL_ALGO may still force a mesh.
constexpr int kMaxMeshRanks = 32;

// True when `name` survives an NCCL_ALGO / NCCL_PROTO list for the function
// `func` (NCCL's syntax, case-insensitive: "Ring,Tree", "^Tree", and entries
// scoped to one function after ';': "ring;allreduce:oneshot,ring").
bool listAllows(const std::string& spec, const std::string& name, const std::string& func = "");

// The cheapest allowed algorithm and protocol; throws ncclInvalidUsage naming
// the variables when the lists exclude every candidate.
Choice choose(const TuneRequest& req, const std::string& algoSpec, const std::string& protoSpec);
// The same, false instead of throwing when nothing is left.
bool tryChoose(const TuneRequest& req, const std::string& algoSpec, const std::string& protoSpec, Choice* out);

// The cost model of one algorithm and protocol on a request (fixed cost included).
double costOf(const Algorithm& a, Protocol p, const TuneRequest& req);

}  // namespace strata::algorithms
