// data::Loader: same batches whatever the number of workers, exact resume
// position, worker failures and early destruction; samplers against PyTorch
// and against their expected frequencies; batched transforms.
#include <trainkit/callbacks/progressive_resize.hpp>
#include <trainkit/data.hpp>
#include <trainkit/trainkit.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "../examples/glyphs.hpp"
#include "support.hpp"

using namespace trainkit;

namespace {

data::TensorDataset numbered(int64_t n) {
  auto x = torch::arange(n * 3 * 8 * 8, at::kFloat).view({n, 3, 8, 8});
  return {x, torch::arange(n)};
}

/// Random CPU and device transforms, so determinism covers their draws too.
data::LoaderOptions augmenting(int64_t workers) {
  return {.batch_size = 8,
          .workers = workers,
          .prefetch = 2,
          .seed = 5,
          .transform = data::transforms::HorizontalFlip{0.5},
          .device_transform = data::transforms::RandomCrop{.size = 6, .padding = 1}};
}

std::vector<data::Batch> collect(auto& loader) {
  std::vector<data::Batch> out;
  for (const auto& b : loader) out.push_back(b);
  return out;
}

bool same(const std::vector<data::Batch>& a, const std::vector<data::Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i].input, b[i].input) || !torch::equal(a[i].target, b[i].target)) {
      return false;
    }
  }
  return true;
}

/// A per-sample dataset that throws at one index, or sleeps to look slow.
struct Flaky {
  int64_t n = 100;
  int64_t bad = -1;
  int sleep_ms = 0;
  int64_t size() const { return n; }
  data::Batch get(int64_t i) const {
    if (sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    if (i == bad) throw std::runtime_error("corrupt sample " + std::to_string(i));
    return {torch::full({4}, double(i)), torch::tensor(i)};
  }
};

}  // namespace

TEST_CASE("the same batches, bitwise, with 0, 1 and 4 workers") {
  const auto ds = numbered(100);
  std::vector<std::vector<data::Batch>> runs;
  for (int64_t workers : {0, 1, 4}) {
    data::Loader loader(ds, data::RandomSampler({.size = 100, .seed = 3}), augmenting(workers));
    CHECK(loader.size() == 13);
    auto epoch0 = collect(loader);
    loader.set_epoch(1);
    auto epoch1 = collect(loader);
    CHECK(!same(epoch0, epoch1));  // reshuffled and re-augmented per epoch
    loader.set_epoch(0);
    CHECK(same(collect(loader), epoch0));  // reproducible
    epoch0.insert(epoch0.end(), epoch1.begin(), epoch1.end());
    runs.push_back(epoch0);
  }
  CHECK(same(runs[0], runs[1]));
  CHECK(same(runs[0], runs[2]));
  // another seed: another order and other augmentation draws
  auto options = augmenting(2);
  options.seed = 6;
  data::Loader reseeded(ds, data::RandomSampler({.size = 100, .seed = 3}), options);
  const auto other = collect(reseeded);
  CHECK(torch::equal(other[0].target, runs[0][0].target));  // same sampler seed: same order
  CHECK(!torch::equal(other[0].input, runs[0][0].input));   // different draws
  CHECK(runs[0].back().input.size(0) == 4);                 // 100 = 12 x 8 + 4
  CHECK(runs[0].front().input.sizes() == std::vector<int64_t>{8, 3, 6, 6});
}

TEST_CASE("starting at batch i equals skipping i batches") {
  const auto ds = numbered(50);
  for (int64_t workers : {0, 3}) {
    data::Loader loader(ds, data::RandomSampler({.size = 50, .seed = 1}), augmenting(workers));
    loader.set_epoch(2);
    const auto all = collect(loader);
    loader.set_start(4);
    const auto rest = collect(loader);
    REQUIRE(rest.size() == all.size() - 4);
    CHECK(same(rest, std::vector<data::Batch>(all.begin() + 4, all.end())));
    CHECK(collect(loader).size() == all.size());  // the start applies once
  }
}

