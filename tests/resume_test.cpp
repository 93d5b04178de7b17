// Checkpoints: an interrupted-and-resumed run ends bitwise equal to an
// uninterrupted one (dropout RNG, accumulation, a threaded loader with random
// transforms, mid-epoch and at an epoch end); callback, schedule and scaler
// state survive; bad files are rejected whole, naming the file.
#include <trainkit/callbacks.hpp>
#include <trainkit/data.hpp>
#include <trainkit/io.hpp>
#include <trainkit/trainkit.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>

#include "compat/setup.hpp"
#include "support.hpp"

using namespace trainkit;

namespace {

using Net = tk_test::DropNet;

using ResumableTrainer =
    Trainer<optim::AdamW, sched::OneCycle, precision::Fp16, accumulate::Every<3>, clip::Norm>;

const data::TensorDataset& dataset() {
  static const data::TensorDataset ds = [] {
    auto gen = data::generator(3);
    return data::TensorDataset{at::randn({200, 4, 4}, gen), at::randint(0, 4, {200}, gen)};
  }();
  return ds;
}

std::unique_ptr<ResumableTrainer> make_trainer(
    CheckpointOptions::Form form = CheckpointOptions::Form::Auto, bool asynchronous = false) {
  torch::manual_seed(11);
  return std::make_unique<ResumableTrainer>(
      Net(),
      ResumableTrainer::Options{.optim = {.lr = 1e-2},
                                .sched = {.max_lr = 2e-2},
                                .precision = {.autocast = false, .scaler = {.growth_interval = 4}},
                                .clip = {.max_norm = 0.5},
                                .checkpoint = {.form = form, .asynchronous = asynchronous}});
}

auto make_loader() {
  // 200 samples, batch 16: 13 micro-batches per epoch = windows 3,3,3,3,1
  return std::make_unique<data::Loader<data::TensorDataset, data::RandomSampler>>(
      dataset(), data::RandomSampler({.size = 200, .seed = 5}),
      data::LoaderOptions{.batch_size = 16,
                          .workers = 2,
                          .seed = 9,
                          .device_transform = data::transforms::HorizontalFlip{0.5}});
}

/// Saves at chosen points and stops the run at one of them.
struct Interrupt {
  std::filesystem::path dir;
  int64_t stop_at_step = -1;
  int64_t stop_after_epoch = -1;
  void on_step_end(TrainState& s) {
    s.save_checkpoint(dir / ("step-" + std::to_string(s.step) + ".ckpt"));
    if (s.step == stop_at_step) s.request_stop("interrupted");
  }
  void on_epoch_end(TrainState& s) {
    s.save_checkpoint(dir / ("epoch-" + std::to_string(s.epoch) + ".ckpt"));
    if (s.epoch == stop_after_epoch) s.request_stop("interrupted");
  }
};

void expect_bitwise_equal(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
}

}  // namespace

