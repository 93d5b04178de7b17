#pragma once
// Parameters live in one flat buffer (docs/design.md): the model's trainable
// tensors are re-pointed at views of one contiguous buffer per (device, dtype),
// and their gradients at views of a matching flat gradient that autograd
// accumulates into. Optimizers, clipping and zeroing then touch a handful of
// large tensors instead of hundreds of small ones. Each parameter group
// (param_groups.hpp) has buffers of its own, so a group's hyperparameters
// apply to whole buffers.
#include <c10/util/strides.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"
#include "trainkit/param_groups.hpp"

namespace trainkit {

/// One contiguous buffer of parameters that share a parameter group, a
/// device and a dtype.
struct FlatGroup {
  at::Tensor data;                 ///< all parameters, back to back
  at::Tensor grad;                 ///< their gradients, same layout
  std::vector<at::Tensor> params;  ///< the model's parameters (views of `data`)
  std::vector<int64_t> offsets;    ///< start of each parameter in `data`
  /// Each parameter's sizes and strides in `data` (from `offsets`): what
  /// remakes it after its storage went (full sharding) and the order of its
  /// elements there (channels-last or not) for sharded checkpoints.
  struct View {
    std::vector<int64_t> sizes, strides;
  };
  std::vector<View> views;
  /// Each parameter's elements in `data`, in order: all of them, or in a
  /// shard (FlatParams::shard) those its slice holds (0 where it holds none).
  std::vector<int64_t> param_lengths;
  size_t param_group = 0;  ///< index into FlatParams::param_groups()
  size_t unit = 0;         ///< the sharding unit (parallel::FullShard); 0 elsewhere
  /// In a shard (FlatParams::shard): the whole group's layout and where the
  /// slice starts in it (optim::Muon rebuilds whole matrices from gathered
  /// slices with it). Unset in a whole group.
  struct Whole {
    int64_t begin = 0;
    std::vector<int64_t> offsets;
    std::vector<View> views;
  };
  std::optional<Whole> whole;

  int64_t numel() const { return data.numel(); }
};

/// A rank's part of each flat group: part `index` of `count`
/// (FlatParams::shard_range).
struct GroupShare {
  int index = 0, count = 1;
};

/// A parameter group as an optimizer sees it; index 0 is the default group
/// (the parameters no group selected, the optimizer's own options).
struct ParamGroupInfo {
  std::string name;
  GroupOptions options;
};

class FlatParams {
 public:
  FlatParams() = default;

  /// Flattens `params` (those that require grad; shared tensors once).
  /// Call after the module has reached its device: moving it later undoes this.
  /// With ChannelsLast, 4-d parameters become NHWC-strided views (the
  /// buffer stays one block; autograd keeps the gradients in that layout).
  explicit FlatParams(const std::vector<at::Tensor>& params,
                      at::MemoryFormat format = at::MemoryFormat::Contiguous);

  explicit FlatParams(torch::nn::Module& module) : FlatParams(module.parameters()) {}

  /// A parameter's sharding unit, from its dotted name (0: none).
  using UnitOf = std::function<size_t(const std::string& name)>;

  /// The module's trainable parameters in parameter groups: each goes to the
  /// first of `groups` that selects it (index i + 1), the rest to the default
  /// group (0). Buffers per (group, unit, device, dtype), the default group's
  /// first; `unit_of` (full sharding) gives each unit buffers of its own.
  FlatParams(const torch::nn::Module& module, const std::vector<ParamGroup>& groups,
             at::MemoryFormat format = at::MemoryFormat::Contiguous,
             const UnitOf& unit_of = nullptr);

  /// The buffers, each of one parameter group, device and dtype.
  std::span<FlatGroup> groups() { return groups_; }
  std::span<const FlatGroup> groups() const { return groups_; }

  /// The parameter groups, the default one first (always present, maybe empty).
  const std::vector<ParamGroupInfo>& param_groups() const { return param_groups_; }
  /// The index of the parameter group named `name` (an error naming the groups if none).
  size_t param_group(const std::string& name) const;

  /// Freezes a parameter group (or unfreezes it): its parameters stop
  /// requiring grad, so backward computes nothing for them, and optimizers
  /// skip its buffers, state included, as torch.optim skips a parameter
  /// without a gradient. Shards (shard()) share the flags.
  void set_frozen(size_t param_group, bool frozen);
  bool frozen(size_t param_group) const { return (*frozen_)[param_group] != 0; }

  int64_t numel() const {
    int64_t n = 0;
    for (const auto& g : groups_) n += g.numel();
    return n;
  }

