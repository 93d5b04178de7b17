#pragma once
// tests/reference/make_scripted_reference.py's batches, made the same way,
// and the task of its transformer (forward(tokens, targets) -> (logits, loss)).
#include <trainkit/data/batch.hpp>
#include <trainkit/script_module.hpp>
#include <trainkit/task.hpp>

#include <cstdint>

namespace scripted_models {

constexpr int64_t kImages = 8, kClasses = 5, kSide = 8, kVocab = 16, kBlock = 8, kSequences = 4;

/// make_scripted_reference.py's cnn_batch(m).
inline trainkit::data::Batch cnn_batch(int64_t m) {
  const auto i = at::arange(kImages * kSide * kSide, at::kLong);
  auto images = ((37 * i + 11 * m).remainder(23) - 11)
                    .to(at::kFloat)
                    .div(8.0)
                    .view({kImages, 1, kSide, kSide});
  const auto labels = (3 * at::arange(kImages, at::kLong) + m).remainder(kClasses);
  images.narrow(2, 0, kSide / 2).add_(((labels.to(at::kFloat) - 2) / 2).view({kImages, 1, 1, 1}));
  return {images, labels};
}

struct TokenBatch {
  at::Tensor tokens, targets;
};

/// make_scripted_reference.py's transformer_batch(m).
inline TokenBatch transformer_batch(int64_t m) {
  auto seq = at::empty({kSequences, kBlock + 1}, at::kLong);
  for (int64_t b = 0; b < kSequences; ++b) {
    const int64_t start = (5 * m + 3 * b) % kVocab, stride = 1 + (m + 2 * b) % 3;
    for (int64_t t = 0; t <= kBlock; ++t) seq[b][t] = (start + stride * t) % kVocab;
  }
  return {seq.narrow(1, 0, kBlock).contiguous(), seq.narrow(1, 1, kBlock).contiguous()};
}

/// The transformer's forward takes both and returns (logits, loss).
struct NextToken {
  trainkit::StepOutput step(trainkit::ScriptModule& model, const TokenBatch& b) const {
    return {model->forward_tensors<2>(b.tokens, b.targets)[1]};
  }
};

}  // namespace scripted_models
