#pragma once
// TPE (tree-structured Parzen estimator), as Optuna 3.1's TPESampler: the
// finished trials are split into the best gamma(n) ("below") and the rest
// ("above"), each set is modelled by a Parzen estimator (a mixture of
// truncated normals, or of categorical distributions, one kernel per trial
// plus a wide prior), and of n_ei_candidates draws from the "below" model
// the one with the highest l(x) / g(x) is taken. With several objectives
// (Optuna's multi-objective TPE) "below" is whole non-dominated ranks, the
// last cut by greedy hypervolume subset selection, and its kernels weigh by
// hypervolume contribution. Everything is recomputed from the StudyView on
// each call: the sampler keeps no state.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/tune/detail/rng.hpp"
#include "trainkit/tune/pareto.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/samplers/random.hpp"

namespace trainkit::tune {
namespace detail {

/// Optuna's default_gamma: the size of "below" among n trials.
inline int64_t tpe_default_gamma(int64_t n) {
  // 0.1 * n as a double, as Optuna computes it (ceil(0.1 * 30) is 4).
  return std::min<int64_t>(static_cast<int64_t>(std::ceil(0.1 * static_cast<double>(n))), 25);
}

/// Optuna's default_weights: the latest 25 trials weigh 1, older ones
/// ramp up from 1/n (oldest first).
inline std::vector<double> tpe_default_weights(int64_t n) {
  std::vector<double> w(static_cast<size_t>(std::max<int64_t>(n, 0)), 1.0);
  if (n < 25) return w;
  const int64_t m = n - 25;  // np.linspace(1 / n, 1, m), written out as numpy does
  const double start = 1.0 / static_cast<double>(n);
  if (m == 1) w[0] = start;
  if (m > 1) {
    const double step = (1.0 - start) / static_cast<double>(m - 1);
    for (int64_t k = 0; k < m - 1; ++k)
      w[static_cast<size_t>(k)] = static_cast<double>(k) * step + start;
    w[static_cast<size_t>(m - 1)] = 1.0;
  }
  return w;
}

/// The standard normal truncated to [a, b], in log space so that far tails
/// keep their precision (Optuna's _truncnorm, itself from SciPy).
namespace truncnorm {

/// The standard normal CDF, through erfc where erf would cancel.
inline double ndtr(double a) {
  const double x = a / std::numbers::sqrt2;
  if (x < -1 / std::numbers::sqrt2) return 0.5 * std::erfc(-x);
  if (x < 1 / std::numbers::sqrt2) return 0.5 + 0.5 * std::erf(x);
  return 1.0 - 0.5 * std::erfc(x);
}

/// log(ndtr(a)); below -20 by the asymptotic series, where erfc underflows.
inline double log_ndtr(double a) {
  if (a > 6) return -ndtr(-a);  // log(1 - e) ~ -e
  if (a > -20) return std::log(ndtr(a));
  const double log_lhs = -0.5 * a * a - std::log(-a) - 0.5 * std::log(2 * std::numbers::pi);
  double last = 0, rhs = 1, numerator = 1, denom = 1, sign = 1;
  const double denom_cons = 1 / (a * a);
  for (int i = 1; std::abs(last - rhs) > std::numeric_limits<double>::epsilon(); ++i) {
    last = rhs;
    sign = -sign;
    denom *= denom_cons;
    numerator *= 2 * i - 1;
    rhs += sign * numerator * denom;
  }
  return log_lhs + std::log(rhs);
}

/// numpy's logaddexp.
inline double log_sum(double x, double y) {
  if (x == y) return x + std::numbers::ln2;
  const double d = x - y;
  if (d > 0) return x + std::log1p(std::exp(-d));
  if (d <= 0) return y + std::log1p(std::exp(d));
  return x + y;  // a NaN
}

/// log(exp(p) - exp(q)) for p >= q.
inline double log_diff(double log_p, double log_q) {
  return log_p + std::log1p(-std::exp(log_q - log_p));
}

/// log of the standard normal's mass in [a, b].
inline double log_gauss_mass(double a, double b) {
  // Tails are computed on the left side, where log_ndtr is accurate.
  if (b <= 0) return log_diff(log_ndtr(b), log_ndtr(a));
  if (a > 0) return log_diff(log_ndtr(-a), log_ndtr(-b));
  return std::log1p(-ndtr(a) - ndtr(-b));  // mass near 1: no cancellation
}

/// log of the standard normal density.
inline double norm_logpdf(double x) {
  return -x * x / 2 - 0.5 * std::log(2 * std::numbers::pi);
}

/// log-density at x of the standard normal truncated to [a, b].
inline double logpdf(double x, double a, double b) {
  if (x < a || x > b) return -std::numeric_limits<double>::infinity();
  return norm_logpdf(x) - log_gauss_mass(a, b);
}

/// The x with log_ndtr(x) = y, by bisection on [-100, 100] as Optuna does.
inline double ndtri_exp(double y) {
  double lo = -100, hi = 100, m = 0;
  for (int k = 0; k < 100; ++k) {
    m = (lo + hi) / 2;
    (log_ndtr(m) < y ? lo : hi) = m;
  }
  return m;
}

/// The q-quantile of the standard normal truncated to [a, b].
inline double ppf(double q, double a, double b) {
  if (q == 0) return a;
  if (q == 1) return b;
  // Inverts on the side of the narrower tail, in log space.
  if (a < 0) return ndtri_exp(log_sum(log_ndtr(a), std::log(q) + log_gauss_mass(a, b)));
  return -ndtri_exp(log_sum(log_ndtr(-b), std::log1p(-q) + log_gauss_mass(a, b)));
}

}  // namespace truncnorm

/// Settings of a Parzen estimator (Optuna's _ParzenEstimatorParameters).
struct ParzenOptions {
  bool consider_prior = true;
  double prior_weight = 1.0;
  bool consider_magic_clip = true;
  bool consider_endpoints = false;
  std::function<std::vector<double>(int64_t)> weights = tpe_default_weights;
  bool multivariate = false;
  /// Optuna 3.1's continuous log-density, which lacks the kernels' -log(sigma)
  /// (a bug fixed in Optuna 3.5, optuna#5109); false: the true density.
  bool legacy_log_pdf = false;
};

/// One parameter of a Parzen estimator: a kernel per observation (and the prior).
struct ParzenParam {
  std::string name;
  Distribution distribution;
  bool categorical = false;
  double low = 0;   ///< the kernels' support, on the log scale for log parameters,
  double high = 0;  ///< widened by q / 2 on a grid
  double q = 0;     ///< a grid's step (kernels integrate over a cell); 0: continuous
  std::vector<double> mus, sigmas;
  std::vector<std::vector<double>> probabilities;  ///< categorical: [kernel][choice]
};

/// Whether a numerical distribution is modelled on the log scale.
inline bool log_scale(const Distribution& dist) {
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) return f->log;
  if (const auto* i = std::get_if<IntDistribution>(&dist)) return i->log;
  return false;
}

/// Optuna 3.1's _ParzenEstimator: a mixture over `space` whose component k
/// puts, on each parameter, a kernel at observation k (the last component
/// being the prior). Values are internal values (a categorical's index).
class ParzenEstimator {
 public:
  /// Per parameter name, one value per observation (or per point).
  using Values = std::map<std::string, std::vector<double>>;

