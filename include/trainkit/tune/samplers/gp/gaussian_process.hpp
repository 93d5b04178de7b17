#pragma once
// The GP model of Gaussian-process Bayesian optimisation (Optuna 4's
// _gp): a Matern 5/2 kernel (one lengthscale per parameter, Hamming
// distance for categoricals) fitted by maximum a posteriori over its
// hyperparameters, its posterior, and log expected improvement. LibTorch
// does the linear algebra and the gradients (double precision, CPU).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

// torch/types.h first: special.h relies on what it declares. The linear
// algebra is ATen's (at::linalg_*): LibTorch 2.x has no torch/linalg.h.
#include <torch/types.h>

#include <torch/autograd.h>
#include <torch/optim/lbfgs.h>
#include <torch/special.h>

namespace trainkit::tune::detail {

/// Matern 5/2 of a squared, lengthscale-scaled distance d:
/// exp(-sqrt(5d)) (1 + sqrt(5d) + 5d/3). The derivative in d is written out
/// because autograd through sqrt gives 0 * inf = nan at d = 0 (a training
/// point against itself).
struct Matern52 : torch::autograd::Function<Matern52> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor d) {
    const auto s = torch::sqrt(5.0 * d);
    const auto e = torch::exp(-s);
    ctx->save_for_backward({-5.0 / 6.0 * (s + 1.0) * e});
    return e * (5.0 / 3.0 * d + s + 1.0);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    return {ctx->get_saved_variables()[0] * grad[0]};
  }
};

/// log E[max(0, z + e)], e ~ N(0, 1), i.e. log(z Phi(z) + phi(z)), stable
/// far below the incumbent (Ament et al. 2023, "Unexpected improvements to
/// expected improvement", eq. 9). With both branches, each sees clamped
/// inputs so the one not taken has finite gradients (torch::where would
/// pass on a nan).
inline torch::Tensor standard_log_ei(const torch::Tensor& z) {
  constexpr double sqrt_half = 0.70710678118654752440;
  constexpr double inv_sqrt_2pi = 0.39894228040143267794;
  constexpr double sqrt_half_pi = 1.25331413731550025121;
  constexpr double log_sqrt_2pi = 0.91893853320467274178;
  constexpr double cut = -25;
  const bool any_tail = (z < cut).any().item<bool>();
  const auto z1 = any_tail ? z.clamp_min(cut) : z;
  const auto direct = torch::log(0.5 * z1 * torch::special::erfc(-sqrt_half * z1) +
                                 torch::exp(-0.5 * z1 * z1) * inv_sqrt_2pi);
  if (!any_tail) return direct;  // the common case: half the work
  const auto z2 = z.clamp_max(cut);
  const auto tail = -0.5 * z2 * z2 - log_sqrt_2pi +
                    torch::log1p(sqrt_half_pi * z2 * torch::special::erfcx(-sqrt_half * z2));
  return torch::where(z < cut, tail, direct);
}

/// log E[max(0, y - f0)] for y ~ N(mean, var) (var > 0): log expected
/// improvement over f0 when maximising.
inline torch::Tensor log_ei(const torch::Tensor& mean, const torch::Tensor& var, double f0) {
  const auto sigma = torch::sqrt(var);
  return standard_log_ei((mean - f0) / sigma) + torch::log(sigma);
}

/// E[max(0, y - f0)] for y ~ N(mean, var).
inline torch::Tensor expected_improvement(const torch::Tensor& mean, const torch::Tensor& var,
                                          double f0) {
  return torch::exp(log_ei(mean, var, f0));
}

/// The kernel's hyperparameters: k(a, b) = kernel_scale *
/// matern52(sum_j isl_j * dist_j(a, b)^2), plus noise_var on the diagonal of
/// the training covariance.
struct KernelParams {
  std::vector<double> inverse_squared_lengthscales;  ///< one per column; empty: all 1
  double kernel_scale = 1;
  double noise_var = 1;
};

/// The floor of the noise variance, on standardised values. Optuna's is
/// 1e-6; at 1e-8 the model resolves a deterministic objective 10x finer
/// (its noise sits at the floor). The covariance's condition number, at most
/// n * kernel_scale / floor (about 1e11 at 100 trials), stays far from
/// double precision's 4.5e15 (docs/benchmarks.md, 2026-11-25 (afternoon)).
inline constexpr double default_minimum_noise = 1e-8;

struct GpFitOptions {
  double minimum_noise = default_minimum_noise;  ///< noise_var >= this
  bool deterministic_objective = false;          ///< noise_var fixed at minimum_noise
  int64_t max_iter = 200;                        ///< L-BFGS iterations
  double gtol = 1e-2;                            ///< stop when every |gradient| <= this (Optuna's)
};

