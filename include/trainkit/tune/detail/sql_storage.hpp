#pragma once
// What SqliteStorage and PostgresStorage share, written once: the schema,
// every statement, the storage logic and the row -> FrozenTrial assembly,
// over a small connection interface each backend implements. Statements are
// PostgreSQL's with $1, $2, ... placeholders and a few {tokens} (types, the
// clock, row locks) that render_sql turns into each dialect.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/tune/detail/schema_revision.hpp"
#include "trainkit/tune/storage.hpp"
#include "trainkit/version.hpp"

namespace trainkit::tune::detail {

enum class SqlDialect { Sqlite, Postgres };

/// A statement's parameter.
using SqlParam = std::variant<std::nullptr_t, int64_t, double, std::string>;
/// A result row, every column as text (nullopt: NULL; a double as
/// format_double writes it, so it reads back exactly).
using SqlRow = std::vector<std::optional<std::string>>;
using SqlRows = std::vector<SqlRow>;

/// One connection to a database; used under SqlStorage's mutex only.
class SqlConnection {
 public:
  virtual ~SqlConnection() = default;
  virtual SqlDialect dialect() const = 0;
  /// The database, for messages: its file, or its server and name.
  virtual std::string where() const = 0;
  /// Runs `body` as one transaction: committed when it returns, rolled back
  /// when it throws. A `write` transaction takes the write lock first
  /// (SQLite: BEGIN IMMEDIATE, so it never fails half-way on a busy
  /// database). A backend may run `body` again after a transient conflict
  /// (PostgreSQL's deadlock or serialisation failure): `body` changes
  /// nothing but the database and its own results.
  virtual void transaction(bool write, const std::function<void()>& body) = 0;
  /// One statement (written as below; rendered and prepared once per
  /// connection) with its parameters; its rows.
  virtual SqlRows query(const std::string& sql, const std::vector<SqlParam>& params) = 0;
};

/// `sql` in `dialect`: the {tokens} and {macros(ARG)} below replaced, and
/// $N -> ?N in SQLite.
inline std::string render_sql(std::string_view sql, SqlDialect dialect) {
  struct Token {
    std::string_view name, sqlite, postgres;
  };
  static constexpr Token tokens[] = {
      // Optuna's column types (its SQLAlchemy models; PostgreSQL's enum types
      // are created with the tables).
      {"{serial}", "INTEGER", "SERIAL"},
      {"{float}", "FLOAT", "FLOAT(53)"},
      {"{datetime}", "DATETIME", "TIMESTAMP WITHOUT TIME ZONE"},
      // An intermediate value's step: Optuna's INTEGER is 32 bits in
      // PostgreSQL, and a step may count samples; Optuna reads either.
      {"{step}", "INTEGER", "BIGINT"},
      {"{studydirection}", "VARCHAR(8)", "studydirection"},
      {"{trialstate}", "VARCHAR(8)", "trialstate"},
      {"{trialvaluetype}", "VARCHAR(7)", "trialvaluetype"},
      {"{trialintermediatevaluetype}", "VARCHAR(7)", "trialintermediatevaluetype"},
      // Now, as Optuna writes a trial's start and end: local time, six
      // digits of fraction (SQLAlchemy 1.4 reads fewer as microseconds).
      {"{now_local}", "(strftime('%Y-%m-%d %H:%M:%f', 'now', 'localtime') || '000')",
       "clock_timestamp()::timestamp"},
      // Now, as Optuna writes heartbeats: the database's CURRENT_TIMESTAMP
      // (UTC in SQLite, the session's time zone in PostgreSQL), in whole
      // seconds: Optuna 3 reads a beat later than its own CURRENT_TIMESTAMP
      // as a day old.
      {"{now_db}", "(strftime('%Y-%m-%d %H:%M:%S', 'now') || '.000000')",
       "date_trunc('second', clock_timestamp())::timestamp"},
      // Row locks. A SQLite write transaction holds the whole database.
      {"{lock}", "", " FOR UPDATE"},
      {"{share}", "", " FOR SHARE"},
      // The oldest waiting trial no other worker is claiming. NO KEY: a
      // concurrent insert of the trial's attributes key-share-locks it.
      {"{claim}", "", " FOR NO KEY UPDATE SKIP LOCKED"},
  };
  // {name(ARG)}: ARG (up to the first ")}") where @ stands.
  static constexpr Token macros[] = {
      // Seconds since the epoch of a local time {now_local} wrote.
      {"{epoch_of(", "((julianday(@, 'utc') - 2440587.5) * 86400.0)",
       "extract(epoch FROM (@)::timestamptz)::float8"},
      // The local time of seconds since the epoch (NULL stays NULL).
      {"{local_time(", "(strftime('%Y-%m-%d %H:%M:%f', @, 'unixepoch', 'localtime') || '000')",
       "to_timestamp(@)::timestamp"},
      // {now_db}'s form of seconds since the epoch.
      {"{db_time(", "(strftime('%Y-%m-%d %H:%M:%S', @, 'unixepoch') || '.000000')",
       "date_trunc('second', to_timestamp(@))::timestamp"},
      // Seconds since a time {now_db} wrote, and since one {now_local} wrote.
      // (PostgreSQL: through timestamptz, so that a change to or from
      // daylight saving time in between counts right.)
      {"{age(", "((julianday('now') - julianday(@)) * 86400.0)",
       "extract(epoch FROM clock_timestamp() - (@)::timestamptz)::float8"},
      {"{age_local(", "((julianday('now') - julianday(@, 'utc')) * 86400.0)",
       "extract(epoch FROM clock_timestamp() - (@)::timestamptz)::float8"},
  };
  std::string out;
  out.reserve(sql.size() + 64);
  for (size_t k = 0; k < sql.size();) {
    bool replaced = false;
    if (sql[k] == '{') {
      for (const auto& t : tokens) {
        if (sql.substr(k, t.name.size()) != t.name) continue;
        out += dialect == SqlDialect::Sqlite ? t.sqlite : t.postgres;
        k += t.name.size();
        replaced = true;
        break;
      }
      for (const auto& m : macros) {
        if (replaced || sql.substr(k, m.name.size()) != m.name) continue;
        const size_t end = sql.find(")}", k);
        const auto arg = sql.substr(k + m.name.size(), end - k - m.name.size());
        const auto body = dialect == SqlDialect::Sqlite ? m.sqlite : m.postgres;
        const size_t at = body.find('@');
        out +=
            std::string(body.substr(0, at)) + std::string(arg) + std::string(body.substr(at + 1));
        k = end + 2;
        replaced = true;
      }
    }
    if (!replaced) out += sql[k++];
  }
  if (dialect == SqlDialect::Sqlite) {  // $N -> ?N
    for (size_t k = 0; k + 1 < out.size(); ++k) {
      if (out[k] == '$' && out[k + 1] >= '0' && out[k + 1] <= '9') out[k] = '?';
    }
  }
  return out;
}

/// Optuna's tables (Optuna 4's `create_all` on each database, and the
/// revision row alembic would stamp).
inline std::vector<std::string> schema_statements(SqlDialect dialect) {
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
           std::string("CREATE INDEX ix_trials_study_id ON trials (study_id)"),
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
  }
  return statements;
}

