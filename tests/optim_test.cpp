// Optimizer parity: trainkit's flat optimizers against torch.optim's own
// trajectories (tests/reference/optim.json) over 120 steps, and against
// LibTorch's torch::optim in the same process.
#include <trainkit/clip.hpp>
#include <trainkit/optim.hpp>

#include "support.hpp"

using namespace trainkit;

namespace {

struct Problem {
  std::vector<at::Tensor> params;
  FlatParams flat;
};

Problem make_problem(const nlohmann::json& ref) {
  Problem p;
  for (auto& t : tk_test::reference_tensors(ref)) p.params.push_back(t.requires_grad_(true));
  p.flat = FlatParams(p.params);
  return p;
}

void set_grads(Problem& p, const std::vector<double>& grads) {
  torch::NoGradGuard no_grad;
  p.flat.groups()[0].grad.copy_(tk_test::to_tensor(grads));
}

at::Tensor flat_values(const Problem& p) {
  return p.flat.groups()[0].data;
}

template <class Opt>
double run_case(const nlohmann::json& ref, const nlohmann::json& c,
                const typename Opt::Options& o) {
  auto p = make_problem(ref);
  Opt opt(p.flat, o);
  const auto grads = ref["grads"];
  const auto checkpoints = ref["checkpoints"].get<std::vector<int64_t>>();
  double worst = 0.0;
  size_t next = 0;
  for (int64_t step = 0; step < int64_t(grads.size()); ++step) {
    if (!c["lr_decay"].is_null()) opt.set_lr(o.lr * std::pow(c["lr_decay"].get<double>(), step));
    set_grads(p, grads[step].get<std::vector<double>>());
    opt.step();
    if (next < checkpoints.size() && step + 1 == checkpoints[next]) {
      const auto expected = tk_test::to_tensor(c["params"][next].get<std::vector<double>>());
      worst = std::max(worst, tk_test::max_rel_error(flat_values(p), expected));
      ++next;
    }
  }
  CHECK(next == checkpoints.size());
  return worst;
}

/// `fused`: the optimizers' option (unset: their default).
double run_named(const nlohmann::json& ref, const std::string& name,
                 std::optional<bool> fused = std::nullopt) {
  const auto& c = ref["cases"][name];
  const auto& k = c["options"];
  auto get = [&](const char* key, double fallback) {
    return k.contains(key) ? k[key].get<double>() : fallback;
  };
  auto flag = [&](const char* key) { return k.contains(key) && k[key].get<bool>(); };
  const auto kind = c["optimizer"].get<std::string>();
  if (kind == "SGD") {
    return run_case<optim::SGD>(ref, c,
                                {.lr = get("lr", 0),
                                 .momentum = get("momentum", 0),
                                 .dampening = get("dampening", 0),
                                 .weight_decay = get("weight_decay", 0),
                                 .nesterov = flag("nesterov"),
                                 .maximize = flag("maximize"),
                                 .fused = fused});
  }
  const double beta1 = k.contains("betas") ? k["betas"][0].get<double>() : 0.9;
  const double beta2 = k.contains("betas") ? k["betas"][1].get<double>() : 0.999;
  if (kind == "Adam") {
    return run_case<optim::Adam>(ref, c,
                                 {.lr = get("lr", 0),
                                  .beta1 = beta1,
                                  .beta2 = beta2,
                                  .eps = get("eps", 1e-8),
                                  .weight_decay = get("weight_decay", 0),
                                  .amsgrad = flag("amsgrad"),
                                  .fused = fused});
  }
  REQUIRE(kind == "AdamW");
  return run_case<optim::AdamW>(ref, c,
                                {.lr = get("lr", 0),
                                 .beta1 = beta1,
                                 .beta2 = beta2,
                                 .eps = get("eps", 1e-8),
                                 .weight_decay = get("weight_decay", 0.01),
                                 .amsgrad = flag("amsgrad"),
                                 .fused = fused});
}

}  // namespace

TEST_CASE("flat optimizers match torch.optim over 120 steps to 1e-6 relative") {
  at::set_num_threads(1);
  const auto ref = tk_test::load_reference("optim.json");
  for (const auto& [name, c] : ref["cases"].items()) {
    CAPTURE(name);
    const double err = run_named(ref, name);
    MESSAGE(name << ": max relative error " << err);
    CHECK(err <= 1e-6);
  }
}

