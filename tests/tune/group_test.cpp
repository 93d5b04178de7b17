// Conditional spaces: the group-decomposed search space against Optuna 3.1's
// (tests/reference/make_tune_groups.py wrote tune_groups.json), and TPE's
// `group`, which models each group jointly (gp_test.cpp has the GP's).
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <trainkit/tune/samplers/tpe.hpp>

using namespace trainkit::tune;
using nlohmann::json;

namespace {

FrozenTrial trial_with(int64_t number, TrialState state, const std::vector<std::string>& names) {
  FrozenTrial t;
  t.id = t.number = number;
  t.state = state;
  for (const auto& name : names)
    t.params[name] = Param{FloatDistribution{0, 1, false, std::nullopt}, 0.5};
  if (state == TrialState::Complete) t.value = 1.0;
  if (state == TrialState::Pruned) t.intermediate[0] = 1.0;
  return t;
}

std::vector<std::vector<std::string>> names_of(const std::vector<SearchSpace>& groups) {
  std::vector<std::vector<std::string>> out;
  for (const auto& g : groups) {
    out.emplace_back();
    for (const auto& [name, dist] : g) out.back().push_back(name);  // sorted, as the reference
  }
  return out;
}

}  // namespace

TEST_CASE("groups of parameters that appear together are Optuna's") {
  std::ifstream in(TRAINKIT_REFERENCE_DIR "/tune_groups.json");
  REQUIRE_MESSAGE(in.good(), "missing tests/reference/tune_groups.json");
  const auto reference = json::parse(in);
  int cases = 0;
  for (const auto& c : reference.at("cases")) {
    std::vector<FrozenTrial> trials;
    for (const auto& t : c.at("trials")) {
      std::vector<std::string> names;
      for (const auto& n : t.at(1)) names.push_back(n.get<std::string>());
      trials.push_back(trial_with(static_cast<int64_t>(trials.size()),
                                  trial_state_from_string(t.at(0).get<std::string>()), names));
    }
    const StudyView view{Direction::Minimize, trials};
    INFO("case " << cases << ": " << c.at("trials").dump());
    CHECK(json(names_of(group_decomposed_search_space(view))) == c.at("groups"));
    CHECK(json(names_of(group_decomposed_search_space(view, true))) == c.at("groups_with_pruned"));
    ++cases;
  }
  CHECK(cases == 5);
}

namespace {

const FloatDistribution unit{0, 1, false, std::nullopt};

// One branch whose two parameters matter together: good where u and v are
// on the same side of 0.5, bad where not, so each one's marginal is the
// same among good and bad trials. Another branch with a parameter of its
// own, every trial of it at `b_value`; then the trial being sampled.
std::vector<FrozenTrial> quadrant_history(double b_value) {
  const CategoricalDistribution branch{{"a", "b"}};
  std::vector<FrozenTrial> trials;
  int64_t i = 0;  // branch a's trials so far: they cycle through the four quadrants
  for (int64_t k = 0; k < 64; ++k) {
    FrozenTrial t;
    t.id = t.number = k;
    t.state = TrialState::Complete;
    const bool in_a = k % 4 != 3;
    t.params["branch"] = Param{branch, in_a ? 0.0 : 1.0};
    if (in_a) {
      const double jitter = 0.01 * static_cast<double>(k % 7);
      const double u = (i / 2) % 2 ? 0.75 : 0.25, v = i % 2 ? 0.75 : 0.25;
      ++i;
      t.params["u"] = Param{unit, u + jitter};
      t.params["v"] = Param{unit, v - jitter};
      t.value = (u == v ? 0.0 : 1.0) + 0.001 * static_cast<double>(k);
    } else {
      t.params["w"] = Param{unit, 0.5};
      t.value = b_value;
    }
    trials.push_back(t);
  }
  FrozenTrial me;
  me.id = me.number = 64;
  trials.push_back(me);
  return trials;
}

// Of 40 seeds, the joint draws of (u, v) in a good quadrant.
int joint_draws_in_a_good_quadrant(const StudyView& view, const FrozenTrial& me) {
  int joint = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    sampler::TpeOptions g;
    g.seed = seed;
    g.multivariate = g.group = true;
    const auto r = sampler::Tpe(g).sample_relative(view, me);
    joint += (r.at("u") < 0.5) == (r.at("v") < 0.5);
  }
  return joint;
}

}  // namespace

TEST_CASE("TPE's group models a branch's own parameters, jointly") {
  const auto trials = quadrant_history(2.0);  // branch b: the worst
  const FrozenTrial& me = trials.back();
  const StudyView view{Direction::Minimize, trials};

  sampler::TpeOptions o;
  o.multivariate = true;
  o.group = true;
  const auto grouped = sampler::Tpe(o).sample_relative(view, me);
  std::set<std::string> keys;
  for (const auto& [name, x] : grouped) keys.insert(name);
  CHECK(keys == std::set<std::string>{"branch", "u", "v", "w"});  // every group
  o.group = false;
  CHECK(sampler::Tpe(o).sample_relative(view, me).size() == 1);  // the branch alone

  // Over 40 draws: with group, (u, v) come from one joint model of the good
  // trials; without, each from its own marginal, alike for good and bad.
  const int joint = joint_draws_in_a_good_quadrant(view, me);
  int marginal = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    sampler::TpeOptions m;
    m.seed = seed;
    m.multivariate = true;
    const sampler::Tpe independent(m);
    marginal += (independent.sample(view, me, "u", unit) < 0.5) ==
                (independent.sample(view, me, "v", unit) < 0.5);
  }
  MESSAGE("draws in a good quadrant, of 40: " << joint << " modelled jointly, " << marginal
                                              << " one parameter at a time");
  CHECK(joint >= 34);
  CHECK(joint > marginal + 8);

  // As Optuna: "below" is the best trials of the whole study, then those
  // that have the group. With branch b the best, it holds none of branch
  // a's, whose model is then the prior: (u, v) no longer favour a good
  // quadrant (ranking branch a's trials alone would keep 40 of 40).
  const auto b_best = quadrant_history(-1.0);
  const int from_prior =
      joint_draws_in_a_good_quadrant(StudyView{Direction::Minimize, b_best}, b_best.back());
  MESSAGE("with branch b the best: " << from_prior << " of 40 in a good quadrant");
  CHECK(from_prior <= 30);
}

TEST_CASE("TPE's group needs multivariate") {
  sampler::TpeOptions o;
  o.group = true;
  std::string error;
  try {
    sampler::Tpe{o};
  } catch (const trainkit::Error& e) {
    error = e.what();
  }
  CHECK(error.find("TpeOptions.group") != std::string::npos);
  CHECK(error.find("unless multivariate is true") != std::string::npos);
}
