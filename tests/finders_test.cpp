// The finders. The learning-rate finder: the sweep's rates, the suggestion
// on a planted curve (where the smoothed loss falls fastest), a stop on
// divergence, and the trainer put back bit for bit (a fit after lr_find
// equals a fit without it). The batch-size finder: against a CPU memory
// budget, the largest batch that fits and the smallest that does not differ
// by one; the other modes, the data running short, errors.
#include <trainkit/data.hpp>
#include <trainkit/finders.hpp>
#include <trainkit/memory.hpp>
#include <trainkit/trainkit.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support.hpp"

using namespace trainkit;

namespace {

using SgdTrainer = Trainer<optim::SGD>;

std::vector<data::Batch> regression_data() {
  auto gen = data::generator(12);
  std::vector<data::Batch> out;
  const auto w = at::randn({8, 1}, gen);
  for (int i = 0; i < 5; ++i) {
    const auto x = at::randn({32, 8}, gen) * 3;
    out.push_back({x, x.mm(w)});
  }
  return out;
}

std::unique_ptr<SgdTrainer> make_trainer() {
  torch::manual_seed(4);
  // dropout: the restore must put the random generator back too
  return std::make_unique<SgdTrainer>(
      torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Dropout(0.2),
                            torch::nn::Linear(16, 1)),
      SgdTrainer::Options{.optim = {.lr = 1e-3, .momentum = 0.9}});
}

}  // namespace

TEST_CASE("lr_find: the sweep's rates, step k at fraction (k + 1) / num_steps") {
  finders::LrFindOptions o{.min_lr = 1e-6, .max_lr = 1.0, .num_steps = 6};
  CHECK(finders::sweep_lr(o, 5) == doctest::Approx(1.0));
  CHECK(finders::sweep_lr(o, 0) == doctest::Approx(1e-5));  // 1e-6 * (1e6)^(1/6)
  o.exponential = false;
  CHECK(finders::sweep_lr(o, 2) == doctest::Approx(1e-6 + 0.5 * (1.0 - 1e-6)));
}

TEST_CASE("lr_find: the suggestion is where the planted curve falls fastest") {
  std::vector<double> lrs, losses;
  for (int i = 0; i < 100; ++i) {
    lrs.push_back(std::pow(10.0, -7 + i / 10.0));
    losses.push_back(-std::tanh((i - 30) / 5.0));  // steepest at i = 30
  }
  CHECK(finders::suggest_lr(lrs, losses, 10, 1) == lrs[30]);
  losses[60] = std::nan("");  // non-finite points are left out
  CHECK(finders::suggest_lr(lrs, losses, 10, 1) == lrs[30]);
  CHECK(finders::suggest_lr(lrs, losses, 40, 1) == lrs[40]);  // the steepest point left
  CHECK_FALSE(finders::suggest_lr(lrs, losses, 98, 1).has_value());

  // A blow-up and a steeper recovery after the minimum (the demo's curve on
  // the glyphs): the suggestion stays before the minimum unless told not to.
  losses.clear();
  for (int i = 0; i < 100; ++i) {
    const double fall = -std::tanh((i - 30) / 5.0);  // steepest at i = 30
    const double rise = i < 70 ? 0 : i < 80 ? 3.0 * (i - 70) : 30 - 0.5 * (i - 80);
    losses.push_back(fall + rise);
  }
  CHECK(finders::suggest_lr(lrs, losses, 10, 1) == lrs[30]);
  CHECK(finders::suggest_lr(lrs, losses, 10, 1, /*up_to_minimum=*/false) > lrs[80]);
  // A loss that only rises has no rate to suggest.
  for (int i = 0; i < 100; ++i) losses[size_t(i)] = double(i);
  CHECK_FALSE(finders::suggest_lr(lrs, losses, 10, 1).has_value());
}

