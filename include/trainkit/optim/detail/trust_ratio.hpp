#pragma once
// Layer-wise trust ratios (optim::Lars, optim::Lamb) over flat buffers: the
// L2 norm of each parameter's part of a buffer, computed on the device
// (no host synchronisation), and a per-parameter factor spread back over
// the buffer's elements. In a shard a rank holds part of some parameters:
// the squares of its parts are totalled over the ranks
// (FlatParams::reduce_across_ranks) before the root, so every rank sees
// each whole parameter's norm.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "trainkit/params.hpp"

namespace trainkit::detail {

/// Row r: the norm of each parameter of flat group `g` in `tensors[r]`
/// (each laid out as g.data); [tensors.size(), parameters].
inline at::Tensor parameter_norms(const FlatParams& flat, const FlatGroup& g,
                                  const std::vector<at::Tensor>& tensors) {
  const auto zero = at::zeros({}, g.data.options());
  std::vector<at::Tensor> parts;
  std::vector<size_t> where;  // the row-major position of each part
  for (size_t r = 0; r < tensors.size(); ++r) {
    int64_t offset = 0;
    for (size_t k = 0; k < g.param_lengths.size(); ++k) {
      const int64_t n = g.param_lengths[k];
      if (n > 0) {
        parts.push_back(tensors[r].narrow(0, offset, n));
        where.push_back(r * g.param_lengths.size() + k);
      }
      offset += n;
    }
  }
  std::vector<at::Tensor> norms(tensors.size() * g.param_lengths.size(), zero);
  if (!parts.empty()) {
    const auto found = at::_foreach_norm(parts, 2);
    for (size_t i = 0; i < found.size(); ++i) norms[where[i]] = found[i];
  }
  auto out = at::stack(norms).view({int64_t(tensors.size()), int64_t(g.param_lengths.size())});
  if (!flat.spread_across_ranks()) return out;
  auto squares = out.square();
  flat.reduce_across_ranks(squares, FlatParams::Reduction::Sum);
  return squares.sqrt_();
}

/// g.param_lengths on g's device, for spread_over_elements (made once: a
/// copy from the host each step would wait for the device).
inline at::Tensor lengths_on_device(const FlatGroup& g) {
  return at::tensor(g.param_lengths, at::kLong).to(g.data.device());
}

/// `per_parameter` (one value per parameter of `g`) repeated over each
/// parameter's elements in g.data; `lengths` from lengths_on_device(g).
inline at::Tensor spread_over_elements(const FlatGroup& g, const at::Tensor& lengths,
                                       const at::Tensor& per_parameter) {
  return per_parameter.repeat_interleave(lengths, /*dim=*/0, /*output_size=*/g.numel());
}

/// `target` (laid out as g.data) times each parameter's factor in
/// `per_parameter`, over that parameter's elements. On a GPU one multiply
/// by the factors spread over the elements (no host read, so capturable);
/// on CPUs a multiply per parameter's view: with repeat_interleave's CPU
/// kernel Lamb and Lars stepped 100x slower than AdamW on 4 x 4M parameters
/// (bench_optim's without_kernels_4_large), and reading the factors waits
/// for nothing. Both round alike: each element times its
/// parameter's factor.
inline void scale_per_parameter(const FlatGroup& g, const at::Tensor& lengths,
                                const at::Tensor& target, const at::Tensor& per_parameter) {
  if (!target.is_cpu()) {
    target.mul_(spread_over_elements(g, lengths, per_parameter.to(target.scalar_type())));
    return;
  }
  const auto factors = per_parameter.to(target.scalar_type()).to(at::kDouble).contiguous();
  const double* factor = factors.data_ptr<double>();
  int64_t offset = 0;
  for (size_t k = 0; k < g.param_lengths.size(); ++k) {
    const int64_t n = g.param_lengths[k];
    if (n > 0) target.narrow(0, offset, n).mul_(factor[k]);
    offset += n;
  }
}

/// `ratio` where both norms are positive, else 1 (the papers' and timm's
/// convention: a zero weight or step is not rescaled).
inline at::Tensor ratio_or_one(const at::Tensor& ratio, const at::Tensor& a, const at::Tensor& b) {
  return at::where(a.gt(0).logical_and(b.gt(0)), ratio, at::ones_like(ratio));
}

}  // namespace trainkit::detail
