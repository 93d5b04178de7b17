// The step algorithm: accumulation equivalence (with a partial window at
// epoch end), one schedule advance per optimizer step, clipping on unscaled
// gradients, skipped fp16 steps, evaluation and callbacks in order.
#include <trainkit/trainkit.hpp>

#include "support.hpp"

using namespace trainkit;
using tk_test::Mlp;

namespace {

data::TensorDataset regression_data(int64_t n, uint64_t seed = 11) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto x = at::randn({n, 8}, gen);
  auto y = at::randint(0, 3, {n}, gen);
  return {x, y};
}

/// Records every lr_at call so the test can count schedule advances.
struct CountingSchedule {
  struct Options {};
  explicit CountingSchedule(const Options&) {}
  void start(const sched::ScheduleContext& ctx) { total = ctx.total_steps; }
  double lr_at(int64_t step) const {
    asked.push_back(step);
    return 0.05 / double(1 + step);
  }
  int64_t total = 0;
  mutable std::vector<int64_t> asked;
};

/// A classification task whose loss becomes +inf on chosen micro-batches.
struct PoisonedTask {
  std::set<int64_t> poisoned;
  int64_t seen = 0;
  StepOutput step(ModelRef& model, const data::Batch& batch) {
    auto out = task::Classification{}.step(model, batch);
    if (poisoned.count(seen++)) out.loss = out.loss * INFINITY;
    return out;
  }
};

struct Recorder {
  std::vector<std::string>* events;
  void on_fit_begin(TrainState&) { events->push_back("fit_begin"); }
  void on_epoch_begin(TrainState& s) {
    events->push_back("epoch_begin " + std::to_string(s.epoch));
  }
  void on_step_end(TrainState& s) { events->push_back("step " + std::to_string(s.step)); }
  void on_validation_end(TrainState&) { events->push_back("validation"); }
  void on_epoch_end(TrainState&) { events->push_back("epoch_end"); }
  void on_fit_end(TrainState&) { events->push_back("fit_end"); }
};

}  // namespace

TEST_CASE("Every<4> at batch 16 equals batch 64 without accumulation, partial window included") {
  at::set_num_threads(1);
  // 224 samples: three full windows of 4 x 16, then an epoch-end window of 2 x 16 (= 32)
  const auto ds = regression_data(224);
  auto big = tk_test::seeded_mlp(), small = tk_test::seeded_mlp(), runtime = tk_test::seeded_mlp();
  Trainer<optim::SGD, sched::Constant, precision::Fp32, accumulate::None> reference(
      big, {.optim = {.lr = 0.1, .momentum = 0.9}});
  Trainer<optim::SGD, sched::Constant, precision::Fp32, accumulate::Every<4>> accumulated(
      small, {.optim = {.lr = 0.1, .momentum = 0.9}});
  Trainer<optim::SGD, sched::Constant, precision::Fp32, accumulate::Steps> at_runtime(
      runtime, {.optim = {.lr = 0.1, .momentum = 0.9}, .accumulate = {.steps = 4}});
  data::TensorBatches b64(ds, {.batch_size = 64, .seed = 5}),
      b16(ds, {.batch_size = 16, .seed = 5});
  const auto r1 = reference.fit(task::Classification{}, b64, {.epochs = 3});
  const auto r2 = accumulated.fit(task::Classification{}, b16, {.epochs = 3});
  const auto r3 = at_runtime.fit(task::Classification{}, b16, {.epochs = 3});
  CHECK(r1.steps == 12);
  CHECK(r2.steps == 12);
  CHECK(r3.steps == 12);
  const double err = tk_test::max_param_rel_error(*big, *small);
  MESSAGE("max relative parameter difference: " << err);
  CHECK(err <= 1e-6);
  CHECK(tk_test::max_param_rel_error(*big, *runtime) <= 1e-6);
  CHECK(tk_test::max_param_rel_error(*big, *tk_test::seeded_mlp()) > 1e-3);  // it did train
}

