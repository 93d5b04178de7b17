// Scheduler parity: every schedule against torch.optim.lr_scheduler's own
// learning rates (and momenta) for 121 steps (tests/reference/sched.json).
#include <trainkit/concepts.hpp>
#include <trainkit/sched.hpp>

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