  ParzenEstimator(const Values& observations, const SearchSpace& space, ParzenOptions o)
      : options_(std::move(o)) {
    n_ = space.empty() ? 0 : observations.at(space.begin()->first).size();
    const bool prior = options_.consider_prior || n_ == 0;
    weights_ = component_weights(prior);
    // Scott's rule for the joint model's bandwidth, as the BOHB paper.
    const double sigma0 = 0.2 * std::pow(static_cast<double>(std::max<size_t>(n_, 1)),
                                         -1.0 / (static_cast<double>(space.size()) + 4));
    for (const auto& [name, dist] : space) {
      ParzenParam p;
      p.name = name;
      p.distribution = dist;
      const auto& obs = observations.at(name);
      if (obs.size() != n_) {
        throw Error("trainkit: Parzen estimator observations of \"" + name + "\" number " +
                    std::to_string(obs.size()) + ", of the others " + std::to_string(n_));
      }
      if (const auto* c = std::get_if<CategoricalDistribution>(&dist)) {
        p.categorical = true;
        const double fill = options_.prior_weight / static_cast<double>(prior ? n_ + 1 : n_);
        p.probabilities.assign(prior ? n_ + 1 : n_, std::vector<double>(c->choices.size(), fill));
        for (size_t k = 0; k < n_; ++k) p.probabilities[k].at(static_cast<size_t>(obs[k])) += 1;
        for (auto& row : p.probabilities) {
          const double sum = std::accumulate(row.begin(), row.end(), 0.0);
          for (auto& v : row) v /= sum;
        }
      } else {
        set_bounds(p);
        std::vector<double> x(obs.size());
        std::transform(obs.begin(), obs.end(), x.begin(), [&](double v) { return to_model(p, v); });
        set_kernels(p, std::move(x), prior, sigma0);
      }
      params_.push_back(std::move(p));
    }
  }

  /// The mixture's weights, one per component (the prior's last).
  const std::vector<double>& weights() const { return weights_; }
  /// The kernels of each parameter, in the search space's order.
  const std::vector<ParzenParam>& params() const { return params_; }
  /// The kernels of parameter `name`.
  const ParzenParam& param(const std::string& name) const {
    for (const auto& p : params_) {
      if (p.name == name) return p;
    }
    throw Error("trainkit: Parzen estimator has no parameter \"" + name + "\"");
  }

