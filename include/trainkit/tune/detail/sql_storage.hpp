#pragma once
// The storage SqliteStorage and PostgresStorage share, written once over
// sql_dialect.hpp's connection: every statement, the storage's logic and
// the row -> FrozenTrial assembly, in Optuna's schema (optuna_schema.hpp)
// with its values as Optuna stores them (sql_values.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/tune/detail/migrate_trainkit_0_1.hpp"
#include "trainkit/tune/detail/optuna_schema.hpp"
#include "trainkit/tune/detail/sql_dialect.hpp"
#include "trainkit/tune/detail/sql_values.hpp"
#include "trainkit/tune/sql_options.hpp"
#include "trainkit/tune/storage.hpp"
#include "trainkit/tune/system_attrs.hpp"
#include "trainkit/version.hpp"

namespace trainkit::tune::detail {

/// Storage over any SqlConnection, in Optuna's relational schema (so that
/// Optuna opens what trainkit writes and the reverse; docs/optuna-schema.md):
/// each call is one transaction.
class SqlStorage : public Storage {
 public:
  using Storage::create_study;
  int64_t create_study(const std::string& name, const std::vector<Direction>& directions,
                       bool load_if_exists) override {
    require_directions(directions);
    return run(true, [&] {
      const auto made =
          q("INSERT INTO studies (study_name) VALUES ($1) ON CONFLICT (study_name) DO NOTHING "
            "RETURNING study_id",
            {name});
      if (!made.empty()) {
        for (size_t k = 0; k < directions.size(); ++k) {
          q("INSERT INTO study_directions (direction, study_id, objective) VALUES ($1, $2, $3)",
            {optuna_name(directions[k]), cell_integer(made[0][0]), int64_t(k)});
        }
        return cell_integer(made[0][0]);
      }
      const auto found = q("SELECT study_id FROM studies WHERE study_name = $1", {name});
      if (found.empty()) throw Error("trainkit: study \"" + name + "\" vanished while created");
      if (!load_if_exists) throw_study_exists(name);
      const int64_t id = cell_integer(found[0][0]);
      require_same_direction(name, directions_of(id), directions);
      return id;
    });
  }
  std::vector<Direction> directions(int64_t study) override {
    return run(false, [&] { return directions_of(study); });
  }
  std::vector<std::string> study_names() override {
    return run(false, [&] {
      std::vector<std::string> names;
      for (const auto& row : q("SELECT study_name FROM studies ORDER BY study_id", {}))
        names.push_back(cell_text(row[0]));
      return names;
    });
  }

  std::optional<FrozenTrial> start_trial(int64_t study, const WorkerId& worker,
                                         std::optional<int64_t> max_trials,
                                         bool waiting_only) override {
    return run(true, [&]() -> std::optional<FrozenTrial> {
      if (max_trials) {
        lock_study(study);
        if (budget_used(study) >= *max_trials) return std::nullopt;
      }
      int64_t id = -1;
      const auto waiting = q(
          "SELECT trial_id FROM trials WHERE study_id = $1 AND state = $2 ORDER BY trial_id LIMIT "
          "1{claim}",
          {study, optuna_name(TrialState::Waiting)});
      if (!waiting.empty()) {
        id = cell_integer(waiting[0][0]);
        q("UPDATE trials SET state = $2, datetime_start = {now_local} WHERE trial_id = $1",
          {id, optuna_name(TrialState::Running)});
      } else {
        if (waiting_only) return std::nullopt;
        lock_study(study);
        id = insert_trial(study, TrialState::Running);
      }
      // Only a worker that beats has a heartbeat row: Optuna fails a running
      // trial whose row is stale, and leaves one without a row alone.
      if (worker.heartbeat_s > 0) beat(id);
      set_attr(id, "system", system_attr::kWorker, worker.to_json());
      return load_trials("t.trial_id = $1", id).at(0);
    });
  }
  void enqueue_trial(int64_t study, const nlohmann::json& params,
                     const nlohmann::json& system_attrs) override {
    run(true, [&] {
      lock_study(study);
      enqueue_locked(study, params, system_attrs);
    });
  }
  bool enqueue_trials_once(int64_t study, const std::string& key,
                           const std::vector<nlohmann::json>& params) override {
    return run(true, [&] {
      lock_study(study);
      // The mark is a study system attribute (Optuna's readers ignore it).
      const auto marked =
          q("INSERT INTO study_system_attributes (study_id, \"key\", value_json) VALUES ($1, $2, "
            "'true') ON CONFLICT (study_id, \"key\") DO NOTHING RETURNING study_id",
            {study, system_attr::enqueued_once(key)});
      if (marked.empty()) return false;
      for (const auto& p : params) enqueue_locked(study, p, nlohmann::json::object());
      return true;
    });
  }

