#include "harness/perf_world.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#ifdef STRATA_PERF_MPI
#include <mpi.h>
#endif

namespace strata::perf {

static bool launchedByMpirun() {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

World::World(int* argc, char*** argv, int nThreads)
    : nThreads_(nThreads), threads_(nThreads, AcrossProcesses{this}), slots_(nThreads) {
#ifdef STRATA_PERF_MPI
  if (launchedByMpirun()) {
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_size(MPI_COMM_WORLD, &nProcs_);
    MPI_Comm_rank(MPI_COMM_WORLD, &proc_);
    mpi_ = true;
  }
#else
  (void)argc;
  (void)argv;
  (void)launchedByMpirun;
#endif
}

World::~World() {
#ifdef STRATA_PERF_MPI
  if (mpi_) MPI_Finalize();
#endif
}

void World::AcrossProcesses::operator()() noexcept {
#ifdef STRATA_PERF_MPI
  if (world->mpi_) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

void World::barrier() { threads_.arrive_and_wait(); }

void World::broadcast(void* data, size_t bytes) {
#ifdef STRATA_PERF_MPI
  if (mpi_) MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
#else
  (void)data;
  (void)bytes;
#endif
}

double World::combine(int thread, double value, int mode) {
  slots_[thread] = value;
  threads_.arrive_and_wait();
  if (thread == 0) {
    double local;
    switch (mode) {
      case 0: local = slots_[0]; break;
      case 2: local = *std::min_element(slots_.begin(), slots_.end()); break;
      case 3: local = *std::max_element(slots_.begin(), slots_.end()); break;
      default: local = std::accumulate(slots_.begin(), slots_.end(), 0.0); break;
    }
    double global = local;
#ifdef STRATA_PERF_MPI
    if (mpi_) {
      MPI_Op op = mode == 2 ? MPI_MIN : mode == 3 ? MPI_MAX : MPI_SUM;
      if (mode == 0) MPI_Bcast(&global, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      else MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    }
#endif
    if (mode == 1) global /= static_cast<double>(nThreads_) * nProcs_;
    result_ = global;
  }
  threads_.arrive_and_wait();
  return result_;
}

std::vector<std::string> World::gatherToFirst(const std::string& mine) {
  std::vector<std::string> all{mine};
#ifdef STRATA_PERF_MPI
  if (mpi_) {
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(nProcs_);
    MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<int> displs(nProcs_, 0);
    for (int p = 1; p < nProcs_; ++p) displs[p] = displs[p - 1] + lens[p - 1];
    std::string joined(proc_ == 0 ? displs.back() + lens.back() : 0, '\0');
    MPI_Gatherv(mine.data(), len, MPI_CHAR, joined.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
    all.clear();
    if (proc_ == 0)
      for (int p = 0; p < nProcs_; ++p) all.push_back(joined.substr(displs[p], lens[p]));
  }
#endif
  return all;
}

}  // namespace strata::perf
