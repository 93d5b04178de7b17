#pragma once
// Gaussian-process Bayesian optimisation, after Optuna 4's GPSampler: once
// `n_startup_trials` trials are complete, a GP (Matern 5/2, one lengthscale
// per parameter, Hamming distance for categoricals) is fitted to the
// complete trials of the intersection search space, and the next trial's
// parameters are those that maximise log expected improvement over the best
// value so far. LibTorch does the linear algebra and the gradients (double
// precision, CPU; the model is gp/gaussian_process.hpp). Every random draw
// comes from detail::Rng, never from torch's global generator, so a seeded
// study replays exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// LibTorch first (gp/gaussian_process.hpp).
#include "trainkit/tune/samplers/gp/gaussian_process.hpp"

#include "trainkit/tune/detail/rng.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/samplers/detail/model_space.hpp"
#include "trainkit/tune/samplers/random.hpp"

namespace trainkit::tune {

namespace detail {

/// One parameter of the GP's search space and its map to the unit box: a
/// numerical one's ModelAxis scaled to [0, 1]; a categorical as its choice
/// index, unnormalised (only equality matters).
struct GpAxis : ModelAxis {
  const Distribution* dist = nullptr;
  bool categorical = false;
  bool discrete = false;
  int64_t n_choices = 0;

  explicit GpAxis(const Distribution& d) : dist(&d) {
    if (const auto* c = std::get_if<CategoricalDistribution>(&d)) {
      categorical = true;
      n_choices = static_cast<int64_t>(c->choices.size());
      return;
    }
    static_cast<ModelAxis&>(*this) = ModelAxis(d);
    discrete = q > 0 || std::holds_alternative<IntDistribution>(d);
  }
  double normalize(double internal) const {
    if (categorical) return internal;
    const double t = to_model(internal);
    return high > low ? (t - low) / (high - low) : 0.5;
  }
  /// The value `dist` takes nearest to unit-box coordinate x.
  double to_internal(double x) const {
    if (categorical) return std::clamp(std::round(x), 0.0, static_cast<double>(n_choices - 1));
    const double t = low + std::clamp(x, 0.0, 1.0) * (high - low);
    return snap(*dist, log ? std::exp(t) : t);
  }
  /// x moved onto the grid (the identity for a continuous float).
  double snap_unit(double x) const {
    if (categorical || discrete) return normalize(to_internal(x));
    return std::clamp(x, 0.0, 1.0);
  }
};

}  // namespace detail

namespace sampler {

struct GpOptions {
  uint64_t seed = 0;
  int64_t n_startup_trials = 10;         ///< complete trials drawn at random before the GP
  bool deterministic_objective = false;  ///< fix the GP's noise at its floor
  int64_t n_candidates = 2048;           ///< quasi-random points the acquisition is evaluated at
  int64_t n_local_search = 10;           ///< of which this many (with the best trial) are ascended
  int64_t max_ascent_steps = 200;        ///< L-BFGS iterations per local search, at most
  double minimum_noise = detail::default_minimum_noise;  ///< the GP's noise-variance floor
  /// Other workers' running trials enter the model at the best value seen,
  /// after the kernel is fitted without them (Optuna 4.5's "best" constant
  /// liar, optuna#6430), so that parallel workers do not propose the same
  /// point. One worker alone sees no running trial with a point: nothing
  /// changes for it. (A pessimistic liar, the worst value in the fit, bent
  /// the model and raised the regret: docs/benchmarks.md.)
  bool constant_liar = true;
  /// Trials their objective failed enter the model at the worst value seen
  /// (not those failed for a lost worker), so the sampler leaves a region
  /// where the objective fails (Optuna ignores them, and
  /// proposes the same failing point again: docs/benchmarks.md).
  bool failed_as_worst = true;
  /// Model each group of parameters that appear together
  /// (group_decomposed_search_space) with a GP of its own, fitted to the
  /// trials that have it, instead of the intersection alone: a conditional
  /// space's branch parameters are then modelled, not drawn at random (as
  /// TpeOptions::group; Optuna's GPSampler has no such option).
  bool group = false;
};

/// Optuna-4-style GP sampler: relative sampling over the intersection search
/// space, log-EI acquisition; startup trials and parameters outside the
/// relative space are uniform draws (as sampler::Random with the same seed).
class Gp {
 public:
  explicit Gp(GpOptions o = {}) : options_(o) {
    using trainkit::detail::require_option;
    require_option(o.n_startup_trials >= 0, "GpOptions.n_startup_trials", o.n_startup_trials,
                   ">= 0");
    require_option(o.n_candidates >= 1, "GpOptions.n_candidates", o.n_candidates, ">= 1");
    require_option(o.n_local_search >= 1, "GpOptions.n_local_search", o.n_local_search, ">= 1");
    require_option(o.max_ascent_steps >= 0, "GpOptions.max_ascent_steps", o.max_ascent_steps,
                   ">= 0");
    require_option(o.minimum_noise > 0, "GpOptions.minimum_noise", o.minimum_noise, "> 0");
  }