/// Exact text of a double: the shortest that reads back to the same bits,
/// and PostgreSQL's spelling of NaN and the infinities.
inline std::string format_double(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

inline double parse_double(const std::string& s) {
  double x = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), x);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
    throw Error("trainkit: stored number \"" + s + "\" is not a double");
  }
  return x;
}

inline int64_t parse_int(const std::string& s) {
  int64_t x = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), x);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
    throw Error("trainkit: stored integer \"" + s + "\" is not an integer");
  }
  return x;
}

/// Where Python's json writes NaN, Infinity and -Infinity (nlohmann has no
/// such tokens): a string no attribute holds, swapped for the token after
/// writing and before parsing.
inline constexpr std::string_view kNonFiniteTokens[] = {"NaN", "Infinity", "-Infinity"};
inline std::string non_finite_stand_in(std::string_view token) {
  return "\x01trainkit:" + std::string(token) + "\x01";
}

/// An attribute as Optuna stores it (`json.dumps`): JSON with Python's
/// tokens for non-finite numbers, and text that is not UTF-8 with U+FFFD,
/// so every attribute reads back as written.
inline std::string attr_text(const nlohmann::json& v) {
  const auto encode = [](const auto& self, const nlohmann::json& x) -> nlohmann::json {
    if (x.is_number_float() && !std::isfinite(x.get<double>()))
      return non_finite_stand_in(std::isnan(x.get<double>()) ? "NaN"
                                 : x.get<double>() > 0       ? "Infinity"
                                                             : "-Infinity");
    if (!x.is_structured()) return x;
    auto out = x;
    for (auto& [key, item] : out.items()) item = self(self, item);
    return out;
  };
  auto text = encode(encode, v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (const auto token : kNonFiniteTokens) {
    const auto quoted = nlohmann::json(non_finite_stand_in(token)).dump();
    for (size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at)) {
      text.replace(at, quoted.size(), token);
    }
  }
  return text;
}

