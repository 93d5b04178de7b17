// One process of the sharding tests: each sharding strategy trains as DDP
// does, step by step, as PyTorch tests FSDP. CTest starts N of these through
// scripts/launch.sh; argv[1] names the scenario. Every collective of the
// sharded runs is preceded by a delay that differs between ranks and steps,
// so a rank that reads a buffer before its collective ends, or ranks that
// issue collectives in different orders, show as a wrong number or a hang.
#include <torch/torch.h>

#include <trainkit/callbacks/early_stopping.hpp>
#include <trainkit/callbacks/ema.hpp>
#include <trainkit/callbacks/tensorboard.hpp>
#include <trainkit/data.hpp>
#include <trainkit/finders/lr_finder.hpp>
#include <trainkit/io/checkpoint.hpp>
#include <trainkit/io/weights.hpp>
#include <trainkit/memory.hpp>
#include <trainkit/optim/lamb.hpp>
#include <trainkit/optim/lars.hpp>
#include <trainkit/parallel/ddp.hpp>
#include <trainkit/parallel/full_shard.hpp>
#include <trainkit/parallel/hybrid_shard.hpp>
#include <trainkit/parallel/shard_grad_op.hpp>
#include <trainkit/trainkit.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../examples/gpt.hpp"
#include "../gpt_batches.hpp"
#include "../step_record.hpp"
#include "worker_support.hpp"

namespace tk = trainkit;
using worker::check;
using worker::rank_env;
using worker::world_env;

namespace {

using gpt_batches::kBlock;
using gpt_batches::kVocab;
using gpt_batches::micro_batch;

/// Options with a rank- and call-dependent sleep (0-4 ms) before each collective.
tk::parallel::DDP::Options delayed(int port_offset) {
  auto o = worker::ddp_options(port_offset);
  o.before_collective = [calls = 0](const std::string&) mutable {
    const int ms = (rank_env() * 3 + calls++) % 5;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  };
  return o;
}

namespace par = tk::parallel;
using Params = torch::OrderedDict<std::string, at::Tensor>;

/// `o` as strategy Par takes it: full sharding with units from `rule`;
/// hybrid sharding with the ranks as hosts of two (as LOCAL_WORLD_SIZE=2
/// and LOCAL_RANK = RANK mod 2 would say on real hosts).
template <class Par>
auto options_for(par::DDP::Options o, const par::wrap::Rule& rule) {
  if constexpr (std::is_same_v<Par, par::HybridShard>) {  // one host of one on odd worlds
    const int per_host = world_env() % 2 == 0 ? 2 : 1;
    o.rendezvous.local_world_size = per_host;
    o.rendezvous.local_rank = rank_env() % per_host;
  }
  if constexpr (std::is_base_of_v<par::FullShard, Par>) {
    return par::FullShard::Options{.group = o, .wrap = rule};
  } else {
    return o;
  }
}

/// The trained parameters, cloned: under full sharding gathered first (at
/// rest they are empty).
template <class TrainerT>
Params whole_parameters(TrainerT& trainer) {
  [[maybe_unused]] auto whole = par::gathered_parameters(trainer.parallel());
  Params out;
  for (const auto& item : trainer.model().named_parameters())
    out.insert(item.key(), item.value().detach().clone());
  return out;
}

double max_rel_diff(const Params& a, const Params& b) {
  double worst = 0;
  for (const auto& item : a) {
    const auto& y = b[item.key()];
    worst = std::max(worst, (item.value() - y).abs().max().item<double>() /
                                y.abs().max().clamp_min(1e-30).item<double>());
  }
  return worst;
}

examples::Gpt make_gpt() {
  torch::manual_seed(7);
  examples::Gpt model(examples::GptConfig{
      .vocab_size = kVocab, .block_size = kBlock, .n_layer = 2, .n_head = 4, .n_embd = 32});
  examples::init_like_nanogpt(model);
  return model;
}

struct Run {
  std::vector<double> losses, norms;
  tk::FitResult result;
  Params params;
  double val_loss = 0;  ///< evaluate() after training, on 4 more micro-batches
};

template <class Par>
using GptTrainer = tk::Trainer<tk::optim::AdamW, tk::sched::WarmupCosine, tk::precision::Fp32,
                               tk::accumulate::Every<2>, tk::clip::Norm, Par>;

/// 20 steps of nanoGPT's recipe (two parameter groups, warm-up and cosine,
/// Every<2>, clip 1.0) on this rank's 40 micro-batches.
template <class Par>
Run train_gpt(examples::Gpt& model, int port_offset) {
  GptTrainer<Par> trainer(
      model,
      {.optim = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1},
       .sched = {.warmup_steps = 5, .start_factor = 0.1, .eta_min = 3e-4},
       .clip = {.max_norm = 1.0},
       .parallel = options_for<Par>(delayed(port_offset), par::wrap::of_type<examples::Block>()),
       .param_groups = {tk::params::no_weight_decay()}});
  std::vector<examples::TokenBatch> batches;
  for (int64_t m = 0; m < 40; ++m) batches.push_back(micro_batch(m * world_env() + rank_env()));
  Run run;
  run.result =
      trainer.fit(examples::LanguageModelling{}, batches, {.epochs = 1, .data_is_per_rank = true},
                  tk_test::StepRecord{&run.losses, &run.norms});
  if constexpr (std::is_base_of_v<par::ShardGradOp, Par>) {
    // No rank holds the whole gradient: the parameters have none, the flat
    // buffers none, and the shard is this rank's slice (of its host's, hybrid).
    for (const auto& p : model->parameters()) check(!p.grad().defined(), "no parameter gradient");
    const auto& flat = trainer.flat_params();
    auto& mine = trainer.gradients();
    constexpr bool kHosts = std::is_same_v<Par, par::HybridShard>;
    const int shard_rank = kHosts ? rank_env() % 2 : rank_env();
    const int shards = kHosts ? 2 : world_env();
    for (size_t g = 0; g < flat.groups().size(); ++g) {
      const auto [begin, end] =
          tk::FlatParams::shard_range(flat.groups()[g].numel(), shard_rank, shards);
      check(flat.groups()[g].grad.numel() == 0, "no full flat gradient");
      check(mine.groups()[g].grad.numel() == end - begin,
            "the gradient shard is this rank's slice");
    }
  }
  if constexpr (std::is_base_of_v<par::FullShard, Par>) {
    // Nor the whole parameters: at rest they are empty and the unit
    // buffers have no bytes; only the shard (a copy of its own) has.
    for (const auto& p : model->parameters()) check(p.numel() == 0, "parameters empty at rest");
    for (const auto& g : trainer.flat_params().groups())
      check(g.data.storage().nbytes() == 0, "no bytes in a whole buffer at rest");
    check(trainer.parallel().unit_names().size() == 3, "the root and two blocks");
  }
  run.params = whole_parameters(trainer);
  std::vector<examples::TokenBatch> val;
  for (int64_t m = 40; m < 44; ++m) val.push_back(micro_batch(m * world_env() + rank_env()));
  run.val_loss = trainer.evaluate(examples::LanguageModelling{}, val).at("loss");
  return run;
}

/// worker::max_rel_diff, but for the attention's key bias: softmax is
/// invariant to it, so its gradient is zero up to rounding, and AdamW's
/// normalised step follows that noise in whatever order a strategy sums it
/// (about 2e-4 apart after 20 steps, between any two reduction orders).
double max_rel_diff_but_key_bias(const Params& a, const Params& b) {
  double worst = 0;
  for (const auto& item : a) {
    auto x = item.value(), y = b[item.key()];
    if (item.key().ends_with("attn.c_attn.bias")) {  // [query | key | value]
      const auto n = x.numel() / 3;
      x = at::cat({x.narrow(0, 0, n), x.narrow(0, 2 * n, n)});
      y = at::cat({y.narrow(0, 0, n), y.narrow(0, 2 * n, n)});
    }
    worst = std::max(
        worst, (x - y).abs().max().item<double>() / y.abs().max().clamp_min(1e-30).item<double>());
  }
  return worst;
}