  void set_param(int64_t trial, const std::string& name, const Param& param) override {
    run(true, [&] {
      require_running(trial);
      q("INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES "
        "($1, $2, $3, $4) ON CONFLICT (trial_id, param_name) DO UPDATE SET param_value = "
        "excluded.param_value, distribution_json = excluded.distribution_json",
        {trial, name, param.internal, to_optuna_json(param.distribution).dump()});
    });
  }
  void report(int64_t trial, int64_t step, double value) override {
    run(true, [&] {
      require_running(trial);
      q("INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, "
        "intermediate_value_type) VALUES ($1, $2, $3, $4) ON CONFLICT (trial_id, step) DO UPDATE "
        "SET intermediate_value = excluded.intermediate_value, intermediate_value_type = "
        "excluded.intermediate_value_type",
        {trial, step, finite_or_null(value), value_type(value)});
    });
  }
  void set_system_attr(int64_t trial, const std::string& key, const nlohmann::json& v) override {
    run(true, [&] {
      require_trial(trial);
      set_attr(trial, "system", key, v);
    });
  }
  void set_user_attr(int64_t trial, const std::string& key, const nlohmann::json& v) override {
    run(true, [&] {
      require_trial(trial);
      set_attr(trial, "user", key, v);
    });
  }
  bool finish_trial(int64_t trial, const TrialEnd& end) override {
    return run(true, [&] {
      const auto study = q("SELECT study_id FROM trials WHERE trial_id = $1", {trial});
      if (study.empty()) throw_no_trial(trial);
      require_values(end, directions_of(cell_integer(study[0][0])).size());
      // The study first, as start_trial locks it: a retry takes the next number.
      if (end.retry) lock_study(cell_integer(study[0][0]));
      const auto done =
          q("UPDATE trials SET state = $2, datetime_complete = {now_local} WHERE trial_id = $1 AND "
            "state = $3 RETURNING trial_id",
            {trial, optuna_name(end.state), optuna_name(TrialState::Running)});
      if (done.empty()) return false;
      // As Optuna: an objective value is a number or an infinity, never NaN.
      const auto values = end.value ? std::vector{*end.value} : end.values;
      for (size_t k = 0; k < values.size(); ++k) {
        if (std::isnan(values[k])) continue;
        q("INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES ($1, $2, $3, "
          "$4)",
          {trial, int64_t(k), finite_or_null(values[k]), value_type(values[k])});
      }
      for (const auto& [key, v] : end.system_attrs.items()) set_attr(trial, "system", key, v);
      if (end.retry) {
        enqueue_locked(cell_integer(study[0][0]),
                       load_trials("t.trial_id = $1", trial).at(0).param_values(), *end.retry);
      }
      return true;
    });
  }

  std::vector<FrozenTrial> trials(int64_t study) override {
    return run(false, [&] {
      if (q("SELECT study_id FROM studies WHERE study_id = $1", {study}).empty())
        throw_no_study(study);
      return load_trials("t.study_id = $1", study);
    });
  }

  void heartbeat(int64_t trial) override {
    run(true, [&] {
      require_trial(trial);
      beat(trial);
    });
  }
  double seconds_since_heartbeat(int64_t trial) override {
    return run(false, [&] {
      const auto rows =
          q("SELECT COALESCE({age(h.heartbeat)}, {age_local(t.datetime_start)}) FROM trials t LEFT "
            "JOIN trial_heartbeats h ON h.trial_id = t.trial_id WHERE t.trial_id = $1",
            {trial});
      if (rows.empty()) throw_no_trial(trial);
      return parse_double(cell_text(rows[0][0]));
    });
  }

