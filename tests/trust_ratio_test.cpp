// optim::Lamb and optim::Lars against the papers' algorithms written in
// PyTorch (tests/reference/trust.json, made by make_trust_reference.py),
// with a group left out of the trust ratio; the trust ratio over a
// shard's slices; their errors; and a Trainer resuming bitwise.
#include <trainkit/optim/lamb.hpp>
#include <trainkit/optim/lars.hpp>
#include <trainkit/trainkit.hpp>

#include <cmath>

#include "reference_steps.hpp"
#include "scratch.hpp"
#include "support.hpp"

using namespace trainkit;
namespace nn = torch::nn;

namespace {

/// The bias p2, as the papers leave biases out: no trust ratio, no decay.
ParamGroup bias_group() {
  return {
      "no_trust_ratio", params::name_matches("^p2$"), {.weight_decay = 0.0, .trust_ratio = false}};
}

optim::Lamb::Options lamb_options(const nlohmann::json& c) {
  return {.lr = c["lr"].get<double>(),
          .beta1 = c["beta1"].get<double>(),
          .beta2 = c["beta2"].get<double>(),
          .eps = c["eps"].get<double>(),
          .weight_decay = c["weight_decay"].get<double>(),
          .bias_correction = c["bias_correction"].get<bool>()};
}
optim::Lars::Options lars_options(const nlohmann::json& c) {
  return {.lr = c["lr"].get<double>(),
          .momentum = c["momentum"].get<double>(),
          .dampening = c["dampening"].get<double>(),
          .weight_decay = c["weight_decay"].get<double>(),
          .nesterov = c["nesterov"].get<bool>(),
          .trust_coefficient = c["trust_coefficient"].get<double>(),
          .eps = c["eps"].get<double>(),
          .trust_clip = c["trust_clip"].get<bool>()};
}

template <class Opt>
void check_case(const nlohmann::json& ref, const nlohmann::json& c,
                const typename Opt::Options& options) {
  tk_test::ReferenceTensors model(ref);
  FlatParams flat(*model, {bias_group()});
  Opt opt(flat, options);
  CHECK(opt.lr(1) == c["lr"].get<double>());
  const auto got = tk_test::reference_trajectory(ref, opt, model);
  REQUIRE(got.size() == c["params"].size());
  for (size_t k = 0; k < got.size(); ++k) {
    const auto want = tk_test::to_tensor(c["params"][k].get<std::vector<double>>());
    const double err = tk_test::max_rel_error(got[k], want);
    CAPTURE(k);
    CHECK(err <= 1e-6);
  }
}

struct MlpImpl : nn::Module {
  MlpImpl() {
    torch::manual_seed(5);
    fc1 = register_module("fc1", nn::Linear(6, 16));
    norm = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({16})));
    fc2 = register_module("fc2", nn::Linear(16, 1));
  }
  at::Tensor forward(at::Tensor x) { return fc2(torch::relu(norm(fc1(x)))); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
  nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace

TEST_CASE("optim::Lamb and optim::Lars match the papers' algorithms over 20 steps") {
  at::set_num_threads(1);
  const auto ref = tk_test::load_reference("trust.json");
  for (const auto& [name, c] : ref["cases"].items()) {
    CAPTURE(name);
    if (c["kind"] == "lamb") {
      check_case<optim::Lamb>(ref, c, lamb_options(c));
    } else {
      check_case<optim::Lars>(ref, c, lars_options(c));
    }
  }
}

TEST_CASE(
    "per-parameter norms of a shard's slices total to the whole parameters' norms, and factors "
    "scale each parameter's elements") {
  // What each rank of a sharded run computes before the all-reduce sums
  // the squares (the exchange itself: sharding.whole_tensors_{2,3}).
  const auto ref = tk_test::load_reference("trust.json");
  tk_test::ReferenceTensors model(ref);
  FlatParams flat(*model, {bias_group()});
  const auto& g = flat.groups()[0];  // p0, p1, p3, p4 (zero)
  REQUIRE(g.param_lengths == std::vector<int64_t>{96, 72, 60, 5});
  const auto whole = trainkit::detail::parameter_norms(flat, g, {g.data, g.data * 2});
  CHECK(whole[0][3].item<double>() == 0.0);
  auto squares = at::zeros_like(whole);
  std::vector<int64_t> held(4, 0);
  for (int r = 0; r < 3; ++r) {  // slices of 77 or 78 elements: parameters cut apart
    const auto shard = flat.shard(r, 3);
    const auto& mine = shard.groups()[0];
    REQUIRE(mine.param_lengths.size() == 4);
    for (size_t k = 0; k < 4; ++k) held[k] += mine.param_lengths[k];
    squares += trainkit::detail::parameter_norms(shard, mine, {mine.data, mine.data * 2}).square();
  }
  CHECK(held == g.param_lengths);
  CHECK(tk_test::max_rel_error(squares.sqrt(), whole) < 1e-6);
  CHECK(tk_test::max_rel_error(whole[1], whole[0] * 2) < 1e-6);
  // Spread back over the elements: each parameter's value on its own.
  const auto lengths = trainkit::detail::lengths_on_device(g);
  const auto spread = trainkit::detail::spread_over_elements(g, lengths, at::arange(4.0));
  CHECK(spread.numel() == g.numel());
  CHECK(spread[95].item<double>() == 0.0);
  CHECK(spread[96].item<double>() == 1.0);
  CHECK(spread[g.numel() - 1].item<double>() == 3.0);
  // Scaled in place: per parameter's view on CPUs, by the spread factors on
  // GPUs; the two agree to the bit.
  const auto factors = at::rand({4}, at::kDouble);
  auto scaled = at::randn({g.numel()});
  const auto expected =
      scaled * trainkit::detail::spread_over_elements(g, lengths, factors.to(at::kFloat));
  trainkit::detail::scale_per_parameter(g, lengths, scaled, factors);
  CHECK(at::equal(scaled, expected));
}

TEST_CASE("optim::Lamb and Lars: the groups they leave out, and the errors") {
  Mlp mlp;
  SUBCASE("no_trust_ratio: biases and norms, without decay") {
    FlatParams flat(*mlp, {params::no_trust_ratio()});
    optim::Lamb opt(flat, {});
    CHECK(opt.options(1).weight_decay == 0.0);
    size_t left_out = 0;
    for (const auto& g : flat.groups())
      if (g.param_group == 1) left_out += g.params.size();
    CHECK(left_out == 4);  // fc1.bias, norm.weight, norm.bias, fc2.bias
  }
  SUBCASE("a field the optimizer does not have") {
    FlatParams flat(*mlp, {{"b", params::below_2d(), {.momentum = 0.8}}});
    CHECK_THROWS_WITH_AS(optim::Lamb(flat, {}), doctest::Contains("param_groups[0].momentum"),
                         Error);
    FlatParams betas(*mlp, {{"b", params::below_2d(), {.beta1 = 0.8}}});
    CHECK_THROWS_WITH_AS(optim::Lars(betas, {}), doctest::Contains("param_groups[0].beta1"), Error);
  }
  SUBCASE("other optimizers refuse trust_ratio") {
    FlatParams flat(*mlp, {params::no_trust_ratio()});
    CHECK_THROWS_WITH_AS(optim::AdamW(flat, {}), doctest::Contains("param_groups[0].trust_ratio"),
                         Error);
    CHECK_THROWS_WITH_AS(optim::SGD(flat, {}), doctest::Contains("param_groups[0].trust_ratio"),
                         Error);
  }
  SUBCASE("options out of range name themselves") {
    FlatParams flat(*mlp);
    CHECK_THROWS_WITH_AS(optim::Lamb(flat, {.beta2 = 1.0}), doctest::Contains("optim.beta2"),
                         Error);
    CHECK_THROWS_WITH_AS(optim::Lars(flat, {.trust_coefficient = 0.0}),
                         doctest::Contains("optim.trust_coefficient"), Error);
    CHECK_THROWS_WITH_AS(optim::Lars(flat, {.momentum = 0.0, .nesterov = true}),
                         doctest::Contains("optim.nesterov"), Error);
  }
}

TEST_CASE("a Trainer with optim::Lamb or Lars resumes from a checkpoint bitwise") {
  const auto dir = tk_test::temp_dir("trainkit_trust");
  auto gen = data::generator(3);
  const auto x = at::randn({96, 6}, gen);
  const auto y = x.mean(1, true).sin();
  struct SaveAt {
    std::filesystem::path file;
    void on_step_end(TrainState& s) {
      if (s.step == 7) s.save_checkpoint(file);
    }
  };
  const auto check_resumes = [&]<class Opt>(Opt*, const typename Opt::Options& options) {
    const auto train = [&](FitOptions fit, auto... callbacks) {
      Trainer<Opt, sched::WarmupCosine> trainer(Mlp(),
                                                {.optim = options,
                                                 .sched = {.warmup_steps = 2},
                                                 .param_groups = {params::no_trust_ratio()}});
      data::TensorBatches batches({x, y}, {.batch_size = 8, .shuffle = true, .seed = 2});
      fit.epochs = 2;
      trainer.fit(task::Regression{}, batches, fit, callbacks...);
      return trainer.model().parameters();
    };
    const auto unbroken = train({}, SaveAt{dir / "step7.ckpt"});
    const auto resumed = train({.resume_from = dir / "step7.ckpt"});
    REQUIRE(unbroken.size() == resumed.size());
    for (size_t i = 0; i < unbroken.size(); ++i) CHECK(torch::equal(unbroken[i], resumed[i]));
  };
  check_resumes(static_cast<optim::Lamb*>(nullptr), {.lr = 0.01});
  check_resumes(static_cast<optim::Lars*>(nullptr), {.lr = 0.5});
  std::filesystem::remove_all(dir);
}
