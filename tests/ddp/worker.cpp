// One process of the multi-process tests. CTest starts N of them through
// scripts/launch.sh (torchrun's environment); each runs the scenario named
// by argv[1] over Gloo and checks it, exiting non-zero with a message when a
// check fails. Scenarios that run several process groups one after another
// use MASTER_PORT, MASTER_PORT + 1, ...
#include <torch/torch.h>

#include <trainkit/callbacks/ema.hpp>
#include <trainkit/callbacks/model_checkpoint.hpp>
#include <trainkit/capture.hpp>
#include <trainkit/data.hpp>
#include <trainkit/io/checkpoint.hpp>
#include <trainkit/memory.hpp>
#include <trainkit/optim/muon.hpp>
#include <trainkit/parallel/ddp.hpp>
#include <trainkit/parallel/shard_grad_op.hpp>
#include <trainkit/parallel/zero_sharded.hpp>
#include <trainkit/trainkit.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "worker_support.hpp"

namespace tk = trainkit;
using namespace std::chrono_literals;

namespace {

using worker::check;
using worker::ddp_options;
using worker::max_rel_diff;
using worker::rank_env;
using worker::world_env;

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t hidden, bool extra) {
    fc1 = register_module("fc1", torch::nn::Linear(8, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 1));
    if (extra) unused = register_module("unused", torch::nn::Linear(4, 4));
  }
  at::Tensor forward(at::Tensor x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, unused{nullptr};
};
TORCH_MODULE(Mlp);

Mlp make_model(int64_t hidden = 32, bool extra = false) {
  torch::manual_seed(11);
  return Mlp(hidden, extra);
}

tk::data::TensorDataset make_data(int64_t n) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto x = at::randn({n, 8}, gen);
  auto y = (x.sum(1, true) * 0.5).sin() + 0.1 * at::randn({n, 1}, gen);
  return {x, y};
}

using Loader = tk::data::Loader<tk::data::TensorDataset, tk::data::DistributedSampler>;
Loader make_loader(int64_t n, int64_t batch) {
  return Loader(make_data(n), tk::data::DistributedSampler({.size = n, .seed = 5}),
                {.batch_size = batch});
}

template <class Opt, class Acc, class Par>
using T = tk::Trainer<Opt, tk::sched::Constant, tk::precision::Fp32, Acc, tk::clip::None, Par>;

// DDP with W ranks x batch 16/W equals one process with batch 16 (SGD with
// momentum, 20 steps, 100 samples: the last batch of each epoch is short).
void parity() {
  const int world = world_env();
  const tk::optim::SGD::Options sgd{.lr = 0.05, .momentum = 0.9};
  const tk::FitOptions fit{.epochs = 3, .max_steps = 20};

  auto single = make_model();
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::Single> ref(single, {.optim = sgd});
  auto ref_data = make_loader(100, 16);
  const auto ref_result = ref.fit(tk::task::Regression{}, ref_data, fit);

  auto model = make_model();
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> ddp(
      model, {.optim = sgd, .parallel = ddp_options(0)});
  auto data = make_loader(100, 16 / world);  // the trainer gives it this rank's shard
  const auto result = ddp.fit(tk::task::Regression{}, data, fit);
  const double err = max_rel_diff(*model, *single);
  std::printf("rank %d: DDP vs one process, %lld steps: max rel diff %.3g\n", rank_env(),
              (long long)result.steps, err);
  check(result.steps == 20 && err < 1e-6, "DDP parameters equal one process's within 1e-6");
  const double loss = result.metrics.at("train_loss"),
               ref_loss = ref_result.metrics.at("train_loss");
  check(std::abs(loss - ref_loss) <= 1e-6 * std::abs(ref_loss),
        "train_loss averaged over ranks equals one process's");

  // Accumulation: W ranks x 2 micro-batches of 8/W, one exchange per step.
  auto acc_model = make_model();
  T<tk::optim::SGD, tk::accumulate::Every<2>, tk::parallel::DDP> acc(
      acc_model, {.optim = sgd, .parallel = ddp_options(1)});
  auto acc_data = make_loader(100, 8 / world);
  const auto acc_result = acc.fit(tk::task::Regression{}, acc_data, fit);
  const double acc_err = max_rel_diff(*acc_model, *single);
  std::printf("rank %d: DDP + accumulate::Every<2> vs one process: max rel diff %.3g\n", rank_env(),
              acc_err);
  check(acc_result.steps == 20 && acc_err < 1e-6,
        "DDP with accumulation equals one process within 1e-6");

  // optim::Muon orthogonalises whole matrices, which every DDP rank holds.
  const tk::optim::Muon::Options muon{.lr = 0.02, .ns_dtype = at::kFloat, .adamw = {.lr = 1e-2}};
  const std::vector<tk::ParamGroup> hidden{tk::optim::Muon::hidden_matrices()};
  auto muon_single = make_model();
  T<tk::optim::Muon, tk::accumulate::None, tk::parallel::Single> muon_ref(
      muon_single, {.optim = muon, .param_groups = hidden});
  auto muon_ref_data = make_loader(100, 16);
  muon_ref.fit(tk::task::Regression{}, muon_ref_data, fit);
  auto muon_model = make_model();
  T<tk::optim::Muon, tk::accumulate::None, tk::parallel::DDP> muon_ddp(
      muon_model, {.optim = muon, .parallel = ddp_options(2), .param_groups = hidden});
  auto muon_data = make_loader(100, 16 / world);
  muon_ddp.fit(tk::task::Regression{}, muon_data, fit);
  const double muon_err = max_rel_diff(*muon_model, *muon_single);
  std::printf("rank %d: Muon + AdamW under DDP vs one process: max rel diff %.3g\n", rank_env(),
              muon_err);
  check(muon_err < 1e-6, "DDP with optim::Muon equals one process within 1e-6");
}