double rel(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

/// The strategy's losses, gradient norms and final parameters against DDP's.
template <class Par>
void compare_with_ddp(const char* name, const Run& ddp, int port) {
  auto model = make_gpt();
  const auto run = train_gpt<Par>(model, port);
  check(run.result.steps == 20 && run.losses.size() == 20, std::string(name) + ": 20 steps");
  double loss = 0, norm = 0;
  for (size_t s = 0; s < run.losses.size(); ++s) {
    loss = std::max(loss, rel(run.losses[s], ddp.losses[s]));
    norm = std::max(norm, rel(run.norms[s], ddp.norms[s]));
  }
  const double params = max_rel_diff_but_key_bias(run.params, ddp.params);
  const double val = rel(run.val_loss, ddp.val_loss);
  std::printf(
      "rank %d of %d: %s vs DDP, 20 steps: losses %.3g, gradient norms %.3g, "
      "parameters %.3g, evaluation %.3g (max relative differences)\n",
      rank_env(), world_env(), name, loss, norm, params, val);
  check(val <= 1e-6, std::string(name) + ": evaluate() equals DDP's");
  // The norm is summed over 4096-element chunks of each flat buffer, and
  // full sharding has a buffer per unit: other chunks, other rounding (up
  // to 1e-6 here), hence 2e-6 for the norms, and for the parameters they
  // clip (1.2e-6 after 20 steps with OpenBLAS under LibTorch 2.6).
  check(loss <= 1e-6 && norm <= 2e-6 && params <= 2e-6,
        std::string(name) +
            " equals DDP within 1e-6 step by step (2e-6 for gradient norms and parameters)");
  check(run.losses.back() < 0.9 * run.losses.front(), std::string(name) + " learned");
}

void gpt_parity() {
  auto ddp_model = make_gpt();
  const auto ddp = train_gpt<tk::parallel::DDP>(ddp_model, 0);
  compare_with_ddp<par::ShardGradOp>("ShardGradOp (ZeRO-2)", ddp, 1);
  compare_with_ddp<par::FullShard>("FullShard (ZeRO-3)", ddp, 2);
}

/// On 4 ranks as two hosts of two: HybridShard against DDP, and a host
/// size that does not divide the ranks refused by name.
void hybrid() {
  auto ddp_model = make_gpt();
  const auto ddp = train_gpt<par::DDP>(ddp_model, 0);
  compare_with_ddp<par::HybridShard>("HybridShard (2 hosts of 2)", ddp, 1);
  try {
    auto o = worker::ddp_options(2);
    o.rendezvous.local_world_size = 3;
    par::HybridShard refused({.group = o});
    check(false, "3 ranks per host of 4 is an error");
  } catch (const tk::Error& e) {
    check(std::string(e.what()).find("local_world_size") != std::string::npos &&
              std::string(e.what()).find("dividing world_size = 4") != std::string::npos,
          std::string("the error names the option and the world size: ") + e.what());
  }
}

// ---- sizes the world size does not divide, and ranks with empty shards ----
struct TinyImpl : torch::nn::Module {
  TinyImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(5, 7));
    fc2 = register_module("fc2", torch::nn::Linear(7, 1));
  }
  at::Tensor forward(at::Tensor x) {
    return fc2(torch::tanh(par::unit(fc1, [&] { return fc1(x); })));  // a unit if the rule says
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Tiny);

/// Regression, and on rank 0's fifth micro-batch a term whose gradient is
/// inf in fc1.bias[6] alone: under sharding only that element's owner (the
/// last rank) sees it, and every rank must skip the step.
struct OneInfGradient {
  int64_t calls = 0;
  tk::StepOutput step(Tiny& model, const tk::data::Batch& b) {
    auto loss = torch::mse_loss(model(b.input), b.target);
    if (rank_env() == 0 && calls++ == 4) loss = loss + model->fc1->bias[6] * INFINITY;
    return {loss};
  }
};

struct TinyRun {
  Params params;
  tk::FitResult result;
  double loss_scale;
};

/// How train_tiny_units' trainers save (the resume scenario sets it).
tk::CheckpointOptions tiny_checkpoint{};

/// A one-element parameter group (fc2.bias: all ranks but one hold none of
/// it) and groups of 42 and 7 elements; fp32 with loss scaling; 12 batches
/// of 4 per rank and epoch.
template <class Par, class TaskT, class... Callbacks>
TinyRun train_tiny_units(const par::wrap::Rule& units, int port_offset, TaskT task,
                         const tk::FitOptions& fit, Callbacks... callbacks) {
  torch::manual_seed(3);
  Tiny model;
  tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp16, tk::accumulate::Every<2>,
              tk::clip::Norm, Par>
      trainer(model, {.optim = {.lr = 1e-2, .weight_decay = 0.01},
                      .precision = {.autocast = false},
                      .clip = {.max_norm = 0.5},
                      .parallel = options_for<Par>(delayed(port_offset), units),
                      .param_groups = {{"head bias",
                                        tk::params::name_matches("fc2\\.bias"),
                                        {.lr_scale = 2.0, .weight_decay = 0.0}},
                                       {"biases", tk::params::below_2d(), {.weight_decay = 0.0}}},
                      .checkpoint = tiny_checkpoint});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + rank_env());
  const auto x = at::randn({48, 5}, gen);
  const auto y = x.sum(1, true).sin();
  std::vector<tk::data::Batch> data;
  for (int64_t i = 0; i < 48; i += 4) data.push_back({x.narrow(0, i, 4), y.narrow(0, i, 4)});
  auto result = trainer.fit(task, data, fit, callbacks...);
  return {whole_parameters(trainer), std::move(result), trainer.precision().scaler().scale_value()};
}
/// Full sharding with the root unit alone.
template <class Par, class TaskT, class... Callbacks>
TinyRun train_tiny(int port_offset, TaskT task, const tk::FitOptions& fit, Callbacks... callbacks) {
  return train_tiny_units<Par>(par::wrap::names({}), port_offset, task, fit, callbacks...);
}

/// One step skipped for an inf gradient that one shard holds.
void odd_sizes() {
  const tk::FitOptions fit{.epochs = 2, .data_is_per_rank = true};
  auto ddp = train_tiny<tk::parallel::DDP>(0, OneInfGradient{}, fit);
  auto zero2 = train_tiny<par::ShardGradOp>(1, OneInfGradient{}, fit);
  auto zero3 = train_tiny<par::FullShard>(2, OneInfGradient{}, fit);  // all in the root unit
  for (const auto* run : {&ddp, &zero2, &zero3}) {
    check(run->result.steps == 12, "12 steps");
    check(run->loss_scale == 32768.0, "the inf step skipped, scale halved");
  }
  for (const auto& [name, run] : {std::pair{"ShardGradOp", &zero2}, {"FullShard", &zero3}}) {
    const double err = max_rel_diff(run->params, ddp.params);
    std::printf("rank %d of %d: %s vs DDP, odd sizes, empty shards, an inf in one shard: %.3g\n",
                rank_env(), world_env(), name, err);
    check(err <= 1e-6,
          std::string(name) + " equals DDP on odd sizes, empty shards and skipped steps");
  }
}

