// Compile-time benchmark: the umbrella header and one instantiated Trainer.
// With TRAINKIT_BENCH_SECOND_MODEL the same Trainer type also trains a
// second model type (two inputs, a struct batch): what that adds is what a
// model type costs, which should be its task and fit, not the Trainer again.
#include <torch/torch.h>
#include <trainkit/trainkit.hpp>

struct NetImpl : torch::nn::Module {
  NetImpl() : fc(register_module("fc", torch::nn::Linear(32, 10))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

using BenchTrainer =
    trainkit::Trainer<trainkit::optim::AdamW, trainkit::sched::OneCycle, trainkit::precision::Fp32,
                      trainkit::accumulate::Every<2>, trainkit::clip::Norm>;

double train(const std::vector<trainkit::data::Batch>& batches) {
  using namespace trainkit;
  BenchTrainer trainer(Net(), {.sched = {.max_lr = 1e-2}});
  return trainer.fit(task::Classification{}, batches, {.epochs = 2}).metrics["train_loss"];
}

#ifdef TRAINKIT_BENCH_SECOND_MODEL
struct PairImpl : torch::nn::Module {
  PairImpl() : fc(register_module("fc", torch::nn::Linear(64, 10))) {}
  torch::Tensor forward(torch::Tensor a, torch::Tensor b) { return fc(torch::cat({a, b}, 1)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Pair);
struct PairBatch {
  torch::Tensor a, b, label;
};
struct PairTask {
  trainkit::StepOutput step(Pair& model, const PairBatch& batch) const {
    return {torch::nn::functional::cross_entropy(model(batch.a, batch.b), batch.label)};
  }
};

double train_pairs(const std::vector<PairBatch>& batches) {
  BenchTrainer trainer(Pair(), {.sched = {.max_lr = 1e-2}});
  return trainer.fit(PairTask{}, batches, {.epochs = 2}).metrics["train_loss"];
}
#endif
