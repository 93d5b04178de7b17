#pragma once
// Grid search: every combination of the listed values, each run exactly
// once however many workers share the study. The study enqueues the whole
// grid in one transaction (FiniteSampler) and workers claim its trials from
// the storage, so no combination runs twice and none is skipped; the study
// ends when the grid is used up.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/error.hpp"
#include "trainkit/tune/detail/rng.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/space.hpp"

namespace trainkit::tune::sampler {

/// Parameter name -> the values to try.
using GridSpace = std::map<std::string, std::vector<nlohmann::json>>;

struct GridOptions {
  /// The order trials run in: nullopt the product order (last name fastest),
  /// else shuffled by this seed (early trials spread over the grid).
  std::optional<uint64_t> seed{};
};

class Grid {
 public:
  static constexpr bool multi_objective = true;  ///< it never reads the trials' values
  explicit Grid(GridSpace space, GridOptions o = {}) : space_(std::move(space)), options_(o) {
    trainkit::detail::require_option(!space_.empty(), "grid", std::string("{}"),
                                     "at least one parameter with values");
    for (const auto& [name, values] : space_) {
      trainkit::detail::require_option(!values.empty(), "grid[\"" + name + "\"]", std::string("[]"),
                                       "at least one value");
      for (const auto& v : values) {
        trainkit::detail::require_option(tune::detail::storable(v) && !v.is_null(),
                                         "grid[\"" + name + "\"]", tune::detail::shown(v),
                                         "strings in UTF-8, finite numbers or booleans");
      }
    }
  }

  /// Every combination, as name -> value objects, in run order.
  std::vector<nlohmann::json> grid() const {
    std::vector<nlohmann::json> points{nlohmann::json::object()};
    for (const auto& [name, values] : space_) {
      std::vector<nlohmann::json> next;
      for (const auto& p : points) {
        for (const auto& v : values) {
          auto q = p;
          q[name] = v;
          next.push_back(std::move(q));
        }
      }
      points = std::move(next);
    }
    if (options_.seed) {  // Fisher-Yates with our portable generator
      detail::Rng rng(*options_.seed);
      for (auto k = static_cast<int64_t>(points.size()) - 1; k > 0; --k) {
        std::swap(points[static_cast<size_t>(k)], points[static_cast<size_t>(rng.index(k + 1))]);
      }
    }
    return points;
  }
  /// Marks the study as holding this grid: the same grid is enqueued once.
  std::string grid_key() const {
    return "grid:" + std::to_string(detail::stable_hash(nlohmann::json(space_).dump()));
  }

  /// Only reached for a name the grid lacks: the objective asked for more.
  [[noreturn]] double sample(const StudyView&, const FrozenTrial&, const std::string& name,
                             const Distribution&) const {
    std::string names;
    for (const auto& [n, v] : space_) names += (names.empty() ? "" : ", ") + n;
    throw Error("trainkit: the grid has no values for parameter \"" + name +
                "\"; it lists: " + names);
  }

  const GridSpace& space() const { return space_; }

 private:
  GridSpace space_;
  GridOptions options_;
};

}  // namespace trainkit::tune::sampler
