#pragma once
// optim::Muon: momentum orthogonalised by a Newton-Schulz iteration
// (Jordan et al., 2024), as torch.optim.Muon, for the parameter groups
// marked `muon` (2-d matrices: the hidden layers' weights); the other groups
// step by AdamW (the embeddings, the head, norms and biases), as the speed
// records use it. One policy, so schedules, checkpoints and parameter
// groups treat both parts as any optimizer's.
//
// Per matrix W with gradient G, momentum buffer B (torch.optim.Muon's step):
//   B = lerp(B, G, 1 - momentum);  U = nesterov ? lerp(G, B, momentum) : B
//   O = NS(U): X = U / max(|U|_F, eps) (transposed when tall), then ns_steps
//       times A = X X^T, X = a X + (b A + (c A) A) X
//   W = W (1 - lr weight_decay) - lr_adjusted O
// with lr_adjusted = lr sqrt(max(1, rows / cols)) ("original") or
// 0.2 lr sqrt(max(rows, cols)) ("match_rms_adamw").
// Under sharding a rank holds slices that cut matrices apart: the update is
// gathered whole and each rank orthogonalises the matrices its slice touches.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/optim/adamw.hpp"
#include "trainkit/optim/detail/adam_kernel.hpp"
#include "trainkit/optim/detail/device_step.hpp"
#include "trainkit/optim/detail/group_options.hpp"
#include "trainkit/param_groups.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::optim {

struct MuonOptions {
  double lr = 1e-3;  ///< the orthogonalised groups' rate (torch.optim.Muon's default)
  double weight_decay = 0.1;
  double momentum = 0.95;
  bool nesterov = true;
  std::array<double, 3> ns_coefficients{3.4445, -4.7750, 2.0315};
  int64_t ns_steps = 5;
  double eps = 1e-7;
  enum class AdjustLr { Original, MatchRmsAdamW };
  AdjustLr adjust_lr = AdjustLr::Original;
  /// The iteration's dtype. Unset: bf16 on CUDA (as the reference), fp32
  /// elsewhere (the dtype two CPU builds round alike; docs/recipes.md).
  std::optional<at::ScalarType> ns_dtype{};
  /// The groups not marked `muon` step by AdamW with these (group overrides
  /// apply; lr_scale scales adamw.lr).
  AdamWOptions adamw{};
};

class Muon : public detail::CapturableOptimizer<Muon, MuonOptions> {
 public:
  static constexpr const char* stable_name(std::type_identity<Muon>) {
    return "trainkit::optim::Muon";
  }
  using Options = MuonOptions;

