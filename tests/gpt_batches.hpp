#pragma once
// The GPT tests' micro-batches: sequences of arithmetic progressions over a
// small vocabulary with lengths that vary, as tests/reference/
// make_gpt_reference.py's micro_batch(m) makes them.
#include <torch/types.h>

#include <cstdint>

#include "../examples/gpt.hpp"

namespace gpt_batches {

constexpr int64_t kVocab = 24, kBlock = 16, kBatch = 4;

inline examples::TokenBatch micro_batch(int64_t m) {
  auto tokens = at::zeros({kBatch, kBlock}, at::kLong);
  auto targets = at::full({kBatch, kBlock}, -100, at::kLong);
  auto lengths = at::zeros({kBatch}, at::kLong);
  for (int64_t b = 0; b < kBatch; ++b) {
    const int64_t length = kBlock - 3 * ((m + b) % 4);
    const int64_t start = (5 * m + 3 * b) % kVocab, stride = 1 + (m + 2 * b) % 3;
    for (int64_t t = 0; t < length; ++t) {
      tokens[b][t] = (start + stride * t) % kVocab;
      targets[b][t] = (start + stride * (t + 1)) % kVocab;
    }
    lengths[b] = length;
  }
  const auto mask = at::arange(kBlock, at::kLong).unsqueeze(0).lt(lengths.unsqueeze(1));
  return {{tokens, targets}, mask, lengths};
}

}  // namespace gpt_batches