/// `message` without its leading "trainkit: ", to nest it in another.
inline std::string without_prefix(const std::string& message) {
  return message.rfind("trainkit: ", 0) == 0 ? message.substr(10) : message;
}

/// JSON a study database holds: its own text parsed, or a trainkit::Error
/// that names `what` (a cell another program may have written).
inline nlohmann::json stored_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("trainkit: " + what + " is not JSON: " + e.what());
  }
}

/// A trial's parameter as stored: a distribution the study could have
/// suggested from and a value it can give back (a storage keeps a finite
/// float as it was given, in range or not, so only what `Param::value()`
/// could not convert or a sampler could not order is refused), else a
/// trainkit::Error naming the parameter.
inline Param stored_param(const std::string& name, const std::string& distribution,
                          const std::string& internal) {
  const std::string where = "the study database's parameter \"" + name + "\"";
  const auto named = [&](auto&& read) {  // the reader's error, naming the parameter
    try {
      return read();
    } catch (const Error& e) {
      throw Error("trainkit: " + where + ": " + without_prefix(e.what()));
    }
  };
  Param p{
      named([&] { return distribution_from_json(stored_json(distribution, "its distribution")); }),
      named([&] { return parse_double(internal); })};
  named([&] {
    try {
      validate(name, p.distribution);
    } catch (const Error& e) {
      throw Error("trainkit: it has a bad distribution: " + without_prefix(e.what()));
    }
    return 0;
  });
  const auto convertible = [&] {
    if (std::holds_alternative<FloatDistribution>(p.distribution)) return std::isfinite(p.internal);
    if (std::holds_alternative<IntDistribution>(p.distribution)) {
      return p.internal == std::round(p.internal) && std::abs(p.internal) <= 0x1p53;
    }
    return contains(p.distribution, p.internal);  // an index of a choice
  };
  if (!convertible()) {
    throw Error("trainkit: " + where + " holds " + internal + ", which its distribution " +
                distribution + " cannot take");
  }
  return p;
}

