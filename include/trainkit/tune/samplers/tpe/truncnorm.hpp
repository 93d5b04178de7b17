#pragma once
// The standard normal truncated to [a, b], as TPE's kernels need it (Optuna's
// _truncnorm, itself from SciPy): densities, masses and quantiles in log
// space, so that far tails keep their precision.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace trainkit::tune::detail {

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

}  // namespace trainkit::tune::detail