/// A zero-mean GP regressor on normalised inputs. Categorical columns hold
/// choice indices and contribute 1 to the squared distance when they differ.
class GaussianProcess {
 public:
  /// x: (n, d), y: (n); both converted to double.
  GaussianProcess(torch::Tensor x, torch::Tensor y, std::vector<bool> is_categorical = {},
                  KernelParams params = {})
      : x_(x.to(torch::kDouble).contiguous()), y_(y.to(torch::kDouble).reshape({-1})) {
    const int64_t d = x_.size(1);
    if (is_categorical.empty()) is_categorical.assign(static_cast<size_t>(d), false);
    if (static_cast<int64_t>(is_categorical.size()) != d || y_.size(0) != x_.size(0))
      throw std::invalid_argument("trainkit: GaussianProcess: x is (n, d), y (n), d flags");
    std::vector<uint8_t> flags(is_categorical.begin(), is_categorical.end());
    categorical_ = torch::tensor(flags, torch::kBool);
    any_categorical_ = std::any_of(flags.begin(), flags.end(), [](uint8_t f) { return f != 0; });
    torch::NoGradGuard no_grad;
    train_sqd_ = squared_distance(x_, x_);
    set_params(std::move(params));
  }

  int64_t dim() const { return x_.size(1); }
  const KernelParams& params() const { return params_; }
  /// Sets the hyperparameters (the Cholesky factor is recomputed). Throws,
  /// changing nothing, when the covariance has no Cholesky factor.
  void set_params(KernelParams p) {
    if (p.inverse_squared_lengthscales.empty())
      p.inverse_squared_lengthscales.assign(static_cast<size_t>(dim()), 1.0);
    if (static_cast<int64_t>(p.inverse_squared_lengthscales.size()) != dim())
      throw std::invalid_argument("trainkit: GaussianProcess: one lengthscale per column");
    auto isl = torch::tensor(p.inverse_squared_lengthscales, torch::kDouble);
    auto scale = torch::tensor(p.kernel_scale, torch::kDouble);
    auto noise = torch::tensor(p.noise_var, torch::kDouble);
    torch::NoGradGuard no_grad;
    const auto chol = at::linalg_cholesky(train_covariance(isl, scale, noise));
    auto alpha = solve_cholesky(chol, y_.unsqueeze(-1)).squeeze(-1);
    // L^-1 once: the acquisition's ascent differentiates through a matmul,
    // several times cheaper than through a triangular solve.
    auto inv_chol_t = at::linalg_solve_triangular(chol, torch::eye(x_.size(0), torch::kDouble),
                                                  /*upper=*/false, /*left=*/true,
                                                  /*unitriangular=*/false)
                          .t()
                          .contiguous();
    params_ = std::move(p);
    isl_ = std::move(isl), scale_ = std::move(scale), noise_ = std::move(noise);
    alpha_ = std::move(alpha), inv_chol_t_ = std::move(inv_chol_t);
  }
  std::vector<double> lengthscales() const {
    std::vector<double> out;
    for (double isl : params_.inverse_squared_lengthscales) out.push_back(1 / std::sqrt(isl));
    return out;
  }

  /// Prior covariance between the rows of a (m, d) and of b (k, d): (m, k).
  torch::Tensor kernel(const torch::Tensor& a, const torch::Tensor& b) const {
    return kernel_of(squared_distance(a, b), isl_, scale_);
  }

  /// Posterior mean and variance of f at the rows of x ((m, d), or (d) for
  /// one point); differentiable in x when x requires grad.
  std::pair<torch::Tensor, torch::Tensor> posterior(const torch::Tensor& x) const {
    const auto xs = x.dim() == 1 ? x.unsqueeze(0) : x;
    const auto k = kernel(xs, x_);  // (m, n)
    auto mean = k.matmul(alpha_);
    // k K^-1 k^T = |L^-1 k^T|^2 row by row, with K = L L^T.
    const auto v = k.matmul(inv_chol_t_);
    auto var = (scale_ - v.square().sum(-1)).clamp_min(0.0);
    if (x.dim() == 1) return {mean.squeeze(0), var.squeeze(0)};
    return {mean, var};
  }

  /// log p(y | x, params), the Gaussian marginal likelihood.
  double log_marginal_likelihood() const {
    torch::NoGradGuard no_grad;
    return log_marginal_likelihood(isl_, scale_, noise_).item<double>();
  }
  /// Optuna's log prior of the hyperparameters (up to a constant).
  double log_prior() const {
    torch::NoGradGuard no_grad;
    return log_prior(isl_, scale_, noise_).item<double>();
  }