TEST_CASE("loss() and the logged loss are the accumulation window's mean, partial window too") {
  // 10 micro-batches an epoch under Every<3>: windows of 3, 3, 3 and 1.
  struct Recording {  // each micro-batch's loss, as the task computed it
    std::vector<double>* losses;
    StepOutput step(ModelRef& model, const data::Batch& batch) {
      auto out = task::Classification{}.step(model, batch);
      losses->push_back(out.loss.item<double>());
      return out;
    }
  };
  struct Probe {
    std::vector<double>* reported;
    std::vector<double>* logged;
    void on_step_end(TrainState& s) {
      reported->push_back(s.loss());
      for (const auto& [name, value] : s.logged_values())
        if (name == "loss") logged->push_back(value);
    }
  };
  std::vector<double> losses, reported, logged;
  Trainer<optim::SGD, sched::Constant, precision::Fp32, accumulate::Every<3>> trainer(
      tk_test::seeded_mlp(), {.optim = {.lr = 0.1}});
  data::TensorBatches batches(regression_data(100), {.batch_size = 10});
  trainer.fit(Recording{&losses}, batches, {.epochs = 1, .log_every = 1},
              Probe{&reported, &logged});
  REQUIRE(losses.size() == 10);
  const std::vector<double> means = {(losses[0] + losses[1] + losses[2]) / 3,
                                     (losses[3] + losses[4] + losses[5]) / 3,
                                     (losses[6] + losses[7] + losses[8]) / 3, losses[9]};
  REQUIRE(reported.size() == 4);
  REQUIRE(logged.size() == 4);
  for (size_t i = 0; i < means.size(); ++i) {
    CHECK(reported[i] == doctest::Approx(means[i]).epsilon(1e-6));
    CHECK(logged[i] == doctest::Approx(means[i]).epsilon(1e-6));
  }
  CHECK(reported[0] != doctest::Approx(losses[2]).epsilon(1e-9));  // not the last micro-batch's
}

TEST_CASE("the schedule advances once per optimizer step, not per micro-batch") {
  const auto ds = regression_data(100);
  Trainer<optim::SGD, CountingSchedule, precision::Fp32, accumulate::Every<3>> trainer(
      tk_test::seeded_mlp());
  data::TensorBatches batches(ds, {.batch_size = 10});  // 10 micro-batches: windows 3,3,3,1
  std::vector<double> lrs;
  struct LrProbe {
    std::vector<double>* lrs;
    void on_step_end(TrainState& s) { lrs->push_back(s.lr); }
  };
  const auto result = trainer.fit(task::Classification{}, batches, {.epochs = 2}, LrProbe{&lrs});
  CHECK(result.steps == 8);
  CHECK(trainer.scheduler().total == 8);  // the trainer inferred the length
  const auto& asked = trainer.scheduler().asked;
  REQUIRE(asked.size() == 9);  // step 0 at start, then once per boundary
  for (size_t i = 0; i < asked.size(); ++i) CHECK(asked[i] == int64_t(i));
  REQUIRE(lrs.size() == 8);
  CHECK(lrs.back() == doctest::Approx(0.05 / 9));
  CHECK(trainer.optimizer().lr() == doctest::Approx(0.05 / 9));
}

TEST_CASE("OneCycle fills its length from epochs x steps per epoch and ends at its floor") {
  const auto ds = regression_data(96);
  Trainer<optim::SGD, sched::OneCycle, precision::Fp32, accumulate::Every<2>> trainer(
      tk_test::seeded_mlp(), {.optim = {.lr = 0.1, .momentum = 0.9}, .sched = {.max_lr = 0.2}});
  data::TensorBatches batches(ds, {.batch_size = 16});  // 6 micro-batches = 3 steps per epoch
  std::vector<double> lrs, momenta;
  struct Probe {
    std::vector<double>*lrs, *momenta;
    Trainer<optim::SGD, sched::OneCycle, precision::Fp32, accumulate::Every<2>>* trainer;
    void on_step_end(TrainState& s) {
      lrs->push_back(s.lr);  // the rate of the next step
      momenta->push_back(trainer->optimizer().momentum());
    }
  };
  trainer.fit(task::Classification{}, batches, {.epochs = 4}, Probe{&lrs, &momenta, &trainer});
  REQUIRE(lrs.size() == 12);
  // the twelfth and last step ran at lr_at(11): the floor max_lr / 25 / 1e4
  CHECK(lrs[10] == doctest::Approx(0.2 / 25 / 1e4));
  CHECK(momenta[10] == doctest::Approx(0.95));
  CHECK(*std::max_element(lrs.begin(), lrs.end()) == doctest::Approx(0.2).epsilon(0.01));
  CHECK(*std::min_element(momenta.begin(), momenta.end()) == doctest::Approx(0.85).epsilon(0.01));
}