// ZeroSharded steps the same parameters as DDP, with 1/W of the state; with
// a parameter group of its own hyperparameters (amsgrad's extra state there only).
void zero_parity() {
  const tk::optim::AdamW::Options adamw{.lr = 1e-2, .weight_decay = 0.01};
  const std::vector<tk::ParamGroup> groups{
      {"biases", tk::params::below_2d(), {.lr_scale = 0.5, .weight_decay = 0.0, .amsgrad = true}}};
  const tk::FitOptions fit{.epochs = 2};
  auto ddp_model = make_model();
  T<tk::optim::AdamW, tk::accumulate::None, tk::parallel::DDP> ddp(
      ddp_model, {.optim = adamw, .parallel = ddp_options(0), .param_groups = groups});
  auto data = make_loader(96, 8);
  ddp.fit(tk::task::Regression{}, data, fit);

  auto zero_model = make_model();
  T<tk::optim::AdamW, tk::accumulate::None, tk::parallel::ZeroSharded> zero(
      zero_model, {.optim = adamw, .parallel = ddp_options(1), .param_groups = groups});
  zero.fit(tk::task::Regression{}, data, fit);
  const double err = max_rel_diff(*zero_model, *ddp_model);
  const auto full = ddp.optimizer().exp_avg()[0].numel();
  const auto mine = zero.optimizer().exp_avg()[0].numel();
  std::printf("rank %d: ZeroSharded vs DDP: max rel diff %.3g; state %lld of %lld elements\n",
              rank_env(), err, (long long)mine, (long long)full);
  check(err < 1e-6, "ZeroSharded parameters equal DDP's");
  const auto [begin, end] = tk::FlatParams::shard_range(full, rank_env(), world_env());
  check(mine == end - begin, "ZeroSharded keeps only this rank's slice of the state");
}

// Captured steps compose with data parallelism: capture::CudaGraph over DDP
// and ZeroSharded, replayed by re-running the recorded body (emulate: the
// collectives run again, as a graph would launch them), equals the eager
// run within 1e-6 over 20 steps of AdamW + OneCycle + clip::Norm + Every<2>,
// with a parameter group at its own rate (a device learning rate per group);
// and so do Muon (whole matrices gathered in the step) and Lamb (norms
// totalled over the ranks), which step on the device once capturable.
template <class Par, class Capture, class Opt = tk::optim::AdamW>
using SettingTrainer = tk::Trainer<Opt, tk::sched::OneCycle, tk::precision::Fp32,
                                   tk::accumulate::Every<2>, tk::clip::Norm, Par, Capture>;

template <class Par, class Opt = tk::optim::AdamW>
void captured_equals_eager(int port_offset, const char* name) {
  // LibTorch < 2.4 has no fused kernels: there AdamW's capture falls back to eager.
  const auto fused = TRAINKIT_HAS_FUSED_OPTIMIZERS ? std::optional<bool>(true) : std::nullopt;
  const auto options = [&]<class Trainer>(std::type_identity<Trainer>, int offset) {
    typename Trainer::Options o{.sched = {.max_lr = 2e-2, .cycle_momentum = false},
                                .clip = {.max_norm = 0.5},
                                .parallel = ddp_options(offset)};
    if constexpr (std::is_same_v<Opt, tk::optim::Muon>) {
      o.optim = {.lr = 0.02, .adamw = {.lr = 1e-2}};
      o.param_groups = {tk::optim::Muon::hidden_matrices()};
    } else if constexpr (std::is_same_v<Opt, tk::optim::Lamb>) {
      o.optim = {.lr = 1e-2};
      o.param_groups = {tk::params::no_trust_ratio()};
    } else {
      o.optim = {.lr = 1e-2, .fused = fused};
      o.param_groups = {{"biases", tk::params::below_2d(), {.weight_decay = 0.0, .max_lr = 1e-2}}};
    }
    if constexpr (requires { o.capture.emulate; }) o.capture = {.warmup_steps = 2, .emulate = true};
    return o;
  };
  using Eager = SettingTrainer<Par, tk::capture::None, Opt>;
  using Captured = SettingTrainer<Par, tk::capture::CudaGraph, Opt>;
  auto eager_model = make_model(), captured_model = make_model();
  Eager eager(eager_model, options(std::type_identity<Eager>{}, port_offset));
  Captured captured(captured_model, options(std::type_identity<Captured>{}, port_offset + 1));
  auto data = make_loader(320 * world_env(), 8);  // 40 micro-batches of 8 on each rank
  const auto eager_result = eager.fit(tk::task::Regression{}, data, {.epochs = 1});
  const auto captured_result = captured.fit(tk::task::Regression{}, data, {.epochs = 1});
  const double err = max_rel_diff(*captured_model, *eager_model);
  std::printf(
      "rank %d: captured %s vs eager, %lld steps (%lld replays): max rel diff %.3g%s\n", rank_env(),
      name, (long long)captured_result.steps, (long long)captured.graph_replays(), err,
      captured.graph_recorded() ? ""
                                : (" (eager: " + captured.graph_fallback_reason() + ")").c_str());
  check(captured_result.steps == 20 && eager_result.steps == 20, "20 steps each");
  check(err < 1e-6, std::string("captured ") + name + " equals eager within 1e-6");
  check(captured_result.metrics.at("train_loss") == eager_result.metrics.at("train_loss") ||
            std::abs(captured_result.metrics.at("train_loss") /
                         eager_result.metrics.at("train_loss") -
                     1) < 1e-6,
        "the captured run's train_loss is the eager run's");
  if (TRAINKIT_HAS_FUSED_OPTIMIZERS || !std::is_same_v<Opt, tk::optim::AdamW>) {
    check(captured.graph_recorded() && captured.graph_replays() > 10,
          "the step was recorded and replayed");
  }
}

