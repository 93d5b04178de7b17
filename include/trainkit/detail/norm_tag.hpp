#pragma once
// A tag that trainkit's own normalisation modules carry beside
// torch::nn::Module, so that code which treats norm layers alike
// (init::model, init::zero_last_norm) knows them without including them.
namespace trainkit::detail {

struct NormLayerTag {
  virtual ~NormLayerTag() = default;
};

}  // namespace trainkit::detail