TEST_CASE("lr_find: a run stops on divergence and leaves the trainer as it was") {
  const auto data = regression_data();
  auto found = make_trainer();
  const auto before = found->flat_params().groups()[0].data.clone();
  torch::manual_seed(21);
  const auto result =
      finders::lr_find(*found, task::Regression{}, data,
                       {.min_lr = 1e-5, .max_lr = 10.0, .num_steps = 80, .smoothing = 0.9});
  REQUIRE(result.lrs.size() >= 3);
  CHECK(result.diverged);
  CHECK(result.lrs.size() < 80);
  CHECK(result.lrs.size() == result.losses.size());
  REQUIRE(result.suggestion.has_value());
  CHECK(*result.suggestion >= 1e-5);
  CHECK(*result.suggestion < result.lrs.back());
  CHECK(torch::equal(found->flat_params().groups()[0].data, before));

  // The generator is put back: its next draw is the one before the sweep.
  const auto after = torch::rand({4});
  torch::manual_seed(21);
  CHECK(torch::equal(after, torch::rand({4})));
  // Put back bit for bit: training afterwards equals training a fresh trainer.
  auto fresh = make_trainer();
  torch::manual_seed(22);
  found->fit(task::Regression{}, data, {.epochs = 2});
  torch::manual_seed(22);
  fresh->fit(task::Regression{}, data, {.epochs = 2});
  CHECK(torch::equal(found->flat_params().groups()[0].data, fresh->flat_params().groups()[0].data));

  const auto dir = tk_test::temp_dir("trainkit_lr_find");
  result.write_csv(dir / "lr_find.csv");
  std::ifstream in(dir / "lr_find.csv");
  std::string line;
  int64_t rows = 0;
  std::getline(in, line);
  CHECK(line == "lr,loss,raw_loss");
  while (std::getline(in, line)) ++rows;
  CHECK(rows == int64_t(result.lrs.size()));

  CHECK_THROWS_WITH_AS(
      finders::lr_find(*found, task::Regression{}, data, {.min_lr = 1e-3, .max_lr = 1e-4}),
      doctest::Contains("lr_find.max_lr"), Error);
  CHECK_THROWS_WITH_AS(finders::lr_find(*found, task::Regression{}, std::vector<data::Batch>{}),
                       doctest::Contains("gave no batch"), Error);
}

namespace {

/// `steps` batches of `batch_size` regression samples, made before the
/// finder's meter starts (so only the training steps count against it).
std::vector<data::Batch> regression_batches(int64_t batch_size, int64_t steps = 2) {
  auto gen = data::generator(uint64_t(batch_size));
  std::vector<data::Batch> out;
  for (int64_t i = 0; i < steps; ++i) {
    const auto x = at::randn({batch_size, 8}, gen);
    out.push_back({x, x.sum(1, true)});
  }
  return out;
}

std::unique_ptr<SgdTrainer> wide_trainer() {
  torch::manual_seed(5);  // 8 -> 256 -> 1: about 2 KiB of activations per sample
  return std::make_unique<SgdTrainer>(
      torch::nn::Sequential(torch::nn::Linear(8, 256), torch::nn::ReLU(),
                            torch::nn::Linear(256, 1)),
      SgdTrainer::Options{.optim = {.lr = 1e-3, .momentum = 0.9}});
}

}  // namespace

