// Models defined in Python (tests/reference/make_scripted_reference.py),
// scripted and traced there, trained here through the Trainer: against
// PyTorch's own loop on the same weights and batches, with the policies
// and callbacks a C++ model has, and written back for Python.
//
// First, and without the tests' precompiled LibTorch (tests/CMakeLists.txt):
// the opt-in header proves here, in the test command, that it compiles alone.
#include <trainkit/script_module.hpp>
// then what the tests use
#include <trainkit/callbacks.hpp>
#include <trainkit/trainkit.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "scripted_models.hpp"
#include "step_record.hpp"
#include "support.hpp"

using namespace trainkit;

namespace {

using scripted_models::cnn_batch;
using scripted_models::NextToken;
using scripted_models::TokenBatch;
using scripted_models::transformer_batch;

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}
const std::filesystem::path kArchives = std::filesystem::path(TRAINKIT_REFERENCE_DIR) / "scripted";
std::filesystem::path archive(const std::string& model, const std::string& how,
                              const std::string& version) {
  return kArchives / (model + "_" + how + "_torch" + version + ".pt");
}
const std::vector<std::string> kVersions{"1.13", "2.6"};

std::map<std::string, at::Tensor> state_of(torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value();
  for (const auto& b : m.named_buffers()) out[b.key()] = b.value();
  return out;
}

/// The largest difference of `t`'s sampled values from the reference's.
double worst_sample_error(const at::Tensor& t, const nlohmann::json& samples) {
  const auto indices = at::tensor(samples["indices"].get<std::vector<int64_t>>(), at::kLong);
  const auto ours = t.detach().reshape({-1}).to(at::kDouble).index_select(0, indices);
  const auto theirs = tk_test::to_tensor(samples["values"].get<std::vector<double>>());
  return (ours - theirs).abs().max().item<double>();
}

/// The largest difference from the reference: the losses' relative one, the
/// final state's (parameters and persistent buffers, by Python's names) and
/// the eval output's absolute ones (their values are of order 0.01 to 10).
double check_against(const nlohmann::json& ref, ScriptModule& model,
                     const std::vector<double>& losses) {
  REQUIRE(losses.size() == ref["losses"].size());
  double worst = 0;
  for (size_t s = 0; s < losses.size(); ++s) {
    const double theirs = ref["losses"][s];
    worst = std::max(worst, std::abs(losses[s] - theirs) / std::abs(theirs));
  }
  auto state = state_of(*model);
  for (const auto& entry : ref["state"]) {
    const auto name = entry["name"].get<std::string>();
    REQUIRE_MESSAGE(state.count(name), name);
    worst = std::max(worst, worst_sample_error(state.at(name), entry));
  }
  return worst;
}

using CnnTrainer = Trainer<optim::SGD, sched::Step>;
CnnTrainer::Options cnn_options() {
  return {.optim = {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true},
          .sched = {.step_size = 5, .gamma = 0.5},
          .param_groups = {
              {.name = "norms", .select = params::name_matches("^bn"), .options = {.lr = 0.05}}}};
}
std::vector<data::Batch> cnn_batches(int64_t steps) {
  std::vector<data::Batch> out;
  for (int64_t s = 0; s < steps; ++s) out.push_back(cnn_batch(s % 4));
  return out;
}

using TransformerTrainer =
    Trainer<optim::AdamW, sched::WarmupCosine, precision::Fp32, accumulate::Every<2>, clip::Norm>;
TransformerTrainer::Options transformer_options() {
  return {.optim = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1},
          .sched = {.warmup_steps = 5, .start_factor = 0.1, .eta_min = 3e-4},
          .clip = {.max_norm = 1.0},
          .param_groups = {params::no_weight_decay()}};
}
std::vector<TokenBatch> transformer_batches() {
  std::vector<TokenBatch> out;
  for (int64_t m = 0; m < 40; ++m) out.push_back(transformer_batch(m));
  return out;
}

}  // namespace

