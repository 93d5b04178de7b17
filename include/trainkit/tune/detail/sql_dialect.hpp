#pragma once
// The one SQL both study storages speak: statements are PostgreSQL's with
// $1, $2, ... placeholders and a few {tokens} (types, the clock, row locks)
// that render_sql turns into each dialect, run over a small connection
// interface each backend (sqlite.hpp, postgres.hpp) implements.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

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
  /// Readies the database for writing (SQLite: its write-ahead log), once
  /// the storage has read that it may use it: nothing before this writes,
  /// so a database the storage refuses is left as it was.
  virtual void ready_to_write() {}
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

}  // namespace trainkit::tune::detail
