// callbacks::Ema: the average against one computed by hand from the weights
// after every step (timm's decay and warm-up), one fused update per flat
// buffer, buffers averaged or copied, validation on the average without
// changing training, and a checkpoint round trip that resumes exactly.
#include <trainkit/callbacks/ema.hpp>
#include <trainkit/io.hpp>
#include <trainkit/trainkit.hpp>

#include <cmath>
#include <filesystem>
#include <vector>

#include "support.hpp"

using namespace trainkit;

namespace {

struct BnNet : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(6, 8))};
  torch::nn::BatchNorm1d bn{register_module("bn", torch::nn::BatchNorm1d(8))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(8, 3))};
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }
};

using SgdTrainer = Trainer<optim::SGD>;

std::vector<data::Batch> batches(int64_t n, uint64_t seed) {
  auto gen = data::generator(seed);
  std::vector<data::Batch> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back({at::randn({16, 6}, gen), at::randint(0, 3, {16}, gen)});
  return out;
}

std::unique_ptr<SgdTrainer> make_trainer() {
  torch::manual_seed(3);
  return std::make_unique<SgdTrainer>(std::make_shared<BnNet>(),
                                      SgdTrainer::Options{.optim = {.lr = 0.1, .momentum = 0.9}});
}

/// Every tensor Ema averages, in its order, after every step.
struct Recorder {
  std::vector<std::vector<at::Tensor>> after_step;
  std::vector<at::Tensor> at_begin;
  static std::vector<at::Tensor> copy(torch::nn::Module& m) {
    std::vector<at::Tensor> out;
    for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
    for (const auto& b : m.buffers()) out.push_back(b.detach().clone());
    return out;
  }
  void on_fit_begin(TrainState& s) { at_begin = copy(s.model()); }
  void on_step_end(TrainState& s) { after_step.push_back(copy(s.model())); }
};

}  // namespace

TEST_CASE("Ema: timm's decay, and the average of 10 steps computed by hand") {
  const callbacks::Ema::Options warm{
      .decay = 0.999, .warmup = true, .warmup_gamma = 1.0, .warmup_power = 2.0 / 3.0};
  callbacks::Ema ema(warm);
  CHECK(ema.decay_at(0) == 0.0);
  CHECK(ema.decay_at(1) == 0.0);  // the first update copies
  CHECK(ema.decay_at(2) == doctest::Approx(1 - std::pow(2.0, -2.0 / 3.0)));
  CHECK(ema.decay_at(10) == doctest::Approx(1 - std::pow(10.0, -2.0 / 3.0)));
  CHECK(ema.decay_at(100000000) == 0.999);  // capped at decay
  CHECK(callbacks::Ema({.decay = 0.9, .update_after_step = 3}).decay_at(4) == 0.0);
  CHECK(callbacks::Ema({.decay = 0.9, .update_after_step = 3}).decay_at(5) == 0.9);

  auto trainer = make_trainer();
  Recorder rec;
  const auto data = batches(10, 1);
  trainer->fit(task::Classification{}, data, {}, rec, ema);
  REQUIRE(rec.after_step.size() == 10);
  CHECK(ema.updates() == 10);
  CHECK(ema.fused_updates() == 3);  // parameters: one flat buffer; BN running mean and var

  // By hand, in double: ema_0 = the weights at fit begin; ema_s = d_s ema + (1 - d_s) w_s.
  std::vector<at::Tensor> expected;
  for (const auto& t : rec.at_begin) expected.push_back(t.to(at::kDouble));
  for (int64_t s = 1; s <= 10; ++s) {
    const double d = ema.decay_at(s);
    for (size_t i = 0; i < expected.size(); ++i) {
      const auto w = rec.after_step[size_t(s - 1)][i].to(at::kDouble);
      expected[i] = at::isFloatingType(rec.at_begin[i].scalar_type())
                        ? d * expected[i] + (1 - d) * w
                        : w;  // counts: copied
    }
  }
  const auto state = ema.state_dict();
  REQUIRE(state.tensors.size() == expected.size());
  BnNet names;
  size_t i = 0;
  for (const auto& p : names.named_parameters())
    CHECK(torch::allclose(state.tensors.at("param." + p.key()).to(at::kDouble), expected[i++], 1e-5,
                          1e-6));
  for (const auto& b : names.named_buffers())
    CHECK(torch::allclose(state.tensors.at("buffer." + b.key()).to(at::kDouble), expected[i++],
                          1e-5, 1e-6));
  // the average differs from the weights: it is not a copy
  CHECK_FALSE(torch::allclose(state.tensors.at("param.fc1.weight"),
                              trainer->model().named_parameters()["fc1.weight"]));

  auto copy = std::make_shared<BnNet>();
  ema.copy_to(*copy);
  CHECK(torch::equal(copy->fc1->weight, state.tensors.at("param.fc1.weight")));
  CHECK_THROWS_WITH_AS(ema.copy_to(*torch::nn::Linear(2, 2)),
                       doctest::Contains("the model has 2 tensors, the average 9"), Error);
  CHECK_THROWS_WITH_AS(
      callbacks::Ema({.decay = 1.5}),
      "trainkit: option `Ema.decay` = 1.5 is invalid; accepted: a number in [0, 1]", Error);
}