TEST_CASE("scale_batch_size: the largest batch within a CPU budget, by doubling then bisection") {
  auto trainer = wide_trainer();
  const auto before = trainer->flat_params().groups()[0].data.clone();
  const int64_t budget = 1 << 20;
  const auto result = finders::scale_batch_size(
      *trainer, task::Regression{}, [](int64_t b) { return regression_batches(b); },
      {.init_batch_size = 2, .cpu_memory_budget = budget});
  MESSAGE("batch size " << result.batch_size << " after " << result.trials.size() << " trials");
  REQUIRE(result.trials.size() >= 3);
  int64_t largest_fit = 0, smallest_fail = std::numeric_limits<int64_t>::max();
  for (const auto& t : result.trials) {
    if (t.fits) {
      CHECK(t.peak_bytes <= budget);
      CHECK(t.error.empty());
      largest_fit = std::max(largest_fit, t.batch_size);
    } else {
      CHECK(t.error.find("limit") != std::string::npos);
      smallest_fail = std::min(smallest_fail, t.batch_size);
    }
  }
  CHECK(largest_fit < smallest_fail);  // memory grows with the batch
  CHECK(result.batch_size == largest_fit);
  CHECK(smallest_fail == largest_fit + 1);
  CHECK(result.batch_size > 64);  // far more than the init: the growth ran
  // Doubling first: 2, 4, 8, ... up to the first that did not fit.
  for (size_t i = 1; i < result.trials.size() && result.trials[i - 1].fits; ++i)
    CHECK(result.trials[i].batch_size == 2 * result.trials[i - 1].batch_size);
  CHECK(torch::equal(trainer->flat_params().groups()[0].data, before));

  // Put back bit for bit: training afterwards equals training a fresh trainer.
  const auto data = regression_batches(16, 4);
  auto fresh = wide_trainer();
  torch::manual_seed(22);
  trainer->fit(task::Regression{}, data, {.epochs = 2});
  torch::manual_seed(22);
  fresh->fit(task::Regression{}, data, {.epochs = 2});
  CHECK(
      torch::equal(trainer->flat_params().groups()[0].data, fresh->flat_params().groups()[0].data));

  // power mode stops at the doubling: the answer is a power of two whose
  // double did not fit.
  const auto power = finders::scale_batch_size(
      *trainer, task::Regression{}, [](int64_t b) { return regression_batches(b); },
      {.mode = finders::BatchSizeMode::power, .init_batch_size = 2, .cpu_memory_budget = budget});
  CHECK(power.batch_size <= result.batch_size);
  CHECK(power.batch_size * 2 > result.batch_size);
  CHECK((power.batch_size & (power.batch_size - 1)) == 0);
  CHECK_FALSE(power.trials.back().fits);
  CHECK(power.trials.back().batch_size == 2 * power.batch_size);

  const auto dir = tk_test::temp_dir("trainkit_batch_size");
  result.write_csv(dir / "batch_size.csv");
  std::ifstream in(dir / "batch_size.csv");
  std::string line;
  std::getline(in, line);
  CHECK(line == "batch_size,fits,samples_per_batch,peak_bytes,samples_per_s");
  int64_t rows = 0;
  while (std::getline(in, line)) ++rows;
  CHECK(rows == int64_t(result.trials.size()));
}

TEST_CASE("scale_batch_size: too big a start halves, the data running short caps, throughput") {
  auto trainer = wide_trainer();
  const int64_t budget = 1 << 20;
  auto make = [](int64_t b) { return regression_batches(b); };
  // Starting far above the budget: halving down to the first that fits,
  // then bisection up to the largest.
  const auto down = finders::scale_batch_size(
      *trainer, task::Regression{}, make, {.init_batch_size = 4096, .cpu_memory_budget = budget});
  const auto up = finders::scale_batch_size(*trainer, task::Regression{}, make,
                                            {.init_batch_size = 2, .cpu_memory_budget = budget});
  CHECK_FALSE(down.trials[0].fits);
  CHECK(down.trials[1].batch_size == 2048);
  CHECK(down.batch_size == up.batch_size);

  // Data with 40 samples in all: a batch of 64 gives 40, and the search stops there.
  const auto small = finders::scale_batch_size(
      *trainer, task::Regression{},
      [](int64_t b) { return regression_batches(std::min<int64_t>(b, 40)); },
      {.init_batch_size = 16});
  CHECK(small.batch_size == 40);
  CHECK(small.trials.size() == 3);  // 16, 32, 64 (which gave 40)
  CHECK(small.trials.back().samples_per_batch == 40);

  // Throughput: the doubling's sizes, and the answer is the fastest of those that fit.
  const auto fast = finders::scale_batch_size(*trainer, task::Regression{}, make,
                                              {.mode = finders::BatchSizeMode::throughput,
                                               .init_batch_size = 8,
                                               .max_batch_size = 128,
                                               .steps_per_trial = 3});
  REQUIRE(fast.trials.size() == 5);  // 8 ... 128, all fit (no budget)
  double best = 0;
  for (const auto& t : fast.trials) {
    CHECK(t.fits);
    CHECK(t.samples_per_s > 0);
    best = std::max(best, t.samples_per_s);
  }
  const auto chosen = std::find_if(fast.trials.begin(), fast.trials.end(),
                                   [&](const auto& t) { return t.batch_size == fast.batch_size; });
  REQUIRE(chosen != fast.trials.end());
  CHECK(chosen->samples_per_s == best);
}

