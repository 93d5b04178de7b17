#pragma once
// What the optimizers share about parameter groups: the name a group's
// option has in errors, its starting learning rate, the refusal of a field
// the optimizer does not have, each group's options and learning rates, and
// the steps taken.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/optim/detail/fused_optim.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::detail {

/// The prefix of a group's options in errors: "optim" for the default group,
/// "param_groups[i]" (as TrainerOptions::param_groups lists it) for the others.
inline std::string group_prefix(size_t param_group) {
  return param_group == 0 ? "optim" : "param_groups[" + std::to_string(param_group - 1) + "]";
}

/// A group's learning rate: its lr, else lr_scale times the optimizer's, else the optimizer's.
inline double group_lr(const GroupOptions& g, double lr, size_t param_group) {
  const auto prefix = group_prefix(param_group);
  if (g.lr && g.lr_scale)
    require_option(false, prefix + ".lr_scale", *g.lr_scale,
                   "unset when " + prefix + ".lr is set (one of the two)");
  if (g.lr_scale) {
    require_option(*g.lr_scale >= 0.0, prefix + ".lr_scale", *g.lr_scale, "a number >= 0");
    return *g.lr_scale * lr;
  }
  return g.lr.value_or(lr);
}

/// Refuses a group option the optimizer `optimizer` does not have.
template <class T>
void refuse_group_option(const std::optional<T>& field, size_t param_group, std::string_view name,
                         std::string_view optimizer, std::string_view accepted) {
  if (!field) return;
  require_option(false, group_prefix(param_group) + "." + std::string(name), *field,
                 "unset: " + std::string(optimizer) + " has no " + std::string(name) +
                     " (its group options: " + std::string(accepted) + ")");
}

/// An optimizer's steps: in all, and per flat buffer (a frozen group's count
/// stops, as torch.optim's per-parameter step).
struct StepCounts {
  int64_t total = 0;
  std::vector<int64_t> per_buffer;

  explicit StepCounts(size_t buffers = 0) : per_buffer(buffers, 0) {}
  void save(StateDict& d) const {
    d.values["steps"] = total;
    for (size_t i = 0; i < per_buffer.size(); ++i)
      d.values["steps." + std::to_string(i)] = per_buffer[i];
  }
  /// What save() wrote, checked; a buffer's count absent from an older
  /// checkpoint is the total.
  static StepCounts read(const StateDict& d, size_t buffers) {
    StepCounts out(buffers);
    out.total = d.value<int64_t>("steps");
    for (size_t i = 0; i < buffers; ++i) {
      const auto key = "steps." + std::to_string(i);
      out.per_buffer[i] = d.values.count(key) ? d.value<int64_t>(key) : out.total;
    }
    return out;
  }
};

/// An optimizer's per-element state tensors, as `visit(f)` lists them with
/// f(state-dict name, tensor, flat buffer): into a state dict, ...
template <class Visit>
void save_state_tensors(StateDict& d, const Visit& visit) {
  visit([&](const std::string& name, const at::Tensor& t, size_t) { d.tensors[name] = t; });
}
/// ... as the flat buffers they follow (ElementwiseState), ...
template <class Visit>
ElementwiseState elementwise_of(const Visit& visit) {
  ElementwiseState out;
  visit([&](const std::string& name, const at::Tensor&, size_t i) { out[name] = i; });
  return out;
}
/// ... and each paired with its value in `d`, all checked before the
/// caller assigns any.
template <class Visit>
std::vector<std::pair<at::Tensor, at::Tensor>> read_state_tensors(const StateDict& d,
                                                                  const Visit& visit) {
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  visit([&](const std::string& name, const at::Tensor& t, size_t) {
    out.emplace_back(t, d.tensor_like(name, t));
  });
  return out;
}

}  // namespace trainkit::detail

namespace trainkit::detail {

/// An optimizer's options per parameter group (its Options type O, with an
/// `lr`): the optimizer's own, each group's with its overrides, and the
/// learning rates, on the host and, once capturable, on the device.
template <class O>
class GroupedOptions {
 public:
  /// The default group's learning rate.
  double lr() const { return group_.front().lr; }
  /// Sets the default group's learning rate; the other groups keep their
  /// ratio to it (as at construction): what a learning-rate sweep wants.
  void set_lr(double lr) {
    for (size_t g = 0; g < group_.size(); ++g) set_lr(g, lr * lr_ratio_[g]);
  }
  /// One parameter group's learning rate (a schedule per group).
  double lr(size_t param_group) const { return group_.at(param_group).lr; }
  void set_lr(size_t param_group, double lr) {
    group_.at(param_group).lr = lr;
    device_lr_[param_group].set(lr);
  }
  /// The optimizer's options: the default group's (it has no overrides).
  const O& options() const { return group_.front(); }
  /// A parameter group's options: the optimizer's with the group's overrides.
  const O& options(size_t param_group) const { return group_.at(param_group); }

 protected:
  /// `resolve(options, group options, group index)` gives a group's options, checked.
  template <class Resolve>
  GroupedOptions(const FlatParams& params, const O& options, Resolve&& resolve) {
    for (size_t g = 0; g < params.param_groups().size(); ++g)
      group_.push_back(resolve(options, params.param_groups()[g].options, g));
    for (const auto& o : group_)  // to the default group's (optim::Muon's may not be optim.lr)
      lr_ratio_.push_back(group_.front().lr > 0.0 ? o.lr / group_.front().lr : 1.0);
    device_lr_.resize(group_.size());
  }

  /// Every group's learning rate on the device from now on (DeviceLr).
  void make_rates_capturable(const at::Tensor& like) {
    for (size_t g = 0; g < group_.size(); ++g) device_lr_[g].make_capturable(group_[g].lr, like);
  }
  const at::Tensor& device_lr(size_t param_group) const { return device_lr_[param_group].tensor(); }
  /// A group's learning rate as a step over scalars S reads it (device_step.hpp):
  /// the host's number (double), or its device tensor once capturable.
  template <class S>
  S rate(size_t param_group) const {
    if constexpr (std::is_same_v<S, double>) {
      return group_[param_group].lr;
    } else {
      return device_lr(param_group);
    }
  }

  /// A field a schedule cycles for every group (momentum, beta1).
  void set_all(double O::*field, double value) {
    for (auto& o : group_) o.*field = value;
  }
  /// Saves `field` of every group: `name` for the default group (as before
  /// groups existed), `name.<g>` for the others.
  void save_field(StateDict& d, const std::string& name, double O::*field) const {
    d.values[name] = group_.front().*field;
    for (size_t g = 1; g < group_.size(); ++g)
      d.values[name + "." + std::to_string(g)] = group_[g].*field;
  }
  /// What save_field wrote, checked before anything is assigned; a group's
  /// value absent from an older checkpoint stays as it is.
  std::vector<double> read_field(const StateDict& d, const std::string& name,
                                 double O::*field) const {
    std::vector<double> out{d.value<double>(name)};
    for (size_t g = 1; g < group_.size(); ++g) {
      const auto key = name + "." + std::to_string(g);
      out.push_back(d.values.count(key) ? d.value<double>(key) : group_[g].*field);
    }
    return out;
  }
  void assign_field(double O::*field, const std::vector<double>& values) {
    for (size_t g = 0; g < group_.size(); ++g) group_[g].*field = values[g];
  }

  std::vector<O> group_;  ///< per parameter group, the default one first

 private:
  std::vector<double> lr_ratio_;     ///< each group's lr over the default's, for set_lr(lr)
  std::vector<DeviceLr> device_lr_;  ///< per parameter group
};

}  // namespace trainkit::detail