TEST_CASE(
    "scripted and traced models train as PyTorch's loop trains them, from either PyTorch's "
    "archive") {
  at::set_num_threads(1);
  const auto ref = tk_test::load_reference("scripted_torch" + torch_version() + ".json");
  for (const auto& version : kVersions) {
    for (const std::string how : {"script", "trace"}) {
      CAPTURE(version);
      CAPTURE(how);
      {  // SmallCnn: SGD, a group by state_dict names, StepLR; batch norm's buffers
        ScriptModule model(archive("cnn", how, version));
        CHECK(model->recorded_training_mode() ==
              (how == "trace" ? std::optional<bool>(true) : std::nullopt));
        CnnTrainer trainer(model, cnn_options());
        std::vector<double> losses;
        trainer.fit(task::Classification{}, cnn_batches(20), {.epochs = 1},
                    tk_test::StepRecord{&losses});
        const double worst = check_against(ref["cnn"], model, losses);
        MESSAGE("cnn " << how << " (archive of PyTorch " << version << "): largest difference "
                       << worst);
        CHECK(worst <= 1e-6);
        model->eval();
        torch::NoGradGuard no_grad;
        if (how == "script") {
          CHECK(worst_sample_error(model->forward(cnn_batch(7).input), ref["cnn"]["eval_output"]) <=
                1e-6);
        } else {  // traced in training mode: its batch norm cannot evaluate
          CHECK(tk_test::error_of([&] {
                  model->forward(cnn_batch(7).input);
                }).find("was traced in training mode") != std::string::npos);
        }
      }
      {  // SmallTransformer: two inputs and outputs, AdamW, warm-up + cosine, Every<2>, clip
        ScriptModule model(archive("transformer", how, version));
        TransformerTrainer trainer(model, transformer_options());
        std::vector<double> losses;
        trainer.fit(NextToken{}, transformer_batches(), {.epochs = 1},
                    tk_test::StepRecord{&losses});
        const double worst = check_against(ref["transformer"], model, losses);
        MESSAGE("transformer " << how << " (archive of PyTorch " << version
                               << "): largest difference " << worst);
        CHECK(worst <= 1e-6);
        model->eval();
        torch::NoGradGuard no_grad;
        const auto b = transformer_batch(99);
        CHECK(worst_sample_error(model->forward_tensors<2>(b.tokens, b.targets)[0],
                                 ref["transformer"]["eval_output"]) <= 1e-6);
      }
    }
  }
}

TEST_CASE(
    "a scripted model's parameters are the scripted module's own tensors, by Python's names") {
  ScriptModule model(archive("transformer", "script", torch_version()));
  const auto script = model->script();
  std::vector<std::string> python_names;
  for (const auto& p : script.named_parameters()) python_names.push_back(p.name);
  std::vector<std::string> ours;
  for (const auto& p : model->named_parameters()) ours.push_back(p.key());
  CHECK(ours == python_names);
  CHECK(ours.front() == "position");  // the root's own parameter, then the children's
  // the same tensors: a change through one is seen through the other
  torch::NoGradGuard no_grad;
  model->named_parameters()["blocks.1.fc.weight"].fill_(0.25);
  CHECK(script.attr("blocks")
            .toModule()
            .attr("1")
            .toModule()
            .attr("fc")
            .toModule()
            .attr("weight")
            .toTensor()
            .eq(0.25)
            .all()
            .item<bool>());
  // train() and eval() reach every scripted submodule
  model->eval();
  for (const auto& m : script.modules()) CHECK_FALSE(m.is_training());
  model->train();
  for (const auto& m : script.modules()) CHECK(m.is_training());
  CHECK(model->non_persistent_buffers() ==
        std::set<std::string>{"blocks.0.attn.causal", "blocks.1.attn.causal"});
  // no_weight_decay(true) knows a scripted embedding table (traced: a mangled class name)
  for (const std::string how : {"script", "trace"}) {
    CAPTURE(how);
    ScriptModule m(archive("transformer", how, torch_version()));
    const auto table = m->named_parameters()["tokens.weight"];
    FlatParams flat(*m, {params::no_weight_decay(/*embeddings=*/true)});
    const size_t group = flat.param_group("no_weight_decay");
    size_t found = 0;
    for (const auto& g : flat.groups()) {
      for (const auto& p : g.params) {
        if (p.is_same(table)) found = g.param_group;
      }
    }
    CHECK(found == group);
  }
}

