// Every option is validated up front, and the error names the option, the
// value and what is accepted.
#include <trainkit/trainkit.hpp>

#include "support.hpp"

using namespace trainkit;

namespace {

void expect_error(const std::function<void()>& make, const std::string& option,
                  const std::string& value, const std::string& accepted) {
  CAPTURE(option);
  try {
    make();
    FAIL("no trainkit::Error for " << option);
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(
        msg.find("option `" + option + "` = " + value + " is invalid") != std::string::npos, msg);
    CHECK_MESSAGE(msg.find("accepted: " + accepted) != std::string::npos, msg);
  }
}

FlatParams& some_params() {
  static std::vector<at::Tensor> tensors{torch::zeros({3}).requires_grad_(true)};
  static FlatParams flat(tensors);
  return flat;
}

}  // namespace

TEST_CASE("optimizer options") {
  auto& p = some_params();
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) {
    const std::string accepted = "false or unset with LibTorch " TORCH_VERSION
                                 " (ATen's fused optimizer kernels need LibTorch >= 2.4)";
    expect_error([&] { optim::AdamW(p, {.fused = true}); }, "optim.fused", "true", accepted);
    expect_error([&] { optim::SGD(p, {.fused = true}); }, "optim.fused", "true", accepted);
  }
  expect_error([&] { optim::SGD(p, {.lr = -0.1}); }, "optim.lr", "-0.1", "a number >= 0");
  expect_error([&] { optim::SGD(p, {.momentum = -1}); }, "optim.momentum", "-1", "a number >= 0");
  expect_error([&] { optim::SGD(p, {.weight_decay = -1}); }, "optim.weight_decay", "-1",
               "a number >= 0");
  expect_error([&] { optim::SGD(p, {.nesterov = true}); }, "optim.nesterov", "true",
               "true only with momentum > 0 and dampening == 0");
  expect_error([&] { optim::AdamW(p, {.lr = -1e-3}); }, "optim.lr", "-0.001",
               "a finite number >= 0");
  expect_error([&] { optim::Adam(p, {.beta1 = 1.0}); }, "optim.beta1", "1", "0 <= beta1 < 1");
  expect_error([&] { optim::Adam(p, {.beta2 = -0.5}); }, "optim.beta2", "-0.5", "0 <= beta2 < 1");
  expect_error([&] { optim::AdamW(p, {.eps = -1}); }, "optim.eps", "-1", "a number >= 0");
  expect_error([&] { optim::AdamW(p, {.weight_decay = -0.01}); }, "optim.weight_decay", "-0.01",
               "a number >= 0");
}

TEST_CASE("scheduler options") {
  expect_error([] { sched::Step({.step_size = 0}); }, "sched.step_size", "0",
               "a number of steps > 0");
  expect_error([] { sched::Step({.gamma = 0}); }, "sched.gamma", "0", "a number > 0");
  expect_error(
      [] {
        sched::MultiStep({.milestones = {3, -2}});
      },
      "sched.milestones", "-2", "step numbers > 0");
  expect_error([] { sched::Exponential({.gamma = -1}); }, "sched.gamma", "-1", "a number > 0");
  expect_error([] { sched::Constant({.factor = 2}); }, "sched.factor", "2", "0 <= factor <= 1");
  expect_error([] { sched::Cosine({.t_max = -5}); }, "sched.t_max", "-5",
               "a number of steps > 0, or 0 for the whole run");
  expect_error([] { sched::Cosine({.eta_min = -1}); }, "sched.eta_min", "-1", "a number >= 0");
  expect_error([] { sched::Constant({.total_iters = -1}); }, "sched.total_iters", "-1",
               "a number >= 0");
  expect_error([] { sched::Linear({.total_iters = -4}); }, "sched.total_iters", "-4",
               "a number of steps > 0, or 0 for the whole run");
  expect_error([] { sched::Linear({.start_factor = 0}); }, "sched.start_factor", "0",
               "0 < start_factor <= 1");
  expect_error([] { sched::Linear({.end_factor = 1.5}); }, "sched.end_factor", "1.5",
               "0 <= end_factor <= 1");
  expect_error([] { sched::WarmupCosine({.warmup_steps = -1}); }, "sched.warmup_steps", "-1",
               "a number >= 0");
  expect_error(
      [] {
        sched::WarmupCosine({.warmup_steps = 10, .total_steps = 10}).start({0.1, -1});
      },
      "sched.warmup_steps", "10", "fewer steps than sched.total_steps");
  expect_error([] { sched::OneCycle({.max_lr = -1}); }, "sched.max_lr", "-1",
               "a number > 0, or 0 for optim.lr");
  expect_error([] { sched::OneCycle({.pct_start = 1.0}); }, "sched.pct_start", "1",
               "0 < pct_start < 1");
  expect_error([] { sched::OneCycle({.div_factor = 0}); }, "sched.div_factor", "0", "a number > 0");
  expect_error([] { sched::OneCycle({.final_div_factor = -2}); }, "sched.final_div_factor", "-2",
               "a number > 0");
  expect_error([] { sched::OneCycle({.base_momentum = 0.99, .max_momentum = 0.9}); },
               "sched.base_momentum", "0.99", "a number <= sched.max_momentum");
  expect_error(
      [] {
        sched::OneCycle().start({0.1, -1});
      },
      "sched.total_steps", "0", "a number of optimizer steps > 0");
}