// ---- parameters without a gradient, inside an accumulation window ----
struct HalfUsedImpl : torch::nn::Module {
  HalfUsedImpl() {
    fc = register_module("fc", torch::nn::Linear(5, 1));
    unused = register_module("unused", torch::nn::Linear(3, 3));
  }
  at::Tensor forward(at::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr}, unused{nullptr};
};
TORCH_MODULE(HalfUsed);

template <class Par>
Params train_half_used(int port_offset, bool find_unused) {
  torch::manual_seed(4);
  HalfUsed model;
  auto options = delayed(port_offset);
  options.find_unused_parameters = find_unused;
  tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::Every<2>,
              tk::clip::None, Par>
      trainer(model, {.optim = {.lr = 1e-2, .weight_decay = 0.1},
                      .parallel = options_for<Par>(options, par::wrap::names({}))});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(50 + rank_env());
  std::vector<tk::data::Batch> data;
  for (int i = 0; i < 8; ++i) data.push_back({at::randn({4, 5}, gen), at::randn({4, 1}, gen)});
  trainer.fit(tk::task::Regression{}, data, {.data_is_per_rank = true});
  return whole_parameters(trainer);
}

/// As under DDP: an error that names them, from the first micro-batch of a
/// window (not a crash at the end of a scope), or with
/// find_unused_parameters the same training as DDP's.
template <class Par>
void unused_against(const char* name, const Params& ddp, int port_offset) {
  try {
    train_half_used<Par>(port_offset, false);
    check(false, "a parameter without a gradient is an error");
  } catch (const tk::Error& e) {
    const std::string what = e.what();
    check(what.find("got no gradient in this step") != std::string::npos &&
              what.find("unused.weight") != std::string::npos &&
              what.find("unused.bias") != std::string::npos &&
              what.find(" fc.") == std::string::npos,
          std::string(name) + ": the error names the parameters without a gradient: " + what);
  }
  const double err = max_rel_diff(train_half_used<Par>(port_offset + 1, true), ddp);
  std::printf("rank %d of %d: %s vs DDP with unused parameters: %.3g\n", rank_env(), world_env(),
              name, err);
  check(err <= 1e-6, std::string(name) + " with find_unused_parameters equals DDP");
}

void unused() {
  const auto ddp = train_half_used<par::DDP>(0, true);
  unused_against<par::ShardGradOp>("ShardGradOp", ddp, 1);
  unused_against<par::FullShard>("FullShard", ddp, 3);
}

// ---- a checkpoint's sharded state goes back where it was ----
struct SaveAt {
  int64_t step;
  std::filesystem::path file;
  void on_step_end(tk::TrainState& s) {
    if (s.step == step) s.save_checkpoint(file);
  }
};

/// Saved at step 5 of 12 (inside the first of two epochs) and resumed by a
/// new trainer: bitwise equal to a run never stopped.
template <class Par>
void resume_as(const char* name, const std::filesystem::path& file, int port_offset) {
  const tk::FitOptions whole{.epochs = 2, .data_is_per_rank = true};
  auto unbroken = train_tiny<Par>(port_offset, tk::task::Regression{}, whole);
  auto first = whole;
  first.max_steps = 5;
  train_tiny<Par>(port_offset + 1, tk::task::Regression{}, first, SaveAt{5, file});
  auto rest = whole;
  rest.resume_from = file;
  auto resumed = train_tiny<Par>(port_offset + 2, tk::task::Regression{}, rest);
  const double err = max_rel_diff(resumed.params, unbroken.params);
  std::printf("rank %d of %d: %s resumed at step 5 vs unbroken: %.3g\n", rank_env(), world_env(),
              name, err);
  check(resumed.result.steps == 12 && err == 0.0,
        std::string("a resumed ") + name + " run equals an unbroken one");
}

void resume(const std::filesystem::path& dir) {
  std::error_code ignored;  // every rank makes it; one wins
  std::filesystem::create_directories(dir, ignored);
  resume_as<par::ShardGradOp>("ShardGradOp", dir / "shard_grad_op.ckpt", 0);
  resume_as<par::FullShard>("FullShard", dir / "full_shard.ckpt", 3);
  // Each rank's part written on a thread beside the next steps, the entries
  // gathered on the writers' own group.
  tiny_checkpoint.asynchronous = true;
  resume_as<par::FullShard>("FullShard saving asynchronously", dir / "full_shard_async.ckpt", 6);
  tiny_checkpoint = {};
}

// ---- callbacks::Ema on sharded weights ----
struct EmaRun {
  Params average;  ///< Ema::state_dict's parameters, whole
  Params copied;   ///< Ema::copy_to into a whole model
  double val_loss = 0;
};
/// At fit's end, while the trainer lives: what `ema` holds (collectives
/// under full sharding, on every rank).
struct ReadEma {
  tk::callbacks::Ema* ema;
  EmaRun* out;
  void on_fit_end(tk::TrainState& s) {
    for (const auto& [name, t] : ema->state_dict().tensors) {
      if (name.rfind("param.", 0) == 0) out->average.insert(name.substr(6), t.clone());
    }
    Tiny whole;
    ema->copy_to(*whole);
    for (const auto& item : whole->named_parameters()) out->copied.insert(item.key(), item.value());
    out->val_loss = s.metrics.at("val_loss");
  }
};

/// The tiny model with fc1 a unit, `ema` validated on, 2 epochs of 6
/// steps; `fit` may save or resume.
template <class Par, class... Callbacks>
EmaRun train_ema(int port_offset, tk::FitOptions fit, tk::callbacks::Ema& ema, Callbacks... more) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(200 + rank_env());
  std::vector<tk::data::Batch> val;
  for (int i = 0; i < 4; ++i) val.push_back({at::randn({4, 5}, gen), at::randn({4, 1}, gen)});
  fit.epochs = 2, fit.data_is_per_rank = true, fit.val_data = val;
  EmaRun out;
  train_tiny_units<Par>(par::wrap::names({"fc1"}), port_offset, tk::task::Regression{}, fit,
                        std::ref(ema), more..., ReadEma{&ema, &out});
  return out;
}

const tk::callbacks::Ema::Options kEmaOptions{.decay = 0.8, .validate = true};

/// The average of a run saved at step 5 under Saver and resumed under FullShard.
template <class Saver>
Params ema_resumed(const std::filesystem::path& file, int port_offset) {
  tk::callbacks::Ema first(kEmaOptions), resumed(kEmaOptions);
  train_ema<Saver>(port_offset, {.max_steps = 5}, first, SaveAt{5, file});
  auto run = train_ema<par::FullShard>(port_offset + 1, {.resume_from = file}, resumed);
  check(resumed.updates() == 12, "the resumed average counts every step's update");
  return run.average;
}