 protected:
  /// Opens the database behind `db`, making Optuna's tables where it has
  /// none as `options` say. A database it refuses is left as it was: it is
  /// read, and found usable, before anything is written to it.
  SqlStorage(std::unique_ptr<SqlConnection> db, const NewDatabaseOptions& options)
      : db_(std::move(db)) {
    const Holds holds = run(false, [&] { return usable_now(options); });
    db_->ready_to_write();
    if (holds == Holds::Study) return;
    // A new database, or trainkit 0.1's: Optuna's tables, made (and 0.1's
    // rows moved into them) in one transaction. DDL only then: a worker may
    // hold DML rights only.
    run(true, [&] {
      // Two PostgreSQL sessions creating the same tables at once can both
      // fail; SQLite's write lock already serialises this.
      if (db_->dialect() == SqlDialect::Postgres) q("SELECT pg_advisory_xact_lock(7142003)", {});
      const Holds now = usable_now(options);  // another worker may have made them meanwhile
      if (now == Holds::Study) return;
      for (const auto& s : schema_statements(db_->dialect(), options.schema)) q(s, {});
      q("INSERT INTO version_info (version_info_id, schema_version, library_version) VALUES (1, "
        "$1, $2)",
        {kOptunaSchemaVersion, "trainkit " + std::to_string(TRAINKIT_VERSION_MAJOR) + "." +
                                   std::to_string(TRAINKIT_VERSION_MINOR) + "." +
                                   std::to_string(TRAINKIT_VERSION_PATCH)});
      q("INSERT INTO alembic_version (version_num) VALUES ($1)", {revision_of(options.schema)});
      if (now == Holds::Trainkit01Study) trainkit_0_1::migrate(*db_);
    });
  }

 private:
  enum class Holds { Study, Trainkit01Study, Nothing };
  // What the database holds, if this storage may use it; else the error
  // that says why not. Reads only.
  Holds usable_now(const NewDatabaseOptions& options) {
    const auto tables = table_names_now();
    const auto has = [&](std::string_view table) {
      return std::find(tables.begin(), tables.end(), table) != tables.end();
    };
    if (has("alembic_version") && has("studies")) {
      const auto revision = q("SELECT version_num FROM alembic_version", {});
      check_schema_revision(db_->where(), revision.size() == 1 ? revision[0][0] : std::nullopt);
      return Holds::Study;
    }
    if (has("studies")) {
      throw Error("trainkit: " + db_->where() +
                  " has Optuna's table `studies` but no `alembic_version`, so its schema "
                  "revision is unknown: it is not a study database as Optuna or trainkit "
                  "write one (a partial copy?)");
    }
    if (trainkit_0_1::wrote(tables)) {
      trainkit_0_1::require_known_version(*db_);
      return Holds::Trainkit01Study;
    }
    if (tables.empty() || (options.beside_other_tables && !has("alembic_version"))) {
      return Holds::Nothing;
    }
    std::string listed;
    for (size_t k = 0; k < tables.size() && k < 5; ++k) listed += (k ? ", " : "") + tables[k];
    if (tables.size() > 5) listed += ", ...";
    throw Error("trainkit: " + db_->where() + " holds no study but " +
                std::to_string(tables.size()) + " other table(s) (" + listed + ")" +
                (has("alembic_version")
                     ? ", among them another application's `alembic_version`, which Optuna's "
                       "tables cannot share: give the study a database of its own"
                     : ": is it the right database? To make Optuna's tables beside them, set "
                       "NewDatabaseOptions.beside_other_tables"));
  }
  // The database's tables (in PostgreSQL, of the session's schema), by name.
  std::vector<std::string> table_names_now() {
    std::vector<std::string> names;
    for (const auto& row :
         q(db_->dialect() == SqlDialect::Sqlite
               ? "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                 "'sqlite!_%' ESCAPE '!' ORDER BY name"
               : "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = current_schema() "
                 "ORDER BY tablename",
           {})) {
      names.push_back(cell_text(row[0]));
    }
    return names;
  }

  // Runs `body` as one transaction under the connection's lock; its result.
  template <class F, class R = std::invoke_result_t<F&>>
  R run(bool write, F&& body) {
    std::lock_guard lock(mutex_);
    if constexpr (std::is_void_v<R>) {
      db_->transaction(write, body);
    } else {
      std::optional<R> out;
      db_->transaction(write, [&] { out = body(); });
      return std::move(*out);
    }
  }