TEST_CASE("precision, accumulate and clip options") {
  expect_error([] { precision::Fp16({}, torch::kCPU); }, "precision.autocast", "true",
               "true only on a CUDA device");
  expect_error([] { precision::GradScaler({.init_scale = 0}); }, "precision.scaler.init_scale", "0",
               "a finite number > 0");
  expect_error([] { precision::GradScaler({.growth_factor = 1}); },
               "precision.scaler.growth_factor", "1", "a number > 1");
  expect_error([] { precision::GradScaler({.backoff_factor = 1}); },
               "precision.scaler.backoff_factor", "1", "0 < backoff_factor < 1");
  expect_error([] { precision::GradScaler({.growth_interval = 0}); },
               "precision.scaler.growth_interval", "0", "a number of steps > 0");
  expect_error([] { accumulate::Steps({.steps = 0}); }, "accumulate.steps", "0",
               "a number of micro-batches per optimizer step >= 1");
  expect_error([] { clip::Norm({.max_norm = 0}); }, "clip.max_norm", "0", "a finite number > 0");
  expect_error([] { clip::Norm({.max_norm = -1}); }, "clip.max_norm", "-1", "a finite number > 0");
  expect_error([] { clip::Norm({.norm_type = 0}); }, "clip.norm_type", "0",
               "a number > 0, or infinity for the max-norm");
  expect_error([] { clip::Value({.clip_value = 0}); }, "clip.clip_value", "0",
               "a finite number > 0");
}

TEST_CASE("trainer, fit, data and callback options") {
  expect_error(
      [] {
        Trainer<optim::SGD, sched::Constant, precision::Fp32, accumulate::Steps> t(
            tk_test::seeded_mlp(), {.accumulate = {.steps = 0}});
      },
      "accumulate.steps", "0", "a number of micro-batches");
  expect_error(
      [] {
        Trainer<optim::AdamW, sched::OneCycle> t(tk_test::seeded_mlp(),
                                                 {.sched = {.pct_start = 0}});
      },
      "sched.pct_start", "0", "0 < pct_start < 1");
  struct Frozen : torch::nn::Module {
    at::Tensor forward(at::Tensor x) { return x; }
  };
  expect_error([] { Trainer<> t(std::make_shared<Frozen>()); }, "model",
               "\"no trainable parameters\"", "a model with at least one parameter");
  const auto ds = data::TensorDataset{torch::randn({8, 8}), torch::zeros({8}, at::kLong)};
  Trainer<optim::SGD> trainer(tk_test::seeded_mlp());
  data::TensorBatches batches(ds, {.batch_size = 4});
  expect_error([&] { trainer.fit(task::Classification{}, batches, {.epochs = 0}); }, "fit.epochs",
               "0", "a number >= 1");
  expect_error([&] { trainer.fit(task::Classification{}, batches, {.log_every = 0}); },
               "fit.log_every", "0", "a number >= 1");
  expect_error([&] { data::TensorBatches(ds, {.batch_size = 0}); }, "data.batch_size", "0",
               "a number >= 1");
  expect_error(
      [] {
        data::TensorBatches({torch::zeros({4, 2}), torch::zeros({3})}, {});
      },
      "data.targets", "3", "as many targets as inputs");
  expect_error([] { callbacks::ProgressBar({.lines_per_epoch = 0}); },
               "progress_bar.lines_per_epoch", "0", "a number >= 1");
  expect_error([] { callbacks::ProgressBar({.width = -3}); }, "progress_bar.width", "-3",
               "a number of columns >= 1");
  expect_error([] { callbacks::CsvLogger({.path = "runs/"}); }, "csv_logger.path", "\"runs/\"",
               "a file path");
  expect_error([] { callbacks::EarlyStopping({.patience = -1}); }, "early_stopping.patience", "-1",
               "a number of epochs >= 0");
  expect_error([] { callbacks::EarlyStopping({.min_delta = -1}); }, "early_stopping.min_delta",
               "-1", "a number >= 0");
  expect_error([] { callbacks::EarlyStopping({.monitor = ""}); }, "early_stopping.monitor", "\"\"",
               "a metric name");
  expect_error(
      [&] {
        Trainer<optim::Wrap<torch::optim::Adagrad>, sched::OneCycle> t(tk_test::seeded_mlp());
        t.fit(task::Classification{}, batches);
      },
      "sched.cycle_momentum", "true", "false for an optimizer without momentum");
}