/// Under FullShard each rank averages its slice of the flat buffers: the
/// average, and validation on it, equal DDP's to the reduction order; a
/// checkpoint (sharded) resumes it bitwise; a DDP checkpoint's average
/// loads into a FullShard run; and after the trainer is gone the average
/// refuses to gather with an error, not a crash.
void ema(const std::filesystem::path& dir) {
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  tk::callbacks::Ema ddp_ema(kEmaOptions), full_ema(kEmaOptions);
  const auto ddp = train_ema<par::DDP>(0, {}, ddp_ema);
  const auto full = train_ema<par::FullShard>(1, {}, full_ema);
  const double err = max_rel_diff(full.average, ddp.average);
  const double val = rel(full.val_loss, ddp.val_loss);
  std::printf("rank %d of %d: Ema under FullShard vs DDP: average %.3g, val_loss on it %.3g\n",
              rank_env(), world_env(), err, val);
  check(full.average.size() == 4 && err <= 1e-6 && val <= 1e-6,
        "the sharded average and validation on it equal DDP's");
  check(max_rel_diff(full.copied, full.average) == 0.0, "copy_to gives the gathered average");
  check(full_ema.updates() == 12, "an update per step");

  // Saved at step 5 (the sharded form, FullShard's default) and resumed.
  const double again =
      max_rel_diff(ema_resumed<par::FullShard>(dir / "ema_full_shard.ckpt", 2), full.average);
  std::printf("rank %d of %d: Ema under FullShard resumed at step 5 vs unbroken: %.3g\n",
              rank_env(), world_env(), again);
  check(again == 0.0, "a resumed sharded average is bitwise equal");
  // A DDP run's checkpoint (one file, the average whole) into FullShard.
  const double across = max_rel_diff(ema_resumed<par::DDP>(dir / "ema_ddp.ckpt", 4), ddp.average);
  std::printf("rank %d of %d: DDP's checkpoint resumed under FullShard vs DDP unbroken: %.3g\n",
              rank_env(), world_env(), across);
  check(across <= 1e-6, "a DDP checkpoint's average goes on under FullShard");

  try {
    (void)full_ema.state_dict();
    check(false, "a sharded average without its trainer is an error");
  } catch (const tk::Error& e) {
    check(std::string(e.what()).find("the trainer whose shards these are is gone") !=
              std::string::npos,
          std::string("the error says why: ") + e.what());
  }
}

// ---- resharding: saved by N ranks under one strategy, resumed by M under another ----
// `reshard_save` (N ranks) saves at step 5 under each strategy, in its
// default form (one file under DDP and ZeroSharded, sharded otherwise);
// `reshard_load` (M ranks) resumes ten of those under another strategy,
// chosen so that over M in 1..4 every pair of strategies and every pair of
// rank counts meets: the resumed parameters equal the saved ones bit for
// bit, and three more steps equal DDP's from the same checkpoint to the
// reduction order.
const char* const kStrategies[] = {"DDP", "ZeroSharded", "ShardGradOp", "FullShard", "HybridShard"};

template <class F>
void with_strategy(int index, F&& f) {
  switch (index) {
    case 0:
      return f(std::type_identity<par::DDP>{});
    case 1:
      return f(std::type_identity<par::ZeroSharded>{});
    case 2:
      return f(std::type_identity<par::ShardGradOp>{});
    case 3:
      return f(std::type_identity<par::FullShard>{});
    default:
      return f(std::type_identity<par::HybridShard>{});
  }
}
/// fc1 its own unit under full sharding: groups unlike DDP's.
par::wrap::Rule reshard_units() {
  return par::wrap::names({"fc1"});
}
std::filesystem::path saved_by(const std::filesystem::path& dir, int strategy, int ranks) {
  return dir / (std::string(kStrategies[strategy]) + "-" + std::to_string(ranks) + ".ckpt");
}

// The data's position: an epoch of 60 samples (each its own index as
// input) in batches of 2, interrupted after 4 steps on N ranks and finished
// on M = N mod 4 + 1: every sample of the epoch is trained once, the only
// repeats the padding of the rest to a multiple of M.
constexpr int64_t kSamples = 60, kBatch = 2, kStepsBefore = 4;

std::filesystem::path indices_file(const std::filesystem::path& dir, const std::string& run,
                                   int rank) {
  return dir / ("indices-" + run + "-" + std::to_string(rank) + ".txt");
}
void write_indices(const std::filesystem::path& file, const std::vector<int64_t>& seen) {
  std::ofstream out(file);
  for (const auto i : seen) out << i << "\n";
}
std::vector<int64_t> read_indices(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<int64_t> out;
  for (int64_t i; in >> i;) out.push_back(i);
  return out;
}

/// Trains the index regression on this rank's share, writes the indices it
/// trained on to `record`, and waits for every rank to have written.
void train_indices(int port_offset, const tk::FitOptions& fit, const std::filesystem::path& record,
                   const std::filesystem::path& save_at = {}) {
  struct Recorded {
    std::vector<int64_t>* seen;
    tk::StepOutput step(torch::nn::Linear& model, const tk::data::Batch& b) {
      for (int64_t i = 0; i < b.input.size(0); ++i) seen->push_back(b.input[i][0].item<int64_t>());
      return {torch::mse_loss(model(b.input), b.target)};
    }
  };
  torch::manual_seed(1);
  torch::nn::Linear model(1, 1);
  tk::Trainer<tk::optim::SGD, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None,
              tk::clip::None, par::DDP>
      trainer(model, {.optim = {.lr = 1e-3}, .parallel = worker::ddp_options(port_offset)});
  const auto x = at::arange(kSamples, at::kFloat).unsqueeze(1);
  tk::data::Loader loader(tk::data::TensorDataset{x, x * 0.5},
                          tk::data::RandomSampler({.size = kSamples, .seed = 3}),
                          {.batch_size = kBatch});
  std::vector<int64_t> seen;
  if (save_at.empty()) {
    trainer.fit(Recorded{&seen}, loader, fit);
  } else {
    trainer.fit(Recorded{&seen}, loader, fit, SaveAt{kStepsBefore, save_at});
  }
  write_indices(record, seen);
  trainer.parallel().barrier("indices recorded");
}
void data_position_save(const std::filesystem::path& dir) {
  const int n = world_env();
  train_indices(5, {.epochs = 1, .max_steps = kStepsBefore},
                indices_file(dir, "before" + std::to_string(n), rank_env()),
                dir / ("data-" + std::to_string(n) + ".ckpt"));
}

void data_position_load(const std::filesystem::path& dir) {
  const int m = world_env(), n = m % 4 + 1;
  tk::FitOptions rest{.epochs = 1};
  rest.resume_from = dir / ("data-" + std::to_string(n) + ".ckpt");
  train_indices(6, rest, indices_file(dir, "after" + std::to_string(m), rank_env()));
  std::map<int64_t, int> count;
  int64_t before = 0, after = 0;
  for (int r = 0; r < n; ++r)
    for (const auto i : read_indices(indices_file(dir, "before" + std::to_string(n), r)))
      ++count[i], ++before;
  for (int r = 0; r < m; ++r)
    for (const auto i : read_indices(indices_file(dir, "after" + std::to_string(m), r)))
      ++count[i], ++after;
  const int64_t rest_samples = kSamples - before, padded = (rest_samples + m - 1) / m * m;
  std::printf(
      "rank %d: epoch interrupted on %d ranks after %lld samples, finished on %d with "
      "%lld (%lld of them padding)\n",
      rank_env(), n, (long long)before, m, (long long)after, (long long)(padded - rest_samples));
  check(before == kStepsBefore * kBatch * n, "the interrupted ranks took 4 batches each");
  check(int64_t(count.size()) == kSamples && count.begin()->first == 0 &&
            count.rbegin()->first == kSamples - 1,
        "every sample of the epoch was trained");
  check(after == padded, "the rest, padded to a multiple of the new number of ranks, was trained");
}

void reshard_save(const std::filesystem::path& dir) {
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  data_position_save(dir);
  for (int a = 0; a < 5; ++a) {
    with_strategy(a, [&]<class Par>(std::type_identity<Par>) {
      const tk::FitOptions fit{.epochs = 2, .max_steps = 5, .data_is_per_rank = true};
      const auto file = saved_by(dir, a, world_env());
      const auto run =
          train_tiny_units<Par>(reshard_units(), a, tk::task::Regression{}, fit, SaveAt{5, file});
      if (rank_env() != 0) return;
      // what PyTorch's dcp.load must read (tests/reference/check_dcp_load.py)
      tk::io::NamedTensors saved;
      for (const auto& item : run.params) saved.emplace_back(item.key(), item.value());
      tk::io::save_torch_save(std::filesystem::path(file).replace_extension(".pt"), saved);
    });
  }
}