  SqlRows q(const std::string& sql, const std::vector<SqlParam>& params) {
    return db_->query(sql, params);
  }

  [[noreturn]] static void throw_no_study(int64_t study) {
    throw Error("trainkit: no study with id " + std::to_string(study));
  }
  [[noreturn]] static void throw_no_trial(int64_t trial) {
    throw Error("trainkit: no trial with id " + std::to_string(trial));
  }

  // One direction per objective.
  std::vector<Direction> directions_of(int64_t study) {
    const auto rows =
        q("SELECT direction FROM study_directions WHERE study_id = $1 ORDER BY objective", {study});
    if (rows.empty()) throw_no_study(study);
    std::vector<Direction> out;
    for (const auto& row : rows) {
      const auto& d = cell_text(row[0]);
      const auto known = std::find_if(std::begin(directions_known), std::end(directions_known),
                                      [&](Direction x) { return d == optuna_name(x); });
      if (known == std::end(directions_known))
        throw Error("trainkit: study " + std::to_string(study) + " has direction " + d +
                    "; accepted: MINIMIZE, MAXIMIZE");
      out.push_back(*known);
    }
    return out;
  }
  static constexpr Direction directions_known[] = {Direction::Minimize, Direction::Maximize};

  // Holds the study row until commit: trial numbers and the budget are
  // decided by one worker at a time.
  void lock_study(int64_t study) {
    if (q("SELECT study_id FROM studies WHERE study_id = $1{lock}", {study}).empty())
      throw_no_study(study);
  }
  void require_trial(int64_t trial) {
    if (q("SELECT trial_id FROM trials WHERE trial_id = $1", {trial}).empty())
      throw_no_trial(trial);
  }
  // The share lock keeps another worker from finishing the trial before
  // this transaction's write lands.
  void require_running(int64_t trial) {
    const auto rows = q("SELECT number, state FROM trials WHERE trial_id = $1{share}", {trial});
    if (rows.empty()) throw_no_trial(trial);
    const auto state = trial_state_from_optuna(cell_text(rows[0][1]));
    if (state != TrialState::Running) {
      throw TrialNotRunning("trainkit: trial " + cell_text(rows[0][0]) + " is " + to_string(state) +
                            ", not running: it can no longer change");
    }
  }

  // The trials that count against max_trials (detail::counts_against_budget).
  int64_t budget_used(int64_t study) {
    std::string states;
    std::vector<SqlParam> params{study};
    for (const auto s : trial_states) {
      if (!tune::detail::counts_against_budget(s)) continue;
      params.emplace_back(optuna_name(s));
      states += (states.empty() ? "$" : ", $") + std::to_string(params.size());
    }
    return cell_integer(
        q("SELECT COUNT(*) FROM trials WHERE study_id = $1 AND state IN (" + states + ")",
          params)[0][0]);
  }

  // A new trial (the study row is locked), numbered as Optuna numbers it:
  // the count of the study's trials before it.
  int64_t insert_trial(int64_t study, TrialState s) {
    const bool running = s == TrialState::Running;
    const int64_t id = cell_integer(
        q(running ? "INSERT INTO trials (number, study_id, state, datetime_start) VALUES (NULL, "
                    "$1, $2, {now_local}) RETURNING trial_id"
                  : "INSERT INTO trials (number, study_id, state) VALUES (NULL, $1, $2) "
                    "RETURNING trial_id",
          {study, optuna_name(s)})[0][0]);
    number_trial(study, id);
    return id;
  }
  void number_trial(int64_t study, int64_t id) {
    q("UPDATE trials SET number = (SELECT COUNT(trial_id) FROM trials WHERE study_id = $1 AND "
      "trial_id < $2) WHERE trial_id = $2",
      {study, id});
  }

  void enqueue_locked(int64_t study, const nlohmann::json& params,
                      const nlohmann::json& system_attrs) {
    const int64_t id = insert_trial(study, TrialState::Waiting);
    if (system_attrs.is_object()) {
      for (const auto& [key, v] : system_attrs.items()) {
        if (key != system_attr::kFixedParams) set_attr(id, "system", key, v);
      }
    }
    set_attr(id, "system", system_attr::kFixedParams, params);
  }