TEST_CASE("an epoch goes on after the samples an interrupted run's ranks took, on any number") {
  // 40 samples; 2 ranks took 3 batches of 4 each (24 samples); the rest go
  // to 3 ranks: 16 samples, padded to 18 by wrapping round the rest.
  const auto ds = numbered(40);
  const auto epoch_order = [&] {
    data::Loader whole(ds, data::RandomSampler({.size = 40, .seed = 7}), {.batch_size = 40});
    whole.set_epoch(1);
    return collect(whole).front().target;
  }();
  std::vector<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    data::Loader loader(ds, data::RandomSampler({.size = 40, .seed = 7}), {.batch_size = 4});
    loader.set_shard(rank, 3);
    loader.set_epoch(1);
    loader.set_start_sample(24);
    CHECK(loader.size() == 2);  // 6 samples: 4 + 2
    for (const auto& b : collect(loader))
      for (int64_t i = 0; i < b.target.size(0); ++i) seen.push_back(b.target[i].item<int64_t>());
    loader.set_epoch(2);
    CHECK(loader.size() == 4);  // a new epoch is whole again: 14 samples
  }
  std::vector<int64_t> expected(epoch_order.data_ptr<int64_t>() + 24,
                                epoch_order.data_ptr<int64_t>() + 40);
  expected.push_back(expected[0]), expected.push_back(expected[1]);  // the padding
  std::sort(seen.begin(), seen.end());
  std::sort(expected.begin(), expected.end());
  CHECK(seen == expected);
  // TensorBatches the same way
  data::TensorBatches batches(ds, {.batch_size = 4, .seed = 7});
  batches.set_shard(1, 3);
  batches.set_epoch(0);
  batches.set_start_sample(39);  // one sample left: every rank takes it (padding)
  const auto last = collect(batches);
  REQUIRE(last.size() == 1);
  CHECK(last[0].target.size(0) == 1);
}

TEST_CASE("drop_last and the exact size of an epoch") {
  const auto ds = numbered(30);
  data::Loader loader(ds, data::SequentialSampler(30), {.batch_size = 8, .drop_last = true});
  CHECK(loader.size() == 3);
  const auto batches = collect(loader);
  CHECK(batches.size() == 3);
  CHECK(torch::equal(batches[2].target, torch::arange(16, 24)));
}

TEST_CASE("a worker's exception reaches the training thread with its message") {
  for (int64_t workers : {0, 1, 3}) {
    CAPTURE(workers);
    data::Loader loader(Flaky{.bad = 37}, data::SequentialSampler(100),
                        {.batch_size = 10, .workers = workers});
    int64_t seen = 0;
    try {
      for (const auto& b : loader) seen += b.size();
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()) ==
            "trainkit: loading batch 3 of epoch 0 failed: corrupt sample 37");
    }
    CHECK(seen == 30);
  }
}

