// The GP sampler: its regressor and acquisition against closed forms written
// out here with scalars, the hyperparameter fit, reproducibility, and that
// it beats random search on Branin. The only test of tune that includes
// LibTorch: keep it in this one file (each such file costs a minute to build).
//
// LibTorch before doctest: this LibTorch's glog defines its own CHECK (an
// abort, not a test assertion), and the later definition is the one used.
#include <trainkit/tune/samplers/gp.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <vector>

#include <trainkit/tune/pruners/none.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/study.hpp>

#include "planted_history.hpp"

using namespace trainkit::tune;
using trainkit::tune::detail::GaussianProcess;
using trainkit::tune::detail::KernelParams;

namespace {

// Matern 5/2 with lengthscale l and output scale s at distance r.
double matern(double r, double l, double s) {
  const double a = std::sqrt(5.0) * r / l;
  return s * (1 + a + a * a / 3) * std::exp(-a);
}

double normal_cdf(double z) {
  return 0.5 * (1 + std::erf(z / std::sqrt(2.0)));
}
double normal_pdf(double z) {
  return std::exp(-0.5 * z * z) / std::sqrt(2 * std::numbers::pi);
}

double branin(double x1, double x2) {
  const double pi = std::numbers::pi;
  const double b = 5.1 / (4 * pi * pi), c = 5 / pi, t = 1 / (8 * pi);
  return std::pow(x2 - b * x1 * x1 + c * x1 - 6, 2) + 10 * (1 - t) * std::cos(x1) + 10;
}

double branin_objective(Trial& t) {
  return branin(t.suggest_float("x1", -5, 10), t.suggest_float("x2", 0, 15));
}

template <class S>
std::vector<FrozenTrial> run_study(S sampler, int64_t n_trials,
                                   const std::function<double(Trial&)>& objective,
                                   Direction direction = Direction::Minimize) {
  Study study(std::make_shared<InMemoryStorage>(), {.name = "gp", .direction = direction},
              std::move(sampler), pruner::None{});
  study.optimize(objective, {.n_trials = n_trials, .log = nullptr});
  return study.trials();
}

double best_value(const std::vector<FrozenTrial>& trials) {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& t : trials) best = std::min(best, *t.value);
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

torch::Tensor column(std::vector<double> v) {
  const auto n = static_cast<int64_t>(v.size());
  return torch::tensor(v, torch::kDouble).reshape({n, 1});
}

}  // namespace

TEST_CASE("gp: posterior with fixed hyperparameters matches the closed form") {
  // Two points in 1-d: K^-1 of a 2x2 matrix by hand.
  const double x1 = 0.1, x2 = 0.6, y1 = 0.5, y2 = -1.0, xs = 0.3;
  const double l = 0.5, s = 1.5, noise = 0.01;
  GaussianProcess gp(column({x1, x2}), torch::tensor({y1, y2}, torch::kDouble), {false},
                     KernelParams{{1 / (l * l)}, s, noise});

  const double a = s + noise, k12 = matern(x2 - x1, l, s), det = a * a - k12 * k12;
  const double i11 = a / det, i12 = -k12 / det;  // K^-1 = [[i11, i12], [i12, i11]]
  const double k1 = matern(xs - x1, l, s), k2 = matern(x2 - xs, l, s);
  const double w1 = k1 * i11 + k2 * i12, w2 = k1 * i12 + k2 * i11;  // k* K^-1
  const double mean = w1 * y1 + w2 * y2;
  const double var = s - (w1 * k1 + w2 * k2);

  CHECK(gp.kernel(column({x1}), column({x2})).item<double>() ==
        doctest::Approx(k12).epsilon(1e-12));
  const auto [m, v] = gp.posterior(torch::tensor({xs}, torch::kDouble));
  CHECK(m.dim() == 0);
  CHECK(m.item<double>() == doctest::Approx(mean).epsilon(1e-10));
  CHECK(v.item<double>() == doctest::Approx(var).epsilon(1e-10));

  // A batch gives the same, row by row; far away the prior comes back.
  const auto [mb, vb] = gp.posterior(column({xs, 40.0}));
  REQUIRE(mb.size(0) == 2);
  CHECK(mb[0].item<double>() == doctest::Approx(mean).epsilon(1e-10));
  CHECK(vb[0].item<double>() == doctest::Approx(var).epsilon(1e-10));
  CHECK(mb[1].item<double>() == doctest::Approx(0.0).epsilon(1e-12));
  CHECK(vb[1].item<double>() == doctest::Approx(s).epsilon(1e-12));
}

