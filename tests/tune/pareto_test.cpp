// Several objectives: pareto.hpp's domination, non-dominated ranks (with and
// without constraints), Pareto front, crowding distance and hypervolume
// against Optuna 3.1's on random point sets, ties included
// (tests/reference/make_tune_pareto.py wrote tune_pareto.json), and the
// hypervolume against volumes known in closed form.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include <trainkit/tune/pareto.hpp>

using namespace trainkit::tune;
using nlohmann::json;

TEST_CASE("Pareto ranks, fronts, crowding distances and hypervolumes are Optuna's") {
  std::ifstream in(TRAINKIT_REFERENCE_DIR "/tune_pareto.json");
  REQUIRE_MESSAGE(in.good(), "missing tests/reference/tune_pareto.json");
  const auto reference = json::parse(in);
  int cases = 0, constrained = 0, crowded = 0, tied = 0;
  for (const auto& c : reference.at("cases")) {
    std::vector<Direction> directions;
    for (const auto& d : c.at("directions")) directions.push_back(direction_from_string(d));
    std::vector<Point> points;
    for (const auto& v : c.at("values")) {
      points.push_back(minimized(v.get<std::vector<double>>(), directions));
    }
    INFO("case " << cases << ": " << c.at("directions").dump() << ", " << points.size()
                 << " points");
    std::vector<double> violations;
    if (c.contains("constraints")) {
      for (const auto& k : c.at("constraints")) {
        violations.push_back(violation(k.get<std::vector<double>>()));
      }
      ++constrained;
    }
    CHECK(json(nondominated_ranks(points, violations)) == c.at("ranks"));
    CHECK(json(pareto_front(points)) == c.at("front"));
    if (c.contains("crowding")) {
      // Optuna's distances are the same sums in another order: rounding apart
      const auto ours = crowding_distance(points);
      const auto& theirs = c.at("crowding");
      REQUIRE(ours.size() == theirs.size());
      for (size_t i = 0; i < ours.size(); ++i) {
        if (theirs[i].is_string()) {  // "inf": JSON has no infinity
          CHECK(ours[i] == std::numeric_limits<double>::infinity());
        } else {
          CHECK(ours[i] == doctest::Approx(theirs[i].get<double>()).epsilon(1e-12));
        }
      }
      ++crowded;
    } else {
      ++tied;
    }
    const double hv = hypervolume(points, c.at("reference").get<Point>());
    CHECK(hv == doctest::Approx(c.at("hypervolume").get<double>()).epsilon(1e-12));
    ++cases;
  }
  CHECK(cases == 64);
  CHECK(constrained == 32);
  CHECK(crowded == 32);
  CHECK(tied == 32);
}

TEST_CASE("the hypervolume of known sets") {
  // one point: its box; two crossing boxes: their union
  CHECK(hypervolume({{1, 2}}, {3, 3}) == 2.0);
  CHECK(hypervolume({{0, 2}, {2, 0}}, {3, 3}) == 3 + 3 - 1);
  CHECK(hypervolume({{0, 0, 0}}, {1, 2, 3}) == 6.0);
  // a dominated point and one on or past the reference add nothing
  CHECK(hypervolume({{0, 2}, {2, 0}, {2, 2}, {3, 0}, {-1, 3}}, {3, 3}) == 5.0);
  CHECK(hypervolume({}, {1, 1}) == 0.0);
  // the staircase under the front x + y = 1 sampled at n points, in closed
  // form: the triangle's area plus n small triangles
  for (const int n : {2, 5, 50}) {
    std::vector<Point> front;
    for (int i = 0; i < n; ++i) front.push_back({double(i) / (n - 1), 1 - double(i) / (n - 1)});
    const double step = 1.0 / (n - 1);
    CHECK(hypervolume(front, {1, 1}) == doctest::Approx(0.5 - 0.5 * step).epsilon(1e-12));
  }
  // in three dimensions, each point's box minus the overlaps, by inclusion-exclusion
  const Point r{1, 1, 1};
  CHECK(hypervolume({{0, 0.5, 0.5}, {0.5, 0, 0.5}, {0.5, 0.5, 0}}, r) ==
        doctest::Approx(3 * 0.25 - 3 * 0.125 + 0.125));
  // agrees with a Monte Carlo estimate on a random 3-d front
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Point> points;
  for (int i = 0; i < 30; ++i) points.push_back({u(rng), u(rng), u(rng)});
  int inside = 0;
  const int samples = 200000;
  for (int s = 0; s < samples; ++s) {
    const Point x{u(rng), u(rng), u(rng)};
    for (const auto& p : points) {
      if (p[0] <= x[0] && p[1] <= x[1] && p[2] <= x[2]) {
        ++inside;
        break;
      }
    }
  }
  CHECK(hypervolume(points, r) == doctest::Approx(double(inside) / samples).epsilon(0.01));
}

TEST_CASE("constrained domination: feasible first, then the smaller violation") {
  const Point good{0, 0}, bad{1, 1};
  CHECK(constrained_dominates(good, 0, bad, 0));
  CHECK_FALSE(constrained_dominates(bad, 0, good, 0));
  CHECK(constrained_dominates(bad, 0, good, 0.5));  // feasible beats infeasible
  CHECK(constrained_dominates(bad, 0.1, good, 0.5));
  CHECK_FALSE(constrained_dominates(good, 0.5, bad, 0.5));  // equal violations: neither
  CHECK(violation(std::vector<double>{-1, 0, 0.25, 2}) == 2.25);
  CHECK_THROWS_WITH_AS(violation(std::vector<double>{std::numeric_limits<double>::quiet_NaN()}),
                       doctest::Contains("constraint value is NaN"), trainkit::Error);
  CHECK(minimized(std::vector<double>{1, 2},
                  std::vector{Direction::Minimize, Direction::Maximize}) == Point{1, -2});
  CHECK_THROWS_WITH_AS(
      minimized(std::vector<double>{1}, std::vector{Direction::Minimize, Direction::Maximize}),
      doctest::Contains("one value per objective"), trainkit::Error);
}
