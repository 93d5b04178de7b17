// Ready callbacks: EarlyStopping's rules and weight restore, CsvLogger's file.
#include <trainkit/trainkit.hpp>

#include <filesystem>
#include <fstream>

#include "support.hpp"

using namespace trainkit;

namespace {
void end_epoch(callbacks::EarlyStopping& es, TrainState& s, double value) {
  s.metrics["val_loss"] = value;
  es.on_epoch_end(s);
  ++s.epoch;
}
}  // namespace

TEST_CASE("docs/callbacks.md's table has a row for every hook") {
  std::ifstream in(TRAINKIT_DOCS_DIR "/callbacks.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(!doc.empty());
#define TRAINKIT_DOCUMENTED(name, Tag) \
  CHECK_MESSAGE(doc.find("| `" #name "` |") != std::string::npos, #name " is not documented");
  TRAINKIT_FOR_EACH_HOOK(TRAINKIT_DOCUMENTED)
#undef TRAINKIT_DOCUMENTED
}

TEST_CASE("EarlyStopping: patience and min_delta") {
  auto model = tk_test::seeded_mlp();
  TrainState state(*model);
  callbacks::EarlyStopping es({.patience = 2, .min_delta = 0.01, .restore_best_weights = false});
  end_epoch(es, state, 1.0);
  end_epoch(es, state, 0.995);  // not better by more than min_delta
  CHECK(es.wait() == 1);
  end_epoch(es, state, 0.90);
  CHECK(es.best() == 0.90);
  CHECK(es.best_epoch() == 2);
  end_epoch(es, state, 0.95);
  CHECK(!state.stop_requested());
  end_epoch(es, state, 0.91);
  CHECK(state.stop_requested());
  CHECK(state.stop_reason().find("val_loss did not improve for 2 epochs") != std::string::npos);
}

TEST_CASE("EarlyStopping: max mode for accuracy, and a clear error for an unknown metric") {
  auto model = tk_test::seeded_mlp();
  TrainState state(*model);
  callbacks::EarlyStopping es({.monitor = "val_accuracy", .patience = 1});
  state.metrics["val_accuracy"] = 0.5;
  es.on_epoch_end(state);
  state.metrics["val_accuracy"] = 0.4;
  es.on_epoch_end(state);
  CHECK(state.stop_requested());
  callbacks::EarlyStopping missing({.monitor = "val_f1"});
  CHECK_THROWS_WITH_AS(missing.on_epoch_end(state),
                       doctest::Contains("`early_stopping.monitor` = \"val_f1\" is invalid; "
                                         "accepted: a metric logged at epoch end: val_accuracy"),
                       Error);
}

TEST_CASE("EarlyStopping restores the best weights at the end of fit, in place") {
  auto model = tk_test::seeded_mlp();
  Trainer<optim::SGD> trainer(model, {.optim = {.lr = 0.5}});
  auto x = torch::randn({32, 8});
  auto y = torch::randint(0, 3, {32});
  data::TensorBatches train({x, y}, {.batch_size = 8});
  std::vector<std::vector<at::Tensor>> per_epoch;
  // a scripted metric: best at epoch 1, then two epochs worse: stop after epoch 3
  struct Script {
    std::vector<std::vector<at::Tensor>>* per_epoch;
    void on_validation_end(TrainState& s) {
      const double values[] = {0.9, 0.5, 0.7, 0.8, 0.95};
      s.metrics["val_loss"] = values[s.epoch];
      per_epoch->push_back(tk_test::snapshot(s.model()));
    }
  };
  const auto r = trainer.fit(task::Classification{}, train, {.epochs = 5, .val_data = train},
                             Script{&per_epoch}, callbacks::EarlyStopping({.patience = 2}));
  CHECK(r.epochs == 4);
  const auto now = tk_test::snapshot(*model);
  for (size_t i = 0; i < now.size(); ++i) CHECK(torch::equal(now[i], per_epoch[1][i]));
  // still the trainer's flat buffer
  CHECK(model->fc1->weight.data_ptr<float>() ==
        trainer.flat_params().groups()[0].data.data_ptr<float>());
}

TEST_CASE("CsvLogger writes a header and one flushed row per epoch") {
  const auto dir = tk_test::temp_dir("trainkit_csv_test");
  const auto path = dir / "sub" / "log.csv";
  Trainer<optim::SGD> trainer(tk_test::seeded_mlp());
  auto x = torch::randn({16, 8});
  auto y = torch::randint(0, 3, {16});
  data::TensorBatches train({x, y}, {.batch_size = 8});
  trainer.fit(task::Classification{}, train, {.epochs = 3, .val_data = train},
              callbacks::CsvLogger({.path = path}));
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "epoch,step,lr,seconds,train_loss,val_accuracy,val_loss");
  CHECK(lines[3].rfind("3,6,0.01,", 0) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("fit uses an lvalue callback in place and moves an rvalue one in") {
  struct Counter {
    int64_t steps = 0;
    void on_step_end(TrainState&) { ++steps; }
  };
  Trainer<optim::SGD> trainer(tk_test::seeded_mlp());
  data::TensorBatches train({torch::randn({16, 8}), torch::randint(0, 3, {16})}, {.batch_size = 4});
  Counter counted;
  const auto dir = tk_test::temp_dir("trainkit_lvalue_callbacks");
  callbacks::CsvLogger log({.path = dir / "log.csv"});  // move-only: owns a file
  const auto r = trainer.fit(task::Classification{}, train, {.epochs = 2}, counted, log, Counter{},
                             std::ref(counted));
  CHECK(r.steps == 8);
  CHECK(counted.steps == 2 * r.steps);  // as itself and through std::ref: never a copy
  CHECK(std::filesystem::file_size(dir / "log.csv") > 0);
  static_assert(!std::is_copy_constructible_v<callbacks::CsvLogger>);
  std::filesystem::remove_all(dir);
}

TEST_CASE("CsvLogger names the file it cannot open") {
  Trainer<optim::SGD> trainer(tk_test::seeded_mlp());
  data::TensorBatches train({torch::randn({4, 8}), torch::zeros({4}, at::kLong)},
                            {.batch_size = 4});
  CHECK_THROWS_WITH_AS(trainer.fit(task::Classification{}, train, {},
                                   callbacks::CsvLogger({.path = "/proc/trainkit/log.csv"})),
                       doctest::Contains("/proc/trainkit"), std::exception);
}
