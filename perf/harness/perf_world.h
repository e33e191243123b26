// The ranks of one perf run: processes (under mpirun) x threads x ranks per thread.
#pragma once

#include <barrier>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::perf {

class World {
 public:
  // Joins MPI when launched by mpirun (and built with MPI), else runs as one process.
  World(int* argc, char*** argv, int nThreads);
  ~World();

  int nProcs() const { return nProcs_; }
  int proc() const { return proc_; }
  bool mpi() const { return mpi_; }
  // Waits for every thread of every process.
  void barrier();
  // Broadcasts bytes from process 0.
  void broadcast(void* data, size_t bytes);
  // Per-thread value combined over all threads and processes: 0 first thread's, 1 mean, 2 min, 3 max, 4 sum.
  double combine(int thread, double value, int mode);
  // Strings from every process to process 0 (others get an empty list).
  std::vector<std::string> gatherToFirst(const std::string& mine);

 private:
  // Runs once per barrier phase, on one thread: joins the other processes.
  struct AcrossProcesses {
    World* world;
    void operator()() noexcept;
  };

  int nProcs_ = 1, proc_ = 0, nThreads_;
  bool mpi_ = false;
  std::barrier<AcrossProcesses> threads_;
  std::vector<double> slots_;
  double result_ = 0;
};

}  // namespace strata::perf
