#pragma once
// TrainState::ParameterShards of a trainer under full sharding: this rank's
// slices of the flat groups, and how tensors of their shapes become whole
// parameters by name (a collective) and back (on each rank alone).
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state.hpp"
#include "trainkit/trainer/detail/state_layout.hpp"

namespace trainkit::detail {

/// Null unless `parallel` shards the parameters at rest. The functions it
/// holds use `parallel` and `flat`: once `alive` (their trainer's) expired
/// they throw.
template <class Parallel>
std::shared_ptr<const TrainState::ParameterShards> parameter_shards(
    Parallel& parallel, const FlatParams& flat, const torch::nn::Module& model,
    std::weak_ptr<const int> alive) {
  if constexpr (requires { parallel.unit_of(); }) {
    const auto require_alive = [alive](const char* what) {
      if (alive.expired()) {
        throw Error(std::string("trainkit: ParameterShards::") + what +
                    ": the trainer whose shards these are is gone; call it (Ema::state_dict, "
                    "Ema::copy_to) while the trainer lives");
      }
    };
    auto out = std::make_shared<TrainState::ParameterShards>();
    for (const auto& g : parallel.shard().groups()) out->live.push_back(g.data);
    auto slots = param_slots(model, flat);
    for (const auto& group : slots)
      for (const auto& slot : group) out->names.push_back(slot.name);
    const auto view_of = [&flat](const at::Tensor& buffer, size_t g, size_t k) {
      const auto& group = flat.groups()[g];
      return buffer.as_strided(group.views[k].sizes, group.views[k].strides, group.offsets[k]);
    };
    out->gather = [&parallel, &flat, slots, view_of,
                   require_alive](const std::vector<at::Tensor>& mine) {
      require_alive("gather");
      require_option(mine.size() == flat.groups().size(), "ParameterShards::gather",
                     std::to_string(mine.size()) + " tensors",
                     "one per flat group: " + std::to_string(flat.groups().size()));
      std::map<std::string, at::Tensor> whole;
      for (size_t g = 0; g < slots.size(); ++g) {
        const auto buffer = parallel.gather_group(mine[g], g, "all-gather of parameter shards");
        for (size_t k = 0; k < slots[g].size(); ++k)
          whole[slots[g][k].name] = view_of(buffer, g, k);
      }
      return whole;
    };
    out->slice = [&parallel, &flat, slots, view_of,
                  require_alive](const std::map<std::string, at::Tensor>& by_name) {
      require_alive("slice");
      std::vector<at::Tensor> mine;
      for (size_t g = 0; g < slots.size(); ++g) {
        auto buffer =
            at::zeros({flat.groups()[g].numel()}, parallel.shard().groups()[g].data.options());
        for (size_t k = 0; k < slots[g].size(); ++k) {
          const auto& name = slots[g][k].name;
          const auto found = by_name.find(name);
          if (found == by_name.end())
            throw Error("trainkit: no tensor for parameter \"" + name + "\" to shard");
          auto view = view_of(buffer, g, k);
          if (found->second.sizes() != view.sizes()) {
            throw Error("trainkit: the tensor for parameter \"" + name + "\" is shaped " +
                        c10::str(found->second.sizes()) + ", the parameter " +
                        c10::str(view.sizes()));
          }
          view.copy_(found->second);
        }
        mine.push_back(parallel.slice_of_group(buffer).clone());
      }
      return mine;
    };
    return out;
  } else {
    return nullptr;
  }
}

/// A trainer's part of it: the token its shards' functions check, which
/// expires with the trainer (a member), so what callbacks kept then refuses.
class TrainerShards {
 public:
  template <class Parallel>
  std::shared_ptr<const TrainState::ParameterShards> make(Parallel& parallel,
                                                          const FlatParams& flat,
                                                          const torch::nn::Module& model) const {
    return parameter_shards(parallel, flat, model, alive_);
  }

 private:
  std::shared_ptr<const int> alive_ = std::make_shared<const int>(0);
};

}  // namespace trainkit::detail
