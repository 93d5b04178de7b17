#pragma once
// TPE's model of a set of trials (Optuna 3.1's _ParzenEstimator): a mixture
// with one component per observation and a wide prior, each component a
// truncated normal kernel per numerical parameter (on its ModelAxis) or a
// categorical distribution; drawn from, and its log-density evaluated.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/tune/detail/rng.hpp"
#include "trainkit/tune/samplers/detail/model_space.hpp"
#include "trainkit/tune/samplers/tpe/options.hpp"
#include "trainkit/tune/samplers/tpe/truncnorm.hpp"
#include "trainkit/tune/space.hpp"

namespace trainkit::tune::detail {

/// One parameter of a Parzen estimator: a kernel per observation (and the prior).
/// A numerical one's kernels live on its ModelAxis (a grid point's kernel
/// mass is its cell's).
struct ParzenParam : ModelAxis {
  std::string name;
  Distribution distribution;
  bool categorical = false;
  std::vector<double> mus, sigmas;
  std::vector<std::vector<double>> probabilities;  ///< categorical: [kernel][choice]
};

/// Optuna 3.1's _ParzenEstimator: a mixture over `space` whose component k
/// puts, on each parameter, a kernel at observation k (the last component
/// being the prior). Values are internal values (a categorical's index).
class ParzenEstimator {
 public:
  /// Per parameter name, one value per observation (or per point).
  using Values = std::map<std::string, std::vector<double>>;

  /// The model of `observations` over `space` with TPE's settings `o`;
  /// `weights`, if given, weigh the observations instead of `o.weights`.
  ParzenEstimator(const Values& observations, const SearchSpace& space, sampler::TpeOptions o,
                  std::optional<std::vector<double>> weights = std::nullopt)
      : options_(std::move(o)) {
    if (weights) options_.weights = [w = std::move(*weights)](int64_t) { return w; };
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
        static_cast<ModelAxis&>(p) = ModelAxis(dist);
        std::vector<double> x(obs.size());
        std::transform(obs.begin(), obs.end(), x.begin(), [&](double v) { return p.to_model(v); });
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
    const double y = p.to_model(x);
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

  sampler::TpeOptions options_;
  size_t n_ = 0;
  std::vector<double> weights_;
  std::vector<ParzenParam> params_;
};

}  // namespace trainkit::tune::detail
