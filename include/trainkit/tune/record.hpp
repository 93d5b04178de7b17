#pragma once
// What a study remembers of each trial (FrozenTrial), and the read-only view
// of a study's history that samplers and pruners decide from.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/tune/space.hpp"
#include "trainkit/tune/system_attrs.hpp"

namespace trainkit::tune {

enum class Direction { Minimize, Maximize };

/// Waiting: enqueued, not started. Running: a worker holds it. The other
/// three are final.
enum class TrialState { Waiting, Running, Complete, Pruned, Fail };
inline constexpr TrialState trial_states[] = {TrialState::Waiting, TrialState::Running,
                                              TrialState::Complete, TrialState::Pruned,
                                              TrialState::Fail};

inline const char* to_string(TrialState s) {
  constexpr const char* names[] = {"waiting", "running", "complete", "pruned", "fail"};
  return names[static_cast<int>(s)];
}

inline TrialState trial_state_from_string(const std::string& s) {
  for (const auto state : trial_states) {
    if (s == to_string(state)) return state;
  }
  throw Error("trainkit: stored trial state \"" + s +
              "\" is unknown; accepted: waiting, running, complete, pruned, fail");
}

inline const char* to_string(Direction d) {
  return d == Direction::Minimize ? "minimize" : "maximize";
}

/// "minimize" or "minimize, maximize".
inline std::string to_string(const std::vector<Direction>& directions) {
  std::string out;
  for (const auto d : directions) out += (out.empty() ? "" : ", ") + std::string(to_string(d));
  return out;
}

inline Direction direction_from_string(const std::string& s) {
  trainkit::detail::require_option(s == "minimize" || s == "maximize", "direction", s,
                                   "\"minimize\" or \"maximize\"");
  return s == "minimize" ? Direction::Minimize : Direction::Maximize;
}

struct FrozenTrial {
  int64_t id = -1;      ///< the storage's key
  int64_t number = -1;  ///< 0, 1, ... within its study, in creation order (enqueued: when enqueued)
  TrialState state = TrialState::Running;
  std::optional<double> value;  ///< a study of one objective: its value once complete
  /// A study of several objectives: one value per objective once complete
  /// (`value` stays unset); empty otherwise.
  std::vector<double> values{};
  std::map<std::string, Param> params;
  std::map<int64_t, double> intermediate;  ///< step -> reported value
  nlohmann::json user_attrs = nlohmann::json::object();
  /// trainkit's own notes (their keys: system_attrs.hpp) and any other a
  /// study file holds.
  nlohmann::json system_attrs = nlohmann::json::object();
  double started_at = 0;   ///< seconds since the epoch (0 while waiting)
  double finished_at = 0;  ///< 0 until final

  bool finished() const {
    return state == TrialState::Complete || state == TrialState::Pruned ||
           state == TrialState::Fail;
  }
  /// Failed by its objective (a throw or a NaN) at the parameters it drew:
  /// not by a lost worker or the study's own error, which say nothing of them.
  bool failed_in_objective() const {
    return state == TrialState::Fail && !system_attrs.contains(system_attr::kLostWorker) &&
           !system_attrs.contains(system_attr::kStudyError);
  }
  /// Every objective's value: {value} or `values` (empty when it has none).
  std::vector<double> objective_values() const {
    return value ? std::vector<double>{*value} : values;
  }
  /// Its constraint values (Trial::set_constraints; Optuna's system attr
  /// "constraints"), if it has any.
  std::optional<std::vector<double>> constraints() const {
    if (!has_constraints()) return std::nullopt;
    std::vector<double> out;
    for (const auto& c : system_attrs.at(system_attr::kConstraints))
      out.push_back(c.is_number() ? c.get<double>() : NAN);
    return out;
  }
  /// Whether constraints() has values, without reading them.
  bool has_constraints() const {
    const auto it = system_attrs.find(system_attr::kConstraints);
    return it != system_attrs.end() && it->is_array();
  }
  /// Every constraint holds (is <= 0); true for a trial without constraints.
  bool feasible() const {
    const auto c = constraints();
    return !c || std::all_of(c->begin(), c->end(), [](double v) { return v <= 0; });
  }
  std::optional<int64_t> last_step() const {
    if (intermediate.empty()) return std::nullopt;
    return intermediate.rbegin()->first;
  }
  /// Every parameter as the objective saw it: name -> value.
  nlohmann::json param_values() const {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [name, p] : params) j[name] = p.value();
    return j;
  }
  /// The value of parameter `name` as the objective saw it.
  template <class T>
  T param(const std::string& name) const {
    const auto it = params.find(name);
    if (it == params.end())
      throw Error("trainkit: trial " + std::to_string(number) + " has no parameter \"" + name +
                  "\"");
    const auto v = it->second.value();
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw Error("trainkit: parameter \"" + name + "\" of trial " + std::to_string(number) +
                  " is " + v.dump() + ", which param<T> cannot read as the T asked for");
    }
  }
};