TEST_CASE("bf16 autocast reaches inside a scripted model") {
  at::set_num_threads(1);
  const auto ref = tk_test::load_reference("scripted_torch" + torch_version() + ".json");
  ScriptModule model(archive("cnn", "script", torch_version()));
  Trainer<optim::SGD, sched::Step, precision::Bf16> trainer(
      model,
      {.optim = {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true},
       .sched = {.step_size = 5, .gamma = 0.5},
       .param_groups = {
           {.name = "norms", .select = params::name_matches("^bn"), .options = {.lr = 0.05}}}});
  std::vector<double> losses;
  trainer.fit(task::Classification{}, cnn_batches(5), {.epochs = 1}, tk_test::StepRecord{&losses});
  const auto expected = ref["cnn_bf16_losses"].get<std::vector<double>>();
  REQUIRE(losses.size() == expected.size());
  for (size_t s = 0; s < losses.size(); ++s)
    CHECK(losses[s] == doctest::Approx(expected[s]).epsilon(1e-6));
}

TEST_CASE("a captured step of a scripted model (emulated on the CPU) equals the eager one") {
  at::set_num_threads(1);
  // LibTorch < 2.4 has no fused kernels: there SGD's capture falls back to eager.
  const auto fused = TRAINKIT_HAS_FUSED_OPTIMIZERS ? std::optional<bool>(true) : std::nullopt;
  auto options = cnn_options();
  options.optim.fused = fused;
  ScriptModule eager_model(archive("cnn", "script", torch_version()));
  ScriptModule captured_model(archive("cnn", "script", torch_version()));
  CnnTrainer eager(eager_model, options);
  using Captured = Trainer<optim::SGD, sched::Step, precision::Fp32, accumulate::None, clip::None,
                           parallel::Single, capture::CudaGraph>;
  Captured captured(captured_model, {.optim = options.optim,
                                     .sched = options.sched,
                                     .capture = {.warmup_steps = 2, .emulate = true},
                                     .param_groups = options.param_groups});
  eager.fit(task::Classification{}, cnn_batches(20), {.epochs = 1});
  captured.fit(task::Classification{}, cnn_batches(20), {.epochs = 1});
  const auto a = state_of(*eager_model), b = state_of(*captured_model);
  for (const auto& entry : a)
    CHECK_MESSAGE(
        torch::allclose(entry.second.to(at::kDouble), b.at(entry.first).to(at::kDouble), 0, 1e-6),
        entry.first);
  if (TRAINKIT_HAS_FUSED_OPTIMIZERS) {
    CHECK(captured.graph_recorded());
    CHECK(captured.graph_replays() > 10);
  } else {
    MESSAGE("eager: " << captured.graph_fallback_reason());
  }
}