TEST_CASE("gp: autograd through the posterior matches finite differences") {
  // The Matern kernel's derivative is written out by hand (gp.hpp); check it,
  // at a training point too, where autograd through sqrt would give nan.
  const auto x = torch::tensor({0.1, 0.2, 0.6, 0.9, 0.4, 0.3}, torch::kDouble).reshape({3, 2});
  GaussianProcess gp(x, torch::tensor({0.5, -1.0, 0.3}, torch::kDouble), {false, false},
                     KernelParams{{4.0, 9.0}, 1.3, 0.05});
  for (const auto& point : {std::vector<double>{0.35, 0.55}, std::vector<double>{0.1, 0.2}}) {
    const auto p = torch::tensor(point, torch::kDouble).requires_grad_(true);
    auto [m, v] = gp.posterior(p);
    (m + 0.5 * v).backward();
    const auto grad = p.grad();
    for (int64_t j = 0; j < 2; ++j) {
      const double h = 1e-6;
      auto f = [&](double dx) {
        auto q = torch::tensor(point, torch::kDouble);
        q[j] += dx;
        const auto [mq, vq] = gp.posterior(q);
        return (mq + 0.5 * vq).item<double>();
      };
      CAPTURE(j);
      CHECK(std::isfinite(grad[j].item<double>()));
      CHECK(grad[j].item<double>() == doctest::Approx((f(h) - f(-h)) / (2 * h)).epsilon(1e-5));
    }
  }
}

TEST_CASE("gp: with almost no noise the posterior interpolates the data") {
  const std::vector<double> x = {0.0, 0.4, 0.9}, y = {1.0, -0.5, 0.25};
  GaussianProcess gp(column(x), torch::tensor(y, torch::kDouble), {false},
                     KernelParams{{9.0}, 1.0, 1e-9});
  const auto [m, v] = gp.posterior(column(x));
  for (int64_t i = 0; i < 3; ++i) {
    CHECK(m[i].item<double>() == doctest::Approx(y[static_cast<size_t>(i)]).epsilon(1e-6));
    CHECK(v[i].item<double>() == doctest::Approx(0.0).epsilon(1e-6));
  }
}

TEST_CASE("gp: a categorical column adds its lengthscale term once when the choices differ") {
  // Columns: a float, then a categorical (choice indices 0 and 2).
  const auto x = torch::tensor({0.2, 0.0, 0.7, 2.0}, torch::kDouble).reshape({2, 2});
  GaussianProcess gp(x, torch::tensor({0.0, 1.0}, torch::kDouble), {false, true},
                     KernelParams{{4.0, 0.5}, 2.0, 0.1});
  // d = isl_float * 0.5^2 + isl_cat * 1: a distance sqrt(d) at lengthscale 1.
  const double d = 4.0 * 0.25 + 0.5 * 1;
  CHECK(gp.kernel(x[0].unsqueeze(0), x[1].unsqueeze(0)).item<double>() ==
        doctest::Approx(matern(std::sqrt(d), 1, 2.0)).epsilon(1e-12));
  const auto same = torch::tensor({0.7, 0.0}, torch::kDouble).reshape({1, 2});
  CHECK(gp.kernel(same, x[1].unsqueeze(0)).item<double>() ==
        doctest::Approx(matern(std::sqrt(0.5), 1, 2.0)).epsilon(1e-12));
}