/// A study's direction and its trials, as one snapshot.
struct StudyView {
  Direction direction = Direction::Minimize;  ///< with several objectives: the first's
  std::span<const FrozenTrial> trials;
  /// A study of several objectives: their directions; empty for one.
  std::vector<Direction> objectives{};

  /// The view of a study with these directions (one per objective).
  static StudyView of(const std::vector<Direction>& directions,
                      std::span<const FrozenTrial> trials) {
    trainkit::detail::require_option(!directions.empty(), "directions", std::string("none"),
                                     "one direction per objective");
    return {directions[0], trials, directions.size() > 1 ? directions : std::vector<Direction>{}};
  }
  /// One direction per objective.
  std::vector<Direction> directions() const {
    return objectives.empty() ? std::vector{direction} : objectives;
  }

  std::vector<const FrozenTrial*> with_state(TrialState s) const {
    std::vector<const FrozenTrial*> out;
    for (const auto& t : trials) {
      if (t.state == s) out.push_back(&t);
    }
    return out;
  }
  /// Whether `a` is a better objective value than `b`.
  bool better(double a, double b) const { return direction == Direction::Minimize ? a < b : a > b; }
  /// The best complete trial whose constraints hold (the first of equals);
  /// nullptr when none is.
  const FrozenTrial* best() const {
    const FrozenTrial* out = nullptr;
    for (const auto& t : trials) {
      if (t.state == TrialState::Complete && t.value && t.feasible() &&
          (!out || better(*t.value, *out->value)))
        out = &t;
    }
    return out;
  }
};

/// Whether trial `t` is one the search spaces below are made from: a
/// complete one, or with `include_pruned` a pruned one.
inline bool defines_space(const FrozenTrial& t, bool include_pruned) {
  return t.state == TrialState::Complete || (include_pruned && t.state == TrialState::Pruned);
}

/// The parameters every complete trial (and, with `include_pruned`, every
/// pruned one) has, with one distribution each: what a sampler can model
/// jointly (Optuna's IntersectionSearchSpace). A parameter whose range
/// changed between trials is left out.
inline SearchSpace intersection_search_space(const StudyView& view, bool include_pruned = false) {
  SearchSpace space;
  bool first = true;
  for (const auto& t : view.trials) {
    if (!defines_space(t, include_pruned)) continue;
    if (first) {
      for (const auto& [name, p] : t.params) space.emplace(name, p.distribution);
      first = false;
      continue;
    }
    std::erase_if(space, [&](const auto& entry) {
      const auto p = t.params.find(entry.first);
      return p == t.params.end() || !(p->second.distribution == entry.second);
    });
  }
  return space;
}

/// The parameters of complete (and, with `include_pruned`, pruned) trials
/// split into groups that appear together: every such trial has each group
/// whole or not at all (Optuna's group-decomposed search space, which
/// multivariate TPE with `group` models one group at a time). In a
/// conditional space: the branch choice, and each branch's own parameters.
/// A parameter keeps the distribution of the first trial that has it.
inline std::vector<SearchSpace> group_decomposed_search_space(const StudyView& view,
                                                              bool include_pruned = false) {
  std::vector<SearchSpace> groups;
  for (const auto& t : view.trials) {
    if (!defines_space(t, include_pruned)) continue;
    SearchSpace rest;  // this trial's parameters no group has yet
    for (const auto& [name, p] : t.params) rest.emplace(name, p.distribution);
    std::vector<SearchSpace> next;
    for (const auto& g : groups) {  // each group splits into what this trial has and has not
      SearchSpace in, out;
      for (const auto& [name, dist] : g) (rest.erase(name) ? in : out).emplace(name, dist);
      for (auto* part : {&in, &out}) {
        if (!part->empty()) next.push_back(std::move(*part));
      }
    }
    if (!rest.empty()) next.push_back(std::move(rest));
    groups = std::move(next);
  }
  return groups;
}

}  // namespace trainkit::tune
