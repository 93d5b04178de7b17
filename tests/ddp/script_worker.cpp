// A model scripted in Python (tests/reference/make_scripted_reference.py's
// transformer) trained over 2 Gloo ranks under each parallel strategy:
// equal to one process on the whole batches. Full sharding takes the
// model as one unit (parallel::wrap::none()): a TorchScript forward cannot
// announce its submodules, and asked for units it says so.
#include <trainkit/parallel/full_shard.hpp>
#include <trainkit/parallel/shard_grad_op.hpp>
#include <trainkit/parallel/zero_sharded.hpp>
#include <trainkit/script_module.hpp>
#include <trainkit/trainkit.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "../scripted_models.hpp"
#include "worker_support.hpp"

namespace tk = trainkit;
namespace par = trainkit::parallel;

namespace {

using worker::check;
using worker::ddp_options;
using worker::max_rel_diff;
using worker::rank_env;
using worker::world_env;

using scripted_models::NextToken;
using scripted_models::TokenBatch;
using scripted_models::transformer_batch;

tk::ScriptModule load() {
  return tk::ScriptModule(std::filesystem::path(TRAINKIT_REFERENCE_DIR) / "scripted" /
                          "transformer_script_torch1.13.pt");
}

template <class Par>
using T = tk::Trainer<tk::optim::SGD, tk::sched::Constant, tk::precision::Fp32,
                      tk::accumulate::None, tk::clip::Norm, Par>;
// SGD: AdamW would turn the keys' bias gradients, rounding noise (softmax cancels
// them), into steps of +-lr that differ between runs.
const tk::optim::SGD::Options kSgd{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};

template <class Par, class Options>
void against(const char* name, tk::ScriptModule& single, const Options& options,
             const std::vector<TokenBatch>& mine) {
  auto model = load();
  T<Par> trainer(model, {.optim = kSgd, .clip = {.max_norm = 1.0}, .parallel = options});
  const auto result = trainer.fit(NextToken{}, mine, {.epochs = 1, .data_is_per_rank = true});
  double err = 0;
  if constexpr (std::is_same_v<Par, par::FullShard>) {
    const auto whole = trainer.parallel().gather_parameters();
    err = max_rel_diff(*model, *single);
  } else {
    err = max_rel_diff(*model, *single);
  }
  std::printf("rank %d: scripted transformer, %s vs one process: max rel diff %.3g\n", rank_env(),
              name, err);
  check(result.steps == int64_t(mine.size()) && err < 1e-5,
        std::string(name) + " on a scripted model equals one process within 1e-5");
}

void scripted() {
  const int world = world_env(), rank = rank_env();
  std::vector<TokenBatch> whole, mine;
  for (int64_t m = 0; m < 8; ++m) {
    const auto b = transformer_batch(m);
    whole.push_back(b);
    mine.push_back({b.tokens.chunk(world)[rank].clone(), b.targets.chunk(world)[rank].clone()});
  }
  auto single = load();
  T<par::Single>(single, {.optim = kSgd, .clip = {.max_norm = 1.0}})
      .fit(NextToken{}, whole, {.epochs = 1});

  against<par::DDP>("DDP", single, ddp_options(0), mine);
  against<par::ZeroSharded>("ZeroSharded", single, ddp_options(1), mine);
  against<par::ShardGradOp>("ShardGradOp", single, ddp_options(2), mine);
  against<par::FullShard>(
      "FullShard (wrap::none)", single,
      par::FullShard::Options{.group = ddp_options(3), .wrap = par::wrap::none()}, mine);
  // Units by submodule: the scripted forward never announces them.
  std::string what;
  try {
    auto model = load();
    T<par::FullShard> trainer(model, {.optim = kSgd, .parallel = {.group = ddp_options(4)}});
    trainer.fit(NextToken{}, mine, {.epochs = 1, .data_is_per_rank = true});
  } catch (const tk::Error& e) {
    what = e.what();
  }
  std::printf("rank %d: FullShard with units: %s\n", rank, what.c_str());
  check(what.find("did not run through parallel::unit: tokens blocks ln_f head") !=
                std::string::npos &&
            what.find("give it parallel.wrap = parallel::wrap::none()") != std::string::npos,
        "full sharding by submodule of a scripted model is an Error that says what to do");
}

}  // namespace

int main(int argc, char** argv) {
  return worker::run(argc, argv, {{"scripted", [] { scripted(); }}});
}
