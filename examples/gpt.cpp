// A small GPT (examples/gpt.hpp) trained on sentences of a small grammar,
// character by character, the way nanoGPT trains: AdamW without weight
// decay on biases and LayerNorms, linear warm-up then cosine decay, two
// micro-batches per step, gradient clipping at 1.0, bf16 autocast where the
// CPU has bf16 instructions (fp16 or bf16 on CUDA), and on a GPU the whole
// step captured as a CUDA graph. Sentences vary in length: each batch is
// padded (PadSequences) and the model takes the padding mask. Started on
// several ranks by a launcher (torchrun, scripts/launch.sh, srun), --ddp
// keeps the whole model on each rank (parallel::DDP) and --fsdp makes each
// block a unit of full sharding (parallel::FullShard).
//   python3 -m torch.distributed.run --nproc_per_node 2 --no_python build/examples/gpt --fsdp
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <trainkit/callbacks.hpp>
#include <trainkit/capture.hpp>
#include <trainkit/data.hpp>
#include <trainkit/parallel/ddp.hpp>
#include <trainkit/parallel/full_shard.hpp>
#include <trainkit/trainkit.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "gpt.hpp"

using namespace trainkit;

namespace {

/// Whether this CPU computes in bf16 natively (AVX512-BF16 or AMX), and
/// oneDNN may use those instructions (ONEDNN_MAX_CPU_ISA, when set, names
/// them or ALL); without them, bf16 autocast on a CPU is emulated and
/// slower than fp32 (12x here with AVX2 kernels).
bool cpu_has_bf16() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  const std::string cap = isa != nullptr ? isa : "ALL";
  const bool allowed =
      cap == "ALL" || cap.find("BF16") != std::string::npos || cap.find("AMX") != std::string::npos;
  return allowed && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainkit gpt: a small GPT on sentences of a small grammar, as nanoGPT trains"};
  int64_t epochs = 4, sentences = 4000, batch_size = 32, workers = 1, max_steps = -1;
  int64_t layers = 4, heads = 4, embd = 128;
  int threads = 0;
  bool fsdp = false, ddp = false;
  double lr = 1e-3, max_val_loss = 0.75;
  std::string precision_name = "auto", runs_dir = "runs/gpt";
  app.add_option("--epochs", epochs, "passes over the training sentences")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-steps", max_steps, "stop after this many optimizer steps (-1: none)");
  app.add_option("--sentences", sentences, "training sentences")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "sentences per micro-batch (two per step)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "peak learning rate (warm-up, then cosine to a tenth)")
      ->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--embd", embd, "embedding width (a multiple of --heads)")
      ->check(CLI::PositiveNumber);
  app.add_option("--precision", precision_name,
                 "auto (bf16 on CUDA and on CPUs with bf16 instructions, else fp32), fp32, bf16, "
                 "or fp16 (CUDA)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16"}));
  app.add_option("--threads", threads, "intra-op threads (0: LibTorch's default)");
  app.add_option("--workers", workers, "data loader threads")->check(CLI::NonNegativeNumber);
  app.add_option("--runs-dir", runs_dir, "folder for the CSV log");
  app.add_flag("--fsdp", fsdp,
               "fully shard the blocks over the ranks a launcher started (RANK, WORLD_SIZE, "
               "MASTER_ADDR, MASTER_PORT); steps stay eager");
  app.add_flag("--ddp", ddp,
               "one rank of a data-parallel run (parallel::DDP) that a launcher started; steps "
               "stay eager")
      ->excludes("--fsdp");
  app.add_option("--max-val-loss", max_val_loss,
                 "the validation loss (nats per character) the run must reach to report ok");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) torch::set_num_threads(threads);

  try {
    const auto start = std::chrono::steady_clock::now();
    const bool cuda = torch::cuda::is_available();
    const char* local_rank = std::getenv("LOCAL_RANK");  // one device per rank under a launcher
    const torch::Device device =
        cuda ? torch::Device(torch::kCUDA, c10::DeviceIndex(local_rank ? std::atoi(local_rank) : 0))
             : torch::Device(torch::kCPU);
    if (precision_name == "auto") precision_name = cuda || cpu_has_bf16() ? "bf16" : "fp32";
    if (precision_name == "fp16" && !cuda) {
      std::fprintf(stderr, "gpt: --precision fp16 needs CUDA (bf16 or fp32 on a CPU)\n");
      return 2;
    }
    const examples::GptConfig config{.vocab_size = examples::SentenceCorpus::vocab_size(),
                                     .block_size = 64,
                                     .n_layer = layers,
                                     .n_head = heads,
                                     .n_embd = embd};
    const examples::SentenceCorpus train(sentences, /*seed=*/1, config.block_size);
    const examples::SentenceCorpus val(500, /*seed=*/2, config.block_size);
    // A captured step needs the same shapes every step: on a GPU every
    // batch is padded to the block size, on a CPU to its longest sentence.
    const data::PadSequences pad{.padding_values = {0, -100},
                                 .length = cuda ? config.block_size : 0};
    data::Loader train_batches(train, data::RandomSampler({.size = train.size(), .seed = 1}),
                               {.batch_size = batch_size, .workers = workers, .device = device},
                               pad);
    data::Loader val_batches(val, data::SequentialSampler(val.size()),
                             {.batch_size = 100, .device = device}, pad);
    torch::manual_seed(0);
    examples::Gpt model(config);
    examples::init_like_nanogpt(model);
    int64_t parameters = 0;
    for (const auto& p : model->parameters()) parameters += p.numel();
    // Fully sharded in bf16, the blocks are gathered in bf16 (half the
    // bytes) and their gradients summed in fp32 into fp32 master weights.
    const auto parallel_options = [&]<class Parallel>(Parallel*, bool bf16) {
      if constexpr (std::is_same_v<Parallel, parallel::FullShard>) {
        parallel::FullShard::Options o{.group = {.device = device},
                                       .wrap = parallel::wrap::of_type<examples::Block>()};
        if (bf16) o.mixed_precision = {.param_dtype = at::kBFloat16, .reduce_dtype = at::kFloat};
        return o;
      } else {
        return typename Parallel::Options{};
      }
    };
    // Trains; then, with whole parameters (gathered under --fsdp), samples.
    auto run = [&]<class Precision, class Capture, class Parallel>(Precision*, Capture*,
                                                                   Parallel*) {
      Trainer<optim::AdamW, sched::WarmupCosine, Precision, accumulate::Every<2>, clip::Norm,
              Parallel, Capture>
          trainer(model, {.optim = {.lr = lr, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1},
                          .sched = {.warmup_steps = 20, .start_factor = 0.05, .eta_min = lr / 10},
                          .clip = {.max_norm = 1.0},
                          .parallel = parallel_options(static_cast<Parallel*>(nullptr),
                                                       std::is_same_v<Precision, precision::Bf16>),
                          .param_groups = {params::no_weight_decay()}});
      if (trainer.parallel().is_main()) {
        std::printf("gpt: %lld sentences (\"%s\"), %lld parameters, %s, %s, %d rank(s)%s\n",
                    (long long)train.size(), train.text(0).c_str(), (long long)parameters,
                    device.str().c_str(), precision_name.c_str(), trainer.parallel().world_size(),
                    fsdp ? ", fully sharded" : (ddp ? ", data parallel" : ""));
        std::fflush(stdout);  // before the progress bar writes to stderr
      }
      const auto result = trainer.fit(
          examples::LanguageModelling{}, train_batches,
          {.epochs = epochs, .val_data = val_batches, .max_steps = max_steps},
          callbacks::ProgressBar{}, callbacks::CsvLogger({.path = runs_dir + "/log.csv"}));
      std::vector<std::string> samples;
      [[maybe_unused]] auto whole = parallel::gathered_parameters(trainer.parallel());
      for (const char* prompt : {"the red ", "a small dog "})
        samples.push_back(examples::complete(model, prompt, 48, device));
      return std::pair{result, trainer.parallel().is_main() ? samples : std::vector<std::string>{}};
    };
    constexpr auto* single = static_cast<parallel::Single*>(nullptr);
    constexpr auto* eager = static_cast<capture::None*>(nullptr);
    // Capture on a GPU; on a CPU, or over several ranks, the steps are eager.
    auto pick = [&](auto* precision) {
      if (fsdp) return run(precision, eager, static_cast<parallel::FullShard*>(nullptr));
      if (ddp) return run(precision, eager, static_cast<parallel::DDP*>(nullptr));
      return cuda ? run(precision, static_cast<capture::CudaGraph*>(nullptr), single)
                  : run(precision, eager, single);
    };
    if (precision_name == "fp16" && (fsdp || ddp)) {
      std::fprintf(stderr, "gpt: --%s trains in bf16 or fp32 (--precision fp16 is captured)\n",
                   fsdp ? "fsdp" : "ddp");
      return 2;
    }
    const auto [result, samples] =
        precision_name == "bf16"   ? pick(static_cast<precision::Bf16*>(nullptr))
        : precision_name == "fp16" ? run(static_cast<precision::Fp16*>(nullptr),
                                         static_cast<capture::CudaGraph*>(nullptr), single)
                                   : pick(static_cast<precision::Fp32*>(nullptr));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double val_loss = result.metrics.at("val_loss");
    if (samples.empty()) return 0;  // not the main rank: it reports
    for (const auto& sample : samples) std::printf("sample: \"%s\"\n", sample.c_str());
    const bool ok = val_loss < max_val_loss;
    std::printf(
        "gpt: val_loss %.4f (perplexity %.3f per character) after %lld steps, %.1f s (%s)\n",
        val_loss, std::exp(val_loss), (long long)result.steps, seconds, ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 1;
  }
}