TEST_CASE("destroying a loader mid-epoch joins its workers promptly") {
  const auto start = std::chrono::steady_clock::now();
  {
    data::Loader loader(Flaky{.n = 400, .sleep_ms = 2}, data::SequentialSampler(400),
                        {.batch_size = 4, .workers = 4, .prefetch = 4});
    int64_t taken = 0;
    for (const auto& b : loader) {
      (void)b;
      if (++taken == 2) break;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 2.0);  // 400 samples x 2 ms would be 0.8 s per worker if it ran on
}

TEST_CASE("a sample of the wrong shape names its dataset index") {
  struct Ragged {
    int64_t size() const { return 20; }
    data::Batch get(int64_t i) const { return {torch::zeros({i == 13 ? 5 : 4}), torch::tensor(i)}; }
  };
  data::Loader loader(Ragged{}, data::SequentialSampler(20), {.batch_size = 8, .workers = 2});
  CHECK_THROWS_WITH_AS(collect(loader),
                       doctest::Contains("dataset sample 13 has input of shape [5] and dtype "
                                         "Float, but sample 8 in the same batch has shape [4]"),
                       Error);
}

TEST_CASE("a torch::data dataset plugs in and is stacked per sample") {
  struct Squares : torch::data::datasets::Dataset<Squares> {
    torch::data::Example<> get(size_t i) override {
      return {torch::full({2}, double(i * i)), torch::tensor(int64_t(i))};
    }
    torch::optional<size_t> size() const override { return 9; }
  };
  data::Loader loader(data::TorchDataset<Squares>(Squares{}), data::SequentialSampler(9),
                      {.batch_size = 4, .workers = 2});
  const auto batches = collect(loader);
  REQUIRE(batches.size() == 3);
  CHECK(torch::equal(batches[1].input.select(1, 0), torch::tensor({16.f, 25.f, 36.f, 49.f})));
  CHECK(torch::equal(batches[2].target, torch::tensor({int64_t(8)})));
}

TEST_CASE("Trainer::fit takes a Loader, for training and validation") {
  const auto train = examples::make_glyphs(512, 1), val = examples::make_glyphs(256, 2);
  data::Loader train_loader(train, data::RandomSampler({.size = 512, .seed = 1}),
                            {.batch_size = 32, .workers = 2});
  data::Loader val_loader(val, data::SequentialSampler(256), {.batch_size = 128});
  torch::manual_seed(0);
  Trainer<optim::AdamW, sched::OneCycle> trainer(
      torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 10)),
      {.sched = {.max_lr = 1e-2}});
  const auto r =
      trainer.fit(task::Classification{}, train_loader, {.epochs = 2, .val_data = val_loader});
  CHECK(r.steps == 32);
  CHECK(train_loader.epoch() == 1);
  CHECK(r.metrics.at("val_accuracy") > 0.4);
}

TEST_CASE("DistributedSampler gives PyTorch's shards: disjoint, covering, equal length") {
  const auto ref = tk_test::load_reference("sampler.json");
  for (const auto& c : ref["distributed"]) {
    const int64_t n = c["size"], world = c["world_size"];
    std::vector<int64_t> seen;
    size_t length = 0;
    for (int64_t rank = 0; rank < world; ++rank) {
      data::DistributedSampler s({.size = n,
                                  .rank = rank,
                                  .world_size = world,
                                  .shuffle = c["shuffle"],
                                  .seed = c["seed"],
                                  .drop_last = c["drop_last"]});
      const auto idx = s.indices(c["epoch"].get<int64_t>());
      const auto expected = c["shards"][rank].get<std::vector<int64_t>>();
      CHECK(torch::equal(idx, torch::tensor(expected, at::kLong)));
      CHECK(s.shard_size() == int64_t(expected.size()));
      if (rank == 0) length = expected.size();
      CHECK(expected.size() == length);
      seen.insert(seen.end(), expected.begin(), expected.end());
    }
    std::sort(seen.begin(), seen.end());
    const auto distinct = std::unique(seen.begin(), seen.end()) - seen.begin();
    // all of the set, unless drop_last cut the tail; padding repeats only to fill
    if (c["drop_last"])
      CHECK(distinct == int64_t(seen.size()));
    else
      CHECK(distinct == n);
  }
}

TEST_CASE("WeightedSampler draws in proportion to the weights") {
  const auto weights = torch::tensor({1.0, 2.0, 0.0, 5.0});
  data::WeightedSampler s({.weights = weights, .num_samples = 80000, .seed = 9});
  const auto counts = at::bincount(s.indices(0), {}, 4).to(at::kDouble);
  const auto p = weights / weights.sum();
  // within 5 standard deviations of a multinomial count
  const auto sd = (80000 * p * (1 - p)).sqrt();
  CHECK(((counts - 80000 * p).abs() <= 5 * sd + 1e-9).all().item<bool>());
  CHECK(counts[2].item<double>() == 0.0);
  CHECK(!torch::equal(s.indices(0), s.indices(1)));
  data::WeightedSampler no_repeat({.weights = weights, .num_samples = 3, .replacement = false});
  const auto idx = std::get<0>(no_repeat.indices(0).sort());
  CHECK(torch::equal(idx, torch::tensor({0, 1, 3}, at::kLong)));
  CHECK_THROWS_WITH_AS(
      data::WeightedSampler({.weights = weights, .num_samples = 4, .replacement = false}),
      doctest::Contains("at most the number of non-zero weights"), Error);
}

