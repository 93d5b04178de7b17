#pragma once
// The one migration that is not Optuna's: a database trainkit 0.1 wrote
// (its own tune_* tables, `tune_meta.schema_version` 1) moved into
// Optuna's tables just made, in the transaction that made them, every
// study, trial, parameter, value and attribute kept; then the old tables
// are dropped. Versioned as alembic's are: the version it takes and what
// it leaves are fixed, and any other version is refused before anything is
// written.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/error.hpp"
#include "trainkit/tune/detail/sql_dialect.hpp"
#include "trainkit/tune/detail/sql_values.hpp"
#include "trainkit/tune/space.hpp"
#include "trainkit/tune/system_attrs.hpp"

namespace trainkit::tune::detail::trainkit_0_1 {

/// Whether a database with `tables` is one trainkit 0.1 wrote.
inline bool wrote(const std::vector<std::string>& tables) {
  return std::find(tables.begin(), tables.end(), "tune_meta") != tables.end();
}

/// Throws unless the database is of the one version this migration takes.
/// Reads only.
inline void require_known_version(SqlConnection& db) {
  const auto version = db.query("SELECT value FROM tune_meta WHERE key = 'schema_version'", {});
  if (version.empty() || cell_text(version[0][0]) != "1") {
    throw Error("trainkit: " + db.where() + " has trainkit schema version " +
                (version.empty() ? std::string("(none)") : cell_text(version[0][0])) +
                "; this trainkit converts version 1 (trainkit 0.1) to Optuna's schema");
  }
}

/// An attribute as trainkit 0.1 stored it: non-finite numbers as
/// {"$double": "Infinity"} and so on (read when converting its database).
inline nlohmann::json legacy_attr_from_text(const std::string& text, const std::string& key) {
  const auto decode = [](const auto& self, nlohmann::json& x) -> void {
    if (x.is_object() && x.size() == 1 && x.contains("$double") && x["$double"].is_string()) {
      x = parse_double(x["$double"].get<std::string>());
    } else if (x.is_structured()) {
      for (auto& [name, item] : x.items()) self(self, item);
    }
  };
  auto v = stored_json(text, "the study database's attribute \"" + key + "\"");
  decode(decode, v);
  return v;
}

/// Moves 0.1's rows into Optuna's tables (made, empty, in this
/// transaction), then drops 0.1's tables. Parameters' distributions are
/// stored as Optuna stores them (`normalized`).
inline void migrate(SqlConnection& db) {
  std::map<int64_t, int64_t> studies, trials;  // old id -> new id
  std::map<int64_t, double> beats;             // running trials' last beats, by new id
  for (const auto& r : db.query("SELECT id, name, direction FROM tune_studies ORDER BY id", {})) {
    const auto id =
        cell_integer(db.query("INSERT INTO studies (study_name) VALUES ($1) RETURNING study_id",
                              {cell_text(r[1])})[0][0]);
    db.query("INSERT INTO study_directions (direction, study_id, objective) VALUES ($1, $2, 0)",
             {optuna_name(direction_from_string(cell_text(r[2]))), id});
    studies[cell_integer(r[0])] = id;
  }
  for (const auto& r : db.query("SELECT study_id, key FROM tune_study_marks", {})) {
    db.query(
        "INSERT INTO study_system_attributes (study_id, \"key\", value_json) VALUES ($1, $2, "
        "'true')",
        {studies.at(cell_integer(r[0])), system_attr::enqueued_once(cell_text(r[1]))});
  }
  const auto seconds = [](const std::optional<std::string>& cell) {
    const double x = parse_double(cell_text(cell));
    return x > 0 ? SqlParam(x) : SqlParam(nullptr);  // 0: not yet
  };
  for (const auto& r :
       db.query("SELECT id, study_id, number, state, value, started_at, finished_at, "
                "heartbeat FROM tune_trials ORDER BY study_id, number",
                {})) {
    const auto state = trial_state_from_string(cell_text(r[3]));
    const auto id = cell_integer(
        db.query("INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete) "
                 "VALUES ($1, $2, $3, {local_time($4)}, {local_time($5)}) RETURNING trial_id",
                 {cell_integer(r[2]), studies.at(cell_integer(r[1])), optuna_name(state),
                  seconds(r[5]), seconds(r[6])})[0][0]);
    trials[cell_integer(r[0])] = id;
    if (r[4] && state != TrialState::Running && state != TrialState::Waiting) {
      const double value = parse_double(*r[4]);
      if (!std::isnan(value)) {
        db.query(
            "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES ($1, 0, $2, "
            "$3)",
            {id, finite_or_null(value), value_type(value)});
      }
    }
    if (state == TrialState::Running) beats[id] = parse_double(cell_text(r[7]));
  }
  for (const auto& r :
       db.query("SELECT trial_id, name, distribution, internal FROM tune_trial_params", {})) {
    const auto p = stored_param(cell_text(r[1]), cell_text(r[2]), cell_text(r[3]));
    db.query(
        "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES "
        "($1, $2, $3, $4)",
        {trials.at(cell_integer(r[0])), cell_text(r[1]), p.internal,
         to_optuna_json(normalized(p.distribution)).dump()});
  }
  for (const auto& r : db.query("SELECT trial_id, step, value FROM tune_trial_values", {})) {
    const double value = parse_double(cell_text(r[2]));
    db.query(
        "INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, "
        "intermediate_value_type) VALUES ($1, $2, $3, $4)",
        {trials.at(cell_integer(r[0])), cell_integer(r[1]), finite_or_null(value),
         value_type(value)});
  }
  for (const auto& r : db.query("SELECT trial_id, kind, key, value FROM tune_trial_attrs", {})) {
    const auto id = trials.at(cell_integer(r[0]));
    const auto v = legacy_attr_from_text(cell_text(r[3]), cell_text(r[2]));
    db.query("INSERT INTO trial_" + cell_text(r[1]) +
                 "_attributes (trial_id, \"key\", value_json) VALUES ($1, $2, $3)",
             {id, cell_text(r[2]), attr_text(v)});
    // A heartbeat row for a running trial whose worker beats, as start_trial writes.
    const bool beating = cell_text(r[1]) == "system" && cell_text(r[2]) == system_attr::kWorker &&
                         v.is_object() && v.value("heartbeat_s", 0.0) > 0;
    if (beating && beats.contains(id)) {
      db.query("INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES ($1, {db_time($2)})",
               {id, beats.at(id)});
    }
  }
  for (const char* table : {"tune_trial_attrs", "tune_trial_values", "tune_trial_params",
                            "tune_trials", "tune_study_marks", "tune_studies", "tune_meta"}) {
    db.query(std::string("DROP TABLE ") + table, {});
  }
}

}  // namespace trainkit::tune::detail::trainkit_0_1