TEST_CASE("clipping sees unscaled gradients: Fp16 loss scaling equals Fp32 exactly") {
  const auto ds = regression_data(128);
  auto a = tk_test::seeded_mlp(), b = tk_test::seeded_mlp();
  Trainer<optim::SGD, sched::Constant, precision::Fp32, accumulate::Every<2>, clip::Norm> fp32(
      a, {.optim = {.lr = 0.5}, .clip = {.max_norm = 0.05}});
  Trainer<optim::SGD, sched::Constant, precision::Fp16, accumulate::Every<2>, clip::Norm> scaled(
      b, {.optim = {.lr = 0.5}, .precision = {.autocast = false}, .clip = {.max_norm = 0.05}});
  data::TensorBatches batches(ds, {.batch_size = 16});
  std::vector<double> norms_a, norms_b;
  struct NormProbe {
    std::vector<double>* out;
    void on_step_end(TrainState& s) { out->push_back(*s.grad_norm()); }
  };
  fp32.fit(task::Classification{}, batches, {.epochs = 1}, NormProbe{&norms_a});
  scaled.fit(task::Classification{}, batches, {.epochs = 1}, NormProbe{&norms_b});
  REQUIRE(norms_a.size() == 4);
  CHECK(norms_a.front() > 0.05);  // clipping was active
  for (size_t i = 0; i < norms_a.size(); ++i)
    CHECK(norms_b[i] == doctest::Approx(norms_a[i]).epsilon(1e-6));
  CHECK(tk_test::max_param_rel_error(*a, *b) <= 1e-6);
}

TEST_CASE("an inf loss skips exactly that optimizer step and halves the scale") {
  const auto ds = regression_data(64);
  auto model = tk_test::seeded_mlp();
  Trainer<optim::SGD, sched::Constant, precision::Fp16> trainer(
      model, {.optim = {.lr = 0.1}, .precision = {.autocast = false}});
  data::TensorBatches batches(ds, {.batch_size = 16, .shuffle = false});
  std::vector<std::vector<at::Tensor>> params;
  std::vector<double> scales;
  struct Probe {
    std::vector<std::vector<at::Tensor>>* params;
    std::vector<double>* scales;
    void on_step_end(TrainState& s) {
      params->push_back(tk_test::snapshot(s.model()));
      scales->push_back(*s.loss_scale());
    }
  };
  trainer.fit(PoisonedTask{{2}}, batches, {.epochs = 1}, Probe{&params, &scales});
  REQUIRE(params.size() == 4);
  CHECK(scales == std::vector<double>{65536, 65536, 32768, 32768});
  for (size_t i = 0; i < params[1].size(); ++i) CHECK(torch::equal(params[1][i], params[2][i]));
  CHECK(!torch::equal(params[2][0], params[3][0]));
}