TEST_CASE("RepeatFactorSampler: LVIS factors, and stochastic rounding that averages to them") {
  // category 0 in every sample, category 1 in one of 8, category 2 in one of 4
  std::vector<std::vector<int64_t>> cats(8, {0});
  cats[0].push_back(1);
  cats[1].push_back(2);
  cats[2].push_back(2);
  const double t = 0.5;
  data::RepeatFactorSampler s({.categories = cats, .threshold = t, .seed = 4});
  const auto r = s.repeat_factors();
  CHECK(r[0].item<double>() == doctest::Approx(std::sqrt(t / (1.0 / 8))));  // 2.0
  CHECK(r[1].item<double>() == doctest::Approx(std::sqrt(t / (2.0 / 8))));  // 1.414
  CHECK(r[5].item<double>() == 1.0);
  auto total = torch::zeros({8}, at::kDouble);
  const int epochs = 4000;
  for (int e = 0; e < epochs; ++e) total += at::bincount(s.indices(e), {}, 8).to(at::kDouble);
  const auto mean = total / epochs;
  // frac(r) Bernoulli per epoch: sd of the mean <= 0.5 / sqrt(epochs)
  CHECK(((mean - r).abs() <= 5 * 0.5 / std::sqrt(double(epochs))).all().item<bool>());
  CHECK(s.indices(0).numel() != s.indices(1).numel());  // lengths vary by epoch
}

TEST_CASE("batched transforms: crop windows, flips, normalisation, resize") {
  auto gen = data::generator(1);
  const auto x = torch::arange(2 * 1 * 4 * 4, at::kFloat).view({2, 1, 4, 4});
  const auto crop =
      data::transforms::RandomCrop{.size = 4, .padding = 2}({x, torch::zeros({2})}, gen);
  CHECK(crop.input.sizes() == x.sizes());
  const auto padded = at::constant_pad_nd(x, {2, 2, 2, 2}, 0);
  for (int64_t i = 0; i < 2; ++i) {  // each output is some 4x4 window of its padded input
    bool found = false;
    for (int64_t dy = 0; dy <= 4; ++dy)
      for (int64_t dx = 0; dx <= 4; ++dx)
        found |= torch::equal(crop.input[i], padded[i].narrow(1, dy, 4).narrow(2, dx, 4));
    CHECK(found);
  }
  const auto flipped = data::transforms::HorizontalFlip{1.0}({x, {}}, gen);
  CHECK(torch::equal(flipped.input, x.flip({3})));
  const auto kept = data::transforms::HorizontalFlip{0.0}({x, {}}, gen);
  CHECK(torch::equal(kept.input, x));
  const auto bytes = torch::full({1, 2, 2, 2}, 255, at::kByte);
  const auto norm = data::transforms::Normalize{{0.5, 0.0}, {0.5, 2.0}}({bytes, {}}, gen);
  CHECK(torch::allclose(norm.input[0][0], torch::ones({2, 2})));
  CHECK(torch::allclose(norm.input[0][1], torch::full({2, 2}, 0.5)));
  const data::transforms::Normalize one_channel{{0.5}, {0.5}};
  CHECK_THROWS_WITH_AS(one_channel({bytes, {}}, gen),
                       doctest::Contains("one mean and one std per channel"), Error);
  data::transforms::Resize resize(2);
  CHECK(resize({x, {}}, gen).input.sizes() == std::vector<int64_t>{2, 1, 2, 2});
}

TEST_CASE("ProgressiveResize grows the loader's images over epochs") {
  callbacks::ProgressiveResize progressive({.start_size = 8, .end_size = 16, .end_epoch = 2});
  CHECK(progressive.size_at(0) == 8);
  CHECK(progressive.size_at(1) == 12);
  CHECK(progressive.size_at(5) == 16);
  const auto ds = examples::make_glyphs(64, 1);
  data::Loader loader(ds, data::SequentialSampler(64),
                      {.batch_size = 32, .device_transform = progressive.transform()});
  std::vector<int64_t> sides;
  struct SideProbe {
    std::vector<int64_t>* sides;
    StepOutput step(ModelRef& model, const data::Batch& b) {
      sides->push_back(b.input.size(2));
      return task::Classification{}.step(model, {b.input.flatten(1).narrow(1, 0, 64), b.target});
    }
  };
  Trainer<optim::SGD> trainer(torch::nn::Sequential(torch::nn::Linear(64, 10)));
  trainer.fit(SideProbe{&sides}, loader, {.epochs = 3}, progressive);
  CHECK(sides == std::vector<int64_t>{8, 8, 12, 12, 16, 16});
}

