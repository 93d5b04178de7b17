#pragma once
// data::SequentialSampler: 0, 1, ..., n-1 every epoch.
#include <torch/types.h>

#include "trainkit/error.hpp"

namespace trainkit::data {

class SequentialSampler {
 public:
  explicit SequentialSampler(int64_t size) : size_(size) {
    trainkit::detail::require_option(size >= 0, "sampler.size", size, "a number of samples >= 0");
  }
  at::Tensor indices(int64_t /*epoch*/) const { return at::arange(size_, at::kLong); }

 private:
  int64_t size_;
};

}  // namespace trainkit::data
