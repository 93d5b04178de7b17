// TPE with several objectives and with constraints: the below/above split
// and the below kernels' weights against Optuna 3.1
// (tests/reference/make_tune_motpe.py wrote tune_motpe.json), then the
// sampler in studies: it covers more of ZDT1's front than random search,
// keeps to the feasible region, and ranks running trials last.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/samplers/tpe.hpp>
#include <trainkit/tune/study.hpp>
#include <vector>

#include "zdt1.hpp"

using namespace trainkit::tune;
using nlohmann::json;

namespace {

const auto& two = zdt1::directions;
constexpr double inf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("the split and the below weights are Optuna 3.1's, constraints and several objectives") {
  std::ifstream in(TRAINKIT_REFERENCE_DIR "/tune_motpe.json");
  REQUIRE_MESSAGE(in.good(), "missing tests/reference/tune_motpe.json");
  const auto reference = json::parse(in);
  int weighed = 0;
  for (const auto& c : reference.at("cases")) {
    const auto values = c.at("values").get<std::vector<Point>>();
    const auto violations = c.value("violations", std::vector<double>{});
    CAPTURE(values.size());
    CAPTURE(values.at(0).size());
    CAPTURE(violations.size());
    CAPTURE(c.at("n_below").get<int64_t>());
    std::vector<detail::TpeScore> scores;
    for (const auto& v : values) scores.push_back({-inf, v[0], v.size() > 1 ? v : Point{}});
    const auto [below, above] = detail::tpe_split(scores, c.at("n_below"), violations);
    CHECK(json(below) == c.at("below"));
    CHECK(json(above) == c.at("above"));
    if (!c.contains("weights")) continue;
    const auto expected = c.at("weights").get<std::vector<double>>();
    const auto weights = detail::tpe_below_weights(scores, below, violations);
    REQUIRE(weights.size() == expected.size());
    for (size_t k = 0; k < weights.size(); ++k)
      CHECK(weights[k] == doctest::Approx(expected[k]).epsilon(1e-9));
    ++weighed;
  }
  CHECK(weighed >= 40);
}

TEST_CASE("several objectives: running and failed trials are above, and pruned ones left out") {
  // two complete trials, one running, one pruned
  std::vector<FrozenTrial> trials(4);
  for (int64_t k = 0; k < 4; ++k) {
    trials[size_t(k)].id = trials[size_t(k)].number = k;
    trials[size_t(k)].params["x"] = {FloatDistribution{0, 1, false, std::nullopt}, 0.1 * double(k)};
  }
  trials[0].state = trials[1].state = TrialState::Complete;
  trials[0].values = {1, 2};
  trials[1].values = {2, 1};
  trials[2].state = TrialState::Running;
  trials[3].state = TrialState::Pruned;
  trials[3].intermediate[0] = 0.5;
  const auto obs = detail::tpe_observations(StudyView::of(two, trials), {"x"}, true);
  REQUIRE(obs.numbers == std::vector<int64_t>{0, 1, 2});
  CHECK(obs.finished() == 2);
  const auto [below, above] = detail::tpe_split(obs.scores, 3);
  CHECK(below == std::vector<size_t>{0, 1});
  CHECK(above == std::vector<size_t>{2});
}

TEST_CASE("multi-objective TPE covers more of ZDT1's front than random search") {
  double tpe = 0, random = 0;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    tpe += zdt1::hypervolume_of(zdt1::search(sampler::Tpe({.seed = seed}), 80));
    random += zdt1::hypervolume_of(zdt1::search(sampler::Random({.seed = seed}), 80));
  }
  MESSAGE("hypervolume after 80 trials, mean of 4 seeds: TPE " << tpe / 4 << ", random "
                                                               << random / 4);
  CHECK(tpe > random * 1.05);
}

TEST_CASE("multi-objective TPE keeps to the feasible region once it has seen it") {
  // feasible: x0 <= 0.3, so random search is feasible 30% of the time
  const auto feasible_after_startup = [](const std::vector<FrozenTrial>& trials) {
    int n = 0;
    for (size_t k = 10; k < trials.size(); ++k) n += trials[k].feasible();
    return n;
  };
  int tpe = 0, random = 0;
  for (uint64_t seed = 0; seed < 3; ++seed) {
    const auto t = zdt1::search(sampler::Tpe({.seed = seed}), 50, true);
    tpe += feasible_after_startup(t);
    random += feasible_after_startup(zdt1::search(sampler::Random({.seed = seed}), 50, true));
    for (const auto* best : best_trials(StudyView::of(two, t))) CHECK(best->feasible());
  }
  MESSAGE("feasible among trials 10-49 of 3 seeds: TPE " << tpe << ", random " << random);
  CHECK(tpe > 2 * random);
}