TEST_CASE("gp: expected improvement and its log against the closed form") {
  using trainkit::tune::detail::expected_improvement;
  using trainkit::tune::detail::log_ei;
  const double mu = 0.3, sigma = 0.7, f0 = 0.5;
  const double z = (mu - f0) / sigma;
  const double ei = sigma * (z * normal_cdf(z) + normal_pdf(z));
  const auto mean = torch::tensor(mu, torch::kDouble),
             var = torch::tensor(sigma * sigma, torch::kDouble);
  CHECK(expected_improvement(mean, var, f0).item<double>() == doctest::Approx(ei).epsilon(1e-12));
  CHECK(log_ei(mean, var, f0).item<double>() == doctest::Approx(std::log(ei)).epsilon(1e-12));

  // Far below the incumbent EI underflows a double; log EI follows the
  // asymptotic series z Phi(z) + phi(z) = phi(z) (1/z^2 - 3/z^4 + 15/z^6 - ...).
  for (double zz : {-30.0, -60.0}) {
    const double series =
        1 / (zz * zz) - 3 / std::pow(zz, 4) + 15 / std::pow(zz, 6) - 105 / std::pow(zz, 8);
    const double expected =
        -0.5 * zz * zz - std::log(std::sqrt(2 * std::numbers::pi)) + std::log(series);
    const auto got = trainkit::tune::detail::standard_log_ei(torch::tensor(zz, torch::kDouble));
    CHECK(got.item<double>() == doctest::Approx(expected).epsilon(1e-9));
  }
  // Both sides of the switch at z = -25 agree, and gradients stay finite.
  const auto zs = torch::tensor({-25.0 - 1e-9, -25.0 + 1e-9, -40.0, 0.0, 40.0}, torch::kDouble)
                      .requires_grad_(true);
  const auto out = trainkit::tune::detail::standard_log_ei(zs);
  CHECK(out[0].item<double>() == doctest::Approx(out[1].item<double>()).epsilon(1e-6));
  CHECK(out[4].item<double>() == doctest::Approx(std::log(40.0)).epsilon(1e-12));
  out.sum().backward();
  CHECK(torch::isfinite(zs.grad()).all().item<bool>());
  // d/dz log EI(z) = Phi(z) / EI(z) at z = 0.
  CHECK(zs.grad()[3].item<double>() == doctest::Approx(0.5 / normal_pdf(0.0)).epsilon(1e-10));
}

TEST_CASE("gp: fitting the hyperparameters raises the marginal likelihood") {
  std::vector<double> x, y;
  for (int i = 0; i < 12; ++i) {
    x.push_back(i / 11.0);
    y.push_back(std::sin(8 * x.back()));
  }
  GaussianProcess gp(column(x), torch::tensor(y, torch::kDouble));
  const double lml0 = gp.log_marginal_likelihood(), prior0 = gp.log_prior();
  gp.fit();
  const double lml1 = gp.log_marginal_likelihood(), prior1 = gp.log_prior();
  CHECK(lml1 + prior1 > lml0 + prior0);
  CHECK(lml1 > lml0 + 1);
  // A smooth, noiseless function: a small noise and a lengthscale well below 1.
  CHECK(gp.params().noise_var < 0.05);
  CHECK(gp.lengthscales()[0] < 0.5);
  const auto [m, v] = gp.posterior(column({0.5 / 11}));
  CHECK(m.item<double>() == doctest::Approx(std::sin(8 * 0.5 / 11)).epsilon(0.05));

  GaussianProcess fixed(column(x), torch::tensor(y, torch::kDouble));
  fixed.fit({.minimum_noise = 1e-6, .deterministic_objective = true});
  CHECK(fixed.params().noise_var == 1e-6);
  CHECK(fixed.log_marginal_likelihood() > lml0);
}

TEST_CASE(
    "gp: a refit from its own result stays there, and repeated points fit at the noise floor") {
  // Each point twice, as when a converged study suggests its incumbent
  // again: the covariance is singular but for the noise, and a noiseless
  // function's fit still takes the noise down near its floor (1e-8).
  std::vector<double> x, y;
  for (int i = 0; i < 24; ++i) {
    x.push_back((i / 2) / 11.0);
    y.push_back(std::sin(8 * x.back()));
  }
  GaussianProcess gp(column(x), torch::tensor(y, torch::kDouble));
  gp.fit();
  CHECK(gp.params().noise_var < 1e-7);
  const double fitted = gp.log_marginal_likelihood() + gp.log_prior();
  const auto lengthscale = gp.lengthscales()[0];
  // Again, from where that fit ended. A noise within 1% of its floor
  // restarts at 1.01x the floor (as Optuna's), so the objective may dip.
  gp.fit();
  CHECK(gp.params().noise_var < 1e-7);
  CHECK(gp.log_marginal_likelihood() + gp.log_prior() == doctest::Approx(fitted).epsilon(1e-3));
  CHECK(gp.lengthscales()[0] == doctest::Approx(lengthscale).epsilon(1e-3));
}

