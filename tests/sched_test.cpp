// Scheduler parity: every schedule against torch.optim.lr_scheduler's own
// learning rates (and momenta) for 121 steps (tests/reference/sched.json);
// ReduceLROnPlateau against PyTorch's on planted metric sequences (plateau.json).
#include <trainkit/concepts.hpp>
#include <trainkit/sched.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "support.hpp"

using namespace trainkit;

namespace {

template <class S>
void check_against(const std::string& name, S schedule, double base_lr, bool momentum = false) {
  const auto ref = tk_test::load_reference("sched.json");
  const auto& c = ref["cases"][name];
  const auto lrs = c["lr"].get<std::vector<double>>();
  const auto moms = c["momentum"].get<std::vector<double>>();
  schedule.start({base_lr, ref["steps"].get<int64_t>()});
  double worst = 0.0;
  for (size_t t = 0; t < lrs.size(); ++t) {
    const double lr = schedule.lr_at(int64_t(t));
    worst = std::max(worst, std::abs(lr - lrs[t]) / std::max(std::abs(lrs[t]), 1e-12));
    if constexpr (HasMomentumAt<S>) {
      if (!momentum) continue;
      const auto m = schedule.momentum_at(int64_t(t));
      REQUIRE(m.has_value());
      CHECK(*m == doctest::Approx(moms[t]).epsilon(1e-9));
    }
  }
  MESSAGE(name << ": max relative lr error " << worst);
  CHECK(worst <= 1e-6);
}

}  // namespace

TEST_CASE("schedules match torch.optim.lr_scheduler") {
  check_against("constant", sched::Constant({.factor = 0.5, .total_iters = 10}), 0.1);
  check_against("step", sched::Step({.step_size = 7, .gamma = 0.5}), 0.1);
  check_against("multi_step", sched::MultiStep({.milestones = {25, 10, 60}, .gamma = 0.3}), 0.1);
  check_against("exponential", sched::Exponential({.gamma = 0.97}), 0.1);
  check_against("cosine", sched::Cosine({.t_max = 50, .eta_min = 1e-4}), 0.1);
  check_against("warmup_cosine",
                sched::WarmupCosine({.warmup_steps = 10, .start_factor = 0.01, .eta_min = 1e-5}),
                0.1);
  check_against("linear_warmup",
                sched::Linear({.start_factor = 0.25, .end_factor = 1.0, .total_iters = 40}), 0.1);
  check_against("linear_decay", sched::Linear({.start_factor = 1.0, .end_factor = 0.05}), 0.1);
  check_against("one_cycle", sched::OneCycle({.max_lr = 0.5}), 0.1, true);
  check_against("one_cycle_linear_three_phase",
                sched::OneCycle({.max_lr = 0.3,
                                 .pct_start = 0.25,
                                 .anneal = sched::OneCycle::Anneal::Linear,
                                 .div_factor = 10.0,
                                 .final_div_factor = 100.0,
                                 .three_phase = true,
                                 .base_momentum = 0.8,
                                 .max_momentum = 0.9}),
                0.1, true);
  check_against("one_cycle_adam", sched::OneCycle({.max_lr = 1e-2}), 1e-3, true);
}

TEST_CASE("WarmupCosine past total_steps holds eta_min as nanoGPT does, or with periodic rises again") {
  // nanoGPT's train.py get_lr(it), its warm-up being start_factor = 1 / (warmup + 1)
  const double lr = 6e-4, min_lr = 6e-5;
  const int64_t warmup = 20, decay_iters = 200;
  const auto get_lr = [&](int64_t it) {
    if (it < warmup) return lr * double(it + 1) / double(warmup + 1);
    if (it > decay_iters) return min_lr;
    const double ratio = double(it - warmup) / double(decay_iters - warmup);
    return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
  };
  sched::WarmupCosine held({.warmup_steps = warmup,
                            .start_factor = 1.0 / double(warmup + 1),
                            .total_steps = decay_iters,
                            .eta_min = min_lr});
  sched::WarmupCosine periodic({.warmup_steps = warmup,
                                .start_factor = 1.0 / double(warmup + 1),
                                .total_steps = decay_iters,
                                .eta_min = min_lr,
                                .periodic = true});
  held.start({lr, 1000});
  periodic.start({lr, 1000});
  for (int64_t it = 0; it < 400; ++it) {
    CAPTURE(it);
    CHECK(held.lr_at(it) == doctest::Approx(get_lr(it)).epsilon(1e-12));
    if (it <= decay_iters) CHECK(periodic.lr_at(it) == held.lr_at(it));
  }
  // CosineAnnealingLR's closed form goes on past T_max: back up towards the base rate
  CHECK(periodic.lr_at(decay_iters + 90) > min_lr + 0.4 * (lr - min_lr));
  CHECK(periodic.lr_at(2 * decay_iters - warmup) == doctest::Approx(lr));
}

