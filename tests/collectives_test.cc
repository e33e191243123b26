// Every collective on host memory with exact expected values (collective_cases.cc):
// ranks as threads and as processes, 1..8 ranks.
#include <gtest/gtest.h>

#include <tuple>

#include "collective_cases.h"
#include "harness/ranks.h"

namespace strata::test {
namespace {

class Collectives : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(Collectives, ExactResults) {
  auto [mode, n] = GetParam();
  auto results = runRanks(mode, n, [](int rank, int nranks, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm;
    RANK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
    std::string err = runAll(comm, rank, nranks);
    ncclCommDestroy(comm);
    return err;
  }, 600);
  EXPECT_EQ(failures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Host, Collectives,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(1, 2, 3, 4, 7, 8)),
                         [](const auto& info) {
                           return std::string(modeName(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

}  // namespace
}  // namespace strata::test