  /// `size` draws of every parameter (internal values): a component, then
  /// each parameter from that component's kernel.
  Values sample(Rng& rng, size_t size) const {
    std::vector<double> cdf(weights_.size());
    std::partial_sum(weights_.begin(), weights_.end(), cdf.begin());
    std::vector<size_t> active(size);
    for (auto& a : active) {
      const double u = rng.uniform() * cdf.back();
      a = std::min<size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin(),
                           cdf.size() - 1);
    }
    Values out;
    for (const auto& p : params_) {
      auto& xs = out[p.name];
      for (size_t j = 0; j < size; ++j) {
        const size_t k = active[j];
        const double u = rng.uniform();
        if (p.categorical) {
          const auto& probs = p.probabilities[k];
          double cum = 0;
          size_t idx = 0;
          while (idx + 1 < probs.size() && (cum += probs[idx]) < u) ++idx;
          xs.push_back(static_cast<double>(idx));
        } else {
          const double mu = p.mus[k], sigma = p.sigmas[k];
          const double z = truncnorm::ppf(u, (p.low - mu) / sigma, (p.high - mu) / sigma);
          xs.push_back(from_model(p, z * sigma + mu));
        }
      }
    }
    return out;
  }

  /// The mixture's log-density (log-mass on grids and categoricals) at each
  /// point; `points` holds internal values of every parameter.
  std::vector<double> log_pdf(const Values& points) const {
    if (params_.empty()) return {};
    const size_t m = weights_.size(), size = points.at(params_.front().name).size();
    // Per parameter and component: log of the kernel's mass on its support.
    std::vector<std::vector<double>> log_mass(params_.size());
    for (size_t d = 0; d < params_.size(); ++d) {
      const auto& p = params_[d];
      log_mass[d].assign(m, 0.0);
      if (p.categorical) continue;
      for (size_t k = 0; k < m; ++k) {
        log_mass[d][k] = truncnorm::log_gauss_mass((p.low - p.mus[k]) / p.sigmas[k],
                                                   (p.high - p.mus[k]) / p.sigmas[k]);
      }
    }
    std::vector<double> out(size), comp(m);
    for (size_t j = 0; j < size; ++j) {
      for (size_t k = 0; k < m; ++k) comp[k] = std::log(weights_[k]);
      for (size_t d = 0; d < params_.size(); ++d) {
        const auto& p = params_[d];
        const double x = points.at(p.name).at(j);
        for (size_t k = 0; k < m; ++k) comp[k] += kernel_log_pdf(p, k, x, log_mass[d][k]);
      }
      const double top = *std::max_element(comp.begin(), comp.end());
      if (!std::isfinite(top)) {
        out[j] = top;
        continue;
      }
      double sum = 0;
      for (double c : comp) sum += std::exp(c - top);
      out[j] = std::log(sum) + top;
    }
    return out;
  }

 private:
  static constexpr double kEps = 1e-12;

  // Normalised weights: the `weights` function's for observations, the prior's last.
  std::vector<double> component_weights(bool prior) const {
    auto w = options_.weights(static_cast<int64_t>(n_));
    if (w.size() < n_) {
      throw Error("trainkit: the TPE weights function returned " + std::to_string(w.size()) +
                  " weights for " + std::to_string(n_) + " observations");
    }
    w.resize(n_);
    for (double v : w) {
      if (!(v >= 0) || !std::isfinite(v)) {
        throw Error("trainkit: the TPE weights function returned " + std::to_string(v) +
                    "; weights must be finite and >= 0");
      }
    }
    if (n_ > 0 && std::accumulate(w.begin(), w.end(), 0.0) <= 0) {
      throw Error("trainkit: the TPE weights function returned only zeros");
    }
    if (prior) w.push_back(options_.prior_weight);
    const double sum = std::accumulate(w.begin(), w.end(), 0.0);
    for (auto& v : w) v /= sum;
    return w;
  }

  static void set_bounds(ParzenParam& p) {
    if (const auto* f = std::get_if<FloatDistribution>(&p.distribution)) {
      if (f->log) {
        p.low = std::log(f->low);
        p.high = std::log(f->high);
      } else if (f->step) {
        p.q = *f->step;
        p.low = f->low - 0.5 * p.q;
        p.high = highest(p.distribution) + 0.5 * p.q;
      } else {
        p.low = f->low;
        p.high = f->high;
      }
      return;
    }
    const auto& i = std::get<IntDistribution>(p.distribution);
    if (i.log) {
      p.low = std::log(static_cast<double>(i.low) - 0.5);
      p.high = std::log(static_cast<double>(i.high) + 0.5);
    } else {
      p.q = static_cast<double>(i.step);
      p.low = static_cast<double>(i.low) - 0.5 * p.q;
      p.high = highest(p.distribution) + 0.5 * p.q;
    }
  }

  static double to_model(const ParzenParam& p, double x) {
    return log_scale(p.distribution) ? std::log(x) : x;
  }

