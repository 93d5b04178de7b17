// Rendezvous from the environment (torchrun, Slurm, explicit) and the
// bucket/shard layout helpers; the multi-process behaviour is in ddp/.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <trainkit/parallel/environment.hpp>
#include <trainkit/params.hpp>

#include <cstdlib>
#include <map>
#include <string>

using trainkit::parallel::Environment;

namespace {
// Sets variables for one test and restores the previous values after it.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    for (const char* name : kNames) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      ::unsetenv(name);
    }
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  static constexpr const char* kNames[] = {
      "RANK",         "WORLD_SIZE",   "LOCAL_RANK",    "MASTER_ADDR",    "MASTER_PORT",
      "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODELIST", "SLURM_STEP_NODELIST"};
  std::map<std::string, std::string> saved_;
};
}  // namespace

TEST_CASE("environment: torchrun variables") {
  ScopedEnv env({{"RANK", "3"},
                 {"WORLD_SIZE", "4"},
                 {"LOCAL_RANK", "1"},
                 {"MASTER_ADDR", "10.0.0.7"},
                 {"MASTER_PORT", "29511"}});
  const auto e = Environment::detect();
  CHECK(e.source == "torchrun");
  CHECK(e.rank == 3);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.master_addr == "10.0.0.7");
  CHECK(e.master_port == 29511);
}

TEST_CASE("environment: Slurm variables and the master from the node list") {
  ScopedEnv env({{"SLURM_PROCID", "5"},
                 {"SLURM_NTASKS", "8"},
                 {"SLURM_LOCALID", "1"},
                 {"SLURM_NODELIST", "gpu[03-05,09],cpu1"},
                 {"MASTER_PORT", "29600"}});
  const auto e = Environment::detect();
  CHECK(e.source == "slurm");
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.master_addr == "gpu03");
  CHECK(e.master_port == 29600);
  CHECK(trainkit::detail::first_slurm_host("node7,node8") == "node7");
  CHECK(trainkit::detail::first_slurm_host("a-b[1-2]") == "a-b1");
}

TEST_CASE("environment: LOCAL_RANK alone is an independent worker's device, not a rank") {
  ScopedEnv env(std::map<std::string, std::string>{{"LOCAL_RANK", "3"}});  // --independent
  const auto e = Environment::detect();
  CHECK(e.source == "worker");
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK(e.local_rank == 3);
}

TEST_CASE("environment: explicit values win, defaults without a launcher") {
  ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  const auto e = Environment::detect({.rank = 0, .master_addr = "node0"});
  CHECK(e.rank == 0);
  CHECK(e.world_size == 2);
  CHECK(e.master_addr == "node0");
  CHECK(e.source == "explicit");
  ScopedEnv none(std::map<std::string, std::string>{});
  const auto d = Environment::detect();
  CHECK(d.source == "defaults");
  CHECK(d.world_size == 1);
}

TEST_CASE("environment: bad values name the variable") {
  ScopedEnv env({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  CHECK_THROWS_WITH_AS(Environment::detect(),
                       "trainkit: option `rank` = 2 is invalid; accepted: 0 <= rank < "
                       "world_size = 2 (RANK)",
                       trainkit::Error);
  ScopedEnv bad_port(std::map<std::string, std::string>{{"MASTER_PORT", "29x"}});
  CHECK_THROWS_WITH_AS(Environment::detect(),
                       "trainkit: option `MASTER_PORT` = \"29x\" is invalid; accepted: an integer",
                       trainkit::Error);
}

TEST_CASE("FlatParams::shard: disjoint slices that cover each group") {
  torch::manual_seed(1);
  auto a = torch::randn({7}, torch::requires_grad());
  auto b = torch::randn({3, 2}, torch::requires_grad());
  trainkit::FlatParams flat({a, b});
  for (const int world : {1, 2, 3, 5, 16}) {
    int64_t covered = 0;
    for (int r = 0; r < world; ++r) {
      auto shard = flat.shard(r, world);
      const auto [begin, end] = trainkit::FlatParams::shard_range(13, r, world);
      CHECK(begin == covered);
      covered = end;
      REQUIRE(shard.groups().size() == 1);
      CHECK(shard.groups()[0].numel() == end - begin);
      shard.groups()[0].data.fill_(double(r));  // writes land in the model's parameters
    }
    CHECK(covered == 13);
  }
  CHECK(a.detach().index({0}).item<double>() == 1.0);  // shard 0 of 16 is empty
  CHECK(b.detach().reshape({-1}).index({5}).item<double>() == 15.0);
}
