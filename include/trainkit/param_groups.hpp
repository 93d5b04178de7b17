#pragma once
// Parameter groups: parts of a model trained with their own hyperparameters
// (torch.optim's param_groups). A group selects parameters by name, by the
// type of the module that holds them, or by any predicate; the parameters no
// group selects form the default group, trained with the optimizer's options.
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"

namespace trainkit {

/// A trainable parameter as a group's selector sees it.
struct ParamInfo {
  const std::string& name;          ///< as named_parameters() names it: "blocks.0.attn.weight"
  const at::Tensor& tensor;         ///< the parameter
  const torch::nn::Module& module;  ///< the module that registered it
};

/// A group's hyperparameters. Unset fields take the optimizer's (and the
/// schedule's) options; a field the policies do not have is refused
/// (momentum for AdamW, min_lr for a schedule without one).
struct GroupOptions {
  std::optional<double> lr{};        ///< the group's learning rate
  std::optional<double> lr_scale{};  ///< or: this multiple of the optimizer's lr
  std::optional<double> weight_decay{};
  std::optional<double> beta1{}, beta2{}, eps{};  ///< Adam, AdamW
  std::optional<bool> amsgrad{};                  ///< Adam, AdamW
  std::optional<double> momentum{}, dampening{};  ///< SGD
  std::optional<bool> nesterov{};                 ///< SGD
  std::optional<double> min_lr{};  ///< the schedule's floor for this group (ReduceLROnPlateau)
  /// the schedule's peak for this group (OneCycle; PyTorch's max_lr list).
  /// Unset: sched.max_lr, or this group's lr when sched.max_lr is 0.
  std::optional<double> max_lr{};
};

using ParamSelector = std::function<bool(const ParamInfo&)>;

/// A parameter goes to the first group whose `select` takes it. A group that
/// takes no trainable parameter is an error (a pattern that matches
/// nothing), unless it is `optional`.
struct ParamGroup {
  std::string name;
  ParamSelector select;
  GroupOptions options{};
  bool optional = false;  ///< may take no parameter (helpers that make a group per layer)
};

namespace detail {
template <class M>
struct module_class {
  using type = M;
};
template <class M>
requires requires {
  typename M::ContainedType;
}
struct module_class<M> {  // a holder (torch::nn::Linear): its module class
  using type = typename M::ContainedType;
};
}  // namespace detail

namespace params {

/// Parameters whose name contains a match of `pattern` (ECMAScript regex).
inline ParamSelector name_matches(const std::string& pattern) {
  std::regex re;
  try {
    re = std::regex(pattern);
  } catch (const std::regex_error& e) {
    detail::require_option(false, "params::name_matches", pattern,
                           std::string("a valid ECMAScript regular expression (") + e.what() + ")");
  }
  return [re](const ParamInfo& p) { return std::regex_search(p.name, re); };
}

/// Parameters registered by a module of type `M`: a module class
/// (`torch::nn::LayerNormImpl`) or its holder (`torch::nn::LayerNorm`).
template <class M>
ParamSelector in_module() {
  using Impl = typename detail::module_class<M>::type;
  static_assert(std::is_base_of_v<torch::nn::Module, Impl>,
                "params::in_module<M>: M must be a torch::nn module class or module holder");
  return [](const ParamInfo& p) { return dynamic_cast<const Impl*>(&p.module) != nullptr; };
}

/// Parameters that are not the weights of a matrix or a convolution: fewer
/// than 2 dimensions (biases, normalisation scales and shifts).
inline ParamSelector below_2d() {
  return [](const ParamInfo& p) { return p.tensor.dim() < 2; };
}

/// Either selector.
inline ParamSelector any_of(ParamSelector a, ParamSelector b) {
  return [a = std::move(a), b = std::move(b)](const ParamInfo& p) { return a(p) || b(p); };
}

/// No weight decay for biases and normalisation layers (every parameter of
/// fewer than 2 dimensions), and with `embeddings` for torch::nn::Embedding's
/// tables too: nanoGPT's configure_optimizers and timm's
/// param_groups_weight_decay. Weights of matrices and convolutions keep the
/// optimizer's weight decay.
inline ParamGroup no_weight_decay(bool embeddings = false) {
  auto select = below_2d();
  if (embeddings) select = any_of(std::move(select), in_module<torch::nn::EmbeddingImpl>());
  return {"no_weight_decay", std::move(select), {.weight_decay = 0.0}};
}

/// The layer of a parameter for layer_decay: 0 for the embeddings, 1..layers
/// for the blocks, layers + 1 for the rest (the head).
using LayerOf = std::function<int64_t(const std::string& name)>;

/// The usual layer numbering of transformers and staged CNNs: a name with
/// `<blocks|layers|layer|h|stages>.<i>.` is in layer i + 1; one that names an
/// embedding (`embed`, `wte`, `wpe`, `cls_token`, `pos_`) is in layer 0;
/// anything else is the head, layer `layers` + 1.
inline LayerOf numbered_blocks(int64_t layers) {
  static const std::regex block(R"((?:^|\.)(?:blocks|layers|layer|h|stages)\.(\d+)\.)");
  static const std::regex embedding(R"(embed|wte|wpe|cls_token|(?:^|\.)pos_)");
  return [layers](const std::string& name) -> int64_t {
    std::smatch m;
    if (std::regex_search(name, m, block)) return std::stoll(m[1].str()) + 1;
    if (std::regex_search(name, embedding)) return 0;
    return layers + 1;
  };
}

struct LayerDecayOptions {
  double decay = 0.75;  ///< layer i's lr is decay^(layers + 1 - i) of the head's
  int64_t layers = 0;   ///< the number of blocks (> 0)
  LayerOf layer_of{};   ///< unset: numbered_blocks(layers)
  /// With weight decay off for biases and normalisation layers (no_weight_decay), as timm's
  /// param_groups_layer_decay does: two groups per layer.
  bool no_decay_below_2d = true;
};

/// Layer-wise learning-rate decay for fine-tuning (BEiT, timm's
/// param_groups_layer_decay): one group per layer (two with
/// no_decay_below_2d), the head at the optimizer's lr and each layer below
/// it `decay` times the one above. The groups are optional: a layer may hold
/// no parameter (or no bias).
inline std::vector<ParamGroup> layer_decay(const LayerDecayOptions& o) {
  detail::require_option(o.layers > 0, "params::layer_decay.layers", o.layers,
                         "the number of blocks, > 0");
  detail::require_option(o.decay > 0.0 && o.decay <= 1.0, "params::layer_decay.decay", o.decay,
                         "0 < decay <= 1");
  const LayerOf layer_of = o.layer_of ? o.layer_of : numbered_blocks(o.layers);
  std::vector<ParamGroup> out;
  for (int64_t layer = 0; layer <= o.layers + 1; ++layer) {
    const double scale = std::pow(o.decay, double(o.layers + 1 - layer));
    const auto in_layer = [layer_of, layer](const ParamInfo& p) {
      return layer_of(p.name) == layer;
    };
    const auto name = "layer_" + std::to_string(layer);
    if (o.no_decay_below_2d) {
      out.push_back({name + "_no_weight_decay",
                     [in_layer](const ParamInfo& p) { return in_layer(p) && p.tensor.dim() < 2; },
                     {.lr_scale = scale, .weight_decay = 0.0},
                     /*optional=*/true});
    }
    out.push_back({name, in_layer, {.lr_scale = scale}, /*optional=*/true});
  }
  return out;
}

}  // namespace params
}  // namespace trainkit