/// An attribute as `attr_text` (or Python's json.dumps) wrote it.
inline nlohmann::json attr_from_text(const std::string& text, const std::string& key) {
  std::string strict;  // Python's tokens outside strings -> their stand-ins
  strict.reserve(text.size());
  for (size_t k = 0; k < text.size();) {
    if (text[k] == '"') {  // a string, copied whole
      size_t end = k + 1;
      while (end < text.size() && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, text.size());
      strict.append(text, k, end - k);
      k = end;
      continue;
    }
    bool replaced = false;
    for (const auto token : kNonFiniteTokens) {
      if (text.compare(k, token.size(), token) != 0) continue;
      strict += nlohmann::json(non_finite_stand_in(token)).dump();
      k += token.size();
      replaced = true;
      break;
    }
    if (!replaced) strict += text[k++];
  }
  const auto decode = [](const auto& self, nlohmann::json& x) -> void {
    if (x.is_string()) {
      for (const auto token : kNonFiniteTokens) {
        if (x.get_ref<const std::string&>() != non_finite_stand_in(token)) continue;
        x = parse_double(std::string(token));
        break;
      }
    } else if (x.is_structured()) {
      for (auto& [name, item] : x.items()) self(self, item);
    }
  };
  auto v = stored_json(strict, "the study database's attribute \"" + key + "\"");
  decode(decode, v);
  return v;
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

/// Optuna's names of trainkit's states and directions: its enum member
/// names, trainkit's upper-cased ("complete" -> "COMPLETE").
template <class E>
std::string optuna_name(E e) {
  std::string name = tune::to_string(e);
  for (char& c : name) c = static_cast<char>(c - 'a' + 'A');
  return name;
}
inline TrialState trial_state_from_optuna(const std::string& name) {
  for (const auto s : trial_states) {
    if (name == optuna_name(s)) return s;
  }
  throw Error("trainkit: stored trial state \"" + name +
              "\" is unknown; accepted: WAITING, RUNNING, COMPLETE, PRUNED, FAIL");
}

/// A value's type column (Optuna's TrialValueType and
/// TrialIntermediateValueType): the value itself is stored only when finite.
inline std::string value_type(double x) {
  if (std::isnan(x)) return "NAN";
  if (std::isinf(x)) return x > 0 ? "INF_POS" : "INF_NEG";
  return "FINITE";
}

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
            {optuna_name(directions[k]), integer(made[0][0]), int64_t(k)});
        }
        return integer(made[0][0]);
      }
      const auto found = q("SELECT study_id FROM studies WHERE study_name = $1", {name});
      if (found.empty()) throw Error("trainkit: study \"" + name + "\" vanished while created");
      if (!load_if_exists) throw_study_exists(name);
      const int64_t id = integer(found[0][0]);
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
        names.push_back(text(row[0]));
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
        id = integer(waiting[0][0]);
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
      set_attr(id, "system", "worker", worker.to_json());
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
            {study, "trainkit:enqueued:" + key});
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
      require_values(end, directions_of(integer(study[0][0])).size());
      // The study first, as start_trial locks it: a retry takes the next number.
      if (end.retry) lock_study(integer(study[0][0]));
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
        enqueue_locked(integer(study[0][0]),
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
      return parse_double(text(rows[0][0]));
    });
  }

 protected:
  explicit SqlStorage(std::unique_ptr<SqlConnection> db) : db_(std::move(db)) {
    if (!has_table("alembic_version")) {
      // A new database, or trainkit 0.1's: Optuna's tables, made (and 0.1's
      // rows moved into them) in one transaction. DDL only then: a worker may
      // hold DML rights only.
      run(true, [&] {
        // Two PostgreSQL sessions creating the same tables at once can both
        // fail; SQLite's write lock already serialises this.
        if (db_->dialect() == SqlDialect::Postgres) q("SELECT pg_advisory_xact_lock(7142003)", {});
        if (has_table_now("alembic_version")) return;  // another worker made them meanwhile
        if (has_table_now("studies")) {
          throw Error("trainkit: " + db_->where() +
                      " has Optuna's table `studies` but no `alembic_version`, so its schema "
                      "revision is unknown: it is not a study database as Optuna or trainkit "
                      "write one (a partial copy?)");
        }
        for (const auto& s : schema_statements(db_->dialect())) q(s, {});
        q("INSERT INTO version_info (version_info_id, schema_version, library_version) VALUES (1, "
          "$1, $2)",
          {kOptunaSchemaVersion, "trainkit " + std::to_string(TRAINKIT_VERSION_MAJOR) + "." +
                                     std::to_string(TRAINKIT_VERSION_MINOR) + "." +
                                     std::to_string(TRAINKIT_VERSION_PATCH)});
        q("INSERT INTO alembic_version (version_num) VALUES ($1)",
          {std::string(kOptunaRevisions[0])});
        if (has_table_now("tune_meta")) convert_legacy();
      });
    }
    const auto revision =
        run(false, [&] { return q("SELECT version_num FROM alembic_version", {}); });
    check_schema_revision(db_->where(), revision.size() == 1 ? revision[0][0] : std::nullopt);
  }

 private:
  // Whether the database has `table`, in a transaction of its own.
  bool has_table(const std::string& table) {
    return run(false, [&] { return has_table_now(table); });
  }
  bool has_table_now(const std::string& table) {
    return !q(db_->dialect() == SqlDialect::Sqlite
                  ? "SELECT name FROM sqlite_master WHERE type = 'table' AND name = $1"
                  : "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = "
                    "current_schema() AND tablename = $1",
              {table})
                .empty();
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

  static const std::string& text(const std::optional<std::string>& cell) {
    if (!cell) throw Error("trainkit: the study database holds NULL where a value must be");
    return *cell;
  }
  static int64_t integer(const std::optional<std::string>& cell) { return parse_int(text(cell)); }
  static SqlParam finite_or_null(double x) {
    return std::isfinite(x) ? SqlParam(x) : SqlParam(nullptr);
  }
  // A stored value and its type column, as a double.
  static double typed_value(const std::optional<std::string>& value, const std::string& type) {
    if (type == "FINITE") return parse_double(text(value));
    if (type == "INF_POS") return std::numeric_limits<double>::infinity();
    if (type == "INF_NEG") return -std::numeric_limits<double>::infinity();
    if (type == "NAN") return std::numeric_limits<double>::quiet_NaN();
    throw Error("trainkit: stored value type \"" + type +
                "\" is unknown; accepted: FINITE, INF_POS, INF_NEG, NAN");
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
      const auto& d = text(row[0]);
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
    const auto state = trial_state_from_optuna(text(rows[0][1]));
    if (state != TrialState::Running) {
      throw TrialNotRunning("trainkit: trial " + text(rows[0][0]) + " is " + to_string(state) +
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
    return integer(
        q("SELECT COUNT(*) FROM trials WHERE study_id = $1 AND state IN (" + states + ")",
          params)[0][0]);
  }

  // A new trial (the study row is locked), numbered as Optuna numbers it:
  // the count of the study's trials before it.
  int64_t insert_trial(int64_t study, TrialState s) {
    const bool running = s == TrialState::Running;
    const int64_t id = integer(
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
        if (key != "fixed_params") set_attr(id, "system", key, v);
      }
    }
    set_attr(id, "system", "fixed_params", params);
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
      t.id = integer(r[0]);
      t.number = integer(r[1]);
      t.state = trial_state_from_optuna(text(r[2]));
      if (r[3]) t.started_at = parse_double(*r[3]);
      if (r[4]) t.finished_at = parse_double(*r[4]);
      const int64_t study = integer(r[5]);
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
      const int64_t id = integer(r[0]), objective = integer(r[1]);
      auto& t = out[index.at(id)];
      const size_t n = objectives_of.at(id);
      if (objective < 0 || size_t(objective) >= n)
        throw Error("trainkit: trial " + std::to_string(t.number) + " has a value of objective " +
                    std::to_string(objective) + " in a study of " + std::to_string(n) +
                    " objective(s)");
      const double v = typed_value(r[2], text(r[3]));
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
      out[index.at(integer(r[0]))].params[text(r[1])] =
          stored_param(text(r[1]), text(r[2]), text(r[3]));
    }
    for (const auto& r : q("SELECT x.trial_id, x.step, x.intermediate_value, "
                           "x.intermediate_value_type FROM trial_intermediate_values" +
                               where,
                           {key})) {
      out[index.at(integer(r[0]))].intermediate[integer(r[1])] = typed_value(r[2], text(r[3]));
    }
    for (const char* kind : {"user", "system"}) {
      for (const auto& r : q(std::string("SELECT x.trial_id, x.\"key\", x.value_json FROM trial_") +
                                 kind + "_attributes" + where,
                             {key})) {
        auto& t = out[index.at(integer(r[0]))];
        (kind == std::string_view("user") ? t.user_attrs : t.system_attrs)[text(r[1])] =
            attr_from_text(text(r[2]), text(r[1]));
      }
    }
    return out;
  }

  // trainkit 0.1's tables (tune_*), moved into Optuna's just made, in the
  // transaction that made them: every study, trial, parameter, value and
  // attribute, then the old tables dropped.
  void convert_legacy() {
    const auto version = q("SELECT value FROM tune_meta WHERE key = 'schema_version'", {});
    if (version.empty() || text(version[0][0]) != "1") {
      throw Error("trainkit: " + db_->where() + " has trainkit schema version " +
                  (version.empty() ? std::string("(none)") : text(version[0][0])) +
                  "; this trainkit converts version 1 (trainkit 0.1) to Optuna's schema");
    }
    std::map<int64_t, int64_t> studies, trials;  // old id -> new id
    std::map<int64_t, double> beats;             // running trials' last beats, by new id
    for (const auto& r : q("SELECT id, name, direction FROM tune_studies ORDER BY id", {})) {
      const auto id = integer(
          q("INSERT INTO studies (study_name) VALUES ($1) RETURNING study_id", {text(r[1])})[0][0]);
      q("INSERT INTO study_directions (direction, study_id, objective) VALUES ($1, $2, 0)",
        {optuna_name(direction_from_string(text(r[2]))), id});
      studies[integer(r[0])] = id;
    }
    for (const auto& r : q("SELECT study_id, key FROM tune_study_marks", {})) {
      q("INSERT INTO study_system_attributes (study_id, \"key\", value_json) VALUES ($1, $2, "
        "'true')",
        {studies.at(integer(r[0])), "trainkit:enqueued:" + text(r[1])});
    }
    const auto seconds = [](const std::optional<std::string>& cell) {
      const double x = parse_double(text(cell));
      return x > 0 ? SqlParam(x) : SqlParam(nullptr);  // 0: not yet
    };
    for (const auto& r : q("SELECT id, study_id, number, state, value, started_at, finished_at, "
                           "heartbeat FROM tune_trials ORDER BY study_id, number",
                           {})) {
      const auto state = trial_state_from_string(text(r[3]));
      const auto id = integer(
          q("INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete) "
            "VALUES ($1, $2, $3, {local_time($4)}, {local_time($5)}) RETURNING trial_id",
            {integer(r[2]), studies.at(integer(r[1])), optuna_name(state), seconds(r[5]),
             seconds(r[6])})[0][0]);
      trials[integer(r[0])] = id;
      if (r[4] && state != TrialState::Running && state != TrialState::Waiting) {
        const double value = parse_double(*r[4]);
        if (!std::isnan(value)) {
          q("INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES ($1, 0, $2, "
            "$3)",
            {id, finite_or_null(value), value_type(value)});
        }
      }
      if (state == TrialState::Running) beats[id] = parse_double(text(r[7]));
    }
    for (const auto& r :
         q("SELECT trial_id, name, distribution, internal FROM tune_trial_params", {})) {
      const auto p = stored_param(text(r[1]), text(r[2]), text(r[3]));
      q("INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES "
        "($1, $2, $3, $4)",
        {trials.at(integer(r[0])), text(r[1]), p.internal, to_optuna_json(p.distribution).dump()});
    }
    for (const auto& r : q("SELECT trial_id, step, value FROM tune_trial_values", {})) {
      const double value = parse_double(text(r[2]));
      q("INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, "
        "intermediate_value_type) VALUES ($1, $2, $3, $4)",
        {trials.at(integer(r[0])), integer(r[1]), finite_or_null(value), value_type(value)});
    }
    for (const auto& r : q("SELECT trial_id, kind, key, value FROM tune_trial_attrs", {})) {
      const auto id = trials.at(integer(r[0]));
      const auto v = legacy_attr_from_text(text(r[3]), text(r[2]));
      set_attr(id, text(r[1]), text(r[2]), v);
      // A heartbeat row for a running trial whose worker beats, as start_trial writes.
      const bool beating = text(r[1]) == "system" && text(r[2]) == "worker" && v.is_object() &&
                           v.value("heartbeat_s", 0.0) > 0;
      if (beating && beats.contains(id)) {
        q("INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES ($1, {db_time($2)})",
          {id, beats.at(id)});
      }
    }
    for (const char* table : {"tune_trial_attrs", "tune_trial_values", "tune_trial_params",
                              "tune_trials", "tune_study_marks", "tune_studies", "tune_meta"}) {
      q(std::string("DROP TABLE ") + table, {});
    }
  }

  std::mutex mutex_;  // the study's heartbeat thread shares the connection
  std::unique_ptr<SqlConnection> db_;
};

}  // namespace trainkit::tune::detail