  // Back from the model's scale: exp, then onto the grid (numpy's round:
  // half to even) and into the range. Optuna does not clamp a continuous
  // draw, but exp(log(high)) can exceed high by an ulp.
  static double from_model(const ParzenParam& p, double x) {
    double low = 0;
    if (const auto* f = std::get_if<FloatDistribution>(&p.distribution)) {
      if (f->log) return std::clamp(std::exp(x), f->low, f->high);
      if (!f->step) return std::clamp(x, f->low, f->high);
      low = f->low;
    } else {
      const auto& i = std::get<IntDistribution>(p.distribution);
      low = static_cast<double>(i.low);
      if (i.log) return std::clamp(std::nearbyint(std::exp(x)), low, highest(p.distribution));
    }
    return std::clamp(std::nearbyint((x - low) / p.q) * p.q + low, low, highest(p.distribution));
  }

  void set_kernels(ParzenParam& p, std::vector<double> obs, bool prior, double sigma0) const {
    const double low = p.low, high = p.high;
    p.mus = std::move(obs);
    if (prior) p.mus.push_back(0.5 * (low + high));
    const size_t m = p.mus.size();
    p.sigmas.assign(m, sigma0 * (high - low));
    if (!options_.multivariate) {
      // Each kernel as wide as the larger gap to its neighbours (bounds included).
      std::vector<size_t> order(m);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return p.mus[a] < p.mus[b]; });
      std::vector<double> e{low};
      for (auto k : order) e.push_back(p.mus[k]);
      e.push_back(high);
      std::vector<double> s(m);
      for (size_t k = 0; k < m; ++k) s[k] = std::max(e[k + 1] - e[k], e[k + 2] - e[k + 1]);
      if (!options_.consider_endpoints && e.size() >= 4) {
        s[0] = e[2] - e[1];
        s[m - 1] = e[m] - e[m - 1];
      }
      for (size_t k = 0; k < m; ++k) p.sigmas[order[k]] = s[k];
    }
    const double max_sigma = high - low;
    const double min_sigma = options_.consider_magic_clip
                                 ? (high - low) / std::min(100.0, 1.0 + static_cast<double>(m))
                                 : kEps;
    for (auto& s : p.sigmas) s = std::min(std::max(s, min_sigma), max_sigma);
    if (prior) p.sigmas.back() = high - low;
  }

  // log-density (log-mass on a grid) of parameter p's kernel k at internal value x.
  double kernel_log_pdf(const ParzenParam& p, size_t k, double x, double log_mass) const {
    if (p.categorical) return std::log(p.probabilities[k].at(static_cast<size_t>(x)));
    const double mu = p.mus[k], sigma = p.sigmas[k];
    const double y = to_model(p, x);
    if (p.q == 0) {
      const double z = (y - mu) / sigma;
      if (z < (p.low - mu) / sigma || z > (p.high - mu) / sigma) {
        return -std::numeric_limits<double>::infinity();
      }
      const double lp = truncnorm::norm_logpdf(z) - log_mass;
      return options_.legacy_log_pdf ? lp : lp - std::log(sigma);
    }
    // A grid point stands for its cell: the kernel's mass there.
    const double upper = std::min(y + p.q / 2, p.high), lower = std::max(y - p.q / 2, p.low);
    return truncnorm::log_gauss_mass((lower - mu) / sigma, (upper - mu) / sigma) - log_mass;
  }

  ParzenOptions options_;
  size_t n_ = 0;
  std::vector<double> weights_;
  std::vector<ParzenParam> params_;
};

/// Where a trial ranks (Optuna's _get_observation_pairs): complete trials
/// first (step -inf), then pruned ones by their last step, later steps
/// first; within a step by signed value, lower first; trials without a
/// result last: running ones (the constant liar) and failed ones, when
/// they count as the worst there is.
struct TpeScore {
  /// -inf complete, -last step pruned, 1 pruned before reporting, +inf no result
  double step = 0;
  double value = 0;  ///< the value, negated when maximizing (+inf for a NaN report)
  /// Several objectives, a complete trial: every value, minimised (as
  /// minimized()); `value` is the first's. Empty with one objective.
  Point values{};
  bool no_result() const { return step == std::numeric_limits<double>::infinity(); }
  bool operator<(const TpeScore& o) const {
    return step < o.step || (step == o.step && value < o.value);
  }
};

/// The complete and pruned trials (and running and failed ones, counted as
/// the worst), chronological: their scores, numbers and the internal values
/// of `names` (nullopt where a trial lacks one).
struct TpeObservations {
  std::vector<TpeScore> scores;
  std::vector<int64_t> numbers;                                      ///< the trials' numbers
  std::map<std::string, std::vector<std::optional<double>>> values;  ///< name -> per trial
  /// Where some trial of the study has constraints: per trial, the sum of
  /// its positive constraint values (0: feasible; +inf without constraints
  /// or a result). Empty otherwise.
  std::vector<double> violations;
  /// The trials with a result: what the startup count and gamma see.
  int64_t finished() const {
    return std::count_if(scores.begin(), scores.end(),
                         [](const TpeScore& s) { return !s.no_result(); });
  }
};