TEST_CASE("a resumed run is bitwise equal to an uninterrupted one") {
  at::set_num_threads(1);
  const auto dir = tk_test::temp_dir("trainkit_resume");
  const FitOptions three_epochs{.epochs = 3};

  auto reference = make_trainer();
  auto loader = make_loader();
  callbacks::EarlyStopping watch_ref({.monitor = "train_loss", .patience = 10});
  const auto ref =
      reference->fit(task::Classification{}, *loader, three_epochs, std::ref(watch_ref));

  SUBCASE("interrupted in the middle of an epoch, as one file or sharded") {
    using Form = CheckpointOptions::Form;
    for (const auto& [form, other] :
         {std::pair{Form::File, Form::Sharded}, {Form::Sharded, Form::File}}) {
      CAPTURE(static_cast<int>(form));
      auto first = make_trainer(form);
      auto l1 = make_loader();
      callbacks::EarlyStopping watch1({.monitor = "train_loss", .patience = 10});
      const auto stopped = first->fit(task::Classification{}, *l1, three_epochs,
                                      Interrupt{dir, /*stop_at_step=*/7}, std::ref(watch1));
      CHECK(stopped.steps == 7);  // epoch 1, after 2 of its 5 steps
      CHECK(io::checkpoint_folder::is_sharded_checkpoint(dir / "step-7.ckpt") ==
            (form == Form::Sharded));
      auto second = make_trainer(form);
      auto l2 = make_loader();
      callbacks::EarlyStopping watch2({.monitor = "train_loss", .patience = 10});
      FitOptions resume = three_epochs;
      resume.resume_from = dir / "step-7.ckpt";
      const auto finished =
          second->fit(task::Classification{}, *l2, resume, Interrupt{dir}, std::ref(watch2));
      CHECK(finished.steps == 15);
      expect_bitwise_equal(second->model(), reference->model());
      CHECK(watch2.best() == watch_ref.best());  // early stopping state carried over
      CHECK(watch2.best_epoch() == watch_ref.best_epoch());
      CHECK(second->precision().scaler().scale_value() ==
            reference->precision().scaler().scale_value());
      CHECK(second->optimizer().lr() == reference->optimizer().lr());
      CHECK(finished.metrics.at("train_loss") == ref.metrics.at("train_loss"));
      // a trainer that writes the other form resumes from it too
      auto third = make_trainer(other);
      auto l3 = make_loader();
      CHECK(third->fit(task::Classification{}, *l3, resume).steps == 15);
      expect_bitwise_equal(third->model(), reference->model());
      std::filesystem::remove_all(dir);
    }
  }
  SUBCASE("interrupted at an epoch end, resumed from the folder's latest") {
    auto first = make_trainer();
    auto l1 = make_loader();
    first->fit(task::Classification{}, *l1, three_epochs,
               Interrupt{dir, -1, /*stop_after_epoch=*/0});
    std::filesystem::copy_file(dir / "epoch-0.ckpt", dir / "last.ckpt");
    auto second = make_trainer();
    auto l2 = make_loader();
    FitOptions resume = three_epochs;
    resume.resume_from = dir;  // a folder: its last.ckpt
    const auto finished = second->fit(task::Classification{}, *l2, resume);
    CHECK(finished.steps == 15);
    CHECK(finished.epochs == 3);
    expect_bitwise_equal(second->model(), reference->model());
  }
  std::filesystem::remove_all(dir);
}

// Found with resharding: a fit resumed at its max_steps trained on to the
// epochs' end (the limit was checked for equality after each step).
TEST_CASE("a fit resumed at or past max_steps takes no step") {
  const auto dir = tk_test::temp_dir("trainkit_max_steps");
  data::TensorBatches train({torch::randn({32, 8}), torch::randint(0, 3, {32})}, {.batch_size = 4});
  Trainer<optim::AdamW> first(tk_test::seeded_mlp());
  first.fit(task::Classification{}, train, {.epochs = 2, .max_steps = 3}, Interrupt{dir});
  for (const int64_t limit : {3, 2}) {
    CAPTURE(limit);
    Trainer<optim::AdamW> second(tk_test::seeded_mlp());
    const auto r =
        second.fit(task::Classification{}, train,
                   {.epochs = 2, .max_steps = limit, .resume_from = dir / "step-3.ckpt"});
    CHECK(r.steps == 3);
    CHECK(r.stopped);
    expect_bitwise_equal(second.model(), first.model());
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("bad checkpoints are rejected whole, naming the file and the problem") {
  const auto dir = tk_test::temp_dir("trainkit_bad_ckpt");
  {
    auto trainer = make_trainer();
    auto loader = make_loader();
    trainer->fit(task::Classification{}, *loader, {.epochs = 1}, Interrupt{dir, 2});
  }
  const auto good = dir / "step-2.ckpt";
  auto trainer = make_trainer();
  auto loader = make_loader();
  const auto before = tk_test::snapshot(trainer->model());
  auto expect_rejected = [&](const std::filesystem::path& file, const std::string& what) {
    CAPTURE(what);
    FitOptions options{.epochs = 1, .resume_from = file};
    try {
      trainer->fit(task::Classification{}, *loader, options);
      FAIL("resumed from a bad checkpoint");
    } catch (const Error& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find(file.string()) != std::string::npos, msg);
      CHECK_MESSAGE(msg.find(what) != std::string::npos, msg);
    }
    const auto after = tk_test::snapshot(trainer->model());
    for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i], after[i]));
  };
  std::ifstream in(good, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary)
        .write(content.data(), std::streamsize(content.size()));
    return dir / name;
  };
  expect_rejected(dir / "missing.ckpt", "no such file or folder; fit.resume_if_present");
  for (size_t cut : {size_t(0), size_t(5), size_t(100), bytes.size() / 2, bytes.size() - 1}) {
    expect_rejected(write("cut.ckpt", bytes.substr(0, cut)), "");
  }
  for (size_t pos : {size_t(3), size_t(60), bytes.size() / 2, bytes.size() - 2}) {
    auto flipped = bytes;
    flipped[pos] = char(flipped[pos] ^ 0x10);
    expect_rejected(write("flipped.ckpt", flipped), "");
  }
  expect_rejected(write("foreign.ckpt", io::to_safetensors({{"w", torch::ones({2})}})),
                  "not a trainkit checkpoint");
  // another model: same policies, a different shape
  struct WideImpl : torch::nn::Module {
    WideImpl() { fc = register_module("fc1", torch::nn::Linear(16, 33)); }
    at::Tensor forward(at::Tensor x) { return fc(x.flatten(1)); }
    torch::nn::Linear fc{nullptr};
  };
  auto wide = std::make_shared<WideImpl>();
  ResumableTrainer wide_trainer(wide, {.precision = {.autocast = false}});
  FitOptions to_wide{.epochs = 1, .resume_from = good};
  CHECK_THROWS_WITH_AS(wide_trainer.fit(task::Classification{}, *loader, to_wide),
                       doctest::Contains("checkpoint tensor \"fc1.weight\" is Float[32, 16], "
                                         "expected Float[33, 16]"),
                       Error);
  // other policies
  Trainer<optim::SGD> sgd{Net()};
  FitOptions to_sgd{.epochs = 1, .resume_from = good};
  CHECK_THROWS_WITH_AS(sgd.fit(task::Classification{}, *loader, to_sgd),
                       doctest::Contains("was written by Trainer<trainkit::optim::AdamW"), Error);
  CHECK_NOTHROW(trainer->fit(task::Classification{}, *loader, {.epochs = 1, .resume_from = good}));
  std::filesystem::remove_all(dir);
}

