// Compile-time benchmark: the umbrella header and one instantiated Trainer.
#include <torch/torch.h>
#include <trainkit/trainkit.hpp>

struct NetImpl : torch::nn::Module {
  NetImpl() : fc(register_module("fc", torch::nn::Linear(32, 10))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

double train(const std::vector<trainkit::data::Batch>& batches) {
  using namespace trainkit;
  Trainer<optim::AdamW, sched::OneCycle, precision::Fp32, accumulate::Every<2>, clip::Norm> trainer(
      Net(), {.sched = {.max_lr = 1e-2}});
  return trainer.fit(task::Classification{}, batches, {.epochs = 2}).metrics["train_loss"];
}