/// The model tensors a checkpoint holds, whole.
Params saved_model(const std::filesystem::path& file) {
  Params out;
  for (const auto& [name, t] : tk::io::checkpoint_model(tk::io::read_checkpoint(file), file))
    out.insert(name, t);
  return out;
}

void reshard_load(const std::filesystem::path& dir) {
  data_position_load(dir);
  const int m = world_env();
  int port = 0;
  const auto next_port = [&] { return port++ % 8; };  // a port's last user is long gone
  double worst = 0;
  // Ten of the twenty checkpoints, under strategy b: over M = 1..4 every
  // (a, b) pair and every (N, M) pair meets.
  for (int a = 0; a < 5; ++a) {
    for (int k = 0; k < 2; ++k) {
      const int n = (a + k) % 4 + 1, b = (a + m + k) % 5;
      const auto file = saved_by(dir, a, n);
      const auto saved = saved_model(file);
      tk::FitOptions resume{.epochs = 2, .max_steps = 5, .data_is_per_rank = true};
      resume.resume_from = file;
      auto more = resume;
      more.max_steps = 8;
      const auto run = [&]<class Par>(std::type_identity<Par>, const tk::FitOptions& fit) {
        return train_tiny_units<Par>(reshard_units(), next_port(), tk::task::Regression{}, fit)
            .params;
      };
      Params at_load, trained;
      with_strategy(b, [&](auto strategy) {
        at_load = run(strategy, resume);
        trained = run(strategy, more);
      });
      const auto reference = b == 0 ? trained : run(std::type_identity<par::DDP>{}, more);
      const double load_err = max_rel_diff(at_load, saved);
      const double err = max_rel_diff(trained, reference);
      worst = std::max(worst, err);
      std::printf("rank %d: %s on %d ranks -> %s on %d: at load %.3g, 3 steps vs DDP %.3g\n",
                  rank_env(), kStrategies[a], n, kStrategies[b], m, load_err, err);
      const auto pair = std::string(kStrategies[a]) + " x" + std::to_string(n) + " -> " +
                        kStrategies[b] + " x" + std::to_string(m);
      check(load_err == 0.0, pair + ": the resumed parameters are the saved ones");
      // The strategies differ only in reduction order (and clip::Norm's
      // chunking of the sum of squares): 2e-6 of the largest parameter.
      check(err <= 2e-6, pair + ": three more steps equal DDP's from the same checkpoint");
    }
  }
  std::printf("rank %d: resharding onto %d ranks: worst 3-step difference from DDP %.3g\n",
              rank_env(), m, worst);
}

// ---- memory: what each strategy holds, against the ZeRO paper's formulas ----
/// Nine layers (0.48M parameters), each a unit of full sharding: buckets
/// and units of about one layer each.
struct DeepMlpImpl : torch::nn::Module {
  DeepMlpImpl() {
    torch::manual_seed(5);
    layers = register_module("layers", torch::nn::ModuleList());
    layers->push_back(torch::nn::Linear(64, 256));
    for (int i = 0; i < 7; ++i) layers->push_back(torch::nn::Linear(256, 256));
    layers->push_back(torch::nn::Linear(256, 1));
  }
  at::Tensor forward(at::Tensor x) {
    for (size_t i = 0; i < layers->size(); ++i) {
      const auto& layer = layers[i];
      x = par::unit(layer, [&] {
        if (i == 0) first_weight_dtype = layer->as<torch::nn::Linear>()->weight.scalar_type();
        auto y = layer->as<torch::nn::Linear>()->forward(x);
        return i + 1 < layers->size() ? torch::tanh(y) : y;
      });
    }
    return x;
  }
  torch::nn::ModuleList layers{nullptr};
  at::ScalarType first_weight_dtype = at::kFloat;  ///< as the last forward saw it
};
TORCH_MODULE(DeepMlp);
constexpr double kBucketMb = 0.25;

struct Held {
  tk::memory::Footprint at_rest;
  int64_t counted = 0;  ///< CPU tensor bytes held at rest, by the meter
  int64_t peak = 0;     ///< the most held during one more step
  int64_t params = 0;
  int64_t largest_bucket = 0;  ///< bytes
  int64_t largest_unit = 0;    ///< bytes of the largest flat buffer (a unit's, gathered)
};

/// AdamW in fp32, clip::Norm: two steps (the state exists), then one more
/// under the meter's peak.
template <class Par>
Held measure(int port_offset) {
  DeepMlp net;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9 + rank_env());
  std::vector<tk::data::Batch> data;
  for (int i = 0; i < 3; ++i) data.push_back({at::randn({32, 64}, gen), at::randn({32, 1}, gen)});
  Held held;
  tk::memory::CpuMeter meter;
  auto options = worker::ddp_options(port_offset);
  options.bucket_mb = kBucketMb;
  tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None,
              tk::clip::Norm, Par>
      trainer(net,
              {.parallel = options_for<Par>(options, par::wrap::of_type<torch::nn::Linear>())});
  trainer.fit(tk::task::Regression{}, data, {.max_steps = 2, .data_is_per_rank = true});
  held.at_rest = tk::memory::footprint(trainer);
  held.counted = meter.bytes();
  meter.reset_peak();
  trainer.fit(tk::task::Regression{}, data, {.max_steps = 1, .data_is_per_rank = true});
  held.peak = meter.peak_bytes();
  held.params = trainer.flat_params().numel();
  for (const auto& [begin, size] : trainer.parallel().bucket_ranges())
    held.largest_bucket = std::max(held.largest_bucket, size * 4);
  for (const auto& g : trainer.flat_params().groups())
    held.largest_unit = std::max(held.largest_unit, g.numel() * 4);
  return held;
}

void memory() {
  const auto ddp = measure<tk::parallel::DDP>(0);
  const auto zero1 = measure<tk::parallel::ZeroSharded>(1);
  const auto zero2 = measure<tk::parallel::ShardGradOp>(2);
  const auto zero3 = measure<par::FullShard>(3);
  const double P = double(ddp.params), W = world_env();
  const auto report = [&](const char* name, const Held& h, double formula) {
    std::printf(
        "rank %d of %d: %-12s at rest %7.3f MB (params %.3f, grads %.3f, optimizer "
        "%.3f + %.3f; counted %.3f; formula %.3f), step peak %7.3f MB\n",
        rank_env(), world_env(), name, h.at_rest.total() / 1e6, h.at_rest.parameters / 1e6,
        h.at_rest.gradients / 1e6, h.at_rest.optimizer_state / 1e6,
        h.at_rest.optimizer_workspace / 1e6, h.counted / 1e6, formula / 1e6, h.peak / 1e6);
    check(std::abs(double(h.at_rest.total()) - formula) <= 0.1 * formula,
          std::string(name) + ": at rest within 10% of the formula");
    check(std::abs(double(h.counted - h.at_rest.total())) <= 0.05 * double(h.at_rest.total()),
          std::string(name) + ": the meter counts what the footprint names, within 5%");
  };
  // fp32 AdamW, unfused: per parameter 4 bytes of it, 4 of gradient, 8 of
  // state and 4 of the step's workspace (the ZeRO paper's K = 12).
  report("DDP", ddp, 20 * P);
  report("ZeroSharded", zero1, 8 * P + 12 * P / W);
  report("ShardGradOp", zero2, 4 * P + 16 * P / W);
  report("FullShard", zero3, 20 * P / W);
  // Within a step ZeRO-2 holds DDP's extra (activations, each gradient as
  // autograd makes it) and at most three buckets (two in flight, one
  // filling), never the whole gradient, as FSDP's memory test asserts.
  const int64_t bound = zero2.counted + (ddp.peak - ddp.counted) + 3 * zero2.largest_bucket;
  std::printf("rank %d: ShardGradOp's step peak %.3f MB, bound %.3f MB; a whole gradient %.3f MB\n",
              rank_env(), zero2.peak / 1e6, bound / 1e6, 4 * P / 1e6);
  check(zero2.peak <= bound, "ShardGradOp's step peak within DDP's extra and three buckets");
  check(3 * zero2.largest_bucket < 4 * P, "the bound is below a whole gradient");
  // Full sharding holds besides at most three units gathered (one in
  // compute, the next prefetched, one whose buckets wait to start).
  const int64_t bound3 =
      zero3.counted + (ddp.peak - ddp.counted) + 3 * zero3.largest_bucket + 3 * zero3.largest_unit;
  std::printf("rank %d: FullShard's step peak %.3f MB, bound %.3f MB; whole parameters %.3f MB\n",
              rank_env(), zero3.peak / 1e6, bound3 / 1e6, 4 * P / 1e6);
  check(zero3.peak <= bound3, "FullShard's step peak within DDP's extra, three buckets and units");
  check(zero3.peak < zero2.peak, "FullShard's step peak below ShardGradOp's");
}