void captured() {
  captured_equals_eager<tk::parallel::DDP>(0, "DDP");
  captured_equals_eager<tk::parallel::ZeroSharded>(2, "ZeroSharded");
  captured_equals_eager<tk::parallel::ShardGradOp>(4, "ShardGradOp");
}

void captured_optimizers() {
  captured_equals_eager<tk::parallel::ZeroSharded, tk::optim::Muon>(0, "ZeroSharded, Muon");
  captured_equals_eager<tk::parallel::ShardGradOp, tk::optim::Lamb>(2, "ShardGradOp, Lamb");
}

// A checkpoint callback for the resume scenarios.
struct SaveAt {
  int64_t step;
  std::filesystem::path file;
  void on_step_end(tk::TrainState& s) {
    if (s.step == step) s.save_checkpoint(file);
  }
};

// Global batch 24 on any world size: the samples of each step do not depend on W.
constexpr int64_t kResumeSamples = 96, kGlobalBatch = 24;
const tk::optim::AdamW::Options kResumeAdamW{.lr = 1e-2, .weight_decay = 0.01};
// SGD makes its momentum buffers at the first step: a resume must still shard them.
const tk::optim::SGD::Options kResumeSGD{.lr = 1e-2, .momentum = 0.9};
template <class Opt>
using ZeroTrainer = T<Opt, tk::accumulate::None, tk::parallel::ZeroSharded>;

template <class Opt>
void zero_save(const std::filesystem::path& file, const typename Opt::Options& options,
               const std::string& state) {
  auto model = make_model();
  ZeroTrainer<Opt> t(model, {.optim = options, .parallel = ddp_options(0)});
  auto data = make_loader(kResumeSamples, kGlobalBatch / world_env());
  t.fit(tk::task::Regression{}, data, {.epochs = 3, .max_steps = 6}, SaveAt{6, file});
  const auto ckpt = tk::io::read_checkpoint(file);
  int64_t saved = 0;  // per parameter: "<param>.<state>"
  for (const auto& [name, t] : ckpt.parts.at("optim").tensors)
    if (name.ends_with("." + state)) saved += t.numel();
  std::printf("rank %d: checkpoint at step 6 holds %lld %s elements of %lld\n", rank_env(),
              (long long)saved, state.c_str(), (long long)t.flat_params().numel());
  check(saved == t.flat_params().numel(), "the checkpoint holds the full optimizer state");
}

template <class Opt>
void zero_resume(const std::filesystem::path& file, const typename Opt::Options& options) {
  auto model = make_model();
  ZeroTrainer<Opt> t(model, {.optim = options, .parallel = ddp_options(0)});
  auto data = make_loader(kResumeSamples, kGlobalBatch / world_env());
  const auto r =
      t.fit(tk::task::Regression{}, data, {.epochs = 3, .max_steps = 12, .resume_from = file});

  auto single = make_model();
  T<Opt, tk::accumulate::None, tk::parallel::Single> ref(single, {.optim = options});
  auto ref_data = make_loader(kResumeSamples, kGlobalBatch);
  ref.fit(tk::task::Regression{}, ref_data, {.epochs = 3, .max_steps = 12});
  const double err = max_rel_diff(*model, *single);
  std::printf(
      "rank %d of %d: %s resumed at step 6, ran to %lld: max rel diff to one uninterrupted "
      "process %.3g\n",
      rank_env(), world_env(), file.filename().c_str(), (long long)r.steps, err);
  check(r.steps == 12 && err < 1e-6, "a resumed ZeroSharded run continues the saved one");
}