TEST_CASE("a schedule that needs a length says so when none can be inferred") {
  sched::OneCycle one_cycle({.max_lr = 0.1});
  CHECK_THROWS_WITH_AS(one_cycle.start({0.1, -1}),
                       doctest::Contains("option `sched.total_steps` = 0 is invalid"), Error);
  sched::Cosine cosine;
  CHECK_THROWS_WITH_AS(cosine.start({0.1, -1}), doctest::Contains("sched.t_max"), Error);
  sched::Cosine explicit_length({.t_max = 10});
  CHECK_NOTHROW(explicit_length.start({0.1, -1}));
  CHECK(explicit_length.lr_at(10) == doctest::Approx(0.0));
}

TEST_CASE("OneCycle with max_lr = 0 peaks at the optimizer's lr") {
  sched::OneCycle s;
  s.start({0.02, 100});
  CHECK(s.lr_at(0) == doctest::Approx(0.02 / 25));
  CHECK(s.lr_at(29) == doctest::Approx(0.02));
  CHECK(s.lr_at(1000) == doctest::Approx(s.lr_at(100)));  // clamped, PyTorch would raise
}

namespace {

sched::ReduceLROnPlateau plateau_from(const nlohmann::json& j) {
  sched::ReduceLROnPlateau::Options o;
  using P = sched::ReduceLROnPlateau;
  if (j.contains("mode")) o.mode = j["mode"] == "max" ? P::Mode::Max : P::Mode::Min;
  if (j.contains("factor")) o.factor = j["factor"];
  if (j.contains("patience")) o.patience = j["patience"];
  if (j.contains("threshold")) o.threshold = j["threshold"];
  if (j.contains("threshold_mode"))
    o.threshold_mode = j["threshold_mode"] == "abs" ? P::Threshold::Abs : P::Threshold::Rel;
  if (j.contains("cooldown")) o.cooldown = j["cooldown"];
  if (j.contains("min_lr")) o.min_lr = j["min_lr"];
  if (j.contains("eps")) o.eps = j["eps"];
  return P(o);
}

double metric_of(const nlohmann::json& v) {
  return v.is_string() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

}  // namespace

TEST_CASE("ReduceLROnPlateau matches torch.optim.lr_scheduler.ReduceLROnPlateau epoch by epoch") {
  const auto ref = tk_test::load_reference("plateau.json");
  int reductions = 0;
  for (const auto& c : ref["cases"]) {
    CAPTURE(c["name"].get<std::string>());
    auto s = plateau_from(c["options"]);
    s.start({c["base_lr"].get<double>(), -1});
    const auto lrs = c["lrs"].get<std::vector<double>>();
    for (size_t i = 0; i < lrs.size(); ++i) {
      CAPTURE(i);
      const double before = s.lr();
      s.observe(metric_of(c["metrics"][i]));
      CHECK(s.lr_at(1000) == lrs[i]);  // the same double arithmetic: exact
      reductions += s.lr() < before;
    }
  }
  CHECK(reductions > 20);  // the planted sequences do make it reduce
}

TEST_CASE("ReduceLROnPlateau: state dict round trip, warm-up, and its errors") {
  const auto ref = tk_test::load_reference("plateau.json");
  const auto& c = ref["cases"][2];  // cooldown and min_lr
  auto a = plateau_from(c["options"]), b = plateau_from(c["options"]);
  a.start({0.1, -1});
  b.start({0.1, -1});
  const auto& metrics = c["metrics"];
  for (size_t i = 0; i < 9; ++i) a.observe(metric_of(metrics[i]));
  b.load_state_dict(a.state_dict());  // mid-cooldown
  for (size_t i = 9; i < metrics.size(); ++i) {
    a.observe(metric_of(metrics[i]));
    b.observe(metric_of(metrics[i]));
    CHECK(a.lr() == b.lr());
    CHECK(a.bad_epochs() == b.bad_epochs());
  }
  CHECK(b.lr() == c["lrs"].back().get<double>());

  sched::ReduceLROnPlateau warm({.warmup_steps = 4});
  warm.start({0.2, -1});
  CHECK(warm.lr_at(0) == doctest::Approx(0.05));
  CHECK(warm.lr_at(3) == doctest::Approx(0.2));
  CHECK(warm.lr_at(100) == 0.2);

  CHECK_THROWS_WITH_AS(sched::ReduceLROnPlateau({.factor = 1.0}),
                       "trainkit: option `sched.factor` = 1 is invalid; accepted: a number in "
                       "[0, 1)",
                       Error);
  sched::ReduceLROnPlateau named({.metric = "val_accuracy"});
  named.start({0.1, -1});
  CHECK_THROWS_WITH_AS(named.observe(std::map<std::string, double>{{"train_loss", 1.0}}),
                       "trainkit: option `sched.metric` = \"val_accuracy\" is invalid; accepted: "
                       "one of this epoch's metrics (train_loss); val_* metrics need "
                       "FitOptions::val_data",
                       Error);
}