/// Optuna's _get_observation_pairs over the view's complete and pruned
/// trials, its running ones with `constant_liar`, and its failed ones with
/// `failed_as_worst`. With several objectives pruned trials are left out
/// (Optuna's rule: nothing ranks a pruned trial's one objective against
/// complete trials' several).
inline TpeObservations tpe_observations(const StudyView& view,
                                        const std::vector<std::string>& names,
                                        bool constant_liar = false, bool failed_as_worst = false) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const auto directions = view.directions();
  const bool several = directions.size() > 1;
  const double sign = view.direction == Direction::Minimize ? 1.0 : -1.0;
  const bool constrained = std::any_of(view.trials.begin(), view.trials.end(),
                                       [](const FrozenTrial& t) { return t.has_constraints(); });
  TpeObservations out;
  for (const auto& name : names) out.values[name];
  for (const auto& t : view.trials) {
    TpeScore score;
    if (t.state == TrialState::Complete) {
      const auto values = t.objective_values();
      if (values.size() != directions.size()) continue;
      score = {-inf, sign * values[0]};
      if (several) score.values = minimized(values, directions);
    } else if (t.state == TrialState::Pruned) {
      if (several) continue;
      if (const auto step = t.last_step()) {
        const double v = t.intermediate.at(*step);
        score = {-static_cast<double>(*step), std::isnan(v) ? inf : sign * v};
      } else {
        score = {1, 0};  // pruned before any report: last
      }
    } else if ((t.state == TrialState::Running && constant_liar) ||
               (failed_as_worst && t.failed_in_objective())) {
      score = {inf, sign * inf};
    } else {
      continue;
    }
    if (constrained) out.violations.push_back(score.no_result() ? inf : violation_of(t));
    out.scores.push_back(std::move(score));
    out.numbers.push_back(t.number);
    for (auto& [name, values] : out.values) {
      const auto p = t.params.find(name);
      values.push_back(p == t.params.end() ? std::nullopt : std::optional(p->second.internal));
    }
  }
  return out;
}

/// Optuna's EPS in its multi-objective TPE.
inline constexpr double kTpeEps = 1e-12;

/// Whether the scores rank several objectives (some trial has `values`).
inline bool tpe_several(const std::vector<TpeScore>& scores) {
  return std::any_of(scores.begin(), scores.end(),
                     [](const TpeScore& s) { return !s.values.empty(); });
}

/// The reference point of Optuna's multi-objective TPE: beyond the worst of
/// `points` by a tenth of its size in each objective (EPS where that is 0).
inline Point tpe_reference_point(const std::vector<Point>& points) {
  Point worst = points.at(0);
  for (const auto& p : points) {
    for (size_t k = 0; k < p.size(); ++k) worst[k] = std::max(worst[k], p[k]);
  }
  for (auto& w : worst) {
    w = std::max(1.1 * w, 0.9 * w);
    if (w == 0) w = kTpeEps;
  }
  return worst;
}

/// Greedy hypervolume subset selection (Optuna 3.1's _solve_hssp): `size`
/// of `points` (their indices, in the order taken), each adding the most
/// hypervolume to those taken before it; within 1 - 1/e of the best subset.
inline std::vector<size_t> tpe_hssp(const std::vector<Point>& points, size_t size,
                                    const Point& reference) {
  std::vector<double> gain(points.size());
  for (size_t i = 0; i < points.size(); ++i) gain[i] = hypervolume({points[i]}, reference);
  std::vector<Point> taken;
  std::vector<size_t> out;
  double volume = 0;
  while (out.size() < std::min(size, points.size())) {
    const size_t best =
        static_cast<size_t>(std::max_element(gain.begin(), gain.end()) - gain.begin());
    gain[best] = -1;  // taken
    for (size_t j = 0; j < points.size(); ++j) {
      if (gain[j] == -1) continue;
      // what j shares with the new point and no point taken before
      Point shared(points[j].size());
      for (size_t k = 0; k < shared.size(); ++k)
        shared[k] = std::max(points[best][k], points[j][k]);
      auto with = taken;
      with.push_back(std::move(shared));
      gain[j] -= hypervolume(with, reference) - volume;
    }
    taken.push_back(points[best]);
    out.push_back(best);
    volume = hypervolume(taken, reference);
  }
  return out;
}