  Muon(FlatParams& params, const Options& options) : CapturableOptimizer(params, options, resolve) {
    const auto groups = params.groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const auto& g = groups[i];
      const bool muon = params.param_groups()[g.param_group].options.muon.value_or(false);
      if (muon) check_matrices(params, g, params.param_groups()[g.param_group].name);
      ns_dtype_.push_back(options.ns_dtype.value_or(g.data.is_cuda() ? at::kBFloat16 : at::kFloat));
      momentum_.push_back(muon ? at::zeros_like(g.data) : at::Tensor());
      exp_avg_.push_back(muon ? at::Tensor() : at::zeros_like(g.data));
      exp_avg_sq_.push_back(muon ? at::Tensor() : at::zeros_like(g.data));
      max_exp_avg_sq_.push_back(
          !muon && group_[g.param_group].adamw.amsgrad ? at::zeros_like(g.data) : at::Tensor());
      scratch_.push_back(muon ? at::Tensor() : at::empty_like(g.data));
    }
  }

  /// OneCycle's momentum cycling drives the orthogonalised groups' momentum.
  double momentum() const { return group_.front().momentum; }
  void set_momentum(double m) { set_all(&Options::momentum, m); }
  /// A group of the 2-d parameters outside embeddings whose names do not
  /// match `exclude` (the head: "lm_head"), marked muon: the hidden layers'
  /// matrices, as the speed records orthogonalise them. The rest (embeddings,
  /// the head, norms, biases) stay in the default group, AdamW's.
  static ParamGroup hidden_matrices(const std::string& exclude = "") {
    auto excluded = params::name_matches(exclude.empty() ? "$^" : exclude);
    auto embedding = params::in_module<torch::nn::EmbeddingImpl>();
    return {"muon",
            [excluded, embedding](const ParamInfo& p) {
              return p.tensor.dim() == 2 && !embedding(p) && !excluded(p);
            },
            {.muon = true}};
  }

  StateDict state_dict() const {
    StateDict d;
    steps_.counts().save(d);
    save_field(d, "momentum", &Options::momentum);  // may be cycled by a schedule
    detail::save_state_tensors(d, [this](auto&& f) { for_each_state(f); });
    return d;
  }
  /// The state tensors that follow the flat parameters element by element.
  ElementwiseState elementwise_state() const {
    return detail::elementwise_of([this](auto&& f) { for_each_state(f); });
  }
  std::vector<std::string> per_group_values() const { return {"steps"}; }
  void load_state_dict(const StateDict& d) {
    const auto assign = detail::read_state_tensors(
        d, [this](auto&& f) { for_each_state(f); });  // checked, then assigned
    const auto steps = detail::StepCounts::read(d, steps_.buffers());
    const auto momentum = read_field(d, "momentum", &Options::momentum);
    torch::NoGradGuard no_grad;
    for (auto& [target, source] : assign) target.copy_(source);
    steps_.assign(steps);
    assign_field(&Options::momentum, momentum);
  }

  /// The Newton-Schulz iteration of a 2-d `update`, in `dtype`: torch.optim.Muon's
  /// order of operations, so that in fp32 it agrees with it to rounding.
  static at::Tensor orthogonalise(const at::Tensor& update, const Options& o,
                                  at::ScalarType dtype) {
    const auto [a, b, c] = o.ns_coefficients;
    const bool tall = update.size(0) > update.size(1);
    auto x = update.to(dtype, /*non_blocking=*/false, /*copy=*/true);
    if (tall) x = x.t();
    x = x / x.norm().clamp_min(o.eps);
    for (int64_t s = 0; s < o.ns_steps; ++s) {
      const auto gram = x.mm(x.t());
      const auto poly = b * gram + (c * gram).mm(gram);
      x = a * x + poly.mm(x);
    }
    return tall ? x.t() : x;
  }

 private:
  friend CapturableOptimizer;

  /// Flat buffer i's step, with scalars S: double on the host, 0-d
  /// tensors on the device (called for each buffer not frozen).
  template <class S>
  void step_buffer(size_t i, FlatGroup& g, detail::InfSkip& skip) {
    using namespace detail;
    const auto& o = group_[g.param_group];
    const S lr = rate<S>(g.param_group);  // an AdamW group's is its adamw.lr
    const S t = steps_.advance<S>(i, skip);
    for (const auto& changed :
         {g.data, momentum_[i], exp_avg_[i], exp_avg_sq_[i], max_exp_avg_sq_[i]})
      if (changed.defined()) skip.keep(changed);
    if (!momentum_[i].defined()) {
      const auto& a = o.adamw;
      if constexpr (std::is_same_v<S, double>) {
        const AdamHyper h{lr,        a.beta1,   a.beta2, a.eps, a.weight_decay, /*decoupled=*/true,
                          a.amsgrad, int64_t(t)};
        adam_step(g.data, g.grad, exp_avg_[i], exp_avg_sq_[i], max_exp_avg_sq_[i], scratch_[i], h);
      } else {
        adamw_step_on_device(g.data, g.grad, exp_avg_[i], exp_avg_sq_[i], max_exp_avg_sq_[i],
                             scratch_[i], lr, t, a.beta1, a.beta2, a.eps, a.weight_decay);
      }
      return;
    }
    if (g.whole) {
      step_slice<S>(i, g, o, lr);
      return;
    }
    for (size_t k = 0; k < g.views.size(); ++k) {
      const auto view = [&](const at::Tensor& t) {
        return t.as_strided(g.views[k].sizes, g.views[k].strides, g.offsets[k]);
      };
      auto param = view(g.data);
      const auto grad = view(g.grad);
      auto buffer = view(momentum_[i]);
      buffer.lerp_(grad, 1.0 - o.momentum);
      const auto update = o.nesterov ? grad.lerp(buffer, o.momentum) : buffer;
      const auto ortho = orthogonalise(update, o, ns_dtype_[i]);
      scale_by(param, 1.0 - lr * o.weight_decay);
      add_scaled(param, ortho, -lr * lr_ratio(o, param.size(0), param.size(1)));
    }
  }

  /// f(state-dict name, tensor, flat buffer) for each per-element state tensor.
  template <class F>
  void for_each_state(F&& f) const {
    for (size_t i = 0; i < momentum_.size(); ++i) {
      const auto n = std::to_string(i);
      if (momentum_[i].defined()) f("momentum_buffer." + n, momentum_[i], i);
      if (exp_avg_[i].defined()) f("exp_avg." + n, exp_avg_[i], i);
      if (exp_avg_sq_[i].defined()) f("exp_avg_sq." + n, exp_avg_sq_[i], i);
      if (max_exp_avg_sq_[i].defined()) f("max_exp_avg_sq." + n, max_exp_avg_sq_[i], i);
    }
  }

  /// A rank's slice of a muon group (parallel::ZeroSharded, ShardGradOp,
  /// FullShard): the momentum on the slice, the update gathered whole, and
  /// each matrix the slice touches orthogonalised here (the rest by the
  /// ranks that hold them): the same arithmetic as on whole buffers.
  template <class S>
  void step_slice(size_t i, FlatGroup& g, const Options& o, const S& lr) {
    auto& buffer = momentum_[i];
    buffer.lerp_(g.grad, 1.0 - o.momentum);
    const auto update =
        params_->gather_across_ranks(o.nesterov ? g.grad.lerp(buffer, o.momentum) : buffer, i);
    const auto& whole = *g.whole;
    const int64_t begin = whole.begin, end = begin + g.numel();
    for (size_t k = 0; k < whole.views.size(); ++k) {
      const auto& v = whole.views[k];
      const int64_t first = whole.offsets[k], last = first + v.sizes[0] * v.sizes[1];
      const int64_t lo = std::max(first, begin), hi = std::min(last, end);
      if (lo >= hi) continue;
      const auto ortho =
          orthogonalise(update.as_strided(v.sizes, v.strides, first), o, ns_dtype_[i]);
      auto param = g.data.narrow(0, lo - begin, hi - lo);
      detail::scale_by(param, 1.0 - lr * o.weight_decay);
      // a 2-d parameter is row-major in its buffer (channels-last is 4-d only)
      detail::add_scaled(param, ortho.contiguous().view({-1}).narrow(0, lo - first, hi - lo),
                         -lr * lr_ratio(o, v.sizes[0], v.sizes[1]));
    }
  }

  /// The learning rate's adjustment by shape (adjust_lr).
  static double lr_ratio(const Options& o, int64_t rows, int64_t cols) {
    return o.adjust_lr == Options::AdjustLr::Original
               ? std::sqrt(std::max(1.0, double(rows) / double(cols)))
               : 0.2 * std::sqrt(double(std::max(rows, cols)));
  }

  /// 2-d matrices only; a shard's slices need its strategy's gather.
  static void check_matrices(const FlatParams& params, const FlatGroup& g,
                             const std::string& group) {
    if (g.whole && !params.gathers_across_ranks()) {
      throw Error(
          "trainkit: optim::Muon orthogonalises whole matrices, and this rank holds slices of "
          "group \"" +
          group +
          "\" without a way to gather them: build it on the shard a parallel strategy's attach "
          "returns (it sets FlatParams::set_gather_across_ranks)");
    }
    for (const auto& v : g.whole ? g.whole->views : g.views) {
      if (v.sizes.size() != 2) {
        throw Error("trainkit: optim::Muon: parameter group \"" + group +
                    "\" is marked muon and holds a parameter of shape " +
                    c10::str(c10::IntArrayRef(v.sizes)) +
                    "; Muon steps 2-d matrices (leave biases, norms and embeddings to AdamW: "
                    "optim::Muon::hidden_matrices)");
      }
    }
  }

  static Options resolve(Options o, const GroupOptions& g, size_t param_group) {
    using detail::refuse_group_option;
    const auto prefix = detail::group_prefix(param_group);
    refuse_group_option(g.trust_ratio, param_group, "trust_ratio", "optim::Muon",
                        "those of its muon and AdamW groups");
    if (g.muon.value_or(false)) {
      const char* accepted = "lr, lr_scale, weight_decay, momentum, nesterov (muon groups)";
      refuse_group_option(g.beta1, param_group, "beta1", "optim::Muon's muon groups", accepted);
      refuse_group_option(g.beta2, param_group, "beta2", "optim::Muon's muon groups", accepted);
      refuse_group_option(g.eps, param_group, "eps", "optim::Muon's muon groups", accepted);
      refuse_group_option(g.amsgrad, param_group, "amsgrad", "optim::Muon's muon groups", accepted);
      refuse_group_option(g.dampening, param_group, "dampening", "optim::Muon", accepted);
      o.lr = detail::group_lr(g, o.lr, param_group);
      o.weight_decay = g.weight_decay.value_or(o.weight_decay);
      o.momentum = g.momentum.value_or(o.momentum);
      o.nesterov = g.nesterov.value_or(o.nesterov);
    } else {
      const char* accepted =
          "lr, lr_scale, weight_decay, beta1, beta2, eps, amsgrad (AdamW groups)";
      refuse_group_option(g.momentum, param_group, "momentum", "optim::Muon's AdamW groups",
                          accepted);
      refuse_group_option(g.dampening, param_group, "dampening", "optim::Muon", accepted);
      refuse_group_option(g.nesterov, param_group, "nesterov", "optim::Muon's AdamW groups",
                          accepted);
      auto& a = o.adamw;
      a.lr = detail::group_lr(g, a.lr, param_group);
      a.weight_decay = g.weight_decay.value_or(a.weight_decay);
      a.beta1 = g.beta1.value_or(a.beta1);
      a.beta2 = g.beta2.value_or(a.beta2);
      a.eps = g.eps.value_or(a.eps);
      a.amsgrad = g.amsgrad.value_or(a.amsgrad);
      o.lr = a.lr;  // the group's rate, as schedules read and set it
      detail::AdamFamily<AdamWOptions, true>::check(a, prefix);
      using detail::require_option;
      require_option(!a.fused.value_or(false), prefix + ".adamw.fused", "true",
                     "unset or false (optim::Muon steps its AdamW groups with trainkit's kernel)");
    }
    check(o, prefix);
    return o;
  }
  static void check(const Options& o, const std::string& prefix) {
    using detail::require_option;
    require_option(std::isfinite(o.lr) && o.lr >= 0.0, prefix + ".lr", o.lr,
                   "a finite number >= 0");
    require_option(o.weight_decay >= 0.0, prefix + ".weight_decay", o.weight_decay,
                   "a number >= 0");
    require_option(o.momentum >= 0.0 && o.momentum < 1.0, prefix + ".momentum", o.momentum,
                   "0 <= momentum < 1");
    require_option(o.ns_steps >= 1 && o.ns_steps < 100, prefix + ".ns_steps", o.ns_steps,
                   "1 to 99 (torch.optim.Muon's bound)");
    require_option(o.eps > 0.0, prefix + ".eps", o.eps, "a number > 0");
    if (o.ns_dtype) {
      require_option(
          *o.ns_dtype == at::kFloat || *o.ns_dtype == at::kBFloat16 || *o.ns_dtype == at::kDouble,
          prefix + ".ns_dtype", c10::toString(*o.ns_dtype),
          "at::kBFloat16, at::kFloat or at::kDouble");
    }
  }

  std::vector<at::ScalarType> ns_dtype_;  ///< per flat buffer
  std::vector<at::Tensor> momentum_;      ///< muon buffers (undefined for AdamW's)
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_, max_exp_avg_sq_, scratch_;  ///< AdamW buffers
};

}  // namespace trainkit::optim
