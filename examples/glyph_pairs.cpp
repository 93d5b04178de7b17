// A two-input model: are two glyphs the same character? A shared
// convolutional encoder embeds each image, and a head compares the two
// embeddings. The dataset yields a struct of three tensors (two images and
// the answer), which the loader stacks into a batch of the same struct; the
// task calls the model with both images. AdamW with two parameter groups
// (the encoder at a third of the head's rate, no weight decay on the head's
// biases),
// ReduceLROnPlateau on the validation loss after a warm-up.
#include <torch/torch.h>
#include <trainkit/callbacks.hpp>
#include <trainkit/data.hpp>
#include <trainkit/trainkit.hpp>

#include <cstdio>
#include <string>

#include "glyphs.hpp"

using namespace trainkit;

namespace {

/// Two images and whether they show the same glyph (1) or not (0).
struct Pair {
  at::Tensor left, right, same;
};

/// Pairs over a glyph set: pair i takes glyph i and, by i's parity, another
/// glyph of the same class or one of a different class (balanced classes).
class GlyphPairs {
 public:
  explicit GlyphPairs(data::TensorDataset glyphs) : glyphs_(std::move(glyphs)) {
    const auto labels = glyphs_.targets;
    for (int64_t c = 0; c < 10; ++c) by_class_.push_back(labels.eq(c).nonzero().flatten());
  }
  int64_t size() const { return glyphs_.size(); }
  Pair get(int64_t i) const {
    const int64_t label = glyphs_.targets[i].item<int64_t>();
    const bool same = i % 2 == 0;
    const int64_t other_class = same ? label : (label + 1 + (i / 2) % 9) % 10;
    const auto& pool = by_class_[other_class];
    const int64_t j = pool[(i * 7919) % pool.size(0)].item<int64_t>();
    return {glyphs_.inputs[i], glyphs_.inputs[j], at::scalar_tensor(same ? 1.0 : 0.0)};
  }

 private:
  data::TensorDataset glyphs_;
  std::vector<at::Tensor> by_class_;
};

struct SiameseImpl : torch::nn::Module {
  SiameseImpl() {
    namespace nn = torch::nn;
    encoder = register_module(
        "encoder",
        nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1)), nn::ReLU(),
                       nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(16, 32, 3).padding(1)),
                       nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(32 * 7 * 7, 64)));
    head =
        register_module("head", nn::Sequential(nn::Linear(128, 64), nn::ReLU(), nn::Linear(64, 1)));
  }
  /// Two images (B, 1, 28, 28) -> the logit of "the same glyph" (B).
  at::Tensor forward(const at::Tensor& left, const at::Tensor& right) {
    const auto a = encoder->forward(left), b = encoder->forward(right);
    return head->forward(at::cat({(a - b).abs(), a * b}, 1)).squeeze(1);
  }
  torch::nn::Sequential encoder{nullptr}, head{nullptr};
};
TORCH_MODULE(Siamese);

struct SameOrNot {
  StepOutput step(Siamese& model, const Pair& b) const {
    const auto logits = model(b.left, b.right);
    StepOutput out{torch::nn::functional::binary_cross_entropy_with_logits(logits, b.same)};
    if (!at::GradMode::is_enabled()) {
      out.metrics.emplace_back("accuracy", logits.gt(0).eq(b.same.gt(0.5)).to(at::kFloat).mean());
    }
    return out;
  }
};

}  // namespace

int main() {
  const GlyphPairs train(examples::make_glyphs(4000, 1)), val(examples::make_glyphs(1000, 2));
  data::Loader train_batches(train, data::RandomSampler({.size = train.size(), .seed = 1}),
                             {.batch_size = 64, .workers = 1});
  data::Loader val_batches(val, data::SequentialSampler(val.size()), {.batch_size = 500});
  torch::manual_seed(0);
  Trainer<optim::AdamW, sched::ReduceLROnPlateau> trainer(
      Siamese(),
      {.optim = {.lr = 3e-3, .weight_decay = 0.01},
       .sched = {.factor = 0.3, .patience = 0, .warmup_steps = 30},
       // a parameter joins the first group that selects it
       .param_groups = {{"encoder", params::name_matches("^encoder\\."), {.lr_scale = 1.0 / 3}},
                        params::no_weight_decay()}});
  const auto r = trainer.fit(SameOrNot{}, train_batches, {.epochs = 4, .val_data = val_batches},
                             callbacks::ProgressBar{}, callbacks::LrMonitor{});
  const double accuracy = r.metrics.at("val_accuracy");
  const bool ok = accuracy > 0.85;
  std::printf("glyph_pairs: val_accuracy %.4f val_loss %.4f after %lld steps, lr %.3g (%s)\n",
              accuracy, r.metrics.at("val_loss"), (long long)r.steps, trainer.optimizer().lr(),
              ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