template <class Par>
Params train_mlp(int port_offset, const par::wrap::Rule& rule) {
  DeepMlp net;
  tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None,
              tk::clip::Norm, Par>
      trainer(net,
              {.optim = {.lr = 1e-3}, .parallel = options_for<Par>(delayed(port_offset), rule)});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(20 + rank_env());
  std::vector<tk::data::Batch> data;
  for (int i = 0; i < 4; ++i) data.push_back({at::randn({16, 64}, gen), at::randn({16, 1}, gen)});
  trainer.fit(tk::task::Regression{}, data, {.data_is_per_rank = true});
  return whole_parameters(trainer);
}

// ---- what puts weights back: EarlyStopping and the learning-rate finder ----
struct RestoreRun {
  Params params, before_find, after_find, after_resumed;
  tk::finders::LrFindResult found;
  tk::StateDict stopping;
  int64_t best_epoch = -1;
};

/// lr_find (the trainer put back after its sweep), then 8 epochs with
/// EarlyStopping restoring the best weights, on Tiny with fc1 a unit.
template <class Par>
RestoreRun find_then_stop(int port_offset) {
  torch::manual_seed(3);
  Tiny model;
  tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None,
              tk::clip::None, Par>
      trainer(model,
              {.optim = {.lr = 0.2},
               .parallel = options_for<Par>(delayed(port_offset), par::wrap::names({"fc1"}))});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(40);  // the same on every rank: sharded
  const auto x = at::randn({96, 5}, gen);
  const auto y = x.sum(1, true).sin();
  tk::data::TensorBatches data({x.narrow(0, 0, 64), y.narrow(0, 0, 64)}, {.batch_size = 8});
  // Validation on the opposite targets: its loss rises as training fits.
  tk::data::TensorBatches val({x.narrow(0, 64, 32), -y.narrow(0, 64, 32)},
                              {.batch_size = 8, .shuffle = false});
  RestoreRun run;
  run.before_find = whole_parameters(trainer);
  run.found = tk::finders::lr_find(trainer, tk::task::Regression{}, data,
                                   {.min_lr = 1e-4, .max_lr = 1.0, .num_steps = 12});
  run.after_find = whole_parameters(trainer);
  tk::callbacks::EarlyStopping stopping({.patience = 8});
  trainer.fit(tk::task::Regression{}, data, {.epochs = 8, .val_data = val}, std::ref(stopping));
  run.params = whole_parameters(trainer);
  run.stopping = stopping.state_dict();
  run.best_epoch = stopping.best_epoch();
  // Loaded whole (sliced here under full sharding), the best weights come
  // back after one more epoch that does not beat them.
  tk::callbacks::EarlyStopping resumed({.patience = 8});
  resumed.load_state_dict(run.stopping);
  trainer.fit(tk::task::Regression{}, data, {.epochs = 1, .val_data = val}, std::ref(resumed));
  run.after_resumed = whole_parameters(trainer);
  return run;
}

/// Under full sharding the finder puts each rank's slices back and
/// EarlyStopping keeps and restores them: both equal DDP's, and
/// EarlyStopping's checkpoint holds the same whole tensors.
void restore() {
  const auto ddp = find_then_stop<par::DDP>(0);
  const auto full = find_then_stop<par::FullShard>(1);
  check(full.found.losses.size() == ddp.found.losses.size() && !ddp.found.losses.empty(),
        "the sweep took the same steps");
  double sweep = 0;
  for (size_t i = 0; i < ddp.found.losses.size(); ++i)
    sweep = std::max(sweep, rel(full.found.losses[i], ddp.found.losses[i]));
  check(ddp.best_epoch >= 0 && ddp.best_epoch < 7,
        "the best epoch is not the last: " + std::to_string(ddp.best_epoch));
  check(full.best_epoch == ddp.best_epoch, "the same best epoch");
  const double restored = max_rel_diff(full.params, ddp.params);
  double saved = 0;
  check(full.stopping.tensors.size() == ddp.stopping.tensors.size(), "the same tensors saved");
  for (const auto& [name, t] : ddp.stopping.tensors) {
    const auto& mine = full.stopping.tensors.at(name);
    check(mine.sizes() == t.sizes(), "saved whole: " + name);
    saved = std::max(saved, (mine - t).abs().max().item<double>() /
                                t.abs().max().clamp_min(1e-30).item<double>());
  }
  std::printf(
      "rank %d of %d: FullShard vs DDP: lr_find's losses %.3g, restored best weights %.3g, "
      "EarlyStopping's saved weights %.3g (max relative differences); best epoch %lld\n",
      rank_env(), world_env(), sweep, restored, saved, static_cast<long long>(ddp.best_epoch));
  check(sweep <= 1e-6 && restored <= 1e-6 && saved <= 1e-6, "FullShard equals DDP within 1e-6");
  for (const auto* run : {&ddp, &full}) {
    check(max_rel_diff(run->after_find, run->before_find) == 0, "lr_find put the weights back");
    check(max_rel_diff(run->after_resumed, run->params) == 0,
          "a loaded EarlyStopping put its best weights back");
  }
}

// ---- FSDP's mixed precision ----
struct MixedRun {
  Params params;
  std::vector<double> losses, norms;
  at::ScalarType weight_dtype_in_forward = at::kFloat;
};

/// DeepMlp under bf16 autocast, 6 steps of AdamW clipped at 1.0.
template <class Par>
MixedRun train_mlp_bf16(int port_offset, const par::FullShard::MixedPrecision& mixed = {}) {
  DeepMlp net;
  auto options = delayed(port_offset);
  options.bucket_mb = kBucketMb;
  auto parallel = options_for<Par>(options, par::wrap::of_type<torch::nn::Linear>());
  if constexpr (std::is_base_of_v<par::FullShard, Par>) parallel.mixed_precision = mixed;
  tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Bf16, tk::accumulate::None,
              tk::clip::Norm, Par>
      trainer(net, {.optim = {.lr = 1e-3}, .clip = {.max_norm = 1.0}, .parallel = parallel});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(30 + rank_env());
  std::vector<tk::data::Batch> data;
  for (int i = 0; i < 6; ++i) data.push_back({at::randn({16, 64}, gen), at::randn({16, 1}, gen)});
  MixedRun run;
  trainer.fit(tk::task::Regression{}, data, {.data_is_per_rank = true},
              tk_test::StepRecord{&run.losses, &run.norms});
  run.weight_dtype_in_forward = net->first_weight_dtype;
  run.params = whole_parameters(trainer);
  return run;
}