// One process group per process: each optimizer is its own scenario.
void zero_save(const std::filesystem::path& dir) {
  zero_save<tk::optim::AdamW>(dir / "zero.ckpt", kResumeAdamW, "exp_avg");
}
void zero_resume(const std::filesystem::path& dir) {
  zero_resume<tk::optim::AdamW>(dir / "zero.ckpt", kResumeAdamW);
}
void zero_save_sgd(const std::filesystem::path& dir) {
  zero_save<tk::optim::SGD>(dir / "zero_sgd.ckpt", kResumeSGD, "momentum_buffer");
}
void zero_resume_sgd(const std::filesystem::path& dir) {
  zero_resume<tk::optim::SGD>(dir / "zero_sgd.ckpt", kResumeSGD);
}

// A loss spike in one rank's data stops every rank at the same step.
struct StopOnSpike {
  void on_step_end(tk::TrainState& s) {
    if (s.loss() > 100.0) s.request_stop("loss spike on rank " + std::to_string(rank_env()));
  }
};

void early_stop() {
  auto model = make_model();
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> t(
      model, {.optim = {.lr = 1e-3}, .parallel = ddp_options(0)});
  auto data = make_data(160);
  if (rank_env() == 1) data.targets.narrow(0, 6 * 8, 8).fill_(1000.0);  // batch 7 of rank 1
  tk::data::TensorBatches batches(data, {.batch_size = 8, .shuffle = false});
  const auto r = t.fit(tk::task::Regression{}, batches, {.epochs = 2, .data_is_per_rank = true},
                       StopOnSpike{});
  const auto steps = t.parallel().sum({double(r.steps)}, "test: steps");
  std::printf("rank %d: stopped at step %lld (%s)\n", rank_env(), (long long)r.steps,
              r.stop_reason.c_str());
  check(r.stopped && r.steps == 7, "stopped at step 7");
  check(steps[0] == 7.0 * world_env(), "all ranks stopped at step 7");
  if (rank_env() == 0)
    check(r.stop_reason == "stop requested by rank 1", "rank 0 says who stopped");
}

// Every sampler and in-memory source the library ships shards itself under
// DDP: the ranks' sample ids, recorded through fit, are together one
// process's epoch (plus at most world - 1 ids of padding, as
// DistributedSampler pads), each rank an equal share. Data that cannot
// shard is refused, unless fit says it is per rank.
constexpr int64_t kShardSamples = 48;

struct RecordIds {
  std::vector<int64_t>* ids;
  tk::StepOutput step(tk::ModelRef& model, const tk::data::Batch& b) const {
    const auto v = b.input.select(1, 0).to(at::kLong).contiguous();
    ids->insert(ids->end(), v.data_ptr<int64_t>(), v.data_ptr<int64_t>() + v.numel());
    return tk::task::Regression{}.step(model, b);
  }
};

tk::data::TensorDataset id_data() {
  auto d = make_data(kShardSamples);
  d.inputs.select(1, 0).copy_(at::arange(kShardSamples, at::kFloat));  // column 0: the id
  return d;
}

at::Tensor id_counts(const std::vector<int64_t>& ids) {
  auto counts = at::zeros({kShardSamples}, at::kDouble);
  for (const int64_t id : ids) counts[id] += 1.0;
  return counts;
}

template <class MakeData>
void check_shards(const std::string& name, MakeData make, int port_offset) {
  std::vector<int64_t> single;  // one process's epoch 0
  {
    auto data = make();
    RecordIds record{&single};
    tk::ModelRef model(make_model());
    for (const auto& b : data) (void)record.step(model, b);
  }
  auto model = make_model();
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> t(
      model, {.parallel = ddp_options(port_offset)});
  auto data = make();
  // size() is the whole epoch's until the data has its shard: take_shard
  // gives it now (to size a schedule before fit), as fit would.
  const int64_t world = world_env(), one = int64_t(single.size());
  check(int64_t(data.size()) == (one + 7) / 8, name + ": size() before the shard is the epoch's");
  tk::data::take_shard(data, t.parallel());
  check(int64_t(data.size()) == ((one + world - 1) / world + 7) / 8,
        name + ": size() after take_shard is this rank's share");
  std::vector<int64_t> mine;
  t.fit(RecordIds{&mine}, data, {.epochs = 1});
  auto together = id_counts(mine);
  t.parallel().process_group().all_reduce(together, "test: id counts");
  const auto extra = together - id_counts(single);
  std::printf("rank %d: %s: %zu of one process's %zu samples, %g of padding\n", rank_env(),
              name.c_str(), mine.size(), single.size(), extra.sum().item<double>());
  check(extra.min().item<double>() >= 0 && extra.sum().item<double>() < double(world),
        name + ": the ranks' samples are one process's epoch, padded by < world_size");
  check(int64_t(mine.size()) == (int64_t(single.size()) + world - 1) / world,
        name + ": each rank an equal share");
}