/// Indices (into `scores`) of the best n_below and of the rest, each in
/// chronological order (Optuna's _split_observation_pairs). With
/// `violations`, feasible trials come first and infeasible ones by their
/// violation. With several objectives, whole non-dominated ranks, the last
/// one cut by hypervolume subset selection; trials without a result (no
/// values to rank) are always above.
inline std::pair<std::vector<size_t>, std::vector<size_t>> tpe_split(
    const std::vector<TpeScore>& scores, int64_t n_below, std::span<const double> violations = {}) {
  const size_t n = scores.size();
  const size_t cut = static_cast<size_t>(std::clamp<int64_t>(n_below, 0, static_cast<int64_t>(n)));
  std::vector<size_t> below, above;
  const auto sorted = [&] {
    std::sort(below.begin(), below.end());
    std::sort(above.begin(), above.end());
    return std::pair{below, above};
  };
  // the first `cut` trials in the (stable) order of `less` below, the rest above
  const auto split_by = [&](auto less) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), less);
    below.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(cut));
    above.assign(order.begin() + static_cast<std::ptrdiff_t>(cut), order.end());
    return sorted();
  };
  if (!violations.empty()) {
    trainkit::detail::require_option(violations.size() == n, "violations",
                                     int64_t(violations.size()), "one per score");
    const auto feasible_count =
        static_cast<size_t>(std::count(violations.begin(), violations.end(), 0.0));
    if (cut >= feasible_count)  // every feasible trial is below
      return split_by([&](size_t a, size_t b) { return violations[a] < violations[b]; });
    // more feasible trials than below holds: split those, the infeasible above
    std::vector<size_t> feasible;
    std::vector<TpeScore> feasible_scores;
    for (size_t i = 0; i < n; ++i) {
      if (violations[i] == 0) {
        feasible.push_back(i), feasible_scores.push_back(scores[i]);
      } else {
        above.push_back(i);
      }
    }
    const auto [b, a] = tpe_split(feasible_scores, n_below);
    for (const size_t i : b) below.push_back(feasible[i]);
    for (const size_t i : a) above.push_back(feasible[i]);
    return sorted();
  }
  if (!tpe_several(scores))
    return split_by([&](size_t a, size_t b) { return scores[a] < scores[b]; });
  std::vector<size_t> ranked;  // the trials with values
  std::vector<Point> points;
  for (size_t i = 0; i < n; ++i) {
    if (scores[i].values.empty()) {
      above.push_back(i);
    } else {
      ranked.push_back(i), points.push_back(scores[i].values);
    }
  }
  const auto ranks = nondominated_ranks(points);
  const size_t wanted = std::min(cut, ranked.size());
  for (int64_t r = 0; below.size() < wanted; ++r) {
    std::vector<size_t> members;  // into ranked
    for (size_t i = 0; i < ranked.size(); ++i) {
      if (ranks[i] == r) members.push_back(i);
    }
    if (below.size() + members.size() <= wanted) {
      for (const size_t i : members) below.push_back(ranked[i]);
      continue;
    }
    std::vector<Point> rank_points;  // the boundary rank: the subset adding most volume
    for (const size_t i : members) rank_points.push_back(points[i]);
    std::vector<bool> chosen(members.size(), false);
    for (const size_t k :
         tpe_hssp(rank_points, wanted - below.size(), tpe_reference_point(rank_points)))
      chosen[k] = true;
    for (size_t k = 0; k < members.size(); ++k) {
      if (chosen[k]) below.push_back(ranked[members[k]]);
    }
  }
  std::vector<bool> is_below(n, false);
  for (const size_t i : below) is_below[i] = true;
  for (const size_t i : ranked) {
    if (!is_below[i]) above.push_back(i);
  }
  return sorted();
}

/// The weights of the "below" kernels with several objectives (Optuna
/// 3.1's _calculate_weights_below_for_multi_objective): each feasible
/// trial's hypervolume contribution among the feasible below trials, over
/// the largest; an infeasible one weighs EPS. `below` as tpe_split gives it.
inline std::vector<double> tpe_below_weights(const std::vector<TpeScore>& scores,
                                             const std::vector<size_t>& below,
                                             std::span<const double> violations = {}) {
  std::vector<double> weights(below.size(), kTpeEps);
  std::vector<size_t> feasible;  // into below
  std::vector<Point> points;
  for (size_t k = 0; k < below.size(); ++k) {
    if (violations.empty() || violations[below[k]] == 0)
      feasible.push_back(k), points.push_back(scores[below[k]].values);
  }
  if (points.size() == 1) weights[feasible[0]] = 1;
  if (points.size() < 2) return weights;
  const auto reference = tpe_reference_point(points);
  const double volume = hypervolume(points, reference);
  std::vector<double> contribution(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    auto rest = points;
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
    contribution[i] = volume - hypervolume(rest, reference) + kTpeEps;
  }
  const double top = *std::max_element(contribution.begin(), contribution.end());
  for (size_t i = 0; i < points.size(); ++i) {
    // an infinite value makes the volumes infinite: every kernel then weighs 1
    const double w = contribution[i] / top;
    weights[feasible[i]] = std::isfinite(w) ? std::clamp(w, 0.0, 1.0) : 1.0;
  }
  return weights;
}

/// What multivariate TPE models jointly: the parameters every complete or
/// pruned trial has with one distribution (Optuna's IntersectionSearchSpace
/// with include_pruned), less those with a single value.
inline SearchSpace tpe_search_space(const StudyView& view) {
  return varying(intersection_search_space(view, /*include_pruned=*/true));
}

}  // namespace detail