TEST_CASE("ModelCheckpoint keeps the last K, links last.ckpt, keeps the best, and resumes") {
  const auto dir = tk_test::temp_dir("trainkit_model_ckpt");
  auto trainer = make_trainer();
  auto loader = make_loader();
  callbacks::ModelCheckpoint saver(
      {.dir = dir, .save_every = 2, .keep_last = 2, .monitor = "train_loss"});
  trainer->fit(task::Classification{}, *loader, {.epochs = 2}, std::ref(saver));
  const auto kept = saver.checkpoints();
  REQUIRE(kept.size() == 2);
  CHECK(kept.back().filename() == "step-000000010.ckpt");  // the epoch end at step 10
  CHECK(std::filesystem::is_symlink(dir / "last.ckpt"));
  CHECK(std::filesystem::read_symlink(dir / "last.ckpt") == "step-000000010.ckpt");
  CHECK(std::filesystem::exists(dir / "best.ckpt"));
  for (const auto& f : kept) CHECK_NOTHROW(io::read_checkpoint(f));
  // a third epoch from the folder continues at step 10
  auto more = make_trainer();
  auto l2 = make_loader();
  const auto r = more->fit(task::Classification{}, *l2, {.epochs = 3, .resume_from = dir});
  CHECK(r.steps == 15);
  CHECK_THROWS_WITH_AS(callbacks::ModelCheckpoint({.save_every = -1}),
                       doctest::Contains("`model_checkpoint.save_every` = -1 is invalid"), Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("asynchronous saves resume as synchronous ones do, and a failed write is an Error") {
  const auto dir = tk_test::temp_dir("trainkit_async_save");
  using Form = CheckpointOptions::Form;
  for (const auto form : {Form::File, Form::Sharded}) {
    const std::string name = form == Form::File ? "one file" : "sharded";
    SUBCASE(
        ("ModelCheckpoint's files, last.ckpt and pruning, and the run resumed from them: " + name)
            .c_str()) {
      for (const bool asynchronous : {false, true}) {
        auto trainer = make_trainer(form, asynchronous);
        auto loader = make_loader();
        const auto run = dir / (asynchronous ? "async" : "sync");
        callbacks::ModelCheckpoint saver({.dir = run, .save_every = 2, .keep_last = 2});
        trainer->fit(task::Classification{}, *loader, {.epochs = 2}, std::ref(saver));
        // fit returned: the last write is in place, linked, and the oldest pruned
        CHECK(saver.checkpoints().size() == 2);
        CHECK(std::filesystem::read_symlink(run / "last.ckpt") == "step-000000010.ckpt");
        CHECK(std::filesystem::is_directory(run / "step-000000010.ckpt") ==
              (form == Form::Sharded));
      }
      auto from_sync = make_trainer(), from_async = make_trainer();
      auto l1 = make_loader(), l2 = make_loader();
      CHECK(from_sync->fit(task::Classification{}, *l1, {.epochs = 3, .resume_from = dir / "sync"})
                .steps == 15);
      from_async->fit(task::Classification{}, *l2, {.epochs = 3, .resume_from = dir / "async"});
      expect_bitwise_equal(from_sync->model(), from_async->model());
    }
  }
  // A file where the folder should be: that save's write fails.
  std::ofstream(dir / "not_a_folder") << "x";
  const auto unwritable = dir / "not_a_folder" / "a.ckpt";
  struct SaveAt {
    std::map<int64_t, std::filesystem::path> files;
    void on_step_end(TrainState& s) {
      if (files.count(s.step)) s.save_checkpoint(files.at(s.step));
    }
  };
  const auto fit_error = [&](SaveAt saves, Form form = Form::File) {
    auto trainer = make_trainer(form, /*asynchronous=*/true);
    auto loader = make_loader();
    return tk_test::error_of(
        [&] { trainer->fit(task::Classification{}, *loader, {.epochs = 1}, std::move(saves)); });
  };
  const auto failed = "the asynchronous save of checkpoint " + unwritable.string() + " failed";
  SUBCASE("a failed write is the next save's Error, before that one writes") {
    const auto error = fit_error({{{1, unwritable}, {3, dir / "b.ckpt"}}});
    CHECK_MESSAGE(error.find(failed) != std::string::npos, error);
    CHECK_FALSE(std::filesystem::exists(dir / "b.ckpt"));
  }
  SUBCASE("the last save's failed write is fit's Error at its end") {
    const auto error = fit_error({{{1, dir / "a.ckpt"}, {5, unwritable}}});
    CHECK_MESSAGE(error.find(failed) != std::string::npos, error);
    CHECK(std::filesystem::exists(dir / "a.ckpt"));
  }
  SUBCASE("a sharded save's failed write is the next save's Error, and nothing is committed") {
    const auto error = fit_error({{{1, unwritable}, {3, dir / "b.ckpt"}}}, Form::Sharded);
    CHECK_MESSAGE(error.find("the asynchronous save of sharded checkpoint " + unwritable.string() +
                             " failed") != std::string::npos,
                  error);
    CHECK_FALSE(std::filesystem::exists(dir / "b.ckpt"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("NanGuard skips a non-finite step or stops naming it") {
  struct Poison {
    int64_t at_step;
    int64_t seen = 0;
    StepOutput step(ModelRef& model, const data::Batch& batch) {
      auto out = task::Classification{}.step(model, batch);
      if (seen++ == at_step) out.loss = out.loss * NAN;
      return out;
    }
  };
  data::TensorBatches batches(dataset(), {.batch_size = 50, .shuffle = false});
  Trainer<optim::SGD, sched::Constant, precision::Fp32, accumulate::None, clip::Norm> t1{Net()};
  callbacks::NanGuard skip({.action = callbacks::NanGuard::Action::Skip});
  std::vector<std::vector<at::Tensor>> after;
  struct Snap {
    std::vector<std::vector<at::Tensor>>* out;
    void on_step_end(TrainState& s) { out->push_back(tk_test::snapshot(s.model())); }
  };
  t1.fit(Poison{2}, batches, {.epochs = 1}, std::ref(skip), Snap{&after});
  CHECK(skip.skipped() == 1);
  REQUIRE(after.size() == 4);
  for (size_t i = 0; i < after[1].size(); ++i) CHECK(torch::equal(after[1][i], after[2][i]));
  for (const auto& p : after.back()) CHECK(torch::isfinite(p).all().item<bool>());
  Trainer<optim::SGD> t2{Net()};
  CHECK_THROWS_WITH_AS(t2.fit(Poison{1}, batches, {.epochs = 1}, callbacks::NanGuard{}),
                       "trainkit: NanGuard: non-finite loss (nan) at step 2", Error);
}

TEST_CASE(
    "SIGINT finishes the step, writes a checkpoint and returns - resuming continues exactly") {
  const auto dir = tk_test::temp_dir("trainkit_signal");
  auto reference = make_trainer();
  auto l0 = make_loader();
  reference->fit(task::Classification{}, *l0, {.epochs = 2});
  struct SendSignal {
    void on_step_end(TrainState& s) {
      if (s.step == 4) std::raise(SIGINT);  // handled: noted, the step completes
    }
  };
  auto first = make_trainer();
  auto l1 = make_loader();
  const auto r =
      first->fit(task::Classification{}, *l1,
                 {.epochs = 2, .checkpoint_on_signal = dir / "interrupted.ckpt"}, SendSignal{});
  CHECK(r.interrupted);
  CHECK(r.steps == 4);
  CHECK(r.stop_reason.find("interrupted by signal 2") != std::string::npos);
  auto second = make_trainer();
  auto l2 = make_loader();
  const auto done = second->fit(task::Classification{}, *l2,
                                {.epochs = 2, .resume_from = dir / "interrupted.ckpt"});
  CHECK(done.steps == 10);
  expect_bitwise_equal(second->model(), reference->model());
  std::filesystem::remove_all(dir);
}

TEST_CASE("one command for the first run and every restart: the newest checkpoint by step wins") {
  const auto dir = tk_test::temp_dir("trainkit_restart") / "ckpt";  // not made yet
  auto reference = make_trainer();
  auto l0 = make_loader();
  reference->fit(task::Classification{}, *l0, {.epochs = 2});
  struct Began {
    int64_t step = -1, epoch = -1, batch = -1;
  };
  struct SignalAt {
    int64_t step;
    Began* began_at;
    void on_fit_begin(TrainState& s) { *began_at = {s.step, s.epoch, s.batch}; }
    void on_step_end(TrainState& s) {
      if (s.step == step) std::raise(SIGTERM);
    }
  };
  const FitOptions command{.epochs = 2,
                           .resume_from = dir,
                           .resume_if_present = true,
                           .checkpoint_on_signal = dir / "interrupted.ckpt"};
  auto run = [&](int64_t signal_at, Began& began_at) {
    auto trainer = make_trainer();
    auto loader = make_loader();
    callbacks::ModelCheckpoint every_2({.dir = dir, .save_every = 2});
    auto r = trainer->fit(task::Classification{}, *loader, command, std::ref(every_2),
                          SignalAt{signal_at, &began_at});
    return std::make_pair(std::move(trainer), r);
  };
  Began began;
  const auto [first, r1] = run(7, began);  // a first run: nothing to resume
  CHECK(began.step == 0);
  CHECK(began.epoch == 0);
  CHECK(began.batch == 0);
  CHECK(r1.interrupted);
  CHECK(r1.steps == 7);
  // the epoch so far's loss, and the last complete epoch's metrics
  CHECK(r1.metrics.count("train_loss") == 1);
  CHECK(std::filesystem::read_symlink(dir / "last.ckpt") == "step-000000006.ckpt");
  const auto [second, r2] = run(-1, began);  // interrupted.ckpt (step 7) is newer than last.ckpt
  // on_fit_begin sees where the fit resumes: step 7 is epoch 1's third
  // window (5 windows an epoch), after its micro-batches 0-5
  CHECK(began.step == 7);
  CHECK(began.epoch == 1);
  CHECK(began.batch == 6);
  CHECK(r2.steps == 10);
  expect_bitwise_equal(second->model(), reference->model());
  // the same folder without resume_if_present, empty: an error that names the fix
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto t = make_trainer();
  auto l = make_loader();
  const std::string expected = "no checkpoint to resume from in " + dir.string() +
                               " (no last.ckpt, step-*.ckpt or other *.ckpt); "
                               "fit.resume_if_present = true starts fresh";
  CHECK_THROWS_WITH_AS(t->fit(task::Classification{}, *l, {.resume_from = dir}),
                       doctest::Contains(expected.c_str()), Error);
  // no folder at all (as before a first run): the same advice, not "cannot open"
  std::filesystem::remove_all(dir);
  const std::string missing = "trainkit: fit.resume_from = \"" + dir.string() +
                              "\": no such file or folder; fit.resume_if_present = true starts "
                              "fresh when there is no checkpoint yet";
  CHECK_THROWS_WITH_AS(t->fit(task::Classification{}, *l, {.resume_from = dir}), missing.c_str(),
                       Error);
  std::filesystem::remove_all(dir.parent_path());
}

TEST_CASE("seed_everything and the deterministic switch") {
  seed_everything(123);
  const auto a = torch::randn({5});
  seed_everything(123);
  CHECK(torch::equal(a, torch::randn({5})));
  set_deterministic(true);
  CHECK(at::globalContext().deterministicAlgorithms());
  CHECK(!at::globalContext().benchmarkCuDNN());
  CHECK(!at::globalContext().allowTF32CuBLAS());
  set_deterministic(false);
  CHECK(!at::globalContext().deterministicAlgorithms());
  CHECK(at::globalContext().benchmarkCuDNN());
}

namespace {
// tests/compat/write_checkpoint.cpp, built at trainkit 0.1.0's release
// commit, wrote it at step 4, mid-way through epoch 1.
const std::filesystem::path kCheckpoint010 = TRAINKIT_COMPAT_DIR "/checkpoint-0.1.0.ckpt";

/// The compatibility run resumed from `file`, checked against `saved`.
void check_compat_resume(const std::filesystem::path& file, const io::Checkpoint& saved);
}  // namespace

TEST_CASE("a checkpoint written by trainkit 0.1.0 still resumes") {
  check_compat_resume(kCheckpoint010, io::read_checkpoint(kCheckpoint010));
}

TEST_CASE("a 0.1.0 checkpoint of parallel::CudaGraph or DDP resumes under parallel::Single") {
  // 0.1.0 named the policy in the signature; 0.2 spells it capture::CudaGraph.
  auto ckpt = io::read_checkpoint(kCheckpoint010);
  auto& signature = ckpt.parts.at("trainer").values.at("signature");
  const auto single = signature.as_string();
  REQUIRE(single.ends_with("trainkit::parallel::Single>"));
  signature = single.substr(0, single.size() - 7) + "CudaGraph>";
  const auto dir = tk_test::temp_dir("trainkit_compat_graph");
  io::write_checkpoint(dir / "graph.ckpt", ckpt);
  check_compat_resume(dir / "graph.ckpt", ckpt);
  // Another Parallel policy's checkpoint resumes too: checkpoints hold whole
  // tensors by name, which any strategy reads (docs/checkpoints.md).
  signature = single.substr(0, single.size() - 7) + "DDP>";
  io::write_checkpoint(dir / "ddp.ckpt", ckpt);
  check_compat_resume(dir / "ddp.ckpt", ckpt);
  // Another policy in any other role is refused, naming both.
  signature = std::string(single).replace(single.find("trainkit::clip::"), 16, "my::");
  io::write_checkpoint(dir / "clip.ckpt", ckpt);
  auto trainer = tk_compat::trainer();
  auto data = tk_compat::loader();
  CHECK_THROWS_WITH_AS(
      trainer.fit(task::Classification{}, data, {.epochs = 1, .resume_from = dir / "clip.ckpt"}),
      doctest::Contains("my::"), Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a checkpoint of a development build before 0.1.0 is refused, naming its policies") {
  // efa98fe's checkpoint names its policies as GCC spells their types.
  const std::filesystem::path file = TRAINKIT_COMPAT_DIR "/checkpoint-efa98fe.ckpt";
  auto trainer = tk_compat::trainer();
  auto data = tk_compat::loader();
  CHECK_THROWS_WITH_AS(
      trainer.fit(task::Classification{}, data, {.epochs = 1, .resume_from = file}),
      doctest::Contains("was written by Trainer<trainkit::optim::AdamW, "
                        "trainkit::sched::WarmupCosine, trainkit::precision::Fp16, "
                        "trainkit::accumulate::Every<2l>, trainkit::clip::Norm, "
                        "trainkit::parallel::Single>, not by this Trainer<"),
      Error);
}

namespace {
void check_compat_resume(const std::filesystem::path& file, const io::Checkpoint& saved_ckpt) {
  const auto* saved = &saved_ckpt;
  auto trainer = tk_compat::trainer();
  auto data = tk_compat::loader();
  struct Check {
    const io::Checkpoint* saved;
    tk_compat::CompatTrainer* trainer;
    callbacks::EarlyStopping* stopping;
    bool checked = false;
    void on_fit_begin(TrainState& s) {
      CHECK(s.resumed);
      CHECK(s.step == tk_compat::kSavedAtStep);
      const auto& part = [&](const char* name) -> const StateDict& {
        return saved->parts.at(name);
      };
      for (const auto& [name, t] : io::module_tensors(s.model()))
        CHECK_MESSAGE(torch::equal(t, part("model").tensors.at(name)), name);
      for (const auto& [name, t] : trainer->optimizer().state_dict().tensors)
        CHECK_MESSAGE(torch::equal(t, part("optim").tensors.at(name)), name);
      CHECK(torch::equal(trainer->precision().loss_scale(), part("precision").tensors.at("scale")));
      CHECK(torch::equal(at::detail::getDefaultCPUGenerator().get_state(),
                         part("rng").tensors.at("cpu")));
      CHECK(stopping->state_dict().value<double>("best") ==
            part("callback.0").value<double>("best"));
      checked = true;
    }
  };
  auto stopping = tk_compat::early_stopping();
  Check check{saved, &trainer, &stopping};
  const auto result =
      trainer.fit(task::Classification{}, data, {.epochs = tk_compat::kEpochs, .resume_from = file},
                  std::ref(stopping), std::ref(check));
  CHECK(check.checked);
  CHECK(result.steps == 3 * tk_compat::kEpochs);
  CHECK(result.epochs == tk_compat::kEpochs);
}
}  // namespace

namespace renamed {
// The same clip policy before and after a move to another namespace: its
// declared stable name is what checkpoints record.
namespace v1 {
struct Clip : clip::Norm {
  using clip::Norm::Norm;
  static constexpr const char* stable_name(std::type_identity<Clip>) { return "example::Clip"; }
};
}  // namespace v1
namespace v2 {
struct Clip : clip::Norm {
  using clip::Norm::Norm;
  static constexpr const char* stable_name(std::type_identity<Clip>) { return "example::Clip"; }
};
}  // namespace v2
}  // namespace renamed

TEST_CASE("checkpoints record the policies' stable names, so a renamed policy still resumes") {
  const auto dir = tk_test::temp_dir("trainkit_stable_names");
  using Before = Trainer<optim::AdamW, sched::Constant, precision::Fp32, accumulate::Every<2>,
                         renamed::v1::Clip>;
  using After = Trainer<optim::AdamW, sched::Constant, precision::Fp32, accumulate::Every<2>,
                        renamed::v2::Clip>;
  data::TensorBatches train({torch::randn({16, 8}), torch::randint(0, 3, {16})}, {.batch_size = 4});
  Before before(tk_test::seeded_mlp());
  before.fit(task::Classification{}, train, {.epochs = 1}, Interrupt{dir, 2});
  const auto saved = io::read_checkpoint(dir / "step-2.ckpt");
  CHECK(saved.parts.at("trainer").value<std::string>("signature") ==
        "Trainer<trainkit::optim::AdamW, trainkit::sched::Constant, trainkit::precision::Fp32, "
        "trainkit::accumulate::Every<2>, example::Clip, trainkit::parallel::Single>");
  After after(tk_test::seeded_mlp());
  const auto r =
      after.fit(task::Classification{}, train, {.epochs = 2, .resume_from = dir / "step-2.ckpt"});
  CHECK(r.steps == 4);
  std::filesystem::remove_all(dir);
}

TEST_CASE("ModelCheckpoint's best must beat the last best by more than min_delta") {
  const auto dir = tk_test::temp_dir("trainkit_ckpt_min_delta");
  struct Score {
    std::vector<double> per_epoch;
    void on_epoch_end(TrainState& s) { s.metrics["score"] = per_epoch[size_t(s.epoch)]; }
  };
  struct Record {
    const callbacks::ModelCheckpoint* saver;
    std::vector<double> best;
    void on_epoch_end(TrainState&) { best.push_back(saver->best()); }
  };
  callbacks::ModelCheckpoint saver({.dir = dir,
                                    .every_epoch = false,
                                    .monitor = "score",
                                    .mode = callbacks::ModelCheckpoint::Mode::Min,
                                    .min_delta = 0.1});
  Record record{&saver, {}};
  Trainer<optim::SGD> trainer(tk_test::seeded_mlp());
  data::TensorBatches train({torch::randn({16, 8}), torch::randint(0, 3, {16})}, {.batch_size = 8});
  trainer.fit(task::Classification{}, train, {.epochs = 3}, Score{{1.0, 0.95, 0.85}}, saver,
              record);
  CHECK(record.best == std::vector<double>{1.0, 1.0, 0.85});  // 0.95 is not 0.1 better
  CHECK(std::filesystem::exists(dir / "best.ckpt"));
  CHECK_THROWS_WITH_AS(callbacks::ModelCheckpoint({.monitor = "score", .min_delta = -1}),
                       doctest::Contains("`model_checkpoint.min_delta` = -1 is invalid"), Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("ReduceLROnPlateau resumes: best, bad epochs, cooldown and its lr come back") {
  at::set_num_threads(1);
  const auto dir = tk_test::temp_dir("trainkit_resume_plateau");
  using T = Trainer<optim::SGD, sched::ReduceLROnPlateau>;
  const auto make = [] {
    torch::manual_seed(11);
    return std::make_unique<T>(Net(), T::Options{.optim = {.lr = 0.2},
                                                 .sched = {.metric = "train_loss",
                                                           .factor = 0.5,
                                                           .patience = 0,
                                                           .threshold = 0.1,
                                                           .cooldown = 1}});
  };
  const FitOptions five_epochs{.epochs = 5};
  auto reference = make();
  auto l0 = make_loader();
  reference->fit(task::Classification{}, *l0, five_epochs);
  auto first = make();
  auto l1 = make_loader();
  first->fit(task::Classification{}, *l1, five_epochs, Interrupt{dir, -1, /*stop_after_epoch=*/1});
  auto second = make();
  auto l2 = make_loader();
  FitOptions resume = five_epochs;
  resume.resume_from = dir / "epoch-1.ckpt";
  second->fit(task::Classification{}, *l2, resume);
  expect_bitwise_equal(second->model(), reference->model());
  CHECK(second->scheduler().lr() == reference->scheduler().lr());
  CHECK(second->scheduler().best() == reference->scheduler().best());
  CHECK(second->scheduler().bad_epochs() == reference->scheduler().bad_epochs());
  CHECK(reference->scheduler().lr() < 0.2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("parameter groups resume: per-group optimizer state and schedules come back") {
  at::set_num_threads(1);
  const auto dir = tk_test::temp_dir("trainkit_resume_groups");
  using T = Trainer<optim::AdamW, sched::ReduceLROnPlateau>;
  const auto make = [] {
    torch::manual_seed(11);
    return std::make_unique<T>(
        Net(),
        T::Options{.optim = {.lr = 0.05, .weight_decay = 0.1},
                   .sched = {.metric = "train_loss",
                             .factor = 0.5,
                             .patience = 0,
                             .threshold = 0.1,
                             .min_lr = 0.004},
                   .param_groups = {
                       {"biases",
                        params::below_2d(),
                        {.lr_scale = 0.2, .weight_decay = 0.0, .beta1 = 0.8, .amsgrad = true}}}});
  };
  const FitOptions four_epochs{.epochs = 4};
  auto reference = make();
  auto l0 = make_loader();
  reference->fit(task::Classification{}, *l0, four_epochs);
  auto first = make();
  auto l1 = make_loader();
  first->fit(task::Classification{}, *l1, four_epochs, Interrupt{dir, -1, /*stop_after_epoch=*/1});
  auto second = make();
  auto l2 = make_loader();
  FitOptions resume = four_epochs;
  resume.resume_from = dir / "epoch-1.ckpt";
  second->fit(task::Classification{}, *l2, resume);
  expect_bitwise_equal(second->model(), reference->model());
  // each group's schedule: its own base, reduced, and the biases' at its min_lr floor
  CHECK(second->optimizer().lr(1) == reference->optimizer().lr(1));
  CHECK(second->optimizer().lr(0) == reference->optimizer().lr(0));
  CHECK(reference->optimizer().lr(0) < 0.05);
  CHECK(reference->optimizer().lr(1) < 0.05 * 0.2);
  std::filesystem::remove_all(dir);
}