void shards() {
  namespace d = tk::data;
  using tk::data::Loader;
  const auto ds = id_data();
  const d::LoaderOptions batch8{.batch_size = 8};
  check_shards(
      "SequentialSampler", [&] { return Loader(ds, d::SequentialSampler(kShardSamples), batch8); },
      0);
  check_shards(
      "RandomSampler",
      [&] { return Loader(ds, d::RandomSampler({.size = kShardSamples, .seed = 4}), batch8); }, 1);
  check_shards(
      "WeightedSampler",
      [&] {
        return Loader(ds,
                      d::WeightedSampler({.weights = at::arange(1, kShardSamples + 1), .seed = 4}),
                      batch8);
      },
      2);
  check_shards(
      "RepeatFactorSampler",
      [&] {
        std::vector<std::vector<int64_t>> categories;
        for (int64_t i = 0; i < kShardSamples; ++i) categories.push_back({i % 7 == 0 ? 1 : 0});
        return Loader(
            ds, d::RepeatFactorSampler({.categories = categories, .threshold = 0.3, .seed = 4}),
            batch8);
      },
      3);
  check_shards(
      "CurriculumSampler",
      [&] {
        std::vector<double> difficulty;
        for (int64_t i = 0; i < kShardSamples; ++i) difficulty.push_back(double((i * 17) % 48));
        return Loader(ds, d::CurriculumSampler({.difficulty = difficulty, .start = 0.5, .seed = 4}),
                      batch8);
      },
      4);
  check_shards(
      "DistributedSampler",
      [&] { return Loader(ds, d::DistributedSampler({.size = kShardSamples, .seed = 4}), batch8); },
      5);
  check_shards(
      "TensorBatches", [&] { return d::TensorBatches(ds, {.batch_size = 8, .seed = 4}); }, 6);
  // a vector of batches cannot shard: refused, naming the fix
  std::vector<d::Batch> batches;
  for (const auto& b : d::TensorBatches(ds, {.batch_size = 8, .shuffle = false}))
    batches.push_back(b);
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> t(make_model(),
                                                               {.parallel = ddp_options(7)});
  try {
    t.fit(tk::task::Regression{}, batches, {.epochs = 1});
    throw std::runtime_error("a vector of batches trained unsharded");
  } catch (const tk::Error& e) {
    const std::string what = e.what();
    check(what.find("cannot give each of the " + std::to_string(world_env()) + " ranks") !=
                  std::string::npos &&
              what.find("fit.data_is_per_rank = true") != std::string::npos,
          "the refusal names the problem and the fix: " + what);
  }
  const auto r = t.fit(tk::task::Regression{}, batches, {.epochs = 1, .data_is_per_rank = true});
  check(r.steps == 6, "with data_is_per_rank the same batches train on every rank");
}

