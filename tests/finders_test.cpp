// The learning-rate finder: the sweep's rates, the suggestion on a planted
// curve (where the smoothed loss falls fastest), a stop on divergence, and
// the trainer put back bit for bit (a fit after lr_find equals a fit
// without it).
#include <trainkit/finders.hpp>
#include <trainkit/trainkit.hpp>

#include <cmath>
#include <fstream>
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
}
