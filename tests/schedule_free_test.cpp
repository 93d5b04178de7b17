// optim::ScheduleFreeAdamW against the authors' step written in PyTorch
// (tests/reference/schedule_free.json, made by
// make_schedule_free_reference.py), its evaluation weights included; the
// Trainer's switch between them around validation, checkpoints and fit's
// end, which changes no bit of the run; its errors.
#include <trainkit/io/checkpoint.hpp>
#include <trainkit/optim/schedule_free_adamw.hpp>
#include <trainkit/trainkit.hpp>

#include <cmath>

#include "reference_steps.hpp"
#include "scratch.hpp"
#include "support.hpp"

using namespace trainkit;
namespace nn = torch::nn;

namespace {

optim::ScheduleFreeAdamW::Options options_of(const nlohmann::json& c) {
  return {.lr = c["lr"].get<double>(),
          .beta1 = c["beta1"].get<double>(),
          .beta2 = c["beta2"].get<double>(),
          .eps = c["eps"].get<double>(),
          .weight_decay = c["weight_decay"].get<double>(),
          .warmup_steps = c["warmup_steps"].get<int64_t>(),
          .r = c["r"].get<double>(),
          .weight_lr_power = c["weight_lr_power"].get<double>()};
}

struct MlpImpl : nn::Module {
  MlpImpl() {
    torch::manual_seed(5);
    fc1 = register_module("fc1", nn::Linear(6, 16));
    fc2 = register_module("fc2", nn::Linear(16, 1));
  }
  at::Tensor forward(at::Tensor x) { return fc2(torch::tanh(fc1(x))); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);

using SfTrainer = Trainer<optim::ScheduleFreeAdamW>;
SfTrainer::Options trainer_options() {
  return {.optim = {.lr = 0.01, .weight_decay = 0.01, .warmup_steps = 3},
          .param_groups = {{"biases", params::below_2d(), {.weight_decay = 0.0}}}};
}

}  // namespace

TEST_CASE("optim::ScheduleFreeAdamW matches the authors' step and average over 20 steps") {
  at::set_num_threads(1);
  const auto ref = tk_test::load_reference("schedule_free.json");
  for (const auto& [name, c] : ref["cases"].items()) {
    CAPTURE(name);
    tk_test::ReferenceTensors model(ref);
    FlatParams flat(*model,
                    {{"bias",
                      params::name_matches("^p2$"),
                      {.lr_scale = c["bias_lr_scale"].get<double>(), .weight_decay = 0.0}}});
    optim::ScheduleFreeAdamW opt(flat, options_of(c));
    std::vector<at::Tensor> evaluation;
    const auto training = tk_test::reference_trajectory(ref, opt, model, [&] {
      opt.use_evaluation_weights();
      evaluation.push_back(tk_test::flat_tensors(model));
      opt.use_training_weights();  // from a copy: the next step sees y as it was
    });
    REQUIRE(training.size() == c["params"].size());
    for (size_t k = 0; k < training.size(); ++k) {
      CAPTURE(k);
      const auto want = [&](const char* key) {
        return tk_test::to_tensor(c[key][k].get<std::vector<double>>());
      };
      CHECK(tk_test::max_rel_error(training[k], want("params")) <= 1e-6);
      CHECK(tk_test::max_rel_error(evaluation[k], want("evaluation")) <= 1e-6);
    }
  }
}

TEST_CASE("a Trainer with optim::ScheduleFreeAdamW evaluates and saves the average") {
  const auto dir = tk_test::temp_dir("trainkit_schedule_free");
  auto gen = data::generator(3);
  const auto x = at::randn({96, 6}, gen);
  const auto y = x.mean(1, true).sin();
  const auto vx = at::randn({32, 6}, gen);
  const auto vy = vx.mean(1, true).sin();
  data::TensorBatches val({vx, vy}, {.batch_size = 16});
  struct SaveAt {
    std::filesystem::path file;
    void on_step_end(TrainState& s) {
      if (s.step == 7) s.save_checkpoint(file);
    }
  };
  const auto train = [&](SfTrainer& trainer, FitOptions fit, auto&&... callbacks) {
    data::TensorBatches batches({x, y}, {.batch_size = 8, .shuffle = true, .seed = 2});
    fit.epochs = 2;
    return trainer.fit(task::Regression{}, batches, fit,
                       std::forward<decltype(callbacks)>(callbacks)...);
  };
  SfTrainer plain(Mlp(), trainer_options());
  train(plain, {});
  const auto average = plain.model().parameters();

  SUBCASE("after fit the model holds x = lerp(y, z, 1 - 1/beta1)") {
    auto& opt = plain.optimizer();
    CHECK(opt.evaluating());
    const auto state = opt.state_dict();
    for (const auto& g : plain.flat_params().groups()) {
      const auto n = std::to_string(&g - plain.flat_params().groups().data());
      const auto expected =
          state.tensors.at("y." + n).lerp(state.tensors.at("z." + n), 1 - 1 / 0.9);
      CHECK(torch::equal(g.data, expected));
    }
  }
  SUBCASE("validation, checkpoints and evaluate switch weights without changing the run") {
    Mlp net;
    SfTrainer observed(net, trainer_options());
    const auto result =
        train(observed, {.val_data = data::BatchView(val)}, SaveAt{dir / "step7.ckpt"});
    const auto params = observed.model().parameters();
    for (size_t i = 0; i < average.size(); ++i) CHECK(torch::equal(average[i], params[i]));
    // The last validation ran on the weights the model holds now: x.
    const auto again = observed.evaluate(task::Regression{}, val);
    CHECK(again.at("loss") == result.metrics.at("val_loss"));
    observed.optimizer().use_training_weights();  // y: another model, another loss
    torch::NoGradGuard no_grad;
    const double at_y = torch::mse_loss(net->forward(vx), vy).item<double>();
    CHECK(std::abs(at_y - again.at("loss")) > 1e-6 * again.at("loss"));
  }
  SUBCASE("a resumed run is bitwise the unbroken one") {
    SfTrainer first(Mlp(), trainer_options());
    train(first, {}, SaveAt{dir / "step7.ckpt"});
    SfTrainer resumed(Mlp(), trainer_options());
    train(resumed, {.resume_from = dir / "step7.ckpt"});
    const auto params = resumed.model().parameters();
    for (size_t i = 0; i < average.size(); ++i) CHECK(torch::equal(average[i], params[i]));
  }
  SUBCASE("a checkpoint's model part is the average") {
    struct SaveAndLook {
      SfTrainer* trainer;
      std::filesystem::path file;
      std::map<std::string, at::Tensor> x;
      void on_step_end(TrainState& s) {
        if (s.step != 7) return;
        s.save_checkpoint(file);
        trainer->optimizer().use_evaluation_weights();
        for (const auto& p : trainer->model().named_parameters()) x[p.key()] = p.value().clone();
        trainer->optimizer().use_training_weights();
      }
    };
    SfTrainer looked(Mlp(), trainer_options());
    SaveAndLook look{&looked, dir / "looked.ckpt", {}};
    train(looked, {}, look);
    const auto saved = io::read_checkpoint(look.file);
    REQUIRE(look.x.size() == 4);
    for (const auto& [name, x] : look.x) {
      CAPTURE(name);
      CHECK(torch::equal(saved.parts.at("model").tensors.at(name), x));
    }
    CHECK(saved.parts.at("optim").value<bool>("evaluation_weights"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("optim::ScheduleFreeAdamW: its errors") {
  Mlp mlp;
  FlatParams flat(*mlp);
  SUBCASE("a step on the evaluation weights") {
    optim::ScheduleFreeAdamW opt(flat, {});
    for (auto& g : flat.groups()) g.grad.fill_(0.1);
    opt.step();
    opt.use_evaluation_weights();
    CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("call use_training_weights() first"), Error);
  }
  SUBCASE("options out of range name themselves") {
    CHECK_THROWS_WITH_AS(optim::ScheduleFreeAdamW(flat, {.beta1 = 0.0}),
                         doctest::Contains("optim.beta1"), Error);
    CHECK_THROWS_WITH_AS(optim::ScheduleFreeAdamW(flat, {.warmup_steps = -1}),
                         doctest::Contains("optim.warmup_steps"), Error);
    FlatParams grouped(*mlp, {{"b", params::below_2d(), {.momentum = 0.8}}});
    CHECK_THROWS_WITH_AS(optim::ScheduleFreeAdamW(grouped, {}),
                         doctest::Contains("param_groups[0].momentum"), Error);
  }
}