  /// Per-tensor views, in registration order within each group.
  std::vector<at::Tensor> params() const {
    std::vector<at::Tensor> out;
    for (const auto& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
    return out;
  }

  /// One fill per group: the per-parameter `.grad()` views stay attached.
  void zero_grad() {
    for (auto& g : groups_) g.grad.zero_();
  }

  /// Elements [begin, end) of a group of `numel` that `rank` of `world` owns.
  static std::pair<int64_t, int64_t> shard_range(int64_t numel, int rank, int world) {
    return {numel * rank / world, numel * (rank + 1) / world};
  }

  /// This rank's slice of every group (ZeRO): the same storage, no
  /// per-parameter views. An optimizer built on it steps only that slice.
  FlatParams shard(int rank, int world) const;

  /// Multiplies every gradient by `factor` (partial accumulation windows).
  void scale_grad(double factor) {
    for (auto& g : groups_) g.grad.mul_(factor);
  }

  /// A shard whose gradients are this rank's part of the whole (ZeRO-2, full
  /// sharding) totals what it computes over its slices (a norm's sum of
  /// powers, an inf flag) with the other ranks' through this; clip::Norm
  /// and the loss scaler call it. The identity where every rank holds all.
  enum class Reduction { Sum, Max };
  using AcrossRanks = std::function<void(at::Tensor& partial, Reduction)>;
  void set_across_ranks(AcrossRanks reduce) { across_ranks_ = std::move(reduce); }
  bool spread_across_ranks() const { return static_cast<bool>(across_ranks_); }
  void reduce_across_ranks(at::Tensor& partial, Reduction how) const {
    if (across_ranks_) across_ranks_(partial, how);
  }
  /// A shard's flat group `group` whole from every rank's slice of it
  /// (`mine` laid out as this rank's slice; a collective). The parallel
  /// strategy that made the shard sets it.
  using GatherAcrossRanks = std::function<at::Tensor(const at::Tensor& mine, size_t group)>;
  void set_gather_across_ranks(GatherAcrossRanks gather) { gather_ = std::move(gather); }
  bool gathers_across_ranks() const { return static_cast<bool>(gather_); }
  at::Tensor gather_across_ranks(const at::Tensor& mine, size_t group) const {
    if (!gather_) throw Error("trainkit: FlatParams::gather_across_ranks: no strategy set one");
    return gather_(mine, group);
  }

 private:
  FlatGroup& group_for(const at::Tensor& p, size_t param_group, size_t unit = 0);
  static void flatten(FlatGroup& g, at::MemoryFormat format);

  std::vector<FlatGroup> groups_;
  std::vector<ParamGroupInfo> param_groups_{{"default", {}}};
  /// Per parameter group: frozen (shared with this object's shards).
  std::shared_ptr<std::vector<char>> frozen_ = std::make_shared<std::vector<char>>(1, 0);
  AcrossRanks across_ranks_;
  GatherAcrossRanks gather_;
};

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE FlatParams::FlatParams(const std::vector<at::Tensor>& params,
                                       at::MemoryFormat format) {
  torch::NoGradGuard no_grad;
  std::unordered_set<const void*> seen;
  for (const auto& p : params) {
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    group_for(p, 0).params.push_back(p);
  }
  for (auto& g : groups_) flatten(g, format);
}

TRAINKIT_INLINE FlatParams::FlatParams(const torch::nn::Module& module,
                                       const std::vector<ParamGroup>& groups,
                                       at::MemoryFormat format, const UnitOf& unit_of) {
  torch::NoGradGuard no_grad;
  for (const auto& g : groups) param_groups_.push_back({g.name, g.options});
  frozen_->assign(param_groups_.size(), 0);
  // Named parameters in module.parameters()' order (a module's own, then
  // its children's, depth first), each once, with the group that takes it.
  struct Named {
    at::Tensor tensor;
    size_t group;
    size_t unit;
  };
  std::vector<Named> named;
  std::vector<int64_t> taken(groups.size() + 1, 0);
  std::unordered_set<const void*> seen;
  const std::function<void(const torch::nn::Module&, const std::string&)> visit =
      [&](const torch::nn::Module& m, const std::string& prefix) {
        for (const auto& item : m.named_parameters(/*recurse=*/false)) {
          const auto& p = item.value();
          if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
          const std::string name = prefix + item.key();
          size_t group = 0;
          for (size_t i = 0; i < groups.size() && group == 0; ++i) {
            if (groups[i].select && groups[i].select(ParamInfo{name, p, m})) group = i + 1;
          }
          named.push_back({p, group, unit_of ? unit_of(name) : 0});
          ++taken[group];
        }
        for (const auto& child : m.named_children())
          visit(*child.value(), prefix + child.key() + ".");
      };
  visit(module, "");
  for (size_t i = 0; i < groups.size(); ++i) {
    detail::require_option(groups[i].select != nullptr,
                           "param_groups[" + std::to_string(i) + "].select", groups[i].name,
                           "a selector (params::name_matches, params::in_module, a predicate)");
    detail::require_option(taken[i + 1] > 0 || groups[i].optional,
                           "param_groups[" + std::to_string(i) + "] (\"" + groups[i].name + "\")",
                           "no trainable parameter",
                           "a selector that takes at least one parameter that requires grad and "
                           "no earlier group took (or optional = true)");
  }
  for (size_t group = 0; group < param_groups_.size(); ++group) {
    for (const auto& n : named) {
      if (n.group == group) group_for(n.tensor, group, n.unit).params.push_back(n.tensor);
    }
  }
  for (auto& g : groups_) flatten(g, format);
}

TRAINKIT_INLINE FlatParams FlatParams::shard(int rank, int world) const {
  FlatParams out;
  for (const auto& g : groups_) {
    const auto [begin, end] = shard_range(g.numel(), rank, world);
    FlatGroup s;
    s.data = g.data.narrow(0, begin, end - begin);
    s.grad = g.grad.narrow(0, begin, end - begin);
    for (size_t k = 0; k < g.offsets.size(); ++k) {
      const int64_t first = g.offsets[k], last = first + g.param_lengths[k];
      s.param_lengths.push_back(std::max<int64_t>(0, std::min(last, end) - std::max(first, begin)));
    }
    s.param_group = g.param_group;
    s.unit = g.unit;
    s.whole = FlatGroup::Whole{begin, g.offsets, g.views};
    out.groups_.push_back(std::move(s));
  }
  out.param_groups_ = param_groups_;
  out.frozen_ = frozen_;
  return out;
}

TRAINKIT_INLINE size_t FlatParams::param_group(const std::string& name) const {
  std::string names;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    if (param_groups_[g].name == name) return g;
    if (g) names += ", ";
    names += param_groups_[g].name;
  }
  detail::throw_option_error("parameter group", name, "a group's name (" + names + ")");
}

TRAINKIT_INLINE void FlatParams::set_frozen(size_t param_group, bool frozen) {
  detail::require_option(param_group < param_groups_.size(), "parameter group", param_group,
                         "an index below " + std::to_string(param_groups_.size()));
  (*frozen_)[param_group] = frozen;
  for (auto& g : groups_) {
    if (g.param_group != param_group) continue;
    for (auto& p : g.params) p.requires_grad_(!frozen);
  }
}

TRAINKIT_INLINE FlatGroup& FlatParams::group_for(const at::Tensor& p, size_t param_group,
                                                 size_t unit) {
  for (auto& g : groups_) {
    const auto& first = g.params.front();
    if (g.param_group == param_group && g.unit == unit && first.device() == p.device() &&
        first.scalar_type() == p.scalar_type())
      return g;
  }
  auto& g = groups_.emplace_back();
  g.param_group = param_group;
  g.unit = unit;
  return g;
}

TRAINKIT_INLINE void FlatParams::flatten(FlatGroup& g, at::MemoryFormat format) {
  int64_t total = 0;
  for (const auto& p : g.params) {
    g.offsets.push_back(total);
    g.param_lengths.push_back(p.numel());
    total += p.numel();
  }
  const auto options = g.params.front().options();
  g.data = at::empty({total}, options);
  g.grad = at::zeros({total}, options);
  for (size_t i = 0; i < g.params.size(); ++i) {
    auto& p = g.params[i];
    // The parameter's elements, in the layout the memory format asks for.
    auto strides = c10::contiguous_strides(p.sizes());
    if (format == at::MemoryFormat::ChannelsLast && p.dim() == 4) {
      const auto nhwc = c10::get_channels_last_strides_2d(p.sizes());
      strides.assign(nhwc.begin(), nhwc.end());
    }
    g.views.push_back({p.sizes().vec(), std::vector<int64_t>(strides.begin(), strides.end())});
    auto data_view = g.data.as_strided(p.sizes(), strides, g.offsets[i]);
    data_view.copy_(p.detach());
    p.set_data(data_view);
    p.mutable_grad() = g.grad.as_strided(p.sizes(), strides, g.offsets[i]);
  }
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit
