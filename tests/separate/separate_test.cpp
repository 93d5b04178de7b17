// TRAINKIT_SEPARATE_COMPILATION: this file declares trainkit's non-template
// functions and trainkit_src.cpp defines them. These cases run the paths
// that moved there (flat parameters, the Adam, AdamW and SGD steps, clipping,
// the checkpoint parts, the folder scan, the trainer's counters and
// signature check) and would fail to link if one were declared and compiled
// nowhere.
#include <trainkit/io/checkpoint.hpp>
#include <trainkit/trainkit.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "../support.hpp"

using namespace trainkit;

#if !defined(TRAINKIT_SEPARATE_COMPILATION) || TRAINKIT_DEFINITIONS
#error "this test must be built with TRAINKIT_SEPARATE_COMPILATION"
#endif

namespace {

std::vector<data::Batch> batches() {
  auto gen = data::generator(3);
  std::vector<data::Batch> out;
  for (int i = 0; i < 12; ++i)
    out.push_back({at::randn({16, 4, 4}, gen), at::randint(0, 4, {16}, gen)});
  return out;
}

/// Writes the folder's step checkpoint after `at_step` and stops there.
struct StopAt {
  std::filesystem::path dir;
  int64_t at_step;
  void on_step_end(TrainState& s) {
    if (s.step != at_step) return;
    s.save_checkpoint(dir / io::checkpoint_folder::step_file_name(s.step));
    s.request_stop("interrupted");
  }
};

template <class T>
std::unique_ptr<T> make(typename T::Options options) {
  torch::manual_seed(11);
  return std::make_unique<T>(tk_test::DropNet(), options);
}

/// Trains 3 epochs straight, and again stopped at step 5 and resumed from
/// the folder: the two end bitwise equal.
template <class T>
void check_resume(const typename T::Options& options, const std::string& name) {
  const auto dir = tk_test::temp_dir("trainkit_separate_" + name);
  const auto data = batches();
  const FitOptions three{.epochs = 3, .val_data = data};
  auto straight = make<T>(options);
  const auto ref = straight->fit(task::Classification{}, data, three);

  make<T>(options)->fit(task::Classification{}, data, three, StopAt{dir, 5});
  auto resumed = make<T>(options);
  FitOptions resume = three;
  resume.resume_from = dir;  // its greatest step-*.ckpt
  const auto done = resumed->fit(task::Classification{}, data, resume);
  CHECK(done.steps == ref.steps);
  const auto a = straight->model().parameters(), b = resumed->model().parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
  CHECK(done.metrics.at("train_loss") == ref.metrics.at("train_loss"));
  CHECK(done.metrics.at("val_accuracy") == ref.metrics.at("val_accuracy"));
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST_CASE("separate compilation: AdamW, Adam and SGD trainers resume bitwise") {
  using AdamWTrainer =
      Trainer<optim::AdamW, sched::OneCycle, precision::Fp32, accumulate::Every<2>, clip::Norm>;
  check_resume<AdamWTrainer>({.sched = {.max_lr = 1e-2}, .clip = {.max_norm = 0.5}}, "adamw");
  using AdamTrainer = Trainer<optim::Adam, sched::Constant>;
  check_resume<AdamTrainer>({.optim = {.lr = 1e-2, .weight_decay = 1e-3, .amsgrad = true}}, "adam");
  using SgdTrainer = Trainer<optim::SGD, sched::Constant>;
  check_resume<SgdTrainer>({.optim = {.lr = 0.05, .momentum = 0.9, .nesterov = true}}, "sgd");
}

TEST_CASE("separate compilation: the loss falls, and another trainer's checkpoint is refused") {
  const auto dir = tk_test::temp_dir("trainkit_separate_refused");
  const auto data = batches();
  using AdamWTrainer = Trainer<optim::AdamW>;
  auto trainer = make<AdamWTrainer>({.optim = {.lr = 1e-2}});
  const auto first = trainer->fit(task::Classification{}, data, {.epochs = 1});
  const auto later = trainer->fit(task::Classification{}, data, {.epochs = 5});
  CHECK(later.metrics.at("train_loss") < first.metrics.at("train_loss"));

  make<AdamWTrainer>({})->fit(task::Classification{}, data, {.epochs = 1}, StopAt{dir, 2});
  using SgdTrainer = Trainer<optim::SGD>;
  auto other = make<SgdTrainer>({});
  FitOptions resume{.resume_from = dir};
  const auto file = (dir / io::checkpoint_folder::step_file_name(2)).string();
  CHECK_THROWS_WITH_AS(other->fit(task::Classification{}, data, resume),
                       ("trainkit: cannot resume from " + file + ": was written by " +
                        "Trainer<trainkit::optim::AdamW, trainkit::sched::Constant, "
                        "trainkit::precision::Fp32, trainkit::accumulate::None, "
                        "trainkit::clip::None, trainkit::parallel::Single>, not by this " +
                        "Trainer<trainkit::optim::SGD, trainkit::sched::Constant, "
                        "trainkit::precision::Fp32, trainkit::accumulate::None, "
                        "trainkit::clip::None, trainkit::parallel::Single>")
                           .c_str(),
                       Error);
  std::filesystem::remove_all(dir);
}
