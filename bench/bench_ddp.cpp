// Data parallel benchmarks; run through scripts/launch.sh (bench/run_all.sh
// does), rank 0 reports:
//   overlap: forward + backward + gradient sync per step of a ~21M-parameter
//            MLP, DDP's bucketed all-reduces started from the backward hooks
//            vs the same backward followed by one flat all-reduce (ratio)
//   scaling: training samples/s of the Trainer with DDP (run with -n 1 and
//            -n 2; run_all.sh computes the efficiency)
//   zero:    optimizer-state bytes per rank, ZeroSharded vs DDP (AdamW)
#include <torch/torch.h>

#include <trainkit/data.hpp>
#include <trainkit/parallel/ddp.hpp>
#include <trainkit/parallel/zero_sharded.hpp>
#include <trainkit/trainkit.hpp>

#include <cstdio>
#include <string>

#include "bench_util.hpp"

namespace tk = trainkit;

namespace {

torch::nn::Sequential mlp(int64_t width, int64_t layers, int64_t in, int64_t out) {
  torch::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Linear(in, width), torch::nn::ReLU());
  for (int64_t i = 1; i < layers; ++i) {
    net->push_back(torch::nn::Linear(width, width));
    net->push_back(torch::nn::ReLU());
  }
  net->push_back(torch::nn::Linear(width, out));
  return net;
}

tk::parallel::DDP::Options options(int port_offset) {
  tk::parallel::DDP::Options o;
  o.device = torch::Device(torch::kCPU);  // Gloo ranks on CPUs, also beside a GPU
  o.rendezvous.master_port = std::stoi(std::getenv("MASTER_PORT")) + port_offset;
  return o;
}

void overlap() {
  auto net = mlp(2048, 5, 1024, 1024);  // 4 x 2048^2 + 2 x 1024 x 2048 = 21.0M parameters
  tk::parallel::DDP ddp(options(0));
  ddp.prepare(*net);
  tk::FlatParams flat(*net);
  ddp.attach(flat);
  auto x = torch::randn({16, 1024}), y = torch::randn({16, 1024});
  size_t started_in_backward = 0;
  auto step_overlapped = [&] {
    auto loss = torch::mse_loss(net->forward(x), y);
    loss.backward();
    started_in_backward = ddp.buckets_started();
    ddp.finish_sync(flat);  // waits for the buckets started during backward
    flat.zero_grad();
  };
  auto& group = ddp.process_group();
  const auto world = double(ddp.world_size());
  auto step_flat = [&] {
    auto loss = torch::mse_loss(net->forward(x), y);
    {
      [[maybe_unused]] auto quiet = ddp.defer_sync();  // hooks off: plain backward
      loss.backward();
    }
    for (auto& g : flat.groups()) {  // then one all-reduce of everything
      g.grad.div_(world);
      group.all_reduce(g.grad, "flat all-reduce");
    }
    flat.zero_grad();
  };
  auto step_local = [&] {  // no communication: the compute floor
    auto loss = torch::mse_loss(net->forward(x), y);
    [[maybe_unused]] auto quiet = ddp.defer_sync();
    loss.backward();
    flat.zero_grad();
  };
  const double local = bench::seconds_per_call(step_local, 5, 5);
  const double overlapped = bench::seconds_per_call(step_overlapped, 5, 5);
  const double flat_after = bench::seconds_per_call(step_flat, 5, 5);
  if (ddp.is_main()) {
    char fields[320];
    std::snprintf(fields, sizeof fields,
                  "\"params_M\": %.1f, \"ranks\": %d, \"buckets\": %zu, \"started_in_backward\": "
                  "%zu, \"no_sync_ms\": %.1f, "
                  "\"overlap_ms\": %.1f, \"flat_after_backward_ms\": %.1f, \"speedup\": %.2f",
                  double(flat.numel()) / 1e6, ddp.world_size(), ddp.bucket_ranges().size(),
                  started_in_backward, local * 1e3, overlapped * 1e3, flat_after * 1e3,
                  flat_after / overlapped);
    bench::report("ddp_overlap", fields);
  }
}

// One process runs parallel::Single (the baseline), more run DDP.
template <class Parallel>
void scaling(typename Parallel::Options parallel) {
  auto net = mlp(1024, 2, 784, 10);  // 1.9M parameters
  using T = tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32,
                        tk::accumulate::None, tk::clip::None, Parallel>;
  T trainer(net, {.parallel = parallel});
  const int64_t per_rank = 64, samples = 64 * 40 * trainer.parallel().world_size();
  auto data = tk::data::TensorDataset{torch::randn({samples, 784}),
                                      torch::randint(10, {samples}, torch::kLong)};
  tk::data::Loader loader(data, tk::data::DistributedSampler({.size = samples}),
                          {.batch_size = per_rank});
  trainer.fit(tk::task::Classification{}, loader, {.epochs = 1});  // warm up
  double best = 0;
  for (int repeat = 0; repeat < 3; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    const auto r = trainer.fit(tk::task::Classification{}, loader, {.epochs = 1});
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(r.steps * per_rank * trainer.parallel().world_size()) / s);
  }
  if (trainer.parallel().is_main()) {
    char fields[160];
    std::snprintf(fields, sizeof fields, "\"ranks\": %d, \"samples_per_s\": %.0f",
                  trainer.parallel().world_size(), best);
    bench::report("ddp_scaling", fields);
  }
}

template <class Parallel>
int64_t state_bytes(int port_offset) {
  auto net = mlp(1024, 4, 784, 10);
  tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None,
              tk::clip::None, Parallel>
      trainer(net, {.parallel = options(port_offset)});
  int64_t bytes = 0;
  for (const auto& [name, t] : trainer.optimizer().state_dict().tensors) bytes += t.nbytes();
  return bytes;
}

void zero() {
  const auto ddp = state_bytes<tk::parallel::DDP>(2);
  const auto zero = state_bytes<tk::parallel::ZeroSharded>(3);
  const auto world = tk::parallel::Environment::detect().world_size;
  if (tk::parallel::Environment::detect().rank == 0) {
    char fields[200];
    std::snprintf(fields, sizeof fields,
                  "\"ranks\": %d, \"ddp_state_MB\": %.2f, \"zero_state_MB\": %.2f, "
                  "\"ratio\": %.3f, \"ideal\": %.3f",
                  world, double(ddp) / 1e6, double(zero) / 1e6, double(zero) / double(ddp),
                  1.0 / world);
    bench::report("zero_state_memory", fields);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  try {
    if (what == "overlap" || what == "all") overlap();
    if (what == "scaling" || what == "all") {
      if (tk::parallel::Environment::detect().world_size == 1) {
        scaling<tk::parallel::Single>({});
      } else {
        scaling<tk::parallel::DDP>(options(1));
      }
    }
    if (what == "zero" || what == "all") zero();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    return 1;
  }
  return 0;
}