TEST_CASE("evaluate reports the mean loss and accuracy over samples") {
  struct Fixed : torch::nn::Module {
    at::Tensor forward(at::Tensor x) { return x; }  // logits are the inputs
  };
  auto model = std::make_shared<Fixed>();
  model->register_parameter("unused", torch::zeros({1}));
  Trainer<optim::SGD> trainer(model);
  // 3 samples, 2 right: logits favour class 0, 1, 0; targets 0, 1, 1
  auto x = torch::tensor({{2.f, 0.f}, {0.f, 2.f}, {2.f, 0.f}});
  auto y = torch::tensor({0, 1, 1}, at::kLong);
  data::TensorBatches val(data::TensorDataset{x, y}, {.batch_size = 2, .shuffle = false});
  const auto m = trainer.evaluate(task::Classification{}, val);
  CHECK(m.at("accuracy") == doctest::Approx(2.0 / 3.0));
  const double expected = torch::nn::functional::cross_entropy(x, y).item<double>();
  CHECK(m.at("loss") == doctest::Approx(expected).epsilon(1e-6));
}

TEST_CASE("callbacks fire in order, stop requests end the fit, refs keep caller state") {
  const auto ds = regression_data(40);
  Trainer<optim::SGD> trainer(tk_test::seeded_mlp());
  data::TensorBatches batches(ds, {.batch_size = 20}),
      val(ds, {.batch_size = 40, .shuffle = false});
  std::vector<std::string> events;
  struct StopAtThree {
    int calls = 0;
    void on_step_end(TrainState& s) {
      ++calls;
      if (s.step == 3) s.request_stop("enough");
    }
  } stopper;
  const auto r = trainer.fit(task::Classification{}, batches, {.epochs = 5, .val_data = val},
                             Recorder{&events}, std::ref(stopper));
  CHECK(stopper.calls == 3);
  CHECK(r.stopped);
  CHECK(r.stop_reason == "enough");
  CHECK(r.epochs == 2);
  const std::vector<std::string> expected{"fit_begin",  "epoch_begin 0", "step 1",        "step 2",
                                          "validation", "epoch_end",     "epoch_begin 1", "step 3",
                                          "validation", "epoch_end",     "fit_end"};
  CHECK(events == expected);
  CHECK(r.metrics.count("val_loss") == 1);
  CHECK(r.metrics.count("train_loss") == 1);
}

TEST_CASE("on_exception sees the error, which still reaches the caller") {
  const auto ds = regression_data(20);
  Trainer<optim::SGD> trainer(tk_test::seeded_mlp());
  data::TensorBatches batches(ds, {.batch_size = 10});
  struct Thrower {
    void on_step_end(TrainState&) { throw std::runtime_error("boom"); }
  };
  bool seen = false;
  struct Watcher {
    bool* seen;
    void on_exception(TrainState& s) { *seen = static_cast<bool>(s.exception); }
  };
  CHECK_THROWS_WITH(trainer.fit(task::Classification{}, batches, {}, Thrower{}, Watcher{&seen}),
                    "boom");
  CHECK(seen);
}

// No source file of test_trainer includes trainkit/io/checkpoint.hpp: the
// Trainer compiles without the checkpoint codec and says what to include.
TEST_CASE("resume_from and checkpoint_on_signal without the checkpoint codec name the include") {
  const bool registered = io::detail::registered_codec().read != nullptr;
  REQUIRE_FALSE(registered);
  const auto ds = regression_data(20);
  Trainer<optim::SGD> trainer(tk_test::seeded_mlp());
  data::TensorBatches batches(ds, {.batch_size = 10});
  CHECK_THROWS_WITH_AS(trainer.fit(task::Classification{}, batches, {.resume_from = "runs/x"}),
                       "trainkit: fit.resume_from = \"runs/x\" needs the checkpoint file format: "
                       "#include <trainkit/io/checkpoint.hpp> (or <trainkit/io.hpp>) in one "
                       "source file of the program",
                       Error);
  CHECK_THROWS_WITH_AS(
      trainer.fit(task::Classification{}, batches, {.checkpoint_on_signal = "x.ckpt"}),
      doctest::Contains("fit.checkpoint_on_signal = \"x.ckpt\" needs the checkpoint file format"),
      Error);
  struct SavesAtFirstStep {
    void on_step_end(TrainState& s) { s.save_checkpoint("x.ckpt"); }
  };
  CHECK_THROWS_WITH_AS(
      trainer.fit(task::Classification{}, batches, {}, SavesAtFirstStep{}),
      doctest::Contains("TrainState::save_checkpoint = \"x.ckpt\" needs the checkpoint file"),
      Error);
}

