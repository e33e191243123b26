// Where the ranks of one communicator that are threads of one process on one GPU
// meet, operation by operation: each posts its buffers and an event marking its
// stream's work up to the call; rank 0 enqueues the whole operation on its own
// stream after those events and publishes an event marking its end, which the
// others' streams then wait for. A stream only ever waits for work already
// enqueued, so no stream holds a hardware queue while it waits for a host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"  // CollectiveOp, and Doorbell declared

namespace strata::algorithms::device_shared {

// One rank's part of one operation: its call, as the algorithm got it, and more.
struct SharedPost : CollectiveOp {
  uint64_t seq = 0;       // the communicator's operations, counted from 1 on every rank
  void* ready = nullptr;  // an event: the poster's stream up to its call
  uint64_t capture = 0;   // the CUDA graph capture its stream belongs to (0: none)
};

class Board {
 public:
  // The board of communicator `id` in this process, made by its first rank; `bell`
  // wakes `rank`'s thread when the board has news for it.
  static std::shared_ptr<Board> join(uint64_t id, int nranks, int rank, std::shared_ptr<Doorbell> bell);
  explicit Board(int nranks) : posts_(nranks), gone_(nranks, false), bells_(nranks), ready_(nranks, nullptr) {}
  ~Board();  // destroys the events: no rank can still be about to wait for one
  Board(const Board&) = delete;
  Board& operator=(const Board&) = delete;

  // The events, made on first use on the current device, owned by the board (not by
  // a rank: a rank may leave while another still has to enqueue a wait for its
  // event): `rank`'s ready event, and rank 0's done event.
  void* readyEvent(int rank);
  void* doneEvent();
  // Rank 0's done event for operations captured into a CUDA graph: a capture's record
  // leaves an event unqueryable, and the done event of ordinary operations must stay
  // queryable for ranks that leave (leave()).
  void* graphDoneEvent();

  // `rank` left (its communicator was destroyed or aborted): its post is withdrawn,
  // and whoever waits for it stops. If rank 0 had already taken the post, this waits
  // until rank 0's work for it has run (it writes into this rank's buffers, which the
  // caller may free next); that work never waits for a host, so the wait ends.
  void leave(int rank);
  bool gone(int rank) const;
  // Posts `rank`'s part of operation p.seq and wakes rank 0.
  void post(int rank, const SharedPost& p);
  // Rank 0: true when every rank posted operation `seq` (then `out` holds the posts
  // by rank); else `missing` is the first rank that has not, or that left.
  bool collect(uint64_t seq, std::vector<SharedPost>* out, int* missing);
  // Rank 0: operation `seq` is enqueued and `done` marks its end on rank 0's stream,
  // or it failed (`code`, `error`); wakes every rank. `captured`: it was recorded
  // into a CUDA graph, so it runs when the graph does and nobody leaving waits for it.
  void publish(uint64_t seq, void* done, ncclResult_t code, const std::string& error, bool captured = false);
  // The others: true once operation `seq` was published (its event, or its failure).
  bool finished(uint64_t seq, void** done, ncclResult_t* code, std::string* error) const;

 private:
  void ring(int rank) const;
  void waitForRun(int rank, uint64_t seq);

  mutable std::mutex mu_;
  std::vector<SharedPost> posts_;
  std::vector<bool> gone_;
  std::vector<std::shared_ptr<Doorbell>> bells_;
  std::vector<void*> ready_;
  void* doneEvent_ = nullptr;
  void* graphDoneEvent_ = nullptr;
  bool ranOrdinary_ = false;  // an operation was published with the ordinary (not captured) done event
  uint64_t collected_ = 0;  // the last operation rank 0 took the posts of
  uint64_t published_ = 0;
  void* done_ = nullptr;
  ncclResult_t code_ = ncclSuccess;
  std::string error_;
};

}  // namespace strata::algorithms::device_shared
