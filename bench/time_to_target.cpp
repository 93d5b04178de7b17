// Time to a target validation loss on the GPT example (examples/gpt.hpp):
// the figure an optimizer is chosen by. Per configuration, the learning
// rate is tuned on one seed over a small grid (the fastest to the target),
// then the steps, samples and CPU seconds to the target are the median over
// `--seeds` seeds (each seed orders the data and initialises the model).
// Validation runs every `--every` steps on the optimizer's evaluation
// weights (schedule-free AdamW's average); its time is not counted.
//   build/bench/bench/bench_time_to_target --seeds 5
// One JSON line per configuration (bench_util.hpp), then a markdown table.
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <trainkit/data.hpp>
#include <trainkit/optim.hpp>
#include <trainkit/trainkit.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "../examples/gpt.hpp"
#include "bench_util.hpp"

using namespace trainkit;

namespace {

struct Setup {
  int64_t layers = 2, embd = 64, heads = 4, sentences = 3000, every = 10, max_steps = 600;
  double target = 0.8;
};

/// Where a run reached the target (steps 0: it did not).
struct Reached {
  int64_t steps = 0, samples = 0;
  double cpu_seconds = 0.0;
};

double cpu_now() {
  return double(std::clock()) / CLOCKS_PER_SEC;
}

/// Evaluates every `every` steps and stops the fit at the target; the
/// evaluations' CPU time is left out of the run's.
template <class T, class Val>
struct StopAtTarget {
  T* trainer;
  Val* val;
  const Setup* setup;
  double start, evaluating = 0.0;
  Reached reached{};
  void on_step_end(TrainState& s) {
    if (s.step % setup->every != 0) return;
    const double before = cpu_now();
    const double loss = trainer->evaluate(examples::LanguageModelling{}, *val).at("loss");
    evaluating += cpu_now() - before;
    if (loss > setup->target) return;
    reached = {s.step, s.samples_seen, before - start - evaluating};
    s.request_stop("target reached");
  }
};

/// One configuration: an optimizer and schedule with options made from a
/// learning rate, and a batch size.
struct Config {
  std::string name;
  int64_t batch_size;
  std::vector<double> rates;
  std::function<Reached(const Setup&, int64_t batch, double lr, uint64_t seed)> run;
};

template <class Opt, class Sched>
Reached train(const Setup& setup, int64_t batch, uint64_t seed,
              typename Trainer<Opt, Sched>::Options options) {
  const examples::GptConfig config{.vocab_size = examples::SentenceCorpus::vocab_size(),
                                   .block_size = 64,
                                   .n_layer = setup.layers,
                                   .n_head = setup.heads,
                                   .n_embd = setup.embd};
  const examples::SentenceCorpus corpus(setup.sentences, /*seed=*/1, config.block_size);
  const examples::SentenceCorpus held_out(200, /*seed=*/2, config.block_size);
  const data::PadSequences pad{.padding_values = {0, -100}};
  data::Loader train_batches(corpus, data::RandomSampler({.size = corpus.size(), .seed = seed}),
                             {.batch_size = batch}, pad);
  data::Loader val(held_out, data::SequentialSampler(held_out.size()), {.batch_size = 100}, pad);
  torch::manual_seed(seed);
  examples::Gpt model(config);
  examples::init_like_nanogpt(model);
  Trainer<Opt, Sched> trainer(model, options);
  StopAtTarget<Trainer<Opt, Sched>, decltype(val)> stop{&trainer, &val, &setup, cpu_now()};
  trainer.fit(examples::LanguageModelling{}, train_batches,
              {.epochs = 1000, .max_steps = setup.max_steps}, stop);
  return stop.reached;
}

template <class T>
T median(std::vector<T> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"time to a validation loss on the GPT example, per optimizer"};
  Setup setup;
  int seeds = 5;
  int64_t batch = 16;
  app.add_option("--seeds", seeds, "seeds per configuration (median)")->check(CLI::PositiveNumber);
  app.add_option("--target", setup.target, "validation loss to reach (nats per character)");
  app.add_option("--max-steps", setup.max_steps, "give up after this many steps");
  app.add_option("--batch-size", batch, "the base batch (LAMB runs at 4x and 8x)");
  app.add_option("--every", setup.every, "validate every this many steps");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);

  const auto horizon = setup.max_steps;  // the cosine's length: the budget
  const auto cosine = [&](int64_t steps) {
    return sched::WarmupCosine::Options{.warmup_steps = 20, .total_steps = steps};
  };
  std::vector<Config> configs;
  configs.push_back({"AdamW, warm-up + cosine",
                     batch,
                     {2e-3, 4e-3, 8e-3, 1.6e-2},
                     [&](const Setup& s, int64_t b, double lr, uint64_t seed) {
                       return train<optim::AdamW, sched::WarmupCosine>(
                           s, b, seed,
                           {.optim = {.lr = lr, .beta2 = 0.95, .weight_decay = 0.1},
                            .sched = cosine(horizon),
                            .param_groups = {params::no_weight_decay()}});
                     }});
  configs.push_back({"Muon + AdamW, warm-up + cosine",
                     batch,
                     {0.01, 0.02, 0.04, 0.08},
                     [&](const Setup& s, int64_t b, double lr, uint64_t seed) {
                       return train<optim::Muon, sched::WarmupCosine>(
                           s, b, seed,
                           {.optim = {.lr = lr,
                                      .weight_decay = 0.0,
                                      .adamw = {.lr = 8e-3, .beta2 = 0.95, .weight_decay = 0.0}},
                            .sched = cosine(horizon),
                            .param_groups = {optim::Muon::hidden_matrices("^lm_head\\.")}});
                     }});
  configs.push_back(
      {"schedule-free AdamW, no schedule",
       batch,
       {4e-3, 8e-3, 1.6e-2, 3.2e-2},
       [&](const Setup& s, int64_t b, double lr, uint64_t seed) {
         return train<optim::ScheduleFreeAdamW, sched::Constant>(
             s, b, seed,
             {.optim = {.lr = lr, .beta2 = 0.95, .weight_decay = 0.1, .warmup_steps = 20},
              .param_groups = {params::no_weight_decay()}});
       }});
  for (const int64_t times : {4, 8}) {
    configs.push_back({"LAMB, warm-up + cosine",
                       batch * times,
                       {8e-3, 1.6e-2, 3.2e-2, 6.4e-2},
                       [&](const Setup& s, int64_t b, double lr, uint64_t seed) {
                         return train<optim::Lamb, sched::WarmupCosine>(
                             s, b, seed,
                             {.optim = {.lr = lr, .beta2 = 0.95, .weight_decay = 0.1},
                              .sched = cosine(horizon),
                              .param_groups = {params::no_trust_ratio()}});
                       }});
  }

  std::vector<std::string> rows;
  for (const auto& c : configs) {
    double best_lr = c.rates.front();
    int64_t best_steps = 0;
    for (const double lr : c.rates) {  // tuned on seed 0: the fewest steps
      const auto r = c.run(setup, c.batch_size, lr, 0);
      if (r.steps > 0 && (best_steps == 0 || r.steps < best_steps))
        best_lr = lr, best_steps = r.steps;
    }
    std::vector<int64_t> steps, samples;
    std::vector<double> cpu;
    for (int seed = 1; seed <= seeds; ++seed) {
      const auto r = c.run(setup, c.batch_size, best_lr, uint64_t(seed));
      if (r.steps == 0) continue;
      steps.push_back(r.steps), samples.push_back(r.samples), cpu.push_back(r.cpu_seconds);
    }
    const bool any = !steps.empty();
    const auto fields =
        c10::str("\"optimizer\": \"", c.name, "\", \"batch\": ", c.batch_size,
                 ", \"lr\": ", best_lr, ", \"reached\": ", steps.size(), ", \"seeds\": ", seeds,
                 ", \"median_steps\": ", any ? median(steps) : -1,
                 ", \"median_samples\": ", any ? median(samples) : -1,
                 ", \"median_cpu_s\": ", any ? median(cpu) : -1.0);
    bench::report("time_to_target", fields);
    rows.push_back(c10::str("| ", c.name, " | ", c.batch_size, " | ", best_lr, " | ", steps.size(),
                            "/", seeds, " | ", any ? median(steps) : -1, " | ",
                            any ? median(samples) : -1, " | ", any ? median(cpu) : -1.0, " |"));
  }
  std::printf("\ntarget val_loss %.3f, %lld layers x %lld wide, max %lld steps\n", setup.target,
              (long long)setup.layers, (long long)setup.embd, (long long)setup.max_steps);
  std::printf("| optimizer | batch | lr (tuned) | reached | steps | samples | CPU s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) std::printf("%s\n", r.c_str());
  return 0;
}