TEST_CASE("fused optimizers are bitwise torch.optim's fused=True (LibTorch >= 2.4)") {
  at::set_num_threads(1);
  const auto ref = tk_test::load_reference("fused_optim.json");
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) {  // options_test checks that the option is refused
    MESSAGE("LibTorch " TORCH_VERSION " has no fused optimizer kernels");
    return;
  }
  for (const auto& [name, c] : ref["cases"].items()) {
    CAPTURE(name);
    CHECK(run_named(ref, name, /*fused=*/true) == 0.0);
  }
  auto p = make_problem(ref);
  CHECK(optim::AdamW(p.flat, {.fused = true}).fused());
  CHECK_FALSE(optim::AdamW(p.flat, {}).fused());  // CPUs: trainkit's kernel by default
  CHECK_FALSE(optim::SGD(p.flat, {}).fused());
}

TEST_CASE("a fused step given found_inf changes nothing, step count included") {
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) return;  // options_test checks the refusal
  const auto ref = tk_test::load_reference("fused_optim.json");
  auto p = make_problem(ref);
  optim::AdamW adamw(p.flat, {.lr = 1e-2, .fused = true});
  optim::SGD sgd(p.flat, {.lr = 1e-2, .momentum = 0.9, .fused = true});
  set_grads(p, ref["grads"][0].get<std::vector<double>>());
  adamw.step();
  sgd.step();
  const auto before = flat_values(p).clone();
  const auto moment = adamw.exp_avg()[0].clone();
  const auto buffer = sgd.momentum_buffers()[0].clone();
  adamw.step_unless_inf(at::ones({1}));
  sgd.step_unless_inf(at::ones({1}));
  CHECK(at::equal(flat_values(p), before));
  CHECK(at::equal(adamw.exp_avg()[0], moment));
  CHECK(at::equal(sgd.momentum_buffers()[0], buffer));
  CHECK(adamw.steps_taken() == 1);
  adamw.step_unless_inf(at::zeros({1}));  // a finite step is an ordinary step
  CHECK(adamw.steps_taken() == 2);
  CHECK_FALSE(at::equal(flat_values(p), before));
  // A checkpoint's step count reaches the device counter.
  optim::AdamW resumed(p.flat, {.lr = 1e-2, .fused = true});
  resumed.load_state_dict(adamw.state_dict());
  CHECK(resumed.steps_taken() == 2);
}

TEST_CASE("optim::Wrap<torch::optim::SGD> follows the same reference") {
  const auto ref = tk_test::load_reference("optim.json");
  const auto& c = ref["cases"]["sgd_momentum"];
  auto p = make_problem(ref);
  optim::Wrap<torch::optim::SGD> opt(
      p.flat,
      {.torch = torch::optim::SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(1e-3)});
  CHECK(opt.lr() == doctest::Approx(0.05));
  const auto grads = ref["grads"];
  for (int64_t step = 0; step < 10; ++step) {
    set_grads(p, grads[step].get<std::vector<double>>());
    opt.step();
  }
  const auto expected = tk_test::to_tensor(c["params"][1].get<std::vector<double>>());
  CHECK(tk_test::max_rel_error(flat_values(p), expected) <= 1e-6);
  opt.set_lr(0.5);
  CHECK(opt.lr() == doctest::Approx(0.5));
}

TEST_CASE("flat AdamW stays within 1 ulp of torch::optim::AdamW after 10 steps") {
  torch::manual_seed(0);
  std::vector<at::Tensor> ours, theirs;
  for (int i = 0; i < 20; ++i) {
    auto t = torch::randn({37 + i});
    ours.push_back(t.clone().requires_grad_(true));
    theirs.push_back(t.clone().requires_grad_(true));
  }
  FlatParams flat(ours);
  optim::AdamW mine(flat, {.lr = 1e-2, .weight_decay = 0.05});
  torch::optim::AdamW ref(theirs, torch::optim::AdamWOptions(1e-2).weight_decay(0.05));
  for (int step = 0; step < 10; ++step) {
    for (size_t i = 0; i < ours.size(); ++i) {
      auto g = torch::randn_like(ours[i]);
      ours[i].mutable_grad().copy_(g);
      theirs[i].mutable_grad() = g.clone();
    }
    mine.step();
    ref.step();
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    // distance in units in the last place, via the float bit patterns
    const auto a = ours[i].detach().view(at::kInt).to(at::kLong);
    const auto b = theirs[i].detach().view(at::kInt).to(at::kLong);
    CHECK((a - b).abs().max().item<int64_t>() <= 1);
  }
}

