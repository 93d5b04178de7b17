#pragma once
// Initialisation schemes for one tensor, with torch.nn.init's semantics and
// random draws: the same seed gives the same weights as PyTorch. Xavier and
// orthogonal are LibTorch's own functions; Kaiming (whose C++ version lacks
// SELU's gain) and the truncated normal (which LibTorch's C++ API lacks)
// follow torch.nn.init step by step, so they draw the same numbers too.
#include <torch/nn/init.h>
#include <torch/types.h>

#include <cmath>
#include <string>
#include <variant>

#include "trainkit/error.hpp"

namespace trainkit::init {

/// The nonlinearity after the layer, which sets the gain (torch.nn.init.calculate_gain).
enum class Nonlinearity { kLinear, kRelu, kLeakyRelu, kTanh, kSigmoid, kSelu };
/// Which side of a weight keeps its variance: inputs (forward) or outputs (backward).
enum class FanMode { kFanIn, kFanOut };

/// He et al. 2015: std = gain / sqrt(fan). `negative_slope` is leaky_relu's.
struct Kaiming {
  FanMode mode = FanMode::kFanIn;
  Nonlinearity nonlinearity = Nonlinearity::kRelu;
  double negative_slope = 0.0;
  bool uniform = false;  ///< U(-b, b) with the same variance instead of a normal
};
/// Glorot & Bengio 2010: std = gain * sqrt(2 / (fan_in + fan_out)).
struct Xavier {
  double gain = 1.0;
  bool uniform = true;  ///< as torch.nn.init.xavier_uniform_; false: xavier_normal_
};
/// Saxe et al. 2013: a (semi-)orthogonal matrix of the weight's rows, times `gain`.
struct Orthogonal {
  double gain = 1.0;
};
/// N(mean, std^2) redrawn into [low, high] (absolute bounds, as trunc_normal_'s a and b).
struct TruncatedNormal {
  double mean = 0.0;
  double std = 0.02;
  double low = -2.0;
  double high = 2.0;
};
using Scheme = std::variant<Kaiming, Xavier, Orthogonal, TruncatedNormal>;

/// torch.nn.init.calculate_gain.
inline double gain(Nonlinearity nonlinearity, double negative_slope = 0.01) {
  switch (nonlinearity) {
    case Nonlinearity::kLinear:
    case Nonlinearity::kSigmoid:
      return 1.0;
    case Nonlinearity::kRelu:
      return std::sqrt(2.0);
    case Nonlinearity::kLeakyRelu:
      return std::sqrt(2.0 / (1.0 + negative_slope * negative_slope));
    case Nonlinearity::kTanh:
      return 5.0 / 3.0;
    case Nonlinearity::kSelu:
      return 3.0 / 4.0;
  }
  return 1.0;
}

namespace detail {

inline void check(const at::Tensor& w, const Scheme& scheme) {
  using trainkit::detail::require_option;
  const bool needs_matrix = !std::holds_alternative<TruncatedNormal>(scheme);
  require_option(!needs_matrix || w.dim() >= 2, "init.scheme",
                 "a tensor of dimension " + std::to_string(w.dim()),
                 "a weight of at least 2 dimensions for Kaiming, Xavier and orthogonal");
  require_option(w.numel() > 0, "init.scheme", "an empty tensor", "a tensor with elements");
  if (const auto* t = std::get_if<TruncatedNormal>(&scheme)) {
    require_option(t->std > 0 && std::isfinite(t->std), "init.TruncatedNormal.std", t->std,
                   "a finite number > 0");
    require_option(t->low < t->high, "init.TruncatedNormal.low", t->low,
                   "a bound below high = " + std::to_string(t->high));
  }
  if (const auto* o = std::get_if<Orthogonal>(&scheme)) {
    require_option(std::isfinite(o->gain), "init.Orthogonal.gain", o->gain, "a finite number");
  }
}

}  // namespace detail

/// Fills `w` in place (without recording gradients) from `scheme`, drawing
/// from the default generator as torch.nn.init does.
inline void fill(const at::Tensor& w, const Scheme& scheme) {
  detail::check(w, scheme);
  at::NoGradGuard no_grad;
  namespace ti = torch::nn::init;
  if (const auto* k = std::get_if<Kaiming>(&scheme)) {
    // torch.nn.init.kaiming_normal_/kaiming_uniform_, with this file's gains
    // (LibTorch's C++ list lacks SELU): the same draws, so the same weights.
    const auto [fan_in, fan_out] = ti::_calculate_fan_in_and_fan_out(w);
    const double fan = static_cast<double>(k->mode == FanMode::kFanIn ? fan_in : fan_out);
    const double std = gain(k->nonlinearity, k->negative_slope) / std::sqrt(fan);
    if (k->uniform) {
      w.uniform_(-std::sqrt(3.0) * std, std::sqrt(3.0) * std);
    } else {
      w.normal_(0, std);
    }
  } else if (const auto* x = std::get_if<Xavier>(&scheme)) {
    if (x->uniform) {
      ti::xavier_uniform_(w, x->gain);
    } else {
      ti::xavier_normal_(w, x->gain);
    }
  } else if (const auto* o = std::get_if<Orthogonal>(&scheme)) {
    ti::orthogonal_(w, o->gain);
  } else {
    // torch.nn.init._no_grad_trunc_normal_: the inverse CDF of a uniform draw
    // between the bounds' CDF values, then clamped against rounding.
    const auto& t = std::get<TruncatedNormal>(scheme);
    const auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
    const double l = cdf((t.low - t.mean) / t.std), u = cdf((t.high - t.mean) / t.std);
    w.uniform_(2 * l - 1, 2 * u - 1);
    w.erfinv_();
    w.mul_(t.std * std::sqrt(2.0));
    w.add_(t.mean);
    w.clamp_(t.low, t.high);
  }
}

/// The bias of a sigmoid classifier whose initial probability is `prior` for
/// every class (Lin et al. 2017, focal loss): b = -log((1 - prior) / prior),
/// so that a rare class does not swamp the first steps with its loss.
inline double bias_prior(double prior) {
  trainkit::detail::require_option(prior > 0 && prior < 1, "init.bias_prior", prior,
                                   "a probability in (0, 1)");
  return -std::log((1.0 - prior) / prior);
}

}  // namespace trainkit::init