  /// Maximises log marginal likelihood + log prior over the log of the
  /// hyperparameters with L-BFGS, starting from the current ones. A failed
  /// evaluation (no Cholesky factor) ends the search; the best point seen is
  /// kept, and the defaults when even the start failed.
  void fit(const GpFitOptions& o = {}) {
    torch::AutoGradMode grad_on(true);
    const int64_t d = dim();
    const bool fixed_noise = o.deterministic_objective;
    std::vector<double> init;
    for (double isl : params_.inverse_squared_lengthscales) init.push_back(std::log(isl));
    init.push_back(std::log(params_.kernel_scale));
    // Noise is minimum_noise + exp(raw); start just above the floor at worst.
    if (!fixed_noise)
      init.push_back(
          std::log(std::max(params_.noise_var - o.minimum_noise, 0.01 * o.minimum_noise)));
    auto raw = torch::tensor(init, torch::kDouble).requires_grad_(true);
    const auto noise_floor = torch::tensor(o.minimum_noise, torch::kDouble);

    struct Unpacked {
      torch::Tensor isl, scale, noise;
    };
    auto unpack = [&](const torch::Tensor& r) {
      return Unpacked{torch::exp(r.slice(0, 0, d)), torch::exp(r[d]),
                      fixed_noise ? noise_floor : torch::exp(r[d + 1]) + noise_floor};
    };
    struct NonFinite : std::runtime_error {
      NonFinite() : std::runtime_error("non-finite") {}
    };

    double best_loss = std::numeric_limits<double>::infinity();
    auto best_raw = raw.detach().clone();
    torch::optim::LBFGS lbfgs({raw}, torch::optim::LBFGSOptions(1.0)
                                         .max_iter(o.max_iter)
                                         .tolerance_grad(o.gtol)
                                         .tolerance_change(1e-9)
                                         .history_size(10)
                                         .line_search_fn(std::string("strong_wolfe")));
    auto closure = [&]() -> torch::Tensor {
      lbfgs.zero_grad();
      const auto p = unpack(raw);
      auto loss =
          -(log_marginal_likelihood(p.isl, p.scale, p.noise) + log_prior(p.isl, p.scale, p.noise));
      const double value = loss.item<double>();
      if (!std::isfinite(value)) throw NonFinite();
      loss.backward();
      if (value < best_loss) {
        best_loss = value;
        best_raw = raw.detach().clone();
      }
      return loss;
    };
    try {
      lbfgs.step(closure);
    } catch (const std::exception&) {  // c10::Error from Cholesky, or NonFinite: keep the best
    }
    KernelParams fitted;
    if (std::isfinite(best_loss)) {
      torch::NoGradGuard no_grad;
      const auto p = unpack(best_raw);
      const auto isl = p.isl.contiguous();
      fitted.inverse_squared_lengthscales.assign(isl.data_ptr<double>(),
                                                 isl.data_ptr<double>() + d);
      fitted.kernel_scale = p.scale.item<double>();
      fitted.noise_var = p.noise.item<double>();
    }
    try {
      set_params(std::move(fitted));
    } catch (const std::exception&) {
      set_params({});  // noise 1: always factorisable
    }
  }

 private:
  // Squared differences, (..., m, k, d); 0/1 for categorical columns.
  torch::Tensor squared_distance(const torch::Tensor& a, const torch::Tensor& b) const {
    auto sqd = (a.unsqueeze(-2) - b.unsqueeze(-3)).square();
    if (any_categorical_) sqd = torch::where(categorical_, (sqd > 0).to(torch::kDouble), sqd);
    return sqd;
  }
  static torch::Tensor kernel_of(const torch::Tensor& sqd, const torch::Tensor& isl,
                                 const torch::Tensor& scale) {
    return Matern52::apply(sqd.matmul(isl)) * scale;
  }
  // The training points' covariance, noise on the diagonal.
  torch::Tensor train_covariance(const torch::Tensor& isl, const torch::Tensor& scale,
                                 const torch::Tensor& noise) const {
    return kernel_of(train_sqd_, isl, scale) + noise * torch::eye(x_.size(0), torch::kDouble);
  }
  // X with L L^T X = B.
  static torch::Tensor solve_cholesky(const torch::Tensor& l, const torch::Tensor& b) {
    const auto u = at::linalg_solve_triangular(l, b, /*upper=*/false, true, false);
    return at::linalg_solve_triangular(l.t(), u, /*upper=*/true, true, false);
  }
  torch::Tensor log_marginal_likelihood(const torch::Tensor& isl, const torch::Tensor& scale,
                                        const torch::Tensor& noise) const {
    const int64_t n = x_.size(0);
    const auto l = at::linalg_cholesky(train_covariance(isl, scale, noise));
    const auto u = at::linalg_solve_triangular(l, y_.unsqueeze(-1), false, true, false).squeeze(-1);
    // log det K = 2 sum log diag L
    return -l.diagonal().log().sum() - 0.5 * u.dot(u) -
           0.5 * static_cast<double>(n) * std::log(2 * std::numbers::pi);
  }
  // Optuna's heuristic priors: a penalty on very long and very short
  // lengthscales, Gamma(2, 1) on the scale, Gamma(1.1, 30) on the noise.
  static torch::Tensor log_prior(const torch::Tensor& isl, const torch::Tensor& scale,
                                 const torch::Tensor& noise) {
    auto gamma = [](const torch::Tensor& v, double concentration, double rate) {
      return (concentration - 1) * torch::log(v) - rate * v;
    };
    return -(0.1 / isl + 0.1 * isl).sum() + gamma(scale, 2, 1) + gamma(noise, 1.1, 30);
  }

  torch::Tensor x_, y_, categorical_, train_sqd_;
  bool any_categorical_ = false;
  KernelParams params_;
  torch::Tensor isl_, scale_, noise_, alpha_, inv_chol_t_;
};

}  // namespace trainkit::tune::detail
