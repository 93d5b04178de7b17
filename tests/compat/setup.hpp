#pragma once
// The run behind the committed compatibility checkpoint: the writer
// (write_checkpoint.cpp) and the test that resumes from the file build it
// the same way, so a change that orphans users' checkpoints fails a test.
#include <torch/torch.h>

#include <trainkit/callbacks/early_stopping.hpp>
#include <trainkit/data.hpp>
#include <trainkit/trainkit.hpp>

namespace tk_compat {

using namespace trainkit;

using CompatTrainer = Trainer<optim::AdamW, sched::WarmupCosine, precision::Fp16,
                              accumulate::Every<2>, clip::Norm, parallel::Single>;

inline torch::nn::Sequential model() {
  torch::manual_seed(21);
  return torch::nn::Sequential(torch::nn::Linear(4, 6), torch::nn::Tanh(), torch::nn::Linear(6, 3));
}

inline CompatTrainer trainer() {
  return CompatTrainer(model(), {.optim = {.lr = 1e-2, .weight_decay = 0.1},
                                 .sched = {.warmup_steps = 2},
                                 .precision = {.autocast = false},
                                 .clip = {.max_norm = 0.5},
                                 .parallel = {.device = torch::Device(torch::kCPU)}});
}

inline data::TensorDataset dataset() {
  auto gen = data::generator(4);
  return {at::randn({40, 4}, gen), at::randint(0, 3, {40}, gen)};
}

/// 40 samples in batches of 8: 5 micro-batches, 3 optimizer steps per epoch.
inline auto loader() {
  return data::Loader<data::TensorDataset, data::RandomSampler>(
      dataset(), data::RandomSampler({.size = 40, .seed = 2}),
      data::LoaderOptions{.batch_size = 8});
}

inline callbacks::EarlyStopping early_stopping() {
  return callbacks::EarlyStopping({.monitor = "train_loss", .patience = 5});
}

inline constexpr int64_t kEpochs = 3;
inline constexpr int64_t kSavedAtStep = 4;  ///< in the second epoch, mid-way

}  // namespace tk_compat