TEST_CASE("flat SGD with momentum switched on later starts its buffer from the gradient") {
  auto w = torch::ones({4}).requires_grad_(true);
  FlatParams flat(std::vector<at::Tensor>{w});
  optim::SGD sgd(flat, {.lr = 0.1});
  w.mutable_grad().fill_(1.0);
  sgd.step();  // plain SGD: 1 - 0.1
  sgd.set_momentum(0.9);
  sgd.step();  // buffer = grad: 0.9 - 0.1
  sgd.step();  // buffer = 0.9 * 1 + 1: 0.8 - 0.19
  CHECK(w[0].item<double>() == doctest::Approx(0.61).epsilon(1e-6));
}

TEST_CASE("flat parameters: the model's tensors are views of one buffer") {
  auto a = torch::randn({3, 2}).requires_grad_(true);
  auto b = torch::randn({5}).requires_grad_(true);
  auto frozen = torch::randn({2});
  const auto a0 = a.detach().clone();
  FlatParams flat(std::vector<at::Tensor>{a, b, frozen, a});  // frozen skipped, a once
  REQUIRE(flat.groups().size() == 1);
  CHECK(flat.numel() == 11);
  CHECK(torch::equal(a.detach(), a0));
  auto& g = flat.groups()[0];
  CHECK(a.data_ptr<float>() == g.data.data_ptr<float>());
  CHECK(b.data_ptr<float>() == g.data.data_ptr<float>() + 6);
  (a.sum() * 2 + b.sum()).backward();
  CHECK(g.grad.narrow(0, 0, 6).eq(2).all().item<bool>());
  CHECK(g.grad.narrow(0, 6, 5).eq(1).all().item<bool>());
  CHECK(a.grad().data_ptr<float>() == g.grad.data_ptr<float>());  // accumulated in place
  flat.zero_grad();
  CHECK(a.grad().abs().sum().item<double>() == 0.0);
}

TEST_CASE("clip::Norm: total norm and scaling within 1e-6 of a float64 computation") {
  // (LibTorch 1.13's own clip_grad_norm_ is off by ~1e-5 on this input: one
  // float32 norm over a million elements.)
  torch::manual_seed(3);
  std::vector<at::Tensor> params, originals;
  for (int64_t n : {3, 4096, 70000, 1000003, 5}) {
    params.push_back(torch::zeros({n}).requires_grad_(true));
  }
  FlatParams flat(params);
  double reference = 0.0;
  for (size_t i = 0; i < params.size(); ++i) {
    auto g = torch::randn_like(params[i]) * double(i + 1);
    params[i].mutable_grad().copy_(g);
    originals.push_back(g.to(at::kDouble));
    reference += originals.back().pow(2).sum().item<double>();
  }
  reference = std::sqrt(reference);
  clip::Norm norm({.max_norm = 10.0});
  norm.clip(flat);
  const double ours = norm.last_norm().item<double>();
  CHECK(std::abs(ours - reference) / reference <= 1e-6);
  const double coef = 10.0 / (reference + 1e-6);
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(tk_test::max_rel_error(params[i].grad(), originals[i] * coef) <= 1e-6);
  }
  // below the limit nothing changes; the inf-norm is the largest magnitude
  const auto before = flat.groups()[0].grad.clone();
  clip::Norm loose({.max_norm = 1e9});
  loose.clip(flat);
  CHECK(torch::equal(flat.groups()[0].grad, before));
  clip::Norm inf_norm({.max_norm = 1e9, .norm_type = INFINITY});
  inf_norm.clip(flat);
  CHECK(inf_norm.last_norm().item<double>() == before.abs().max().item<double>());
}

TEST_CASE("clip::Value clamps every gradient element") {
  auto w = torch::zeros({6}).requires_grad_(true);
  FlatParams flat(std::vector<at::Tensor>{w});
  w.mutable_grad().copy_(torch::tensor({-3.f, -0.5f, 0.f, 0.2f, 0.7f, 9.f}));
  clip::Value({.clip_value = 0.5}).clip(flat);
  CHECK(torch::equal(w.grad(), torch::tensor({-0.5f, -0.5f, 0.f, 0.2f, 0.5f, 0.5f})));
}