TEST_CASE("Ema: validation on the average leaves training exactly as it was") {
  const auto data = batches(12, 2), val = batches(3, 9);
  const FitOptions options{.epochs = 2, .val_data = val};
  auto plain = make_trainer();
  callbacks::Ema off({.decay = 0.9});
  const auto r_off = plain->fit(task::Classification{}, data, options, off);
  auto swapped = make_trainer();
  callbacks::Ema on({.decay = 0.9, .validate = true});
  const auto r_on = swapped->fit(task::Classification{}, data, options, on);

  const auto pa = plain->model().parameters(), pb = swapped->model().parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
  CHECK(r_on.metrics.at("train_loss") == r_off.metrics.at("train_loss"));
  CHECK(r_on.metrics.at("val_loss") != r_off.metrics.at("val_loss"));
  // the val_loss is the average's: the same as the average copied into a model
  auto averaged_model = std::make_shared<BnNet>();
  on.copy_to(*averaged_model);
  SgdTrainer judge(averaged_model);
  CHECK(judge.evaluate(task::Classification{}, val).at("loss") ==
        doctest::Approx(r_on.metrics.at("val_loss")).epsilon(1e-6));
}

TEST_CASE("Ema: a checkpoint holds the average, and a resumed run averages on exactly") {
  const auto dir = tk_test::temp_dir("trainkit_ema");
  const auto data = batches(10, 4);
  struct SaveAt {
    std::filesystem::path file;
    void on_step_end(TrainState& s) {
      if (s.step == 4) {
        s.save_checkpoint(file);
        s.request_stop("saved");
      }
    }
  };
  const callbacks::Ema::Options opts{.decay = 0.8, .warmup = true};
  auto whole = make_trainer();
  callbacks::Ema ema_whole(opts);
  whole->fit(task::Classification{}, data, {.epochs = 2}, ema_whole);

  auto first = make_trainer();
  callbacks::Ema ema_first(opts);
  // The saving callback goes after Ema: a checkpoint holds each callback's
  // state as it is when the save runs, so Ema must have updated by then.
  first->fit(task::Classification{}, data, {.epochs = 2}, ema_first, SaveAt{dir / "a.ckpt"});
  auto second = make_trainer();
  callbacks::Ema ema_second(opts);
  second->fit(task::Classification{}, data, {.epochs = 2, .resume_from = dir / "a.ckpt"},
              ema_second, SaveAt{dir / "unused.ckpt"});
  CHECK(ema_second.updates() == ema_whole.updates());
  const auto a = ema_whole.state_dict(), b = ema_second.state_dict();
  for (const auto& [name, t] : a.tensors) CHECK_MESSAGE(torch::equal(t, b.tensors.at(name)), name);

  // The same Ema resumed again, as after a signal in one process: the
  // checkpoint's average, not the weights of the fit before.
  auto third = make_trainer();
  third->fit(task::Classification{}, data, {.epochs = 2, .resume_from = dir / "a.ckpt"}, ema_first,
             SaveAt{dir / "unused.ckpt"});
  const auto c = ema_first.state_dict();
  for (const auto& [name, t] : a.tensors) CHECK_MESSAGE(torch::equal(t, c.tensors.at(name)), name);
}
