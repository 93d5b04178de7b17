#pragma once
// Builds a batch from per-sample datasets by stacking, checking that every
// sample matches the first one's shape and dtype; a mismatch names the
// dataset index, so a bad file in a folder of thousands is found at once.
#include <torch/types.h>

#include <sstream>
#include <vector>

#include "trainkit/data/batch.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

namespace detail {
inline void check_like(const at::Tensor& first, const at::Tensor& t, int64_t first_index,
                       int64_t index, const char* what) {
  if (t.sizes() == first.sizes() && t.scalar_type() == first.scalar_type()) return;
  std::ostringstream msg;
  msg << "trainkit: dataset sample " << index << " has " << what << " of shape " << t.sizes()
      << " and dtype " << t.scalar_type() << ", but sample " << first_index
      << " in the same batch has shape " << first.sizes() << " and dtype " << first.scalar_type();
  throw Error(msg.str());
}
}  // namespace detail

/// Stacks `samples` (taken at dataset positions `indices`) into one batch.
inline Batch stack_samples(const std::vector<Batch>& samples, const std::vector<int64_t>& indices) {
  std::vector<at::Tensor> inputs, targets;
  inputs.reserve(samples.size());
  targets.reserve(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    detail::check_like(samples[0].input, samples[i].input, indices[0], indices[i], "input");
    detail::check_like(samples[0].target, samples[i].target, indices[0], indices[i], "target");
    inputs.push_back(samples[i].input);
    targets.push_back(samples[i].target);
  }
  return {at::stack(inputs), at::stack(targets)};
}

}  // namespace trainkit::data
