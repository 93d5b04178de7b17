// The main job: a small CNN trained on the built-in glyph dataset (or MNIST
// with --mnist DIR), AdamW + OneCycle in fp32 (--precision bf16|fp16), with a progress bar, early
// stopping, per-epoch validation and a final accuracy line. It logs to
// runs/demo/ (--runs-dir): a CSV and a JSON-lines log, TensorBoard event
// files and a self-contained HTML run report; --profile A:B adds a Chrome
// trace and an operator table of steps [A, B). --ema D validates on an
// exponential moving average of the weights; --lr-find runs the
// learning-rate range test instead of training.
// With --ddp it is one rank of a data-parallel run (parallel::DDP: Gloo on
// CPUs, NCCL on GPUs), started by scripts/launch.sh, torchrun or srun.
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <trainkit/callbacks.hpp>
#include <trainkit/data.hpp>
#include <trainkit/finders.hpp>
#include <trainkit/io.hpp>
#include <trainkit/parallel/ddp.hpp>
#include <trainkit/trainkit.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "glyphs.hpp"
#include "models.hpp"

using namespace trainkit;

int main(int argc, char** argv) {
  CLI::App app{"trainkit demo: a small CNN on procedurally generated glyphs"};
  int64_t epochs = 6, train_size = 12000, val_size = 2000, batch_size = 64, workers = 1;
  int threads = 0;
  double max_lr = 3e-3, label_smoothing = 0.0, ema_decay = 0.0;
  double peak_flops = 0;
  std::string mnist_dir, runs_dir = "runs/demo", csv, model_name = "cnn", profile;
  std::string precision_name = "fp32";
  app.add_option("--epochs", epochs, "training epochs")->check(CLI::PositiveNumber);
  app.add_option("--train-size", train_size, "glyphs to train on")->check(CLI::PositiveNumber);
  app.add_option("--val-size", val_size, "glyphs to validate on")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "samples per step")->check(CLI::PositiveNumber);
  app.add_option("--max-lr", max_lr, "OneCycle peak learning rate")->check(CLI::PositiveNumber);
  app.add_option("--label-smoothing", label_smoothing,
                 "cross-entropy label smoothing, as PyTorch's (0: none)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--ema", ema_decay,
                 "validate on an EMA of the weights with this decay, warmed up as timm's "
                 "(0: none)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--threads", threads, "intra-op threads (0: LibTorch's default)");
  app.add_option("--workers", workers, "data loader threads building batches ahead")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--mnist", mnist_dir, "read MNIST IDX files from this folder instead");
  app.add_option("--runs-dir", runs_dir, "folder for the logs, TensorBoard files and report");
  app.add_option("--csv", csv, "per-epoch CSV log (default: <runs-dir>/log.csv)");
  app.add_option("--profile", profile, "profile optimizer steps A:B (e.g. 20:25)");
  int64_t histogram_every = 100;
  app.add_option("--histogram-every", histogram_every,
                 "TensorBoard histograms of weights and gradients every N steps (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--peak-flops", peak_flops, "the device's peak FLOP/s, for MFU")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--model", model_name, "cnn or linear")->check(CLI::IsMember({"cnn", "linear"}));
  bool ddp = false;
  app.add_option("--precision", precision_name,
                 "fp32, bf16 (autocast) or fp16 (CUDA: autocast + loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_flag("--ddp", ddp, "one process of a DDP run (RANK/WORLD_SIZE/... from the launcher)");
  bool lr_find = false;
  app.add_flag("--lr-find", lr_find,
               "run the learning-rate range test instead of training: the curve in "
               "<runs-dir>/lr_find.csv and <runs-dir>/report.html, and a suggested --max-lr");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) torch::set_num_threads(threads);
  if (csv.empty()) csv = runs_dir + "/log.csv";
  int64_t profile_first = 0, profile_last = 0;
  if (!profile.empty() && std::sscanf(profile.c_str(), "%lld:%lld", (long long*)&profile_first,
                                      (long long*)&profile_last) != 2) {
    std::fprintf(stderr, "demo: --profile takes A:B, two step numbers; got \"%s\"\n",
                 profile.c_str());
    return 2;
  }
  if (ddp && precision_name != "fp32") {
    std::fprintf(stderr, "demo: --precision %s trains one process; --ddp trains in fp32\n",
                 precision_name.c_str());
    return 2;
  }

  try {
    const auto start = std::chrono::steady_clock::now();
    data::TensorDataset train, val;
    if (mnist_dir.empty()) {
      train = examples::make_glyphs(train_size, /*seed=*/1);
      val = examples::make_glyphs(val_size, /*seed=*/2);
    } else {
      train = data::read_mnist(mnist_dir, /*train=*/true);
      val = data::read_mnist(mnist_dir, /*train=*/false);
    }
    std::printf("data: %lld train / %lld val images (%s), %d threads\n", (long long)train.size(),
                (long long)val.size(), mnist_dir.empty() ? "glyphs" : "MNIST",
                torch::get_num_threads());
    std::fflush(stdout);  // before the progress bar writes to stderr

    // Random shifts of up to 2 pixels, drawn per batch on the device side.
    // The trainer gives the sampler this process's shard under DDP. On one
    // GPU, batches are built in pinned memory and copied ahead on a side stream.
    std::optional<torch::Device> device;
    if (!ddp && torch::cuda::is_available()) device = torch::Device(torch::kCUDA, 0);
    data::Loader train_batches(train, data::DistributedSampler({.size = train.size(), .seed = 42}),
                               {.batch_size = batch_size,
                                .workers = workers,
                                .seed = 42,
                                .device = device,
                                .device_transform = data::transforms::RandomCrop{28, 2}});
    torch::manual_seed(0);
    if (lr_find) {  // one process, fp32, a constant schedule the sweep overrides
      auto find = [&](auto model) {
        Trainer<optim::AdamW> trainer(model, {.optim = {.weight_decay = 0.01}});
        const auto r =
            finders::lr_find(trainer, task::Classification{.label_smoothing = label_smoothing},
                             train_batches, {.min_lr = 1e-6, .max_lr = 1.0, .num_steps = 100});
        r.write_csv(runs_dir + "/lr_find.csv");
        callbacks::RunReport report({.path = runs_dir + "/report.html",
                                     .title = "trainkit demo: learning-rate range test"});
        report.add_figure(r.figure());
        report.write();
        std::printf("lr_find: %zu steps%s, curve in %s/lr_find.csv and %s/report.html\n",
                    r.lrs.size(), r.diverged ? " (stopped: the loss diverged)" : "",
                    runs_dir.c_str(), runs_dir.c_str());
        if (r.suggestion) std::printf("suggested --max-lr %.3g\n", *r.suggestion);
      };
      model_name == "cnn" ? find(SmallCnn()) : find(LinearModel());
      return 0;
    }
    auto run = [&]<class Parallel, class Precision>(Parallel*, Precision*, auto model) {
      using DemoTrainer =
          Trainer<optim::AdamW, sched::OneCycle, Precision, accumulate::None, clip::None, Parallel>;
      DemoTrainer trainer(
          model, {.optim = {.lr = max_lr, .weight_decay = 0.01}, .sched = {.max_lr = max_lr}});
      // Each rank validates its shard; the trainer averages over ranks.
      data::Loader val_batches(
          val,
          data::DistributedSampler({.size = val.size(),
                                    .rank = trainer.parallel().rank(),
                                    .world_size = trainer.parallel().world_size(),
                                    .shuffle = false}),
          {.batch_size = 500});
      const double flops = callbacks::training_flops_per_sample(
          model, train.inputs.slice(0, 0, 1).to(trainer.device()));
      auto fit = [&](auto... extra) {
        return trainer.fit(
            task::Classification{.label_smoothing = label_smoothing}, train_batches,
            {.epochs = epochs, .val_data = val_batches, .log_every = 10},
            // Throughput and LrMonitor publish what the loggers after them write.
            callbacks::Throughput({.flops_per_sample = flops, .peak_flops = peak_flops}),
            callbacks::LrMonitor{}, callbacks::ProgressBar{},
            callbacks::EarlyStopping({.monitor = "val_loss", .patience = 2}),
            callbacks::CsvLogger({.path = csv}),
            callbacks::JsonLines({.path = runs_dir + "/log.jsonl"}),
            callbacks::TensorBoard(
                {.dir = runs_dir + "/tensorboard", .histogram_every = histogram_every}),
            callbacks::RunReport({.path = runs_dir + "/report.html", .title = "trainkit demo"}),
            extra...);
      };
      auto fit_ema = [&](auto... extra) {
        if (ema_decay == 0) return fit(std::move(extra)...);
        return fit(callbacks::Ema({.decay = ema_decay, .warmup = true, .validate = true}),
                   std::move(extra)...);
      };
      if (profile.empty()) return fit_ema();
      return fit_ema(callbacks::Profiler(
          {.first_step = profile_first, .last_step = profile_last, .dir = runs_dir + "/profile"}));
    };
    auto pick_model = [&](auto* parallel, auto* precision) {
      return model_name == "cnn" ? run(parallel, precision, SmallCnn())
                                 : run(parallel, precision, LinearModel());
    };
    auto single = [&](auto* precision) {
      return pick_model(static_cast<parallel::Single*>(nullptr), precision);
    };
    const auto result = ddp ? pick_model(static_cast<parallel::DDP*>(nullptr),
                                         static_cast<precision::Fp32*>(nullptr))
                        : precision_name == "bf16" ? single(static_cast<precision::Bf16*>(nullptr))
                        : precision_name == "fp16" ? single(static_cast<precision::Fp16*>(nullptr))
                                                   : single(static_cast<precision::Fp32*>(nullptr));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (parallel::Environment::detect().rank != 0) return 0;  // rank 0 reports
    std::printf("logs: %s, %s/log.jsonl\n", csv.c_str(), runs_dir.c_str());
    std::printf("tensorboard: tensorboard --logdir %s/tensorboard\n", runs_dir.c_str());
    std::printf("report: %s/report.html\n", runs_dir.c_str());
    if (!profile.empty())
      std::printf("profile: %s/profile/trace.json, %s/profile/top_ops.txt\n", runs_dir.c_str(),
                  runs_dir.c_str());
    std::printf("final: val_accuracy %.4f val_loss %.4f after %lld epochs, %lld steps (%.1f s)\n",
                result.metrics.at("val_accuracy"), result.metrics.at("val_loss"),
                (long long)result.epochs, (long long)result.steps, seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "demo: %s\n", e.what());
    return 1;
  }
  return 0;
}