/// Units gathered in bf16 with gradients reduced in fp32 train as DDP
/// under bf16 autocast does: autocast casts each Linear's fp32 weights to
/// bf16 as the gather does, and their gradients come back from bf16 as
/// ours do. The shards stay fp32 master weights; bf16 reductions are
/// refused where the backend has none (Gloo in LibTorch 1.13); a forward
/// without autocast to param_dtype is refused by name.
void mixed_precision() {
  const auto ddp = train_mlp_bf16<par::DDP>(0);
  const par::FullShard::MixedPrecision bf16_fp32{.param_dtype = at::kBFloat16,
                                                 .reduce_dtype = at::kFloat};
  const auto mixed = train_mlp_bf16<par::FullShard>(1, bf16_fp32);
  double loss = 0;
  for (size_t s = 0; s < ddp.losses.size(); ++s)
    loss = std::max(loss, rel(mixed.losses[s], ddp.losses[s]));
  const double params = max_rel_diff(mixed.params, ddp.params);
  std::printf(
      "rank %d of %d: FullShard (bf16 gathers, fp32 reductions) vs DDP under bf16 autocast, "
      "6 steps: losses %.3g, parameters %.3g (max relative differences)\n",
      rank_env(), world_env(), loss, params);
  // Two ranks sum a + b as DDP does: bitwise, while the clip's norms agree.
  // FullShard totals the norm from the shards' partial sums and DDP from the
  // whole buffer, which can part in the last bit, and where the clip engages
  // the step follows it (with other data here: norms an ulp apart,
  // parameters 1.1e-7). On three ranks the sums' order differs too. Either
  // way a master weight can end an ulp of fp32 apart, and its bf16 copy
  // then rounds one bf16 step (2^-8) apart: from there the two runs agree
  // to bf16's resolution, not to fp32's (3 ranks, LibTorch 2.6: losses
  // 3e-4, parameters 3e-3 after 6 steps; 1.13: 0 and 1.1e-5). The first
  // step, before any update, is equal on any number of ranks.
  if (world_env() == 2 && mixed.norms == ddp.norms) {
    check(mixed.losses.size() == 6 && loss == 0.0 && params == 0.0,
          "FullShard in bf16 with fp32 reductions equals DDP under bf16 autocast bitwise on 2 "
          "ranks while the norms agree");
  } else {
    check(mixed.losses.size() == 6 && mixed.losses[0] == ddp.losses[0] && loss <= 1e-2 &&
              params <= 1e-2,
          "FullShard in bf16 with fp32 reductions: the first loss equal to DDP's under bf16 "
          "autocast, the rest within bf16's resolution (1e-2)");
  }
  check(mixed.weight_dtype_in_forward == at::kBFloat16, "the forward saw bf16 weights");
  check(ddp.weight_dtype_in_forward == at::kFloat, "DDP's forward saw its fp32 weights");
  double off_bf16 = 0;
  for (const auto& item : mixed.params) {
    check(item.value().scalar_type() == at::kFloat, "gathered whole in fp32: " + item.key());
    const auto& p = item.value();
    off_bf16 =
        std::max(off_bf16, (p - p.to(at::kBFloat16).to(at::kFloat)).abs().max().item<double>());
  }
  check(off_bf16 > 0, "the master weights are not rounded to bf16");

  // reduce_dtype unset: param_dtype's, as in FSDP.
  const par::FullShard::MixedPrecision bf16{.param_dtype = at::kBFloat16};
#if TORCH_VERSION_MAJOR >= 2
  const auto low = train_mlp_bf16<par::FullShard>(2, bf16);
  double low_loss = 0;
  for (size_t s = 0; s < ddp.losses.size(); ++s)
    low_loss = std::max(low_loss, rel(low.losses[s], ddp.losses[s]));
  std::printf("rank %d of %d: bf16 reductions vs DDP: losses %.3g\n", rank_env(), world_env(),
              low_loss);
  check(low_loss > 0 && low_loss <= 2e-2, "bf16 reductions round the gradients, within 2%");
#else
  try {
    train_mlp_bf16<par::FullShard>(2, bf16);
    check(false, "bf16 reductions on Gloo in LibTorch 1.13 are refused");
  } catch (const tk::Error& e) {
    const std::string what = e.what();
    check(what.find("parallel.mixed_precision.reduce_dtype") != std::string::npos &&
              what.find("BFloat16") != std::string::npos && what.find("gloo") != std::string::npos,
          "the error names the option, the dtype and the backend: " + what);
  }
#endif
  try {  // no autocast
    DeepMlp net;
    tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None,
                tk::clip::None, par::FullShard>
        trainer(net, {.parallel = {.group = worker::ddp_options(3),
                                   .wrap = par::wrap::of_type<torch::nn::Linear>(),
                                   .mixed_precision = bf16_fp32}});
    std::vector<tk::data::Batch> data{{at::randn({4, 64}), at::randn({4, 1})}};
    trainer.fit(tk::task::Regression{}, data, {.data_is_per_rank = true});
    check(false, "param_dtype without autocast is an error");
  } catch (const tk::Error& e) {
    const std::string what = e.what();
    check(what.find("parallel.mixed_precision.param_dtype") != std::string::npos &&
              what.find("without autocast") != std::string::npos &&
              what.find("precision::Bf16") != std::string::npos,
          "the error names the option and the cure: " + what);
  }
  try {
    par::FullShard refused(
        {.group = worker::ddp_options(4), .mixed_precision = {.param_dtype = at::kLong}});
    check(false, "an integer param_dtype is an error");
  } catch (const tk::Error& e) {
    check(std::string(e.what()).find("parallel.mixed_precision.param_dtype") != std::string::npos,
          std::string("the error names the option: ") + e.what());
  }
}

// ---- optimizers that need whole tensors from each rank's slices ----
template <class Opt>
tk::ParamGroup groups_for() {
  if constexpr (std::is_same_v<Opt, tk::optim::Muon>) {
    return tk::optim::Muon::hidden_matrices();
  } else if constexpr (std::is_same_v<Opt, tk::optim::ScheduleFreeAdamW>) {
    return {"biases", tk::params::below_2d(), {.weight_decay = 0.0}};
  } else {
    return tk::params::no_trust_ratio();
  }
}

/// DeepMlp with Lamb or Lars (biases out of the trust ratio), Muon (the
/// weights orthogonalised, the biases AdamW's) or schedule-free AdamW (its
/// average switched in for validation and after fit, each rank its slice),
/// 6 steps in 2 epochs, validated after each.
template <class Opt, class Par>
MixedRun train_whole_tensors(int port_offset, const typename Opt::Options& options) {
  DeepMlp net;
  auto o = delayed(port_offset);
  o.bucket_mb = kBucketMb;
  tk::Trainer<Opt, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None, tk::clip::None,
              Par>
      trainer(net, {.optim = options,
                    .parallel = options_for<Par>(o, par::wrap::of_type<torch::nn::Linear>()),
                    .param_groups = {groups_for<Opt>()}});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(50 + rank_env());
  std::vector<tk::data::Batch> data;
  for (int i = 0; i < 3; ++i) data.push_back({at::randn({16, 64}, gen), at::randn({16, 1}, gen)});
  const std::vector<tk::data::Batch> val{{at::randn({8, 64}, gen), at::randn({8, 1}, gen)}};
  MixedRun run;
  trainer.fit(tk::task::Regression{}, data,
              {.epochs = 2, .val_data = tk::data::BatchView(val), .data_is_per_rank = true},
              tk_test::StepRecord{&run.losses, &run.norms});
  run.params = whole_parameters(trainer);
  return run;
}