  double sample(const StudyView&, const FrozenTrial& trial, const std::string& name,
                const Distribution& dist) const {
    detail::Rng rng(options_.seed, trial.number, name);
    return detail::from_unit(dist, rng.uniform());
  }

  std::map<std::string, double> sample_relative(const StudyView& view,
                                                const FrozenTrial& trial) const {
    if (static_cast<int64_t>(view.with_state(TrialState::Complete).size()) <
        options_.n_startup_trials)
      return {};
    return detail::sample_over_search_spaces(
        view, options_.group, /*include_pruned=*/false,
        [&](const SearchSpace& space) { return sample_jointly(view, trial, space); });
  }

  const GpOptions& options() const { return options_; }

 private:
  // The parameters of `space` from one GP of the complete trials that have
  // them all (in range).
  std::map<std::string, double> sample_jointly(const StudyView& view, const FrozenTrial& trial,
                                               const SearchSpace& space) const {
    const auto has_space = [&](const FrozenTrial& t) {
      return std::all_of(space.begin(), space.end(), [&](const auto& entry) {
        const auto p = t.params.find(entry.first);
        return p != t.params.end() && contains(entry.second, p->second.internal);
      });
    };
    auto complete = view.with_state(TrialState::Complete);
    std::erase_if(complete, [&](const FrozenTrial* t) { return !t->value || !has_space(*t); });
    if (space.empty() || complete.empty()) return {};

    std::vector<std::string> names;
    std::vector<detail::GpAxis> axes;
    std::vector<bool> is_categorical;
    for (const auto& [name, dist] : space) {
      names.push_back(name);
      axes.emplace_back(dist);
      is_categorical.push_back(axes.back().categorical);
    }
    const auto n = static_cast<int64_t>(complete.size());
    const auto d = static_cast<int64_t>(axes.size());

    // Inputs in the unit box; values standardised and turned to maximisation.
    std::vector<double> xs, ys;
    const double sign = view.direction == Direction::Minimize ? -1 : 1;
    for (const auto* t : complete) {
      for (size_t j = 0; j < axes.size(); ++j)
        xs.push_back(axes[j].normalize(t->params.at(names[j]).internal));
      ys.push_back(sign * *t->value);
    }
    // An infinite value (a diverged run) counts as the worst or best finite
    // one, as Optuna's GPSampler does: the model stays finite.
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (double y : ys) {
      if (std::isfinite(y)) lo = std::min(lo, y), hi = std::max(hi, y);
    }
    for (double& y : ys) y = lo <= hi ? std::clamp(y, lo, hi) : 0.0;
    double mean = 0, var = 0;
    for (double y : ys) mean += y / static_cast<double>(n);
    for (double y : ys) var += (y - mean) * (y - mean) / static_cast<double>(n);
    const double sd = std::max(std::sqrt(var), 1e-10);
    for (double& y : ys) y = (y - mean) / sd;
    const auto best_trial = std::max_element(ys.begin(), ys.end()) - ys.begin();
    const double incumbent = ys[static_cast<size_t>(best_trial)];
    int64_t rows = n;
    // After the complete trials (best_trial still indexes them): the trials
    // their objective failed, at the worst value seen.
    const double worst = *std::min_element(ys.begin(), ys.end());
    // a row for trial t at value y (t has_space: not the trial being
    // sampled, nor one that has not drawn yet)
    const auto add_row = [&](const FrozenTrial& t, double y) {
      for (size_t j = 0; j < axes.size(); ++j)
        xs.push_back(axes[j].normalize(t.params.at(names[j]).internal));
      ys.push_back(y);
    };
    for (const auto* t : view.with_state(TrialState::Fail)) {
      // not one failed for a lost worker
      if (options_.failed_as_worst && t->failed_in_objective() && has_space(*t))
        add_row(*t, worst), ++rows;
    }

    const auto x_train = torch::tensor(xs, torch::kDouble).reshape({rows, d});
    detail::GaussianProcess gp(x_train, torch::tensor(ys, torch::kDouble), is_categorical);
    gp.fit({.minimum_noise = options_.minimum_noise,
            .deterministic_objective = options_.deterministic_objective});
    // Other workers' running points, believed to be as good as the best
    // trial, after the fit (the kernel is the one fitted without them):
    // expected improvement vanishes there and nothing else in the model moves.
    std::optional<detail::GaussianProcess> believed;
    if (options_.constant_liar) {
      int64_t running = 0;
      for (const auto* t : view.with_state(TrialState::Running)) {
        if (has_space(*t)) add_row(*t, incumbent), ++running;
      }
      if (running > 0) {
        try {
          believed.emplace(torch::tensor(xs, torch::kDouble).reshape({rows + running, d}),
                           torch::tensor(ys, torch::kDouble), is_categorical, gp.params());
        } catch (const std::exception&) {  // no Cholesky factor: the model without them
        }
      }
    }
    const auto& model = believed ? *believed : gp;
    auto acquisition = [&](const torch::Tensor& x) {
      auto [m, v] = model.posterior(x);
      return detail::log_ei(m, v + 1e-12, incumbent);  // the 1e-12 keeps sqrt' finite
    };

    // One stream per group (named by its first parameter); the intersection
    // keeps the stream it always had.
    detail::Rng rng(options_.seed, trial.number,
                    options_.group ? "gp:acquisition:" + names.front() : "gp:acquisition");
    const auto best = maximize(acquisition, gp, axes, x_train[best_trial], rng);
    std::map<std::string, double> out;
    const auto b = best.contiguous();
    for (size_t j = 0; j < axes.size(); ++j)
      out[names[j]] = axes[j].to_internal(b.data_ptr<double>()[j]);
    return out;
  }