// A sharded sampler stopped mid-epoch and resumed: each rank then draws the
// rest of its own share, and the run ends bitwise as an unbroken one.
void shards_resume(const std::filesystem::path& dir) {
  namespace d = tk::data;
  const auto ds = id_data();
  const auto loader = [&] {
    return d::Loader(ds, d::RandomSampler({.size = kShardSamples, .seed = 4}),
                     d::LoaderOptions{.batch_size = 4});
  };
  const int64_t per_epoch = (kShardSamples + world_env() - 1) / world_env() / 4;
  const int64_t stop_at = per_epoch + per_epoch / 2;  // mid-way through epoch 1
  struct StopAt {
    int64_t step;
    std::filesystem::path file;
    void on_step_end(tk::TrainState& s) {
      if (s.step != step) return;
      s.save_checkpoint(file);
      s.request_stop("interrupted");
    }
  };
  using DdpSgd = T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP>;
  const tk::optim::SGD::Options sgd{.lr = 1e-2, .momentum = 0.9};
  const auto run = [&](int port_offset, std::vector<int64_t>& ids, const tk::FitOptions& fit,
                       auto... callbacks) {
    auto model = make_model();
    DdpSgd t(model, {.optim = sgd, .parallel = ddp_options(port_offset)});
    auto data = loader();
    t.fit(RecordIds{&ids}, data, fit, callbacks...);
    return model;
  };
  // Rank 0 alone clears the folder (all ranks at once raced on it); the
  // first run's rendezvous waits for it before any rank writes there.
  if (rank_env() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  std::vector<int64_t> unbroken_ids, first_ids, resumed_ids;
  auto unbroken = run(8, unbroken_ids, {.epochs = 2});
  run(9, first_ids, {.epochs = 2}, StopAt{stop_at, dir / "mid-epoch.ckpt"});
  auto resumed = run(10, resumed_ids, {.epochs = 2, .resume_from = dir});
  auto ids = first_ids;
  ids.insert(ids.end(), resumed_ids.begin(), resumed_ids.end());
  std::printf("rank %d: stopped at step %lld of %lld, resumed: %zu + %zu ids\n", rank_env(),
              (long long)stop_at, (long long)(2 * per_epoch), first_ids.size(), resumed_ids.size());
  check(ids == unbroken_ids, "the resumed rank draws the rest of its own share, in order");
  check(max_rel_diff(*resumed, *unbroken) == 0.0,
        "the resumed run ends bitwise as an unbroken one");
}

// The runs under torchrun: SGD on 96 samples, compared with one process at
// batch 16; the rendezvous where torchrun puts it (no port of the test's own).
const tk::optim::SGD::Options kLaunchedSgd{.lr = 0.05, .momentum = 0.9};
/// Each epoch's train_loss, by epoch.
struct EpochLosses {
  std::map<int64_t, double>* out;
  void on_epoch_end(tk::TrainState& s) { (*out)[s.epoch] = s.metrics.at("train_loss"); }
};

Mlp launched_reference(int64_t epochs, std::map<int64_t, double>* losses = nullptr) {
  auto single = make_model();
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::Single> ref(single,
                                                                    {.optim = kLaunchedSgd});
  auto data = make_loader(96, 16);
  std::map<int64_t, double> ignored;
  ref.fit(tk::task::Regression{}, data, {.epochs = epochs},
          EpochLosses{losses ? losses : &ignored});
  return single;
}
tk::parallel::DDP::Options launched_ddp() {
  tk::parallel::DDP::Options o;
  o.device = torch::Device(torch::kCPU);
  return o;
}

// Started by PyTorch's own launcher (tests/torchrun_test.sh), with the
// rendezvous where torchrun puts it: no port of the test's own. DDP equals
// one process, as in parity().
void torchrun() {
  const auto env = tk::parallel::Environment::detect();
  auto single = launched_reference(2);
  auto model = make_model();
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> ddp(
      model, {.optim = kLaunchedSgd, .parallel = launched_ddp()});
  auto data = make_loader(96, 16 / world_env());
  ddp.fit(tk::task::Regression{}, data, {.epochs = 2});
  const double err = max_rel_diff(*model, *single);
  std::printf("rank %d: under torchrun (agent store: %s): DDP vs one process: max rel diff %.3g\n",
              rank_env(), env.agent_store ? "yes" : "no", err);
  check(err < 1e-6, "DDP under torchrun equals one process within 1e-6");
}

// Under torchrun --max_restarts 1: in the first attempt rank 1 is SIGKILLed
// at step 9 (epoch 1's third of 6); the agent restarts the group, which resumes from the newest
// checkpoint in `dir` (the same command line: resume_if_present) and must
// end as one unbroken process does, each epoch's train_loss too (the
// resumed epoch's counts every rank's losses before the restart).
void elastic(const std::filesystem::path& dir) {
  const auto env = tk::parallel::Environment::detect();
  std::map<int64_t, double> unbroken_losses, losses;
  auto single = launched_reference(3, &unbroken_losses);

  struct KillOnce {
    int attempt;
    void on_step_end(tk::TrainState& s) {
      if (attempt == 0 && rank_env() == 1 && s.step == 9) std::raise(SIGKILL);
    }
  };
  auto model = make_model();
  auto o = launched_ddp();
  o.timeout = 20s;
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> ddp(
      model, {.optim = kLaunchedSgd, .parallel = o});
  auto data = make_loader(96, 16 / world_env());
  const auto r = ddp.fit(tk::task::Regression{}, data,
                         {.epochs = 3, .resume_from = dir, .resume_if_present = true},
                         tk::callbacks::ModelCheckpoint({.dir = dir, .save_every = 2}),
                         KillOnce{env.restart_count}, EpochLosses{&losses});
  for (const auto& [epoch, loss] : losses) {
    const double unbroken = unbroken_losses.at(epoch);
    std::printf("rank %d: epoch %lld train_loss %.8f, unbroken %.8f\n", rank_env(),
                (long long)epoch, loss, unbroken);
    check(std::abs(loss - unbroken) <= 1e-6 * std::abs(unbroken),
          "each epoch's train_loss equals the unbroken run's, the resumed one's too");
  }
  check(losses.count(1) == 1 && losses.count(0) == 0,
        "the restart resumed inside epoch 1 (its checkpoint: step 8)");
  const double err = max_rel_diff(*model, *single);
  std::printf("rank %d: attempt %d, %lld steps: vs one unbroken process: max rel diff %.3g\n",
              rank_env(), env.restart_count, (long long)r.steps, err);
  check(env.restart_count == 1, "the group was restarted once");
  check(r.steps == 18 && err < 1e-6, "the restarted run ends as an unbroken one, within 1e-6");
}

// Rank 1 dies (or hangs) at step 5; rank 0 must fail with an error naming
// the collective, its rank and the lost one, within the timeout and the
// roll call's 2 s past it.
constexpr auto kLostTimeout = 4s;

void lost_rank(bool hang) {
  auto model = make_model();
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> t(
      model, {.optim = {.lr = 1e-3}, .parallel = ddp_options(0, kLostTimeout)});
  auto data = make_loader(400, 8);
  struct Lose {
    bool hang;
    void on_step_end(tk::TrainState& s) {
      if (s.step != 5 || rank_env() != 1) return;
      if (!hang) std::raise(SIGKILL);
      std::this_thread::sleep_for(3 * kLostTimeout);
      std::_Exit(0);
    }
  };
  const auto start = std::chrono::steady_clock::now();
  try {
    t.fit(tk::task::Regression{}, data, {.epochs = 1}, Lose{hang});
  } catch (const tk::Error& e) {
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string what = e.what();
    std::printf("rank %d: error after %.1f s: %s\n", rank_env(), waited, what.c_str());
    check(what.find("rank 0 of 2") != std::string::npos &&
              what.find("collective `") != std::string::npos,
          "the error names the rank and the collective");
    check(what.find("rank 1 of the group did not answer a roll call") != std::string::npos,
          "the error names the peer that is gone");
    check(waited < 4.0 + 2.0 + 3.0, "the error came within the timeout and the roll call");
    std::printf("rank 0: failed as expected within the timeout\n");
    return;
  }
  throw std::runtime_error("the run finished although rank 1 was lost");
}

// Different models on different ranks fail at construction, on every rank.
// A task whose validation metric is named after the rank: "metric_0", "metric_1".
struct RankNamedMetric {
  tk::StepOutput step(tk::ModelRef& model, const tk::data::Batch& batch) const {
    auto out = tk::task::Regression{}.step(model, batch);
    if (!at::GradMode::is_enabled())
      out.metrics.emplace_back("metric_" + std::to_string(rank_env()), out.loss.detach());
    return out;
  }
};

// Ranks that built different models, or whose tasks name different metrics,
// fail on every rank with an error naming what differs.
void mismatch() {
  bool detected = false;
  try {
    T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> t(
        make_model(rank_env() == 1 ? 33 : 32), {.parallel = ddp_options(0)});
  } catch (const tk::Error& e) {
    const std::string what = e.what();
    std::printf("rank %d: %s\n", rank_env(), what.c_str());
    check(what.find("differs between rank 0 and rank(s) 1") != std::string::npos,
          "the error names the rank that differs");
    detected = true;
  }
  check(detected, "different models were detected");
  // Averaged position by position, "metric_0" and "metric_1" would pass as one.
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> t(make_model(),
                                                               {.parallel = ddp_options(1)});
  auto data = make_loader(32, 8);
  try {
    t.fit(RankNamedMetric{}, data, {.epochs = 1, .val_data = data});
  } catch (const tk::Error& e) {
    const std::string what = e.what();
    std::printf("rank %d: %s\n", rank_env(), what.c_str());
    check(what.find("validation metric names (here: loss, metric_" + std::to_string(rank_env())) !=
                  std::string::npos &&
              what.find("differs between rank 0 and rank(s) 1") != std::string::npos,
          "the error names this rank's metrics and the rank that differs");
    return;
  }
  throw std::runtime_error("different metric names were not detected");
}

// A parameter without gradient is an error naming it, unless allowed.
void unused() {
  auto strict_model = make_model(32, true);
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> strict(strict_model,
                                                                    {.parallel = ddp_options(0)});
  auto data = make_loader(64, 8);
  try {
    strict.fit(tk::task::Regression{}, data, {.epochs = 1});
    throw std::runtime_error("the unused parameter was not reported");
  } catch (const tk::Error& e) {
    const std::string what = e.what();
    std::printf("rank %d: %s\n", rank_env(), what.c_str());
    check(what.find("unused.weight") != std::string::npos &&
              what.find("find_unused_parameters") != std::string::npos,
          "the error names the parameter and the switch");
  }
  auto model = make_model(32, true);
  auto options = ddp_options(1);
  options.find_unused_parameters = true;
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> allowed(model, {.parallel = options});
  const auto r = allowed.fit(tk::task::Regression{}, data, {.epochs = 1});
  check(r.steps == 4, "with find_unused_parameters the run completes");
}

// Buffers (BatchNorm's running statistics) follow rank 0 after every step.
void buffers() {
  torch::manual_seed(11);
  auto model = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16),
                                     torch::nn::Tanh(), torch::nn::Linear(16, 1));
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> t(model, {.parallel = ddp_options(0)});
  auto data = make_data(64);
  data.inputs.add_(double(rank_env()));  // different statistics on every rank
  tk::data::TensorBatches batches(data, {.batch_size = 8});
  t.fit(tk::task::Regression{}, batches, {.epochs = 1, .data_is_per_rank = true});
  const auto mean = model->named_buffers()["1.running_mean"].clone();
  auto sum = mean.clone();
  t.parallel().process_group().all_reduce(sum, "test: sum of running means");
  const double spread = (sum / world_env() - mean).abs().max().item<double>();
  std::printf("rank %d: running_mean differs from the ranks' mean by %.3g\n", rank_env(), spread);
  check(spread == 0.0 && mean.abs().sum().item<double>() > 0, "all ranks hold rank 0's buffers");
}