TEST_CASE("Bf16 runs the forward under CPU autocast and restores the previous state") {
  auto model = tk_test::seeded_mlp();
  Trainer<optim::AdamW, sched::Constant, precision::Bf16> trainer(model);
  at::ScalarType seen = at::kFloat;
  struct DtypeTask {
    at::ScalarType* seen;
    StepOutput step(ModelRef& m, const data::Batch& b) {
      auto logits = m(b.input);
      *seen = logits.scalar_type();
      return {torch::nn::functional::cross_entropy(logits.to(at::kFloat), b.target), b.size()};
    }
  };
  const auto ds = regression_data(32);
  data::TensorBatches batches(ds, {.batch_size = 16});
  const auto before = tk_test::snapshot(*model);
  trainer.fit(DtypeTask{&seen}, batches, {.epochs = 1});
  CHECK((seen == at::kBFloat16));
  CHECK(!trainkit::detail::autocast_enabled(c10::DeviceType::CPU));
  CHECK((model->fc1->weight.scalar_type() == at::kFloat));
  CHECK(!torch::equal(model->fc1->weight.detach(), before[0]));
}

TEST_CASE("a user-written optimizer policy plugs in") {
  struct SignDescent {
    struct Options {
      double lr = 0.01;
    };
    SignDescent(FlatParams& p, const Options& o) : params(&p), lr_(o.lr) {}
    void step() {
      torch::NoGradGuard g;
      for (auto& grp : params->groups()) grp.data.sub_(grp.grad.sign() * lr_);
    }
    double lr() const { return lr_; }
    void set_lr(double lr) { lr_ = lr; }
    FlatParams* params;
    double lr_;
  };
  static_assert(OptimizerPolicy<SignDescent>);
  auto model = tk_test::seeded_mlp();
  Trainer<SignDescent> trainer(model, {.optim = {.lr = 0.5}});
  const auto before = tk_test::snapshot(*model);
  const auto ds = regression_data(16);
  data::TensorBatches batches(ds, {.batch_size = 16});
  trainer.fit(task::Classification{}, batches);
  const auto moved = (model->fc1->weight.detach() - before[0]).abs();
  CHECK(moved.max().item<double>() == doctest::Approx(0.5));
}

TEST_CASE("the Trainer feeds ReduceLROnPlateau each epoch's metric, and trains at its rate") {
  const auto ds = regression_data(60);
  using T = Trainer<optim::SGD, sched::ReduceLROnPlateau>;
  const sched::ReduceLROnPlateau::Options plateau{.factor = 0.5, .patience = 0, .threshold = 0.05};
  T trainer(tk_test::seeded_mlp(), T::Options{.optim = {.lr = 0.2}, .sched = plateau});
  data::TensorBatches batches(ds, {.batch_size = 20}),
      val(ds, {.batch_size = 60, .shuffle = false});
  // The same schedule fed by hand with the val_loss the epochs report.
  sched::ReduceLROnPlateau mirror(plateau);
  mirror.start({0.2, -1});
  struct Watch {
    sched::ReduceLROnPlateau* mirror;
    std::vector<double> lrs, expected;
    void on_step_end(TrainState& s) {
      lrs.push_back(s.lr);
      expected.push_back(mirror->lr());
    }
    void on_epoch_end(TrainState& s) { mirror->observe(s.metrics); }
  } watch{&mirror, {}, {}};
  trainer.fit(task::Classification{}, batches, {.epochs = 8, .val_data = val}, std::ref(watch));
  CHECK(watch.lrs == watch.expected);
  CHECK(watch.lrs.back() < 0.2);  // it did reduce
  CHECK(trainer.scheduler().lr() == mirror.lr());
  CHECK(trainer.optimizer().lr() == mirror.lr());
  CHECK(trainer.scheduler().best() == mirror.best());
}