TEST_CASE("scale_batch_size: with a Loader, a budget met while a batch is built does not fit") {
  // A worker that runs out wraps the error in its own (the Loader's); it is
  // still an out-of-memory error. And a drop_last loader past its data gives
  // no batch: the largest size that gave one is the answer.
  auto trainer = wide_trainer();
  auto gen = data::generator(9);
  const auto x = at::randn({4096, 8}, gen);
  const data::TensorDataset set{x, x.sum(1, true)};
  for (const int64_t workers : {0, 2}) {
    CAPTURE(workers);
    const auto found =
        finders::scale_batch_size(*trainer, task::Regression{},
                                  [&](int64_t b) {
                                    return data::Loader(set, data::SequentialSampler(set.size()),
                                                        {.batch_size = b, .workers = workers});
                                  },
                                  {.init_batch_size = 16, .cpu_memory_budget = 1 << 20});
    CHECK(found.batch_size > 16);
    CHECK(found.batch_size < 4096);
    CHECK_FALSE(std::all_of(found.trials.begin(), found.trials.end(),
                            [](const auto& t) { return t.fits; }));
  }
  {  // a worker's out-of-memory error arrives wrapped in the Loader's
    data::Loader loader(set, data::SequentialSampler(set.size()), {.batch_size = 64, .workers = 2});
    memory::CpuMeter meter;
    meter.set_limit(0);
    std::string what;
    try {
      for (auto&& batch : loader) (void)batch;
    } catch (const Error& e) {
      what = e.what();
      CHECK(finders::is_out_of_memory(e));
    }
    CHECK(what.find("loading batch") != std::string::npos);
  }
  const data::TensorDataset forty{x.slice(0, 0, 40), x.slice(0, 0, 40).sum(1, true)};
  const auto capped =
      finders::scale_batch_size(*trainer, task::Regression{},
                                [&](int64_t b) {
                                  return data::Loader(forty, data::SequentialSampler(40),
                                                      {.batch_size = b, .drop_last = true});
                                },
                                {.init_batch_size = 16});
  CHECK(capped.batch_size == 32);
  REQUIRE(capped.trials.size() == 3);  // 16, 32, then 64: no batch
  CHECK(capped.trials.back().samples_per_batch == 0);
}

TEST_CASE("scale_batch_size: errors name what is wrong, and other errors pass through") {
  auto trainer = wide_trainer();
  const auto before = trainer->flat_params().groups()[0].data.clone();
  auto make = [](int64_t b) { return regression_batches(b); };
  CHECK_THROWS_WITH_AS(
      finders::scale_batch_size(*trainer, task::Regression{}, make, {.cpu_memory_budget = 64}),
      doctest::Contains("not even a batch of 1 fits"), Error);
  CHECK_THROWS_WITH_AS(
      finders::scale_batch_size(
          *trainer, task::Regression{}, make,
          {.init_batch_size = 4096, .max_trials = 2, .cpu_memory_budget = 1 << 20}),
      doctest::Contains("no batch size fitted within max_trials = 2 (the smallest tried: 2048)"),
      Error);
  CHECK_THROWS_WITH_AS(finders::scale_batch_size(*trainer, task::Regression{}, make,
                                                 {.init_batch_size = 8, .max_batch_size = 4}),
                       doctest::Contains("scale_batch_size.max_batch_size"), Error);
  CHECK_THROWS_WITH_AS(
      finders::scale_batch_size(*trainer, task::Regression{}, make,
                                {.mode = finders::BatchSizeMode::throughput, .steps_per_trial = 1}),
      doctest::Contains("scale_batch_size.warmup_steps"), Error);
  CHECK_THROWS_WITH_AS(
      finders::scale_batch_size(*trainer, task::Regression{},
                                [](int64_t) { return std::vector<data::Batch>{}; }),
      doctest::Contains("gave no batch"), Error);
  // Not out-of-memory: rethrown as it was, with the trainer put back.
  CHECK_THROWS_WITH_AS(finders::scale_batch_size(*trainer, task::Regression{},
                                                 [](int64_t b) {
                                                   if (b > 4) throw std::runtime_error("disk gone");
                                                   return regression_batches(b);
                                                 }),
                       "disk gone", std::runtime_error);
  CHECK(torch::equal(trainer->flat_params().groups()[0].data, before));

  CHECK(finders::is_out_of_memory(std::runtime_error(
      "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total capacity)")));
  CHECK(finders::is_out_of_memory(std::bad_alloc()));
  CHECK_FALSE(finders::is_out_of_memory(std::runtime_error("shape mismatch")));
}
