#pragma once
// Initialising a whole model in one call, by module type (as torchvision's
// ResNet and timm's models do in their constructors), and the two
// per-layer recipes of the literature: the last norm of a residual block
// starting at zero (Goyal et al. 2017), and a classifier's bias prior.
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
// LibTorch 1.13's modules/instancenorm.h calls the functional it does not include.
#include <torch/nn/functional/instancenorm.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "trainkit/detail/norm_tag.hpp"
#include "trainkit/error.hpp"
#include "trainkit/init/schemes.hpp"

namespace trainkit::init {

/// What `init::model` does to each kind of layer; nullopt keeps LibTorch's
/// own initialisation. The defaults are torchvision ResNet's.
struct ModelOptions {
  std::optional<Scheme> conv = Kaiming{.mode = FanMode::kFanOut};  ///< Conv/ConvTranspose 1-3d
  std::optional<Scheme> linear = std::nullopt;
  std::optional<Scheme> embedding = std::nullopt;
  bool zero_bias = true;      ///< biases of the layers given a scheme start at 0
  bool norm_identity = true;  ///< BatchNorm, InstanceNorm, LayerNorm, GroupNorm: scale 1, shift 0
};

/// How many layers of each kind `init::model` initialised.
struct ModelCounts {
  int64_t conv = 0, linear = 0, embedding = 0, norm = 0;
};

namespace detail {

enum class Kind { kOther, kConv, kLinear, kEmbedding, kNorm };

inline Kind kind_of(torch::nn::Module& m) {
  namespace nn = torch::nn;
  if (m.as<nn::Conv1dImpl>() || m.as<nn::Conv2dImpl>() || m.as<nn::Conv3dImpl>() ||
      m.as<nn::ConvTranspose1dImpl>() || m.as<nn::ConvTranspose2dImpl>() ||
      m.as<nn::ConvTranspose3dImpl>()) {
    return Kind::kConv;
  }
  if (m.as<nn::LinearImpl>()) return Kind::kLinear;
  if (m.as<nn::EmbeddingImpl>()) return Kind::kEmbedding;
  if (m.as<nn::BatchNorm1dImpl>() || m.as<nn::BatchNorm2dImpl>() || m.as<nn::BatchNorm3dImpl>() ||
      m.as<nn::InstanceNorm1dImpl>() || m.as<nn::InstanceNorm2dImpl>() ||
      m.as<nn::InstanceNorm3dImpl>() || m.as<nn::LayerNormImpl>() || m.as<nn::GroupNormImpl>() ||
      dynamic_cast<trainkit::detail::NormLayerTag*>(&m)) {  // layers::BatchNormReLU2d
    return Kind::kNorm;
  }
  return Kind::kOther;
}

/// The module's own parameter `name` (not a submodule's), or an undefined tensor.
inline at::Tensor own(torch::nn::Module& m, const char* name) {
  const auto params = m.named_parameters(/*recurse=*/false);
  const auto* p = params.find(name);
  return p ? *p : at::Tensor();
}

}  // namespace detail

/// Initialises every layer of `model` (itself included) by its type, in
/// registration order, drawing from the default generator.
inline ModelCounts model(torch::nn::Module& model, const ModelOptions& options = {}) {
  using detail::Kind;
  ModelCounts counts;
  at::NoGradGuard no_grad;
  const auto layer = [&](torch::nn::Module& m, const std::optional<Scheme>& scheme,
                         int64_t& count) {
    if (!scheme) return;
    if (auto w = detail::own(m, "weight"); w.defined()) fill(w, *scheme);
    if (auto b = detail::own(m, "bias"); b.defined() && options.zero_bias) b.zero_();
    ++count;
  };
  // apply() visits the model itself without the shared_ptr modules() needs.
  model.apply([&](torch::nn::Module& m) {
    switch (detail::kind_of(m)) {
      case Kind::kConv:
        layer(m, options.conv, counts.conv);
        break;
      case Kind::kLinear:
        layer(m, options.linear, counts.linear);
        break;
      case Kind::kEmbedding:
        layer(m, options.embedding, counts.embedding);
        // as LibTorch's own reset: the padding row stays zero
        if (const auto pad = m.as<torch::nn::EmbeddingImpl>()->options.padding_idx();
            pad && options.embedding) {
          m.as<torch::nn::EmbeddingImpl>()->weight[*pad].zero_();
        }
        break;
      case Kind::kNorm:
        if (!options.norm_identity) break;
        if (auto w = detail::own(m, "weight"); w.defined()) w.fill_(1.0);
        if (auto b = detail::own(m, "bias"); b.defined()) b.zero_();
        ++counts.norm;
        break;
      case Kind::kOther:
        break;
    }
  });
  return counts;
}

/// Sets the scale of the last norm layer of `block` (a residual block,
/// registration order) to zero, so the block starts as the identity through
/// its skip connection. Returns that layer's name in the block.
inline std::string zero_last_norm(torch::nn::Module& block) {
  std::string last;
  at::Tensor scale;
  block.apply([&](const std::string& name, torch::nn::Module& m) {
    if (detail::kind_of(m) != detail::Kind::kNorm) return;
    if (auto w = detail::own(m, "weight"); w.defined()) {
      last = name;
      scale = w;
    }
  });
  if (!scale.defined()) {
    throw Error("trainkit: init::zero_last_norm: " + block.name() +
                " has no norm layer with a scale (BatchNorm, InstanceNorm with affine, "
                "LayerNorm, GroupNorm)");
  }
  at::NoGradGuard no_grad;
  scale.zero_();
  return last;
}

/// Sets the drop probability of every dropout layer of `model` (Dropout,
/// Dropout2d/3d, AlphaDropout, FeatureAlphaDropout) to `p`; 0 takes the
/// stochastic layers out of a speed run without changing the model's code.
/// Returns how many layers changed.
inline int64_t set_dropout(torch::nn::Module& model, double p) {
  trainkit::detail::require_option(p >= 0 && p <= 1, "init.set_dropout", p,
                                   "a probability in [0, 1]");
  namespace nn = torch::nn;
  int64_t count = 0;
  const auto set = [&](auto* layer) {
    if (!layer) return false;
    layer->options.p(p);
    ++count;
    return true;
  };
  model.apply([&](nn::Module& m) {
    set(m.as<nn::DropoutImpl>()) || set(m.as<nn::Dropout2dImpl>()) ||
        set(m.as<nn::Dropout3dImpl>()) || set(m.as<nn::AlphaDropoutImpl>()) ||
        set(m.as<nn::FeatureAlphaDropoutImpl>());
  });
  return count;
}

/// Sets `layer`'s own bias to init::bias_prior(prior) for every output.
inline void set_bias_prior(torch::nn::Module& layer, double prior) {
  const double value = bias_prior(prior);
  auto b = detail::own(layer, "bias");
  if (!b.defined()) {
    throw Error("trainkit: init::set_bias_prior: " + layer.name() +
                " has no bias of its own (construct it with bias = true)");
  }
  at::NoGradGuard no_grad;
  b.fill_(value);
}

}  // namespace trainkit::init
