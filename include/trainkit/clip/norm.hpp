#pragma once
// clip::Norm: rescale gradients so their total p-norm is at most max_norm
// (torch.nn.utils.clip_grad_norm_). The norm is taken over 4096-element chunks
// of the flat gradient and then over the chunk norms: a handful of ops, no
// host read, and short float32 sums (bench_clip: 1.4e-7 relative error on 16M
// elements, where one plain float32 norm in LibTorch 1.13 is off by 7.6e-4).
// Over gradients sharded across ranks, the local norms' p-th powers are
// summed over the ranks (the max for the inf-norm).
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"
#include "trainkit/params.hpp"

namespace trainkit::clip {

/// Total p-norm of all gradients, as a 0-dim float tensor on their device.
TRAINKIT_INLINE at::Tensor total_grad_norm(FlatParams& params, double norm_type,
                                           int64_t chunk = 4096);

class Norm {
 public:
  static constexpr const char* stable_name(std::type_identity<Norm>) {
    return "trainkit::clip::Norm";
  }
  struct Options {
    double max_norm = 1.0;
    double norm_type = 2.0;
  };
  Norm() : Norm(Options{}) {}
  explicit Norm(const Options& o) : options_(o) {
    detail::require_option(o.max_norm > 0.0 && std::isfinite(o.max_norm), "clip.max_norm",
                           o.max_norm, "a finite number > 0");
    detail::require_option(o.norm_type > 0.0, "clip.norm_type", o.norm_type,
                           "a number > 0, or infinity for the max-norm");
  }

  void clip(FlatParams& params);

  /// Total norm before clipping, on the device (read only when logging).
  const at::Tensor& last_norm() const { return last_norm_; }

 private:
  Options options_;
  at::Tensor last_norm_;
};

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE at::Tensor total_grad_norm(FlatParams& params, double norm_type, int64_t chunk) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> parts;
  for (auto& g : params.groups()) {
    const int64_t n = g.grad.numel(), full = n / chunk * chunk;
    if (full > 0) {
      parts.push_back(at::linalg_vector_norm(g.grad.narrow(0, 0, full).view({-1, chunk}), norm_type,
                                             {1}, false, at::kFloat));
    }
    if (n > full) {
      parts.push_back(
          at::linalg_vector_norm(g.grad.narrow(0, full, n - full), norm_type, {}, false, at::kFloat)
              .reshape({1}));
    }
  }
  const auto device =
      params.groups().empty() ? at::Device(at::kCPU) : params.groups().front().grad.device();
  at::Tensor local = parts.empty() ? at::zeros({}, at::TensorOptions(at::kFloat).device(device))
                     : parts.size() == 1 ? at::linalg_vector_norm(parts.front(), norm_type)
                                         : at::linalg_vector_norm(at::cat(parts), norm_type);
  if (!params.spread_across_ranks()) return local;
  // This rank's slices of the gradients: the total over ranks, as a norm of the local norms.
  using Reduction = FlatParams::Reduction;
  if (std::isinf(norm_type)) {
    auto total = local.reshape({1});
    params.reduce_across_ranks(total, Reduction::Max);
    return total.reshape({});
  }
  auto powers = local.pow(norm_type).reshape({1});
  params.reduce_across_ranks(powers, Reduction::Sum);
  return powers.pow(1.0 / norm_type).reshape({});
}

TRAINKIT_INLINE void Norm::clip(FlatParams& params) {
  torch::NoGradGuard no_grad;
  last_norm_ = total_grad_norm(params, options_.norm_type);
  const auto coef = (options_.max_norm / (last_norm_ + 1e-6)).clamp_max_(1.0);
  for (auto& g : params.groups()) g.grad.mul_(coef.to(g.grad.scalar_type()));
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::clip
