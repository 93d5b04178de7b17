#pragma once
// The study's trials as tables: write_trials_csv (one row per trial, a
// column per parameter, blank where a trial lacks one) and
// write_trials_json (the same with intermediate values, distributions and
// the best trial or Pareto front). Both are written atomically, and are the
// same bytes for the same trials.
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/error.hpp"
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/tune/pareto.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/report/common.hpp"
#include "trainkit/tune/system_attrs.hpp"

namespace trainkit::tune {

/// The CSV text of write_trials_csv; a study of several `objectives` has a
/// `values_<k>` column per objective.
inline std::string trials_csv(std::span<const FrozenTrial> trials, size_t objectives = 1) {
  using namespace detail::reports;
  const auto all = by_number(trials);
  const auto names = param_names(all);
  if (objectives < 2) objectives = 0;
  std::string s = "number,state,value";
  for (size_t k = 0; k < objectives; ++k) s += ",values_" + std::to_string(k);
  s += ",started,finished,duration_s";
  // (s += ','; s += field: GCC 12 warns falsely, -Wrestrict, on "," + field)
  for (const auto& name : names) {
    s += ',';
    s += csv_field("params_" + name);
  }
  s += ",reason\n";
  for (const auto& t : all) {
    const auto d = duration_s(t);
    s += std::to_string(t.number) + "," + to_string(t.state) + "," +
         (t.value ? exact(*t.value) : "");
    for (size_t k = 0; k < objectives; ++k) {
      s += ',';
      if (k < t.values.size()) s += exact(t.values[k]);
    }
    s += "," + iso_time(t.started_at) + "," + iso_time(t.finished_at) + "," + (d ? exact(*d) : "");
    for (const auto& name : names) {
      const auto p = t.params.find(name);
      s += ',';
      if (p != t.params.end()) s += csv_field(param_text(p->second));
    }
    s += ',';
    s += csv_field(reason(t));
    s += '\n';
  }
  return s;
}

/// The document of write_trials_json.
inline nlohmann::json trials_json(std::string_view study_name,
                                  const std::vector<Direction>& directions,
                                  std::span<const FrozenTrial> trials) {
  using namespace detail::reports;
  using nlohmann::json;
  const auto all = by_number(trials);
  const auto view = StudyView::of(directions, all);
  json out = {{"study", study_name}};
  if (directions.size() == 1) {
    out["direction"] = to_string(directions[0]);
  } else {
    for (const auto d : directions) out["directions"].push_back(to_string(d));
  }
  json n = json::object();
  for (const auto& [state, count] : counts(all)) n[to_string(state)] = count;
  out["counts"] = n;
  out["params"] = param_names(all);
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json rows = json::array();
  for (const auto& t : all) {
    json distributions = json::object(), intermediate = json::array();
    for (const auto& [name, param] : t.params) distributions[name] = to_json(param.distribution);
    for (const auto& [step, value] : t.intermediate) intermediate.push_back({step, value});
    const auto d = duration_s(t);
    rows.push_back({{"number", t.number},
                    {"state", to_string(t.state)},
                    {"value", t.value ? json(*t.value) : json(nullptr)},
                    {"started", or_null(iso_time(t.started_at))},
                    {"finished", or_null(iso_time(t.finished_at))},
                    {"duration_s", d ? json(*d) : json(nullptr)},
                    {"params", t.param_values()},
                    {"distributions", distributions},
                    {"intermediate", intermediate},
                    {"reason", or_null(reason(t))},
                    {"user_attrs", t.user_attrs}});
    if (!t.values.empty()) rows.back()["values"] = t.values;
    if (const auto c = t.constraints()) rows.back()[system_attr::kConstraints] = *c;
  }
  if (directions.size() == 1) {
    const auto* best = view.best();
    out["best_trial"] = best ? json{{"number", best->number},
                                    {"value", *best->value},
                                    {"params", best->param_values()}}
                             : json(nullptr);
  } else {
    out["best_trials"] = json::array();
    for (const auto* t : best_trials(view)) {
      out["best_trials"].push_back(
          {{"number", t->number}, {"values", t->values}, {"params", t->param_values()}});
    }
  }
  out["trials"] = std::move(rows);
  return out;
}

inline nlohmann::json trials_json(std::string_view study_name, Direction direction,
                                  std::span<const FrozenTrial> trials) {
  return trials_json(study_name, std::vector{direction}, trials);
}

/// One row per trial (in number order): number, state, value (with several
/// `objectives`, `values_<k>` columns too), started and finished (UTC),
/// duration_s, a `params_<name>` column per parameter of any trial (blank
/// where a trial lacks it), the prune or fail reason.
inline void write_trials_csv(const std::filesystem::path& path, std::span<const FrozenTrial> trials,
                             size_t objectives = 1) {
  trainkit::detail::require_file_path("write_trials_csv.path", path, "study/trials.csv");
  io::write_file_atomically(path, trials_csv(trials, objectives));
}

/// {"study", "direction", "counts", "params", "best_trial", "trials": [{number,
/// state, value, started, finished, duration_s, params, distributions,
/// intermediate: [[step, value], ...], reason, user_attrs}]}; with several
/// objectives "directions" and "best_trials" (the Pareto front: number,
/// values, params), and each trial's "values"; a trial's "constraints".
inline void write_trials_json(const std::filesystem::path& path, std::string_view study_name,
                              const std::vector<Direction>& directions,
                              std::span<const FrozenTrial> trials) {
  trainkit::detail::require_file_path("write_trials_json.path", path, "study/trials.json");
  io::write_file_atomically(path, trials_json(study_name, directions, trials).dump() + "\n");
}
inline void write_trials_json(const std::filesystem::path& path, std::string_view study_name,
                              Direction direction, std::span<const FrozenTrial> trials) {
  write_trials_json(path, study_name, std::vector{direction}, trials);
}

}  // namespace trainkit::tune
