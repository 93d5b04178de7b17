#pragma once
// A tensor known by its name, dtype and shape before its data: what a file
// written tensor by tensor (SafetensorsWriter, TorchSaveWriter) puts in its
// header first, and the checks that the tensors then come as announced.
#include <torch/types.h>

#include <string>
#include <vector>

#include "trainkit/error.hpp"

namespace trainkit::io {

struct TensorSpec {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
};

namespace detail {
/// The spec `t` must match, the `written`-th; an Error names what differs.
inline const TensorSpec& next_spec(const std::vector<TensorSpec>& specs, size_t written,
                                   const at::Tensor& t) {
  if (written >= specs.size()) {
    throw Error("trainkit: a tensor beyond the " + std::to_string(specs.size()) +
                " the file's header announced");
  }
  const auto& spec = specs[written];
  if (t.scalar_type() != spec.dtype || t.sizes() != c10::IntArrayRef(spec.shape)) {
    throw Error("trainkit: tensor \"" + spec.name + "\" is " + c10::toString(t.scalar_type()) +
                c10::str(t.sizes()) + ", the header announced " + c10::toString(spec.dtype) +
                c10::str(c10::IntArrayRef(spec.shape)));
  }
  return spec;
}
inline void require_all_written(const std::vector<TensorSpec>& specs, size_t written) {
  if (written != specs.size()) {
    throw Error("trainkit: " + std::to_string(written) + " of the " + std::to_string(specs.size()) +
                " tensors the header announced were written");
  }
}
}  // namespace detail

}  // namespace trainkit::io
