// The simple samplers: random, grid and Halton. Reproducible from a seed,
// in bounds, and the grid runs each combination exactly once.
#include <doctest/doctest.h>

#include <set>

#include <trainkit/tune/pruners/none.hpp>
#include <trainkit/tune/samplers/grid.hpp>
#include <trainkit/tune/samplers/halton.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/study.hpp>

using namespace trainkit::tune;
using nlohmann::json;

namespace {

// A space with every kind of parameter, and a conditional one.
double mixed_objective(Trial& t) {
  const double lr = t.suggest_float("lr", 1e-5, 1e-1, {.log = true});
  const double drop = t.suggest_float("dropout", 0.0, 0.5, {.step = 0.1});
  const int64_t layers = t.suggest_int("layers", 1, 8);
  const int64_t batch = t.suggest_int("batch", 16, 512, {.log = true});
  const int64_t width = t.suggest_int("width", 32, 256, {.step = 32});
  const auto opt = t.suggest_categorical("optimizer", {"adam", "sgd", "lamb"});
  double momentum = 0;
  if (opt == "sgd") momentum = t.suggest_float("momentum", 0.5, 0.99);
  return std::log(lr) + drop + static_cast<double>(layers + batch + width) * 1e-3 + momentum;
}

template <class S>
std::vector<FrozenTrial> run(S sampler, int64_t n) {
  Study study(std::make_shared<InMemoryStorage>(), {}, std::move(sampler), pruner::None{});
  study.optimize(mixed_objective, {.n_trials = n, .log = nullptr});
  return study.trials();
}

json params_of(const std::vector<FrozenTrial>& trials) {
  json out = json::array();
  for (const auto& t : trials) out.push_back(t.param_values());
  return out;
}

template <class S>
void check_reproducible_and_in_bounds(S same, S same_again, S other) {
  const auto a = run(same, 40), b = run(same_again, 40), c = run(other, 40);
  CHECK(params_of(a) == params_of(b));
  CHECK(params_of(a) != params_of(c));
  for (const auto& t : a) {
    for (const auto& [name, p] : t.params) {
      INFO(name, " = ", p.internal);
      CHECK(contains(p.distribution, p.internal));
    }
    CHECK(t.params.contains("momentum") == (t.params.at("optimizer").value() == "sgd"));
  }
}

}  // namespace

TEST_CASE("random and Halton samplers replay from their seed and stay in bounds") {
  check_reproducible_and_in_bounds(sampler::Random({.seed = 1}), sampler::Random({.seed = 1}),
                                   sampler::Random({.seed = 2}));
  check_reproducible_and_in_bounds(sampler::Halton({.seed = 1}), sampler::Halton({.seed = 1}),
                                   sampler::Halton({.seed = 2}));
}

TEST_CASE("random draws are uniform on the parameter's scale") {
  sampler::Random random({.seed = 3});
  const StudyView none{};
  const Distribution log_float = FloatDistribution{1e-4, 1, true, std::nullopt};
  const Distribution dice = IntDistribution{1, 6, 1, false};
  int below_1e2 = 0;
  std::map<int64_t, int> faces;
  const int n = 20000;
  for (int k = 0; k < n; ++k) {
    FrozenTrial t;
    t.number = k;
    below_1e2 += random.sample(none, t, "lr", log_float) < 1e-2;
    ++faces[static_cast<int64_t>(random.sample(none, t, "dice", dice))];
  }
  CHECK(below_1e2 / double(n) == doctest::Approx(0.5).epsilon(0.03));  // half the decades
  REQUIRE(faces.size() == 6);
  for (const auto& [face, count] : faces)
    CHECK(count / double(n) == doctest::Approx(1 / 6.0).epsilon(0.06));
}

TEST_CASE("Halton points spread more evenly than random ones") {
  // The largest empty gap among 32 points in [0, 1): quasi-random is tighter.
  auto max_gap = [](auto sampler) {
    Study study(std::make_shared<InMemoryStorage>(), {}, std::move(sampler), pruner::None{});
    study.optimize([](Trial& t) { return t.suggest_float("x", 0, 1); },
                   {.n_trials = 33, .log = nullptr});
    std::vector<double> xs;
    for (const auto& t : study.trials()) {
      if (t.number > 0) xs.push_back(t.params.at("x").internal);  // trial 0 is random in both
    }
    std::sort(xs.begin(), xs.end());
    double gap = xs.front() + 1 - xs.back();
    for (size_t k = 1; k < xs.size(); ++k) gap = std::max(gap, xs[k] - xs[k - 1]);
    return gap;
  };
  CHECK(max_gap(sampler::Halton({.seed = 5})) < 2.5 / 32);
  CHECK(max_gap(sampler::Random({.seed = 5})) > 2.5 / 32);
  CHECK(trainkit::tune::detail::radical_inverse(6, 2) == 0.375);  // 110 -> 0.011
}

TEST_CASE("a grid runs each combination exactly once, even with several threads") {
  const sampler::GridSpace space = {
      {"lr", {1e-3, 1e-2, 1e-1}}, {"opt", {"adam", "sgd"}}, {"wd", {0, 0.1}}};
  for (int threads : {1, 3}) {
    Study study(std::make_shared<InMemoryStorage>(), {}, sampler::Grid(space, {.seed = 4}),
                pruner::None{});
    study.optimize(
        [](Trial& t) {
          const double lr = t.suggest_categorical("lr", std::vector<double>{1e-3, 1e-2, 1e-1});
          const auto opt = t.suggest_categorical("opt", {"adam", "sgd"});
          const double wd = t.suggest_float("wd", 0, 0.1);
          return lr + wd + (opt == "sgd");
        },
        {.n_threads = threads, .log = nullptr});
    std::set<std::string> seen;
    for (const auto& t : study.trials()) {
      CHECK(t.state == TrialState::Complete);
      seen.insert(params_of({t}).dump());
    }
    CHECK(study.trials().size() == 12);
    CHECK(seen.size() == 12);
    // Running again adds nothing: the grid is used up.
    study.optimize([](Trial&) { return 0.0; }, {.log = nullptr});
    CHECK(study.trials().size() == 12);
  }
}

TEST_CASE("a grid's order is the product order, or shuffled by its seed") {
  const sampler::GridSpace space = {{"a", {1, 2}}, {"b", {"x", "y"}}};
  CHECK(sampler::Grid(space).grid() == std::vector<json>{{{"a", 1}, {"b", "x"}},
                                                         {{"a", 1}, {"b", "y"}},
                                                         {{"a", 2}, {"b", "x"}},
                                                         {{"a", 2}, {"b", "y"}}});
  CHECK(sampler::Grid(space, {.seed = 1}).grid() == sampler::Grid(space, {.seed = 1}).grid());
  CHECK_THROWS_WITH_AS(sampler::Grid(sampler::GridSpace{{"a", {}}}),
                       doctest::Contains("`grid[\"a\"]`"), trainkit::Error);
  Study study(std::make_shared<InMemoryStorage>(), {}, sampler::Grid(space), pruner::None{});
  CHECK_THROWS_WITH_AS(
      study.optimize([](Trial& t) { return t.suggest_float("c", 0, 1); }, {.log = nullptr}),
      doctest::Contains("the grid has no values for parameter \"c\"; it lists: a, b"),
      trainkit::Error);
}
