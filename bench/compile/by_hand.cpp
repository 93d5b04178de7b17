// Compile-time benchmark baseline: the same training loop written by hand.
#include <torch/torch.h>

struct NetImpl : torch::nn::Module {
  NetImpl() : fc(register_module("fc", torch::nn::Linear(32, 10))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

struct Batch {
  torch::Tensor input, target;
};

double train(const std::vector<Batch>& batches) {
  Net net;
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-2));
  torch::optim::StepLR sched(opt, 10, 0.5);
  double last = 0.0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (size_t i = 0; i < batches.size(); ++i) {
      auto loss =
          torch::nn::functional::cross_entropy(net(batches[i].input), batches[i].target) / 2;
      loss.backward();
      if (i % 2 == 1) {
        torch::nn::utils::clip_grad_norm_(net->parameters(), 1.0);
        opt.step();
        sched.step();
        opt.zero_grad();
      }
      last = loss.item<double>();
    }
  }
  return last;
}