namespace sampler {

/// TPE's settings; the defaults are Optuna 3.1's but for constant_liar and
/// failed_as_worst, which change nothing while no trial runs in parallel
/// and none fails.
struct TpeOptions {
  uint64_t seed = 0;              ///< with the trial number and name, seeds each draw
  int64_t n_startup_trials = 10;  ///< random draws until this many trials completed or pruned
  int64_t n_ei_candidates = 24;   ///< draws from l(x) among which the best l/g is taken
  bool multivariate = false;      ///< model the intersection search space jointly
  /// With multivariate: model each group of parameters that appear together
  /// (group_decomposed_search_space) jointly, so a conditional space's
  /// branch parameters are modelled too, not drawn at random (Optuna's
  /// `group`). A group is modelled from the trials that have it.
  bool group = false;
  double prior_weight = 1.0;        ///< the prior kernel's weight against an observation's
  bool consider_prior = true;       ///< a wide kernel (or uniform categorical) in each model
  bool consider_magic_clip = true;  ///< kernels no narrower than range / min(100, n + 1)
  bool consider_endpoints = false;  ///< the outermost kernels' width counts the bounds
  /// The size of "below" among n complete and pruned trials.
  std::function<int64_t(int64_t)> gamma = detail::tpe_default_gamma;
  /// Running trials count as the worst result (Optuna's constant_liar), so
  /// parallel workers do not propose the same region at once. On by default,
  /// where Optuna's is off: one worker alone sees no running trial but the
  /// one being sampled, which has drawn nothing in the snapshot taken at its
  /// start, so nothing changes for it.
  bool constant_liar = true;
  /// Trials their objective failed count as the worst result at the
  /// parameters they drew (not those failed for a lost worker), so the
  /// sampler leaves a region where the objective fails. Optuna ignores
  /// them, and then keeps proposing where nothing has succeeded: with a
  /// failing region, 50 of 60 trials failed, against 13 (docs/benchmarks.md).
  bool failed_as_worst = true;
  /// The kernels' weights for n observations, oldest first.
  std::function<std::vector<double>(int64_t)> weights = detail::tpe_default_weights;
  /// Optuna 3.1's log-density, which leaves out the continuous kernels' 1/sigma
  /// (changed in Optuna 3.5, optuna#5109); false: the true density. On by
  /// default: it found better optima on every benchmark function
  /// (docs/benchmarks.md), and it is what Optuna 3.1 users get.
  bool legacy_log_pdf = true;
};

/// Tree-structured Parzen estimator (Optuna 3.1's TPESampler), for one
/// objective or several, with constraints (Trial::set_constraints) where
/// trials have them: feasible trials rank first.
class Tpe {
 public:
  static constexpr bool multi_objective = true;

  explicit Tpe(TpeOptions o = {}) : options_(std::move(o)) {
    using trainkit::detail::require_option;
    require_option(options_.n_startup_trials >= 0, "TpeOptions.n_startup_trials",
                   options_.n_startup_trials, ">= 0");
    require_option(options_.n_ei_candidates >= 1, "TpeOptions.n_ei_candidates",
                   options_.n_ei_candidates, ">= 1");
    require_option(options_.prior_weight > 0 && std::isfinite(options_.prior_weight),
                   "TpeOptions.prior_weight", options_.prior_weight, "a positive number");
    require_option(static_cast<bool>(options_.gamma), "TpeOptions.gamma", std::string("empty"),
                   "a function");
    require_option(static_cast<bool>(options_.weights), "TpeOptions.weights", std::string("empty"),
                   "a function");
    require_option(!options_.group || options_.multivariate, "TpeOptions.group", true,
                   "false unless multivariate is true (groups are modelled jointly)");
  }

  /// One parameter: random during startup, then from the univariate models
  /// of this parameter's values in the below and above trials.
  double sample(const StudyView& view, const FrozenTrial& trial, const std::string& name,
                const Distribution& dist) const {
    if (const auto v = single_value(dist)) return *v;
    detail::Rng rng(options_.seed, trial.number, name);
    const auto obs =
        detail::tpe_observations(view, {name}, options_.constant_liar, options_.failed_as_worst);
    const auto n = obs.finished();
    if (n < options_.n_startup_trials) return detail::from_unit(dist, rng.uniform());
    const auto [below, above] = detail::tpe_split(obs.scores, options_.gamma(n), obs.violations);
    const auto& values = obs.values.at(name);
    // A parameter whose range changed may have values a log scale cannot take.
    const bool log = detail::log_scale(dist);
    const auto usable = [&](size_t k) {
      // a running or failed trial's value counts only in the current range
      return values[k] && (!log || *values[k] > 0) &&
             (!obs.scores[k].no_result() || contains(dist, *values[k]));
    };
    auto pick = [&](const std::vector<size_t>& idx) {
      detail::ParzenEstimator::Values out{{name, {}}};
      for (auto k : idx) {
        if (usable(k)) out[name].push_back(*values[k]);
      }
      return out;
    };
    return choose(rng, pick(below), pick(above), {{name, dist}}, below_weights(obs, below, usable))
        .at(name);
  }