// Activation checkpointing and weight EMA under DDP: a model run in
// checkpointed segments trains the weights one plain process trains (its
// gradients reach the buckets as the plain model's do), and every rank holds
// the same average, equal to that process's.
void recipes() {
  const int world = world_env();
  const tk::optim::SGD::Options sgd{.lr = 0.05, .momentum = 0.9};
  const tk::FitOptions fit{.epochs = 2, .max_steps = 12};
  const tk::callbacks::Ema::Options average{.decay = 0.9, .warmup = true};
  auto blocks = [] {
    torch::manual_seed(11);
    torch::nn::Sequential s;
    for (int i = 0; i < 4; ++i) {
      s->push_back(torch::nn::Linear(8, 8));
      s->push_back(torch::nn::Tanh());
    }
    s->push_back(torch::nn::Linear(8, 1));
    return s;
  };

  auto single = blocks();
  tk::callbacks::Ema ref_ema(average);
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::Single> ref(single, {.optim = sgd});
  auto ref_data = make_loader(100, 16);
  ref.fit(tk::task::Regression{}, ref_data, fit, ref_ema);

  auto plain = blocks();
  tk::memory::CheckpointedSequential segmented(plain, 3);
  tk::callbacks::Ema ema(average);
  T<tk::optim::SGD, tk::accumulate::None, tk::parallel::DDP> ddp(
      segmented, {.optim = sgd, .parallel = ddp_options(0)});
  auto data = make_loader(100, 16 / world);
  ddp.fit(tk::task::Regression{}, data, fit, ema);
  const double err = max_rel_diff(*plain, *single);
  std::printf("rank %d: checkpointed segments under DDP vs one plain process: max rel diff %.3g\n",
              rank_env(), err);
  check(err < 1e-6, "checkpointed DDP weights equal one process's within 1e-6");

  tk::memory::CheckpointedSequential ema_model(blocks(), 3);
  ema.copy_to(*ema_model);
  auto ref_ema_model = blocks();
  ref_ema.copy_to(*ref_ema_model);
  const double ema_err = max_rel_diff(*ema_model, *ref_ema_model);
  const double moved = max_rel_diff(*ema_model, *plain);
  std::vector<at::Tensor> flat;
  for (const auto& p : ema_model->parameters()) flat.push_back(p.detach().flatten());
  const auto mine = torch::cat(flat);
  auto sum = mine.clone();
  ddp.parallel().process_group().all_reduce(sum, "test: sum of the EMA weights");
  const double spread = (sum / world - mine).abs().max().item<double>();
  std::printf("rank %d: EMA vs one process's %.3g, vs the weights %.3g, across ranks %.3g\n",
              rank_env(), ema_err, moved, spread);
  check(ema_err < 1e-6, "the EMA equals one process's within 1e-6");
  check(moved > 1e-4, "the EMA is an average, not the weights");
  check(spread == 0.0, "every rank holds the same EMA");
}