TEST_CASE("loader options are validated") {
  const auto ds = numbered(4);
  CHECK_THROWS_WITH_AS(data::Loader(ds, data::SequentialSampler(4), {.batch_size = 0}),
                       doctest::Contains("`loader.batch_size` = 0 is invalid"), Error);
  CHECK_THROWS_WITH_AS(data::Loader(ds, data::SequentialSampler(4), {.workers = -1}),
                       doctest::Contains("`loader.workers` = -1 is invalid"), Error);
  CHECK_THROWS_WITH_AS(data::Loader(ds, data::SequentialSampler(4), {.prefetch = 0}),
                       doctest::Contains("`loader.prefetch` = 0 is invalid"), Error);
  CHECK_THROWS_WITH_AS(data::Loader(ds, data::SequentialSampler(9), {}),
                       doctest::Contains("sampler drew an index outside the dataset"), Error);
  data::Loader ok(ds, data::SequentialSampler(4), {.batch_size = 2});
  CHECK_THROWS_WITH_AS(ok.set_start(3), doctest::Contains("`loader.start` = 3 is invalid"), Error);
  CHECK_THROWS_WITH_AS(
      data::DistributedSampler({.size = 4, .rank = 2, .world_size = 2}),
      doctest::Contains("`sampler.rank` = 2 is invalid; accepted: 0 <= rank < world_size"), Error);
  CHECK_THROWS_WITH_AS(data::RepeatFactorSampler({.categories = {{1}}, .threshold = 0}),
                       doctest::Contains("`sampler.threshold` = 0 is invalid"), Error);
}

TEST_CASE("CurriculumSampler: Platanios' pacing over the easiest samples, then all of them") {
  const std::vector<double> difficulty{0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 0.0};
  data::CurriculumSampler sqrt_paced({.difficulty = difficulty, .start = 0.2, .epochs_to_full = 4});
  CHECK(sqrt_paced.competence(0) == doctest::Approx(0.2));
  CHECK(sqrt_paced.competence(2) == doctest::Approx(std::sqrt(0.5 * (1 - 0.04) + 0.04)));
  CHECK(sqrt_paced.competence(4) == 1.0);
  CHECK(sqrt_paced.competence(9) == 1.0);
  data::CurriculumSampler linear(
      {.difficulty = difficulty, .start = 0.2, .epochs_to_full = 4, .sqrt_pacing = false});
  CHECK(linear.competence(2) == doctest::Approx(0.6));

  const auto sorted = [](at::Tensor t) { return std::get<0>(t.sort()); };
  // epoch 0: the easiest 20% (samples 9 and 1), shuffled; epoch 4 on: all ten
  CHECK(torch::equal(sorted(sqrt_paced.indices(0)), torch::tensor({1, 9}, at::kLong)));
  CHECK(sqrt_paced.indices(2).numel() == 8);  // ceil(0.72 * 10)
  CHECK(torch::equal(sorted(sqrt_paced.indices(4)), torch::arange(10, at::kLong)));
  CHECK(torch::equal(sqrt_paced.indices(3), sqrt_paced.indices(3)));  // seeded by (seed, epoch)
  data::CurriculumSampler ordered(
      {.difficulty = difficulty, .start = 0.5, .epochs_to_full = 2, .shuffle = false});
  CHECK(torch::equal(ordered.indices(0), torch::tensor({9, 1, 5, 3, 7}, at::kLong)));
  CHECK(torch::equal(ordered.ranking(), torch::tensor({9, 1, 5, 3, 7, 2, 8, 4, 6, 0}, at::kLong)));

  // through the loader: the epoch's batches hold exactly the epoch's samples
  const data::TensorDataset ds{torch::arange(10, at::kFloat).unsqueeze(1), torch::arange(10)};
  data::Loader loader(ds, data::CurriculumSampler({.difficulty = difficulty, .start = 0.3}),
                      {.batch_size = 2});
  int64_t seen = 0;
  for (const auto& b : loader) seen += b.size();
  CHECK(seen == 3);
  CHECK_THROWS_WITH_AS(data::CurriculumSampler({.difficulty = difficulty, .start = 0}),
                       doctest::Contains("`sampler.start` = 0"), Error);
  CHECK_THROWS_WITH_AS(data::CurriculumSampler({.difficulty = {1.0, std::nan("")}}),
                       doctest::Contains("finite scores"), Error);
}