TEST_CASE("gp: parameters without a Cholesky factor throw and change nothing") {
  GaussianProcess gp(column({0.1, 0.5, 0.9}), torch::tensor({0.0, 1.0, 0.5}, torch::kDouble), {},
                     KernelParams{{4.0}, 1.0, 0.01});
  const auto [m0, v0] = gp.posterior(column({0.3}));
  const double lml0 = gp.log_marginal_likelihood();
  // Every parameter differs; the diagonal, 2 - 3, is negative.
  CHECK_THROWS(gp.set_params(KernelParams{{1.0}, 2.0, -3.0}));
  CHECK(gp.params().noise_var == 0.01);
  CHECK(gp.params().kernel_scale == 1.0);
  CHECK(gp.lengthscales()[0] == 0.5);
  CHECK(gp.log_marginal_likelihood() == lml0);
  const auto [m1, v1] = gp.posterior(column({0.3}));
  CHECK(m1.item<double>() == m0.item<double>());
  CHECK(v1.item<double>() == v0.item<double>());
}

TEST_CASE("gp: a seeded study replays exactly, and the GP takes over after startup") {
  const auto a = run_study(sampler::Gp({.seed = 3}), 25, branin_objective);
  const auto b = run_study(sampler::Gp({.seed = 3}), 25, branin_objective);
  const auto r = run_study(sampler::Random({.seed = 3}), 25, branin_objective);
  REQUIRE(a.size() == 25);
  REQUIRE(b.size() == 25);
  for (size_t k = 0; k < a.size(); ++k) {
    CAPTURE(k);
    CHECK(a[k].param<double>("x1") == b[k].param<double>("x1"));
    CHECK(a[k].param<double>("x2") == b[k].param<double>("x2"));
    CHECK(*a[k].value == *b[k].value);
    // The first 10 are the random sampler's draws; then the GP's.
    CHECK((a[k].param<double>("x1") == r[k].param<double>("x1")) == (k < 10));
  }
}

TEST_CASE("gp: one worker alone - the constant liar changes nothing") {
  const auto liar =
      run_study(sampler::Gp({.seed = 4, .constant_liar = true}), 14, branin_objective);
  const auto plain =
      run_study(sampler::Gp({.seed = 4, .constant_liar = false}), 14, branin_objective);
  REQUIRE(liar.size() == plain.size());
  for (size_t k = 0; k < liar.size(); ++k) {
    CAPTURE(k);
    CHECK(liar[k].param<double>("x1") == plain[k].param<double>("x1"));
    CHECK(liar[k].param<double>("x2") == plain[k].param<double>("x2"));
  }
}

namespace {

// 12 complete trials (stride 5), three at the optimum (0.9, 1.0, 1.1) in
// state `others`, then the trial being sampled: its proposals for 20 seeds
// with options `o`.
std::vector<double> proposals(TrialState others, sampler::GpOptions o) {
  const auto trials = tk_tune_test::history_with_three_at_the_optimum(12, 5, others);
  const FrozenTrial& me = trials.back();
  const StudyView view{Direction::Minimize, trials};
  std::vector<double> out;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    o.seed = seed;
    out.push_back(sampler::Gp(o).sample_relative(view, me).at("x"));
  }
  return out;
}

/// How many of `xs` lie within `radius` of one of `points`.
int near(const std::vector<double>& xs, std::vector<double> points, double radius) {
  return static_cast<int>(std::count_if(xs.begin(), xs.end(), [&](double x) {
    return std::any_of(points.begin(), points.end(),
                       [&](double p) { return std::abs(x - p) < radius; });
  }));
}

const std::vector<double> others_at{0.9, 1.0, 1.1};

}  // namespace

TEST_CASE("gp: the constant liar steers a worker off other workers' running points") {
  // Without the liar every proposal is 1.0, a running trial's point. With
  // it, none is within 0.01 of one (believed as good as the best trial, they
  // promise no improvement), and they stay near the optimum, as Optuna 4.9's
  // GPSampler's do (1.080 to 1.084 on this history).
  const auto with_liar = proposals(TrialState::Running, {.constant_liar = true}),
             without = proposals(TrialState::Running, {.constant_liar = false});
  MESSAGE("proposals within 0.01 of a running point: "
          << near(with_liar, others_at, 0.01) << " with the liar, "
          << near(without, others_at, 0.01) << " without");
  CHECK(near(without, others_at, 0.01) == 20);
  CHECK(near(with_liar, others_at, 0.01) == 0);
  CHECK(near(with_liar, {1.0}, 0.25) == 20);
}