TEST_CASE("a scripted model resumes bitwise, with EMA and Freeze by Python's names") {
  at::set_num_threads(1);
  const auto dir = tk_test::temp_dir("trainkit_script_resume");
  const auto path = archive("cnn", "script", torch_version());
  const auto batches = cnn_batches(8);
  const auto run = [&](int64_t stop_at, const std::optional<std::filesystem::path>& from) {
    ScriptModule model(path);
    auto trainer = std::make_unique<CnnTrainer>(model, cnn_options());
    callbacks::Ema ema({.decay = 0.9});
    callbacks::Freeze freeze(trainer->flat_params(), {.group = "norms", .until_epoch = 1});
    struct SaveAt {
      std::filesystem::path file;
      int64_t step;
      void on_step_end(TrainState& s) {
        if (s.step == step) {
          s.save_checkpoint(file);
          s.request_stop("interrupted");
        }
      }
    } save{dir / "mid.ckpt", stop_at};
    FitOptions options{.epochs = 2};
    if (from) options.resume_from = *from;
    trainer->fit(task::Classification{}, batches, options, std::ref(ema), std::ref(freeze),
                 std::ref(save));
    return std::tuple{model, std::move(trainer), ema.state_dict().tensors};
  };
  const auto initial = state_of(*ScriptModule(path));
  auto [whole, t1, whole_ema] = run(-1, std::nullopt);
  run(11, std::nullopt);
  auto [resumed, t2, resumed_ema] = run(-1, dir / "mid.ckpt");
  const auto a = state_of(*whole), b = state_of(*resumed);
  for (const auto& entry : a)
    CHECK_MESSAGE(torch::equal(entry.second, b.at(entry.first)), entry.first);
  REQUIRE(whole_ema.size() == resumed_ema.size());
  REQUIRE(whole_ema.count("param.head.weight"));
  for (const auto& entry : whole_ema)
    CHECK_MESSAGE(torch::equal(entry.second, resumed_ema.at(entry.first)), entry.first);
  // the norms trained only from epoch 1: their parameters moved, but less
  CHECK_FALSE(torch::equal(a.at("bn1.weight"), initial.at("bn1.weight")));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a trained scripted model goes back to Python: its archive and its state dict") {
  const auto python = tk_test::python_with_torch();
  if (python.empty()) {
    std::puts("trainkit-skip: no python3 with torch");
    return;
  }
  at::set_num_threads(1);
  const auto dir = tk_test::temp_dir("trainkit_script_python");
  nlohmann::json expected;
  for (const std::string name : {"cnn", "transformer"}) {
    ScriptModule model(archive(name, "script", torch_version()));
    if (name == "cnn") {
      CnnTrainer(model, cnn_options()).fit(task::Classification{}, cnn_batches(6), {.epochs = 1});
    } else {
      auto batches = transformer_batches();
      batches.resize(12);
      TransformerTrainer(model, transformer_options()).fit(NextToken{}, batches, {.epochs = 1});
    }
    model->eval();
    torch::NoGradGuard no_grad;
    const auto b = transformer_batch(99);
    const auto out = name == "cnn" ? model->forward(cnn_batch(7).input)
                                   : model->forward_tensors<2>(b.tokens, b.targets)[0];
    const auto flat = out.reshape({-1}).to(at::kDouble).contiguous();
    expected[name] =
        std::vector<double>(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
    model->save(dir / (name + ".pt"));
    model->save_state_dict(dir / (name + "_state.pt"));
    // saving copied the tensors: the model trains on its own, the Trainer's
    const auto ours = model->parameters();
    const auto scripted = model->script().parameters();
    REQUIRE(ours.size() == scripted.size());
    size_t k = 0;
    for (const auto& p : scripted) CHECK(p.is_same(ours[k++]));
  }
  std::ofstream(dir / "expected.json") << expected.dump();
  const auto cmd =
      python + " " + TRAINKIT_REFERENCE_DIR + "/check_scripted_roundtrip.py " + dir.string();
  const bool read_back = std::system(cmd.c_str()) == 0;
  CHECK_MESSAGE(read_back, cmd);
  if (read_back) std::filesystem::remove_all(dir);
}

TEST_CASE("ScriptModule's refusals name what was wrong") {
  const auto missing = std::filesystem::path(TRAINKIT_REFERENCE_DIR) / "no_such_model.pt";
  CHECK(tk_test::error_of([&] { ScriptModule m(missing); }) ==
        "trainkit: ScriptModule: \"" + missing.string() +
            "\" is not a file (a TorchScript archive from torch.jit.save is expected)");
  const auto not_archive = std::filesystem::path(TRAINKIT_REFERENCE_DIR) / "gpt.json";
  CHECK(tk_test::error_of([&] { ScriptModule m(not_archive); })
            .rfind("trainkit: ScriptModule: torch::jit::load could not read \"" +
                       not_archive.string() + "\"",
                   0) == 0);
  CHECK(tk_test::error_of([&] {
          ScriptModule m(archive("cnn", "script", torch_version()),
                         ScriptModuleOptions{.non_persistent_buffers = {"bn1.mean"}});
        }) ==
        "trainkit: ScriptModule: non_persistent_buffers names \"bn1.mean\", which is not a "
        "buffer of the model (its buffers: bn1.num_batches_tracked, bn1.running_mean, "
        "bn1.running_var, bn2.num_batches_tracked, bn2.running_mean, bn2.running_var)");
  ScriptModule cnn(archive("cnn", "script", torch_version()));
  const auto b = transformer_batch(0);
  CHECK(tk_test::error_of([&] { cnn->forward_tensors<2>(cnn_batch(0).input); }) ==
        "trainkit: ScriptModule::forward_tensors<2>: the scripted forward returned a Tensor, not "
        "a tuple or list of 2 tensors");
  ScriptModule transformer(archive("transformer", "script", torch_version()));
  CHECK(
      tk_test::error_of([&] { transformer->forward(b.tokens, b.targets); }) ==
      "trainkit: ScriptModule::forward: the scripted forward returned a Tuple, not one tensor; "
      "call forward_tensors<N>(...) for a tuple or list of N tensors, or call(...) for any value");
  CHECK(tk_test::error_of([&] { transformer->run_method("generate", {}); }) ==
        "trainkit: ScriptModule: the scripted model (__torch__.SmallTransformer) has no method "
        "\"generate\"");
}