namespace {

/// Token sequences of lengths 1..7 (a function of the index), next-token targets.
struct TokenSample {
  at::Tensor tokens, targets;
};
struct Sentences {
  int64_t n = 50;
  int64_t size() const { return n; }
  TokenSample get(int64_t i) const {
    const auto seq = at::arange(i, i + 1 + i % 7 + 1, at::kLong).remainder(11);
    return {seq.narrow(0, 0, seq.size(0) - 1), seq.narrow(0, 1, seq.size(0) - 1)};
  }
};

/// Tokens and a padding mask in, next-token logits out.
struct TinyLmImpl : torch::nn::Module {
  TinyLmImpl() {
    embed = register_module("embed", torch::nn::Embedding(11, 8));
    head = register_module("head", torch::nn::Linear(8, 11));
  }
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& mask) {
    return head(embed(tokens) * mask.unsqueeze(-1).to(at::kFloat));
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(TinyLm);

}  // namespace

TEST_CASE(
    "PadSequences: padded to the batch's longest, with mask and lengths, same with any workers") {
  using Padded = data::Padded<TokenSample>;
  const data::PadSequences pad{.padding_values = {0, -100}};
  auto load = [&](int64_t workers) {
    data::Loader loader(Sentences{}, data::RandomSampler({.size = 50, .seed = 3}),
                        {.batch_size = 8, .workers = workers}, pad);
    static_assert(std::is_same_v<decltype(loader)::BatchType, Padded>);
    std::vector<Padded> out;
    for (const auto& b : loader) out.push_back(b);
    return out;
  };
  const auto serial = load(0);
  REQUIRE(serial.size() == 7);  // 50 / 8, the last one short
  const auto order = data::RandomSampler({.size = 50, .seed = 3}).indices(0);
  for (size_t k = 0; k < serial.size(); ++k) {
    const auto& b = serial[k];
    const int64_t n = b.lengths.size(0);
    CHECK(n == (k + 1 < serial.size() ? 8 : 2));
    CHECK(b.batch.tokens.size(1) == b.lengths.max().item<int64_t>());
    CHECK(b.mask.sizes() == b.batch.tokens.sizes());
    for (int64_t i = 0; i < n; ++i) {
      const auto sample = Sentences{}.get(order[int64_t(k) * 8 + i].item<int64_t>());
      const int64_t len = sample.tokens.size(0);
      CHECK(b.lengths[i].item<int64_t>() == len);
      CHECK(b.batch.tokens[i].narrow(0, 0, len).equal(sample.tokens));
      CHECK(b.batch.targets[i].narrow(0, 0, len).equal(sample.targets));
      CHECK(b.mask[i].sum().item<int64_t>() == len);
      const auto rest = b.batch.tokens.size(1) - len;
      CHECK(b.batch.tokens[i].narrow(0, len, rest).eq(0).all().item<bool>());
      CHECK(b.batch.targets[i].narrow(0, len, rest).eq(-100).all().item<bool>());
    }
  }
  for (int64_t workers : {1, 8}) {
    const auto parallel = load(workers);
    REQUIRE(parallel.size() == serial.size());
    for (size_t k = 0; k < serial.size(); ++k) {
      CHECK(data::tensors_of(parallel[k]).size() == 4);
      for (size_t t = 0; t < 4; ++t) {
        CHECK(data::tensors_of(parallel[k])[t].equal(data::tensors_of(serial[k])[t]));
      }
    }
  }

  SUBCASE("a fixed length: the same shapes every batch, the same real positions") {
    auto fixed = pad;
    fixed.length = 10;
    data::Loader loader(Sentences{}, data::RandomSampler({.size = 50, .seed = 3}),
                        {.batch_size = 8}, fixed);
    size_t k = 0;
    for (const auto& b : loader) {
      const auto& longest = serial[k++];
      const int64_t T = longest.batch.tokens.size(1);
      CHECK(b.batch.tokens.size(1) == 10);
      CHECK(b.mask.sizes() == b.batch.tokens.sizes());
      CHECK(b.lengths.equal(longest.lengths));
      CHECK(b.batch.tokens.narrow(1, 0, T).equal(longest.batch.tokens));
      CHECK(b.batch.targets.narrow(1, 0, T).equal(longest.batch.targets));
      CHECK(b.mask.narrow(1, 0, T).equal(longest.mask));
      CHECK(b.batch.targets.narrow(1, T, 10 - T).eq(-100).all().item<bool>());
      CHECK(!b.mask.narrow(1, T, 10 - T).any().item<bool>());
    }
    CHECK(k == serial.size());
    fixed.length = 5;  // Sentences' samples hold up to 7 tokens
    data::Loader too_short(Sentences{}, data::SequentialSampler(50), {.batch_size = 8}, fixed);
    CHECK_THROWS_WITH_AS(
        [&] {
          for (const auto& b : too_short) (void)b;
        }(),
        doctest::Contains("PadSequences.length is 5: sample 5 has 6 positions"), Error);
  }

  SUBCASE("a padded language model trains through the Trainer, ignoring the padding") {
    struct NextToken {
      StepOutput step(TinyLm& model, const Padded& b) const {
        const auto logits = model(b.batch.tokens, b.mask);
        return {torch::nn::functional::cross_entropy(logits.flatten(0, 1),
                                                     b.batch.targets.flatten())};  // -100 ignored
      }
    };
    torch::manual_seed(1);
    Trainer<optim::AdamW> trainer(TinyLm(), {.optim = {.lr = 5e-2}});
    data::Loader loader(Sentences{}, data::RandomSampler({.size = 50, .seed = 3}),
                        {.batch_size = 8, .workers = 2}, pad);
    const auto before = trainer.evaluate(NextToken{}, loader).at("loss");
    const auto result = trainer.fit(NextToken{}, loader, {.epochs = 5});
    CHECK(result.steps == 35);
    CHECK(trainer.evaluate(NextToken{}, loader).at("loss") < 0.5 * before);
  }
}

TEST_CASE("Stack collates samples of any structure, and names a sample of the wrong shape") {
  struct Pairs {
    int64_t size() const { return 10; }
    std::pair<at::Tensor, at::Tensor> get(int64_t i) const {
      return {at::full({3}, double(i)), at::full({2, 2}, double(-i))};
    }
  };
  data::Loader loader(Pairs{}, data::SequentialSampler(10), {.batch_size = 4});
  std::vector<std::pair<at::Tensor, at::Tensor>> batches;
  for (const auto& b : loader) batches.push_back(b);
  REQUIRE(batches.size() == 3);
  CHECK(batches[0].first.sizes() == c10::IntArrayRef{4, 3});
  CHECK(batches[2].second.sizes() == c10::IntArrayRef{2, 2, 2});
  CHECK(batches[1].first.select(1, 0).equal(at::arange(4, 8, at::kFloat)));

  struct Ragged {
    int64_t size() const { return 4; }
    TokenSample get(int64_t i) const { return Sentences{}.get(i); }
  };
  data::Loader ragged(Ragged{}, data::SequentialSampler(4), {.batch_size = 4});
  CHECK_THROWS_WITH_AS(ragged.build(0),
                       doctest::Contains("dataset sample 1 has tensor 0 of shape [2]"), Error);
}