TEST_CASE("gp: failed_as_worst steers away from where trials failed") {
  const int counted = near(proposals(TrialState::Fail, {.failed_as_worst = true}), {1.0}, 0.25),
            ignored = near(proposals(TrialState::Fail, {.failed_as_worst = false}), {1.0}, 0.25);
  MESSAGE("proposals near the failed points: " << counted << " counting them, " << ignored
                                               << " ignoring them");
  CHECK(counted < ignored / 2);
}

TEST_CASE("gp: beats random search on Branin") {
  std::vector<double> gp_best, random_best;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    gp_best.push_back(best_value(run_study(sampler::Gp({.seed = seed}), 30, branin_objective)));
    random_best.push_back(
        best_value(run_study(sampler::Random({.seed = seed}), 30, branin_objective)));
  }
  MESSAGE("Branin best after 30 trials, median of 5 seeds: gp "
          << median(gp_best) << ", random " << median(random_best) << " (optimum 0.397887)");
  CHECK(median(gp_best) < median(random_best));
  CHECK(median(gp_best) < 1.0);
}

TEST_CASE("gp: mixed spaces, maximisation and conditional parameters") {
  // log int, stepped float, categorical; "extra" exists only on one branch so
  // it stays outside the relative space and is drawn at random.
  const auto objective = [](Trial& t) {
    const auto n = t.suggest_int("n", 1, 64, {.log = true});
    const auto lr = t.suggest_float("lr", 0.0, 1.0, {.step = 0.25});
    const auto kind = t.suggest_categorical("kind", {"a", "b", "c"});
    double v = -std::pow(std::log2(static_cast<double>(n)) - 4, 2) - 4 * std::pow(lr - 0.5, 2);
    if (kind == "b") v += 1;
    if (kind == "c") v += t.suggest_float("extra", 0, 1);
    return v;
  };
  const auto trials = run_study(sampler::Gp({.seed = 1, .n_startup_trials = 5}), 16, objective,
                                Direction::Maximize);
  REQUIRE(trials.size() == 16);
  double best = -1e9;
  for (const auto& t : trials) {
    CHECK(t.state == TrialState::Complete);
    for (const auto& [name, p] : t.params) CHECK(contains(p.distribution, p.internal));
    best = std::max(best, *t.value);
  }
  CHECK(best > -1.5);
}

TEST_CASE("gp: group fits each branch's parameters with a GP of its own") {
  // Branch a: (x - 0.3)^2 over x; branch b: a constant over y. Without group
  // only the branch is modelled and x is drawn at random.
  const FloatDistribution unit{0, 1, false, std::nullopt};
  const CategoricalDistribution branch{{"a", "b"}};
  std::vector<FrozenTrial> trials;
  for (int64_t k = 0; k < 16; ++k) {
    FrozenTrial t;
    t.id = t.number = k;
    t.state = TrialState::Complete;
    const bool in_a = k % 4 != 3;
    t.params["branch"] = Param{branch, in_a ? 0.0 : 1.0};
    const double x = static_cast<double>((k * 7) % 16) / 15;
    t.params[in_a ? "x" : "y"] = Param{unit, x};
    t.value = in_a ? (x - 0.3) * (x - 0.3) : 1.0;
    trials.push_back(t);
  }
  FrozenTrial me;
  me.id = me.number = 16;
  trials.push_back(me);
  const StudyView view{Direction::Minimize, trials};
  CHECK(sampler::Gp({.n_startup_trials = 5}).sample_relative(view, me).size() == 1);
  int near = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const auto r =
        sampler::Gp({.seed = seed, .n_startup_trials = 5, .group = true}).sample_relative(view, me);
    CHECK(r.size() == 3);  // branch, x, y
    near += std::abs(r.at("x") - 0.3) < 0.1;
  }
  MESSAGE("x within 0.1 of branch a's optimum: " << near << " of 10 (at random: about 2)");
  CHECK(near >= 8);
}

TEST_CASE("gp: options are checked") {
  CHECK_THROWS_AS(sampler::Gp({.n_candidates = 0}), trainkit::Error);
  CHECK_THROWS_AS(sampler::Gp({.n_startup_trials = -1}), trainkit::Error);
  CHECK_THROWS_AS(sampler::Gp({.minimum_noise = 0}), trainkit::Error);
}