/// Each strategy against DDP: a rank holds slices that cut parameters
/// apart (nine 256-wide layers over 2 or 3 ranks). A trust ratio needs
/// each whole parameter's norm (the squares of the slices are summed over
/// the ranks); Muon each whole matrix (the update is gathered).
template <class Opt>
void whole_tensors_against_ddp(const char* optimizer, const typename Opt::Options& options,
                               int ports, double weights_within = 1e-6,
                               double biases_within = 3e-6) {
  const auto ddp = train_whole_tensors<Opt, par::DDP>(ports, options);
  const auto compare = [&](const char* name, const MixedRun& run) {
    double loss = 0;
    for (size_t s = 0; s < ddp.losses.size(); ++s)
      loss = std::max(loss, rel(run.losses[s], ddp.losses[s]));
    Params weights, ddp_weights, biases, ddp_biases;  // in the trust ratio's group, and out
    for (const auto& item : run.params) {
      const bool bias = item.key().ends_with(".bias");
      (bias ? biases : weights).insert(item.key(), item.value());
      (bias ? ddp_biases : ddp_weights).insert(item.key(), ddp.params[item.key()]);
    }
    const double w = max_rel_diff(weights, ddp_weights), b = max_rel_diff(biases, ddp_biases);
    std::printf(
        "rank %d of %d: %s under %s vs DDP, 6 steps: losses %.3g, weights %.3g, biases %.3g\n",
        rank_env(), world_env(), optimizer, name, loss, w, b);
    // The weights' norms from slices sum their squares in another order
    // (about 1e-7 apart), as a reduce-scatter sums the gradients. LAMB's
    // Adam step divides by sqrt(v) + eps, which magnifies such rounding
    // where a gradient is near zero: eps 1e-4 here (at 1e-6, 1.2e-6 of the
    // weights and 5e-6 of the biases, which step without the ratio; at
    // 1e-4 the biases part by 3.05e-6 on 3 ranks, the weights by 2.2e-7).
    check(run.losses.size() == 6 && loss <= 1e-6 && w <= weights_within && b <= biases_within,
          std::string(optimizer) + " under " + name + " equals DDP (losses within 1e-6, weights " +
              c10::str(weights_within) + ", biases " + c10::str(biases_within) + ")");
  };
  compare("ZeroSharded", train_whole_tensors<Opt, par::ZeroSharded>(ports + 1, options));
  compare("ShardGradOp", train_whole_tensors<Opt, par::ShardGradOp>(ports + 2, options));
  compare("FullShard", train_whole_tensors<Opt, par::FullShard>(ports + 3, options));
}

void whole_tensors() {
  whole_tensors_against_ddp<tk::optim::Lamb>("Lamb", {.lr = 0.01, .eps = 1e-4}, 0, 1e-6, 5e-6);
  whole_tensors_against_ddp<tk::optim::Lars>("Lars", {.lr = 0.1, .nesterov = true}, 4);
  // Muon's iteration takes the same inputs as DDP's, so two ranks are
  // bitwise. Three ranks' reduce-scatter sums in another order than
  // all-reduce: the AdamW biases part by 4e-6 (eps 1e-8 magnifies it), and
  // the orthogonalised weights by 6e-6 (the iteration's first steps
  // multiply a small singular direction by 3.4 each).
  const double within = world_env() == 2 ? 0.0 : 1e-5;
  whole_tensors_against_ddp<tk::optim::Muon>(
      "Muon", {.lr = 0.02, .ns_dtype = at::kFloat, .adamw = {.lr = 1e-2}}, 8, within, within);
  // Elementwise, as AdamW: its slices need no whole tensor, but its
  // average is switched in on each rank's slice and spread after.
  whole_tensors_against_ddp<tk::optim::ScheduleFreeAdamW>(
      "ScheduleFreeAdamW", {.lr = 0.01, .eps = 1e-4, .warmup_steps = 2}, 12);
}

// ---- full sharding's units: what a user can get wrong ----
/// A unit the model's forward never announces is named after the first
/// step; a module the rule leaves out runs as part of its parent; an empty
/// rule is refused before any process group forms.
void units() {
  auto tiny_with = [](const par::wrap::Rule& rule, int port_offset) {
    torch::manual_seed(3);
    Tiny model;  // its forward announces fc1 and calls fc2 directly
    tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None,
                tk::clip::None, par::FullShard>
        trainer(model, {.parallel = {.group = worker::ddp_options(port_offset), .wrap = rule}});
    std::vector<tk::data::Batch> data{{at::randn({4, 5}), at::randn({4, 1})}};
    return trainer.fit(tk::task::Regression{}, data, {.data_is_per_rank = true}).steps;
  };
  try {
    tiny_with(par::wrap::children(), 0);
    check(false, "units the forward never announces are an error");
  } catch (const tk::Error& e) {
    const std::string what = e.what();
    check(what.find("did not run through parallel::unit: fc2.") != std::string::npos,
          "the error names the units: " + what);
  }
  try {
    par::FullShard::Options o{.group = worker::ddp_options(1), .wrap = nullptr};
    par::FullShard refused(o);
    check(false, "an empty wrap rule is an error");
  } catch (const tk::Error& e) {
    check(std::string(e.what()).find("parallel.wrap") != std::string::npos,
          std::string("the error names the option: ") + e.what());
  }
  // Callbacks that read whole weights between steps refuse shards by name.
  try {
    DeepMlp net;
    tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None,
                tk::clip::None, par::FullShard>
        trainer(net, {.parallel = {.group = worker::ddp_options(4),
                                   .wrap = par::wrap::of_type<torch::nn::Linear>()}});
    std::vector<tk::data::Batch> data{{at::randn({4, 64}), at::randn({4, 1})}};
    trainer.fit(tk::task::Regression{}, data, {.data_is_per_rank = true},
                tk::callbacks::TensorBoard(
                    {.dir = std::filesystem::temp_directory_path() / "trainkit_units_tb",
                     .histogram_every = 1}));
    check(false, "TensorBoard histograms under FullShard are an error");
  } catch (const tk::Error& e) {
    check(std::string(e.what()).find("callbacks::TensorBoard (histogram_every) reads the "
                                     "model's whole weights") != std::string::npos,
          std::string("the error names the callback: ") + e.what());
  }
  // DeepMlp announces its nine layers; a rule that takes three of them
  // trains as DDP does, the other six in the root unit.
  const auto ddp = train_mlp<par::DDP>(2, {});
  const auto some =
      train_mlp<par::FullShard>(3, par::wrap::names({"layers.0", "layers.4", "layers.8"}));
  const double err = max_rel_diff(some, ddp);
  std::printf("rank %d of %d: FullShard with three of nine layers as units vs DDP: %.3g\n",
              rank_env(), world_env(), err);
  check(err <= 1e-6, "FullShard with some announced modules left out equals DDP");
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 2 ? argv[2] : ".";
  const auto resume_here = [&] { resume(dir); };
  const auto ema_here = [&] { ema(dir); };
  const auto reshard_save_here = [&] { reshard_save(dir); };
  const auto reshard_load_here = [&] { reshard_load(dir); };
  return worker::run(argc, argv,
                     {{"gpt_parity", gpt_parity},
                      {"odd_sizes", odd_sizes},
                      {"memory", memory},
                      {"unused", unused},
                      {"units", units},
                      {"mixed_precision", mixed_precision},
                      {"restore", restore},
                      {"whole_tensors", whole_tensors},
                      {"hybrid", hybrid},
                      {"resume", resume_here},
                      {"ema", ema_here},
                      {"reshard_save", reshard_save_here},
                      {"reshard_load", reshard_load_here}});
}