  void beat(int64_t trial) {
    q("INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES ($1, {now_db}) ON CONFLICT "
      "(trial_id) DO UPDATE SET heartbeat = excluded.heartbeat",
      {trial});
  }

  void set_attr(int64_t trial, std::string_view kind, const std::string& key,
                const nlohmann::json& v) {
    q("INSERT INTO trial_" + std::string(kind) +
          "_attributes (trial_id, \"key\", value_json) VALUES ($1, $2, $3) ON CONFLICT "
          "(trial_id, \"key\") DO UPDATE SET value_json = excluded.value_json",
      {trial, key, attr_text(v)});
  }

  // The trials matching `filter` (on trials t, with $1 = key), in number
  // order, assembled from Optuna's tables.
  std::vector<FrozenTrial> load_trials(const std::string& filter, int64_t key) {
    const std::string where = " x JOIN trials t ON t.trial_id = x.trial_id WHERE " + filter;
    std::vector<FrozenTrial> out;
    std::map<int64_t, size_t> index, objectives_of;  // by trial id: its place, its objectives
    std::map<int64_t, size_t> objectives;            // by study
    for (const auto& r : q("SELECT t.trial_id, t.number, t.state, {epoch_of(t.datetime_start)}, "
                           "{epoch_of(t.datetime_complete)}, t.study_id FROM trials t WHERE " +
                               filter + " ORDER BY t.number, t.trial_id",
                           {key})) {
      FrozenTrial t;
      t.id = cell_integer(r[0]);
      t.number = cell_integer(r[1]);
      t.state = trial_state_from_optuna(cell_text(r[2]));
      if (r[3]) t.started_at = parse_double(*r[3]);
      if (r[4]) t.finished_at = parse_double(*r[4]);
      const int64_t study = cell_integer(r[5]);
      if (!objectives.contains(study)) objectives[study] = directions_of(study).size();
      objectives_of[t.id] = objectives[study];
      index[t.id] = out.size();
      out.push_back(std::move(t));
    }
    // a study of one objective: `value`; of several: `values`, each at its objective
    for (const auto& r : q("SELECT x.trial_id, x.objective, x.value, x.value_type FROM "
                           "trial_values" +
                               where,
                           {key})) {
      const int64_t id = cell_integer(r[0]), objective = cell_integer(r[1]);
      auto& t = out[index.at(id)];
      const size_t n = objectives_of.at(id);
      if (objective < 0 || size_t(objective) >= n)
        throw Error("trainkit: trial " + std::to_string(t.number) + " has a value of objective " +
                    std::to_string(objective) + " in a study of " + std::to_string(n) +
                    " objective(s)");
      const double v = typed_value(r[2], cell_text(r[3]));
      if (n == 1) {
        t.value = v;
      } else {
        t.values.resize(n, std::numeric_limits<double>::quiet_NaN());  // NaN: not stored
        t.values[size_t(objective)] = v;
      }
    }
    for (const auto& r : q("SELECT x.trial_id, x.param_name, x.distribution_json, x.param_value "
                           "FROM trial_params" +
                               where,
                           {key})) {
      out[index.at(cell_integer(r[0]))].params[cell_text(r[1])] =
          stored_param(cell_text(r[1]), cell_text(r[2]), cell_text(r[3]));
    }
    for (const auto& r : q("SELECT x.trial_id, x.step, x.intermediate_value, "
                           "x.intermediate_value_type FROM trial_intermediate_values" +
                               where,
                           {key})) {
      out[index.at(cell_integer(r[0]))].intermediate[cell_integer(r[1])] =
          typed_value(r[2], cell_text(r[3]));
    }
    for (const char* kind : {"user", "system"}) {
      for (const auto& r : q(std::string("SELECT x.trial_id, x.\"key\", x.value_json FROM trial_") +
                                 kind + "_attributes" + where,
                             {key})) {
        auto& t = out[index.at(cell_integer(r[0]))];
        (kind == std::string_view("user") ? t.user_attrs : t.system_attrs)[cell_text(r[1])] =
            attr_from_text(cell_text(r[2]), cell_text(r[1]));
      }
    }
    return out;
  }

  std::mutex mutex_;  // the study's heartbeat thread shares the connection
  std::unique_ptr<SqlConnection> db_;
};

}  // namespace trainkit::tune::detail
