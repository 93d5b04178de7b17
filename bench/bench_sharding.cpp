// What each sharding strategy costs and saves, per rank, against DDP in the
// same run and against the ZeRO paper's formulas. Run through
// scripts/launch.sh with 2 and 4 ranks (bench/run_all.sh does); rank 0
// prints one JSON line per strategy:
//   bytes of parameters, gradients and optimizer state at rest
//   (memory::footprint) and the formula's figure for them (fp32 AdamW,
//   unfused: 4 + 4 + 12 bytes per parameter, the sharded parts divided by W);
//   the most CPU tensor bytes held during a step (memory::CpuMeter);
//   the step's median time, and the bytes this host's loopback carried per
//   step, divided by W (run in a network namespace of its own, `unshare -n`,
//   for nothing else to count; run_all.sh does that as root).
// The model is examples/gpt.hpp's GPT (4 layers, 128 wide, 0.8M parameters)
// on sequences of 64 characters, 8 per rank and step.
#include <torch/torch.h>

#include <trainkit/memory.hpp>
#include <trainkit/parallel/ddp.hpp>
#include <trainkit/parallel/full_shard.hpp>
#include <trainkit/parallel/shard_grad_op.hpp>
#include <trainkit/parallel/zero_sharded.hpp>
#include <trainkit/trainkit.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "../examples/gpt.hpp"
#include "bench_util.hpp"

namespace tk = trainkit;

namespace {

constexpr int64_t kBlock = 64, kBatch = 8;

/// Bytes sent on this network namespace's loopback (/proc/net/dev is the
/// reader's namespace's; /sys/class/net is the one sysfs was mounted in).
int64_t loopback_bytes() {
  std::ifstream in("/proc/self/net/dev");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos || line.substr(0, colon).find("lo") == std::string::npos)
      continue;
    std::istringstream fields(line.substr(colon + 1));
    int64_t value = 0;
    for (int i = 0; i < 9; ++i) fields >> value;  // receive: 8 counters; then transmit bytes
    return value;
  }
  return -1;
}

std::vector<examples::TokenBatch> batches(int rank, int count) {
  examples::SentenceCorpus corpus(int64_t(count) * kBatch * 16, 11, kBlock);
  const tk::data::PadSequences pad{.padding_values = {0, -100}};
  std::vector<examples::TokenBatch> out;
  for (int b = 0; b < count; ++b) {
    std::vector<examples::TokenSample> samples;
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < kBatch; ++i) {
      indices.push_back((int64_t(b) * 16 + rank) * kBatch + i);
      samples.push_back(corpus.get(indices.back()));
    }
    out.push_back(pad(samples, indices));
  }
  return out;
}

struct Formula {
  double params, grads, state;  ///< the sharded parts' divisor is W where the strategy shards
};

template <class Par>
void measure(const char* name, Formula formula, int port_offset, int steps) {
  const auto env = tk::parallel::Environment::detect();
  torch::manual_seed(0);
  examples::Gpt model(examples::GptConfig{.vocab_size = examples::SentenceCorpus::vocab_size(),
                                          .block_size = kBlock,
                                          .n_layer = 4,
                                          .n_head = 4,
                                          .n_embd = 128});
  const auto data = batches(env.rank, steps + 2);
  tk::parallel::DDP::Options group;
  group.device = torch::Device(torch::kCPU);
  group.rendezvous.master_port = std::stoi(std::getenv("MASTER_PORT")) + port_offset;
  typename Par::Options options;
  if constexpr (std::is_same_v<Par, tk::parallel::FullShard>) {
    options = {.group = group, .wrap = tk::parallel::wrap::of_type<examples::Block>()};
  } else {
    options = group;
  }
  tk::memory::CpuMeter meter;
  tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None,
              tk::clip::Norm, Par>
      trainer(model, {.parallel = options, .param_groups = {tk::params::no_weight_decay()}});
  const tk::FitOptions first{.max_steps = 2, .data_is_per_rank = true};
  trainer.fit(examples::LanguageModelling{}, data, first);  // the optimizer's state exists
  const auto rest = tk::memory::footprint(trainer);
  const int64_t held = meter.bytes();
  meter.reset_peak();
  std::vector<examples::TokenBatch> timed(data.begin() + 2, data.end());
  trainer.parallel().barrier("start of the timed steps");
  const int64_t sent_before = loopback_bytes();
  const auto start = std::chrono::steady_clock::now();
  trainer.fit(examples::LanguageModelling{}, timed, {.data_is_per_rank = true});
  trainer.parallel().barrier("end of the timed steps");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  const int64_t sent = loopback_bytes() - sent_before;
  const int64_t peak = meter.peak_bytes();
  if (env.rank != 0) return;
  const double P = double(trainer.flat_params().numel()), W = env.world_size;
  const double expected = P * (formula.params + formula.grads + formula.state);
  char fields[640];
  std::snprintf(
      fields, sizeof fields,
      "\"strategy\": \"%s\", \"ranks\": %d, \"params_M\": %.3f, \"params_MB\": %.2f, "
      "\"grads_MB\": %.2f, \"optimizer_MB\": %.2f, \"at_rest_MB\": %.2f, \"formula_MB\": %.2f, "
      "\"vs_formula\": %.3f, \"meter_at_rest_MB\": %.2f, \"step_peak_MB\": %.2f, "
      "\"step_ms\": %.1f, \"sent_MB_per_step_per_rank\": %.3f",
      name, env.world_size, P / 1e6, rest.parameters / 1e6, rest.gradients / 1e6,
      (rest.optimizer_state + rest.optimizer_workspace) / 1e6, rest.total() / 1e6, expected / 1e6,
      double(rest.total()) / expected, held / 1e6, peak / 1e6, seconds * 1e3,
      sent < 0 ? -1.0 : double(sent) / steps / W / 1e6);
  bench::report("sharding", fields);
}

}  // namespace

int main() {
  try {
    const double W = tk::parallel::Environment::detect().world_size;
    const int steps = 10;
    // fp32 AdamW, unfused: 8 bytes of state and 4 of workspace per parameter
    measure<tk::parallel::DDP>("DDP", {4, 4, 12}, 0, steps);
    measure<tk::parallel::ZeroSharded>("ZeroSharded (ZeRO-1)", {4, 4, 12 / W}, 1, steps);
    measure<tk::parallel::ShardGradOp>("ShardGradOp (ZeRO-2)", {4, 4 / W, 12 / W}, 2, steps);
    measure<tk::parallel::FullShard>("FullShard (ZeRO-3)", {4 / W, 4 / W, 12 / W}, 3, steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sharding: %s\n", e.what());
    return 1;
  }
  return 0;
}
