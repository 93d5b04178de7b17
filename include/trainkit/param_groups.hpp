#pragma once
// Parameter groups: parts of a model trained with their own hyperparameters
// (torch.optim's param_groups). A group selects parameters by name, by the
// type of the module that holds them, or by any predicate; the parameters no
// group selects form the default group, trained with the optimizer's options.
#include <regex.h>  // POSIX: std::regex's templates cost every file that trains seconds
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
  std::optional<bool> muon{};  ///< optim::Muon: orthogonalise this group's matrices (else AdamW)
  /// optim::Lamb, Lars: scale each parameter's step by its trust ratio (the
  /// papers leave biases and norms out: params::no_trust_ratio()).
  std::optional<bool> trust_ratio{};
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

/// Parameters whose name contains a match of `pattern`, a POSIX extended
/// regular expression (`^backbone\\.`, `(bias|norm)`, `[0-9]+`).
inline ParamSelector name_matches(const std::string& pattern) {
  auto* compiled = new regex_t;
  if (const int rc = regcomp(compiled, pattern.c_str(), REG_EXTENDED | REG_NOSUB); rc != 0) {
    char why[256];
    regerror(rc, compiled, why, sizeof why);
    delete compiled;  // a failed regcomp holds nothing to free
    detail::require_option(false, "params::name_matches", pattern,
                           std::string("a POSIX extended regular expression (") + why + ")");
  }
  const std::shared_ptr<const regex_t> re(compiled, [](regex_t* r) {
    regfree(r);
    delete r;
  });
  return [re](const ParamInfo& p) { return regexec(re.get(), p.name.c_str(), 0, nullptr, 0) == 0; };
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

/// Parameters of embedding tables: torch::nn::Embedding's, and those of a
/// model scripted in Python (trainkit::ScriptModule), whose submodules are
/// named by their TorchScript class.
inline ParamSelector in_embedding() {
  return any_of(in_module<torch::nn::EmbeddingImpl>(), [](const ParamInfo& p) {
    const auto name =
        p.module.name();  // "...sparse.Embedding" or "...sparse.___torch_mangle_3.Embedding"
    return name.starts_with("__torch__.torch.nn.modules.sparse.") && name.ends_with(".Embedding");
  });
}

/// No weight decay for biases and normalisation layers (every parameter of
/// fewer than 2 dimensions), and with `embeddings` for embedding tables too
/// (in_embedding): nanoGPT's configure_optimizers and timm's
/// param_groups_weight_decay. Weights of matrices and convolutions keep the
/// optimizer's weight decay.
inline ParamGroup no_weight_decay(bool embeddings = false) {
  auto select = below_2d();
  if (embeddings) select = any_of(std::move(select), in_embedding());
  return {"no_weight_decay", std::move(select), {.weight_decay = 0.0}};
}

/// Biases and normalisation layers (and embeddings if asked) without weight
/// decay and without the trust ratio of optim::Lamb and Lars, as their
/// papers and implementations exclude them.
inline ParamGroup no_trust_ratio(bool embeddings = false) {
  auto group = no_weight_decay(embeddings);
  group.name = "no_trust_ratio";
  group.options.trust_ratio = false;
  return group;
}

/// The layer of a parameter for layer_decay: 0 for the embeddings, 1..layers
/// for the blocks, layers + 1 for the rest (the head).
using LayerOf = std::function<int64_t(const std::string& name)>;

/// The usual layer numbering of transformers and staged CNNs: a name with
/// `<blocks|layers|layer|h|stages>.<i>.` is in layer i + 1; one that names an
/// embedding (`embed`, `wte`, `wpe`, `cls_token`, `pos_`) is in layer 0;
/// anything else is the head, layer `layers` + 1.
inline LayerOf numbered_blocks(int64_t layers) {
  return [layers](const std::string& name) -> int64_t {
    std::vector<std::string> parts;  // the name's dot-separated parts
    for (size_t start = 0;;) {
      const size_t dot = name.find('.', start);
      parts.push_back(name.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    for (size_t i = 0; i + 2 < parts.size(); ++i) {  // <blocks>.<i>. and more after it
      const auto& kind = parts[i];
      const auto& number = parts[i + 1];
      if ((kind == "blocks" || kind == "layers" || kind == "layer" || kind == "h" ||
           kind == "stages") &&
          !number.empty() && number.find_first_not_of("0123456789") == std::string::npos)
        return std::stoll(number) + 1;
    }
    for (const char* e : {"embed", "wte", "wpe", "cls_token"})
      if (name.find(e) != std::string::npos) return 0;
    for (const auto& part : parts)
      if (part.rfind("pos_", 0) == 0) return 0;
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