  // The acquisition's argmax in the unit box: the best of n_candidates
  // quasi-random points, then a local search (L-BFGS) from it, from others
  // picked in proportion to exp(acquisition) (Optuna's roulette) and from
  // the best trial; discrete coordinates snapped, categoricals swept.
  template <class Acq>
  torch::Tensor maximize(const Acq& acquisition, const detail::GaussianProcess& gp,
                         const std::vector<detail::GpAxis>& axes, const torch::Tensor& best_trial,
                         detail::Rng& rng) const {
    const auto d = static_cast<int64_t>(axes.size());
    const int64_t n = options_.n_candidates;
    const auto candidates =
        torch::tensor(quasi_random(axes, n, rng), torch::kDouble).reshape({n, d});
    torch::Tensor scores;
    {
      torch::NoGradGuard no_grad;
      scores = acquisition(candidates).contiguous();
    }
    const double* f = scores.data_ptr<double>();
    int64_t top = 0;
    for (int64_t i = 1; i < n; ++i)
      if (f[i] > f[top] || !std::isfinite(f[top])) top = i;
    std::vector<int64_t> starts{top};
    std::vector<double> weights(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const double w = std::exp(f[i] - f[top]);
      weights[static_cast<size_t>(i)] = i == top || !std::isfinite(w) ? 0 : w;
    }
    for (int64_t k = 0; k + 2 < options_.n_local_search; ++k) {
      double total = 0;
      for (double w : weights) total += w;
      if (!(total > 0)) break;
      double r = rng.uniform() * total;
      int64_t pick = 0;
      while (pick + 1 < n && (r -= weights[static_cast<size_t>(pick)]) >= 0) ++pick;
      while (weights[static_cast<size_t>(pick)] == 0) --pick;  // rounding ran past the last
      weights[static_cast<size_t>(pick)] = 0;
      starts.push_back(pick);
    }
    auto x0 = candidates.index_select(0, torch::tensor(starts, torch::kLong));
    if (options_.n_local_search >= 2) x0 = torch::cat({x0, best_trial.unsqueeze(0)});

    auto ascended = ascend(acquisition, gp, axes, x0);
    ascended = snap_rows(axes, ascended);
    ascended = sweep_categoricals(acquisition, axes, ascended);
    const auto pool = torch::cat({candidates[top].unsqueeze(0), ascended});
    torch::NoGradGuard no_grad;
    return pool[acquisition(pool).argmax().template item<int64_t>()];
  }

