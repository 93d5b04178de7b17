// A small training run for the kill test: trains 3 epochs with a checkpoint
// after every optimizer step, printing "step N" just before each checkpoint
// is written, then saves the final weights. `--resume` continues from the
// latest checkpoint in the folder, if there is one. `--map-batches` trains
// a two-input model on string-keyed map batches instead; `--sharded` writes
// sharded checkpoints (folders); `--async` writes each on a background thread.
//   kill_helper DIR OUT.safetensors --resume|--fresh [--map-batches|--sharded|--async]
#include <torch/torch.h>
#include <trainkit/callbacks.hpp>
#include <trainkit/data.hpp>
#include <trainkit/io.hpp>
#include <trainkit/trainkit.hpp>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace trainkit;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(64, 128));
    drop = register_module("drop", torch::nn::Dropout(0.2));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  at::Tensor forward(at::Tensor x) { return fc2(drop(torch::relu(fc1(x.flatten(1))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Net);

struct TwoInputImpl : torch::nn::Module {
  TwoInputImpl() {
    a = register_module("a", torch::nn::Linear(64, 64));
    b = register_module("b", torch::nn::Linear(4, 64));
    drop = register_module("drop", torch::nn::Dropout(0.2));
    head = register_module("head", torch::nn::Linear(64, 10));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& y) {
    return head(drop(torch::relu(a(x) + b(y))));
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, head{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(TwoInput);
using Dict = std::map<std::string, at::Tensor>;
struct DictTask {
  StepOutput step(TwoInput& model, const Dict& batch) const {
    return {torch::nn::functional::cross_entropy(model(batch.at("x"), batch.at("y")),
                                                 batch.at("label"))};
  }
};

struct Announce {
  void on_step_end(TrainState& s) {
    std::printf("step %lld\n", (long long)s.step);
    std::fflush(stdout);
  }
};

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::filesystem::path dir = argv[1], out = argv[2];
  const bool resume = argc > 3 && std::strcmp(argv[3], "--resume") == 0;
  at::set_num_threads(1);
  FitOptions options{.epochs = 3};
  if (resume && std::filesystem::exists(dir / "last.ckpt")) options.resume_from = dir;
  const callbacks::ModelCheckpoint::Options saving{.dir = dir, .save_every = 1, .keep_last = 2};
  if (argc > 4 && std::strcmp(argv[4], "--map-batches") == 0) {
    auto gen = data::generator(1);
    std::vector<Dict> batches;
    for (int i = 0; i < 40; ++i) {
      batches.push_back({{"x", at::randn({16, 64}, gen)},
                         {"y", at::randn({16, 4}, gen)},
                         {"label", at::randint(0, 10, {16}, gen)}});
    }
    seed_everything(4);
    Trainer<optim::AdamW, sched::OneCycle, precision::Fp32, accumulate::Every<2>> trainer(
        TwoInput(), {.sched = {.max_lr = 1e-2}});
    trainer.fit(DictTask{}, batches, options, Announce{}, callbacks::ModelCheckpoint(saving));
    io::save_safetensors(out, trainer.model());
    std::printf("done\n");
    return 0;
  }
  auto gen = data::generator(1);
  const data::TensorDataset ds{at::randn({1200, 64}, gen), at::randint(0, 10, {1200}, gen)};
  data::Loader loader(ds, data::RandomSampler({.size = 1200, .seed = 2}),
                      {.batch_size = 16, .workers = 2, .seed = 3});
  seed_everything(4);
  const std::string flag = argc > 4 ? argv[4] : "";
  const bool sharded = flag == "--sharded" || flag == "--sharded-async";
  const bool asynchronous = flag == "--async" || flag == "--sharded-async";
  Trainer<optim::AdamW, sched::OneCycle, precision::Fp32, accumulate::Every<4>> trainer(
      Net(), {.sched = {.max_lr = 1e-2},
              .checkpoint = {.form = sharded ? CheckpointOptions::Form::Sharded
                                             : CheckpointOptions::Form::Auto,
                             .asynchronous = asynchronous}});
  // Announce first: "step N" is printed right before step N's checkpoint is written.
  trainer.fit(task::Classification{}, loader, options, Announce{},
              callbacks::ModelCheckpoint(saving));
  io::save_safetensors(out, trainer.model());
  std::printf("done\n");
  return 0;
}
