#pragma once
// Optuna's relational schema as each Optuna makes it (its SQLAlchemy
// models and alembic revisions; docs/optuna-schema.md), which revisions
// trainkit reads, and the error for any other.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/tune/detail/sql_dialect.hpp"
#include "trainkit/tune/sql_options.hpp"

namespace trainkit::tune::detail {

/// The revisions trainkit reads and writes: each OptunaSchema's (its
/// Optuna's alembic head), in the enum's order.
struct KnownRevision {
  std::string_view revision, optuna;
};
inline constexpr KnownRevision kOptunaRevisions[] = {{"v3.0.0.d", "Optuna 3"},
                                                     {"v3.2.0.a", "Optuna 4"}};
inline std::string revision_of(OptunaSchema schema) {
  return std::string(kOptunaRevisions[static_cast<size_t>(schema)].revision);
}
/// Optuna's revisions before those: `optuna storage upgrade` takes them on.
inline constexpr std::string_view kOlderOptunaRevisions[] = {
    "v0.9.0.a", "v1.2.0.a", "v1.3.0.a", "v2.4.0.a", "v2.6.0.a", "v3.0.0.a", "v3.0.0.b", "v3.0.0.c"};
/// Optuna's frozen `version_info.schema_version`.
inline constexpr int64_t kOptunaSchemaVersion = 12;

/// Throws unless `found` (the database's one revision, if it has one) is
/// one trainkit reads; the error says what to upgrade. `where` names the
/// database.
inline void check_schema_revision(const std::string& where,
                                  const std::optional<std::string>& found) {
  std::string known;
  for (const auto& [revision, optuna] : kOptunaRevisions) {
    if (found == revision) return;
    known +=
        (known.empty() ? "" : " and ") + std::string(revision) + " (" + std::string(optuna) + ")";
  }
  const bool older =
      found && std::find(std::begin(kOlderOptunaRevisions), std::end(kOlderOptunaRevisions),
                         *found) != std::end(kOlderOptunaRevisions);
  throw Error("trainkit: " + where + " has Optuna schema revision " + found.value_or("(none)") +
              "; this trainkit reads " + known + "; " +
              (older ? "this older one needs `optuna storage upgrade` first"
                     : "it is not one Optuna made before this trainkit: a newer trainkit may read "
                       "it (upgrade trainkit, not the database)"));
}

/// Optuna's tables as `schema`'s Optuna makes them (its `create_all` on
/// each database, and alembic's table): Optuna 4's have one more index,
/// which `optuna storage upgrade` adds to Optuna 3's (as trials_study_id_key).
inline std::vector<std::string> schema_statements(SqlDialect dialect, OptunaSchema schema) {
  std::vector<std::string> statements;
  if (dialect == SqlDialect::Postgres) {
    statements = {
        "CREATE TYPE studydirection AS ENUM ('NOT_SET', 'MINIMIZE', 'MAXIMIZE')",
        "CREATE TYPE trialstate AS ENUM ('RUNNING', 'COMPLETE', 'PRUNED', 'FAIL', 'WAITING')",
        "CREATE TYPE trialvaluetype AS ENUM ('FINITE', 'INF_POS', 'INF_NEG')",
        "CREATE TYPE trialintermediatevaluetype AS ENUM ('FINITE', 'INF_POS', 'INF_NEG', 'NAN')",
    };
  }
  const auto attributes = [](const std::string& owner, const std::string& parent) {
    return "CREATE TABLE " + owner + "_attributes (" + owner + "_attribute_id {serial} NOT NULL, " +
           parent + "_id INTEGER, \"key\" VARCHAR(512), value_json TEXT, PRIMARY KEY (" + owner +
           "_attribute_id), UNIQUE (" + parent + "_id, \"key\"), FOREIGN KEY(" + parent +
           "_id) REFERENCES " + (parent == "study" ? "studies" : "trials") + " (" + parent +
           "_id))";
  };
  for (std::string s : {
           std::string("CREATE TABLE studies (study_id {serial} NOT NULL, study_name VARCHAR(512) "
                       "NOT NULL, PRIMARY KEY (study_id))"),
           std::string("CREATE UNIQUE INDEX ix_studies_study_name ON studies (study_name)"),
           std::string("CREATE TABLE version_info (version_info_id INTEGER NOT NULL, "
                       "schema_version INTEGER, library_version VARCHAR(256), PRIMARY KEY "
                       "(version_info_id), CHECK (version_info_id=1))"),
           std::string("CREATE TABLE study_directions (study_direction_id {serial} NOT NULL, "
                       "direction {studydirection} NOT NULL, study_id INTEGER NOT NULL, objective "
                       "INTEGER NOT NULL, PRIMARY KEY (study_direction_id), UNIQUE (study_id, "
                       "objective), FOREIGN KEY(study_id) REFERENCES studies (study_id))"),
           attributes("study_user", "study"),
           attributes("study_system", "study"),
           std::string("CREATE TABLE trials (trial_id {serial} NOT NULL, number INTEGER, study_id "
                       "INTEGER, state {trialstate} NOT NULL, datetime_start {datetime}, "
                       "datetime_complete {datetime}, PRIMARY KEY (trial_id), FOREIGN "
                       "KEY(study_id) REFERENCES studies (study_id))"),
           attributes("trial_user", "trial"),
           attributes("trial_system", "trial"),
           std::string("CREATE TABLE trial_params (param_id {serial} NOT NULL, trial_id INTEGER, "
                       "param_name VARCHAR(512), param_value {float}, distribution_json TEXT, "
                       "PRIMARY KEY (param_id), UNIQUE (trial_id, param_name), FOREIGN "
                       "KEY(trial_id) REFERENCES trials (trial_id))"),
           std::string("CREATE TABLE trial_values (trial_value_id {serial} NOT NULL, trial_id "
                       "INTEGER NOT NULL, objective INTEGER NOT NULL, value {float}, value_type "
                       "{trialvaluetype} NOT NULL, PRIMARY KEY (trial_value_id), UNIQUE "
                       "(trial_id, objective), FOREIGN KEY(trial_id) REFERENCES trials "
                       "(trial_id))"),
           std::string("CREATE TABLE trial_intermediate_values (trial_intermediate_value_id "
                       "{serial} NOT NULL, trial_id INTEGER NOT NULL, step {step} NOT NULL, "
                       "intermediate_value {float}, intermediate_value_type "
                       "{trialintermediatevaluetype} NOT NULL, PRIMARY KEY "
                       "(trial_intermediate_value_id), UNIQUE (trial_id, step), FOREIGN "
                       "KEY(trial_id) REFERENCES trials (trial_id))"),
           std::string("CREATE TABLE trial_heartbeats (trial_heartbeat_id {serial} NOT NULL, "
                       "trial_id INTEGER NOT NULL, heartbeat {datetime} NOT NULL, PRIMARY KEY "
                       "(trial_heartbeat_id), UNIQUE (trial_id), FOREIGN KEY(trial_id) "
                       "REFERENCES trials (trial_id))"),
           std::string("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
                       "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"),
       }) {
    statements.push_back(std::move(s));
    if (statements.back().rfind("CREATE TABLE trials ", 0) == 0 && schema == OptunaSchema::Optuna4)
      statements.push_back("CREATE INDEX ix_trials_study_id ON trials (study_id)");
  }
  return statements;
}

}  // namespace trainkit::tune::detail