  // Local search: L-BFGS with a strong-Wolfe line search from each start
  // (Optuna's L-BFGS-B: the same gradient tolerance and iteration cap), in
  // coordinates scaled by the lengthscales (z = x / l, where the kernel is
  // isotropic, so one tolerance suits every parameter). The box is kept by
  // clamping x (past a bound a coordinate has no gradient); categorical
  // coordinates stay put. A start keeps its point unless the search found a
  // better one. (A sign-based ascent, iRprop, stalled near the optimum:
  // Hartmann-6's regret at 100 trials was 31x this one's,
  // docs/benchmarks.md.)
  template <class Acq>
  torch::Tensor ascend(const Acq& acquisition, const detail::GaussianProcess& gp,
                       const std::vector<detail::GpAxis>& axes, const torch::Tensor& x0) const {
    if (options_.max_ascent_steps == 0) return x0;
    constexpr double gtol = 1e-2;  // Optuna's pgtol = sqrt(1e-4)
    std::vector<uint8_t> cat_flags;
    for (const auto& a : axes) cat_flags.push_back(a.categorical);
    const auto fixed = torch::tensor(cat_flags, torch::kBool);
    const auto l = torch::tensor(gp.lengthscales(), torch::kDouble);
    std::vector<torch::Tensor> out;
    for (int64_t i = 0; i < x0.size(0); ++i) {
      const auto start = x0[i];
      const auto to_x = [&](const torch::Tensor& z) {
        return torch::where(fixed, start, torch::clamp(z * l, 0.0, 1.0));
      };
      torch::AutoGradMode grad_on(true);
      auto z = (start / l).detach().clone().requires_grad_(true);
      torch::optim::LBFGS lbfgs({z}, torch::optim::LBFGSOptions(1.0)
                                         .max_iter(options_.max_ascent_steps)
                                         .tolerance_grad(gtol)
                                         .tolerance_change(1e-12)
                                         .history_size(10)
                                         .line_search_fn(std::string("strong_wolfe")));
      auto closure = [&]() -> torch::Tensor {
        lbfgs.zero_grad();
        auto loss = -acquisition(to_x(z).unsqueeze(0)).sum();
        loss.backward();
        return loss;
      };
      try {
        lbfgs.step(closure);
      } catch (const std::exception&) {  // a failed evaluation: keep what it reached
      }
      torch::NoGradGuard no_grad;
      const auto x = to_x(z.detach());
      const auto f = acquisition(torch::stack({start, x})).contiguous();
      const double* fp = f.template data_ptr<double>();
      out.push_back(fp[1] > fp[0] ? x : start);  // a NaN keeps the start
    }
    return torch::stack(out);
  }

  static torch::Tensor snap_rows(const std::vector<detail::GpAxis>& axes, const torch::Tensor& x) {
    auto out = x.contiguous().clone();
    double* p = out.data_ptr<double>();
    const auto d = static_cast<int64_t>(axes.size());
    for (int64_t i = 0; i < out.size(0); ++i)
      for (int64_t j = 0; j < d; ++j)
        p[i * d + j] = axes[static_cast<size_t>(j)].snap_unit(p[i * d + j]);
    return out;
  }

  // Each categorical in turn set to its best choice, row by row (gradients
  // cannot move a choice index).
  template <class Acq>
  static torch::Tensor sweep_categoricals(const Acq& acquisition,
                                          const std::vector<detail::GpAxis>& axes,
                                          torch::Tensor x) {
    torch::NoGradGuard no_grad;
    const int64_t rows = x.size(0);
    for (size_t j = 0; j < axes.size(); ++j) {
      if (!axes[j].categorical || axes[j].n_choices < 2) continue;
      const int64_t k = axes[j].n_choices;
      auto tried = x.repeat_interleave(k, 0);  // row r's copies at r*k ... r*k + k-1
      tried.select(1, static_cast<int64_t>(j)).copy_(torch::arange(k, torch::kDouble).repeat(rows));
      const auto pick = acquisition(tried).reshape({rows, k}).argmax(1);
      x = x.clone();
      x.select(1, static_cast<int64_t>(j)).copy_(pick.to(torch::kDouble));
    }
    return x;
  }

  // A Kronecker (generalised golden ratio) sequence, randomly shifted: low
  // discrepancy in any dimension without tables (Roberts 2018's R_d), mapped
  // onto each axis's grid.
  static std::vector<double> quasi_random(const std::vector<detail::GpAxis>& axes, int64_t n,
                                          detail::Rng& rng) {
    const auto d = axes.size();
    double phi = 2;  // the root of phi^(d+1) = phi + 1
    for (int k = 0; k < 64; ++k) phi = std::pow(1 + phi, 1.0 / static_cast<double>(d + 1));
    std::vector<double> alpha(d), shift(d);
    for (size_t j = 0; j < d; ++j) {
      alpha[j] = std::fmod(std::pow(1 / phi, static_cast<double>(j + 1)), 1.0);
      shift[j] = rng.uniform();
    }
    std::vector<double> out;
    out.reserve(static_cast<size_t>(n) * d);
    for (int64_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < d; ++j) {
        double u = shift[j] + static_cast<double>(i + 1) * alpha[j];
        u -= std::floor(u);
        const auto& a = axes[j];
        out.push_back(a.categorical ? std::min(std::floor(u * static_cast<double>(a.n_choices)),
                                               static_cast<double>(a.n_choices - 1))
                                    : a.snap_unit(u));
      }
    }
    return out;
  }

  GpOptions options_;
};

}  // namespace sampler
}  // namespace trainkit::tune