  /// The intersection search space (or with `group`, each group of it),
  /// jointly (multivariate mode after startup); empty otherwise, so every
  /// parameter goes to `sample`.
  std::map<std::string, double> sample_relative(const StudyView& view,
                                                const FrozenTrial& trial) const {
    if (!options_.multivariate) return {};
    if (!options_.group) return sample_jointly(view, trial, detail::tpe_search_space(view));
    std::map<std::string, double> out;
    for (const auto& space : group_decomposed_search_space(view, /*include_pruned=*/true))
      out.merge(sample_jointly(view, trial, varying(space)));
    return out;
  }

  /// The settings this sampler was made with.
  const TpeOptions& options() const { return options_; }

 private:
  // The parameters of `space` from one joint model of the trials that have
  // them all (Optuna's _sample_relative: the below/above split ranks every
  // trial, then keeps those).
  std::map<std::string, double> sample_jointly(const StudyView& view, const FrozenTrial& trial,
                                               const SearchSpace& space) const {
    if (space.empty()) return {};
    std::vector<std::string> names;
    for (const auto& [name, dist] : space) names.push_back(name);
    const auto obs =
        detail::tpe_observations(view, names, options_.constant_liar, options_.failed_as_worst);
    const auto n = obs.finished();
    if (n < options_.n_startup_trials) return {};
    const auto [below, above] = detail::tpe_split(obs.scores, options_.gamma(n), obs.violations);
    // Every complete and pruned trial has every parameter of `space`, in
    // range; a running or failed one counts once it has them all, in range.
    const auto usable = [&](size_t k) {
      return std::all_of(names.begin(), names.end(), [&](const std::string& name) {
        const auto& v = obs.values.at(name)[k];
        return v && contains(space.at(name), *v);  // drawn under another range: left out
      });
    };
    auto pick = [&](const std::vector<size_t>& idx) {
      detail::ParzenEstimator::Values out;
      for (const auto& name : names) out[name];
      for (auto k : idx) {
        if (!usable(k)) continue;
        for (const auto& name : names) out[name].push_back(*obs.values.at(name)[k]);
      }
      return out;
    };
    // One stream per group (named by its first parameter); the intersection
    // keeps the stream it always had.
    detail::Rng rng(options_.seed, trial.number,
                    options_.group ? "\x1ftpe.relative:" + names.front() : "\x1ftpe.relative");
    return choose(rng, pick(below), pick(above), space, below_weights(obs, below, usable));
  }

  // With several objectives: the below kernels' weights (hypervolume
  // contributions), for the trials `usable` keeps; none with one objective
  // (the `weights` option's).
  template <class Usable>
  static std::optional<std::vector<double>> below_weights(const detail::TpeObservations& obs,
                                                          const std::vector<size_t>& below,
                                                          const Usable& usable) {
    if (!detail::tpe_several(obs.scores)) return std::nullopt;
    const auto all = detail::tpe_below_weights(obs.scores, below, obs.violations);
    std::vector<double> out;
    for (size_t k = 0; k < below.size(); ++k) {
      if (usable(below[k])) out.push_back(all[k]);
    }
    return out;
  }

  // Of n_ei_candidates draws from l (below), the one with the highest l/g;
  // `below_weights`, if given, weigh l's kernels instead of the option's.
  std::map<std::string, double> choose(detail::Rng& rng,
                                       const detail::ParzenEstimator::Values& below,
                                       const detail::ParzenEstimator::Values& above,
                                       const SearchSpace& space,
                                       std::optional<std::vector<double>> below_weights) const {
    const detail::ParzenOptions po{.consider_prior = options_.consider_prior,
                                   .prior_weight = options_.prior_weight,
                                   .consider_magic_clip = options_.consider_magic_clip,
                                   .consider_endpoints = options_.consider_endpoints,
                                   .weights = options_.weights,
                                   .multivariate = options_.multivariate,
                                   .legacy_log_pdf = options_.legacy_log_pdf};
    auto below_po = po;
    if (below_weights) below_po.weights = [w = std::move(*below_weights)](int64_t) { return w; };
    const detail::ParzenEstimator l(below, space, below_po), g(above, space, po);
    const auto candidates = l.sample(rng, static_cast<size_t>(options_.n_ei_candidates));
    const auto log_l = l.log_pdf(candidates), log_g = g.log_pdf(candidates);
    size_t best = 0;
    for (size_t k = 1; k < log_l.size(); ++k) {
      if (log_l[k] - log_g[k] > log_l[best] - log_g[best]) best = k;
    }
    std::map<std::string, double> out;
    for (const auto& [name, xs] : candidates) out[name] = xs[best];
    return out;
  }

  TpeOptions options_;
};

}  // namespace sampler
}  // namespace trainkit::tune