// A two-input model on string-keyed map batches: W ranks, each on its
// rows of every batch, equal one process on whole batches.
struct TwoInputImpl : torch::nn::Module {
  TwoInputImpl() {
    a = register_module("a", torch::nn::Linear(8, 16));
    b = register_module("b", torch::nn::Linear(3, 16));
    head = register_module("head", torch::nn::Linear(16, 1));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& y) {
    return head(torch::tanh(a(x) + b(y)));
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, head{nullptr};
};
TORCH_MODULE(TwoInput);
using Dict = std::map<std::string, at::Tensor>;
struct DictTask {
  tk::StepOutput step(TwoInput& model, const Dict& batch) const {
    return {torch::mse_loss(model(batch.at("x"), batch.at("y")), batch.at("target"))};
  }
};

void any_batch() {
  const int world = world_env(), rank = rank_env();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  std::vector<Dict> whole, mine;
  for (int i = 0; i < 12; ++i) {
    Dict b{{"x", at::randn({16, 8}, gen)}, {"y", at::randn({16, 3}, gen)}};
    b["target"] = (b["x"].sum(1, true) - b["y"].sum(1, true)).sin();
    whole.push_back(b);
    mine.push_back(tk::data::map_tensors(
        b, [&](const at::Tensor& t) { return t.chunk(world)[rank].clone(); }));
  }
  const tk::optim::AdamW::Options adamw{.lr = 1e-2, .weight_decay = 0.01};
  torch::manual_seed(11);
  TwoInput single;
  T<tk::optim::AdamW, tk::accumulate::Every<2>, tk::parallel::Single> ref(single, {.optim = adamw});
  ref.fit(DictTask{}, whole, {.epochs = 2});
  torch::manual_seed(11);
  TwoInput model;
  T<tk::optim::AdamW, tk::accumulate::Every<2>, tk::parallel::DDP> ddp(
      model, {.optim = adamw, .parallel = ddp_options(0)});
  const auto result = ddp.fit(DictTask{}, mine, {.epochs = 2, .data_is_per_rank = true});
  const double err = max_rel_diff(*model, *single);
  std::printf("rank %d: two inputs, map batches, DDP vs one process: max rel diff %.3g\n", rank,
              err);
  check(result.steps == 12 && err < 1e-5, "DDP on map batches equals one process within 1e-5");
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 2 ? argv[2] : ".";
  return worker::run(argc, argv,
                     {
                         {"parity", [&] { parity(); }},
                         {"zero_parity", [&] { zero_parity(); }},
                         {"zero_save", [&] { zero_save(dir); }},
                         {"zero_resume", [&] { zero_resume(dir); }},
                         {"zero_save_sgd", [&] { zero_save_sgd(dir); }},
                         {"zero_resume_sgd", [&] { zero_resume_sgd(dir); }},
                         {"early_stop", [&] { early_stop(); }},
                         {"killed_rank", [&] { lost_rank(false); }},
                         {"hung_rank", [&] { lost_rank(true); }},
                         {"mismatch", [&] { mismatch(); }},
                         {"unused", [&] { unused(); }},
                         {"buffers", [&] { buffers(); }},
                         {"recipes", [&] { recipes(); }},
                         {"captured", [&] { captured(); }},
                         {"captured_optimizers", [&] { captured_optimizers(); }},
                         {"any_batch", [&] { any_batch(); }},
                         {"torchrun", [&] { torchrun(); }},
                         {"shards", [&] { shards(), shards_resume(dir); }},
                         {"elastic", [&] { elastic(dir); }},
                     });
}
