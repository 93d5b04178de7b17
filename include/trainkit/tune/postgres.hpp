#pragma once
// PostgresStorage: a study in a PostgreSQL database, shared by workers on
// any number of machines. A waiting trial is claimed with FOR NO KEY UPDATE
// SKIP LOCKED (two workers never get the same one), new numbers are taken
// under the study row's lock, and times are the server's clock, so that
// heartbeats compare across machines. A transaction that loses a deadlock
// is run again, and so is one whose connection broke before its COMMIT was
// sent (the server rolled it back), on a new connection. Connections time
// out (connect_timeout, TCP keepalives and user timeout, unless the
// connection string says otherwise), so a dead server or network ends a
// call with an error instead of hanging the worker.
#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/tune/detail/sql_storage.hpp"
#include "trainkit/tune/sql_options.hpp"

namespace trainkit::tune {

namespace detail {

class PostgresConnection final : public SqlConnection {
 public:
  explicit PostgresConnection(std::string conninfo) : conninfo_(std::move(conninfo)) {
    where_ = describe(conninfo_);
    // Defaults first: the connection string (expanded from "dbname", last)
    // overrides them.
    const char* keys[] = {
        "connect_timeout",  "keepalives",       "keepalives_idle", "keepalives_interval",
        "keepalives_count", "tcp_user_timeout", "dbname",          nullptr};
    const char* values[] = {"10", "1", "30", "10", "3", "60000", conninfo_.c_str(), nullptr};
    conn_ = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
      const std::string why = conn_ ? trimmed(PQerrorMessage(conn_)) : "out of memory";
      PQfinish(conn_);
      throw Error("trainkit: cannot connect to " + where() + ": " + why);
    }
    start_session();
  }
  PostgresConnection(const PostgresConnection&) = delete;
  PostgresConnection& operator=(const PostgresConnection&) = delete;
  ~PostgresConnection() override { PQfinish(conn_); }

  SqlDialect dialect() const override { return SqlDialect::Postgres; }
  std::string where() const override { return "PostgreSQL database (" + where_ + ")"; }

  void transaction(bool write, const std::function<void()>& body) override {
    reconnect_if_broken();
    // Reads see one snapshot across their statements.
    const char* begin = write ? "BEGIN" : "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
    bool reconnected = false;
    for (int attempt = 1;; ++attempt) {
      bool committing = false;
      try {
        command(begin);
        body();
        committing = true;
        command("COMMIT");
        return;
      } catch (const Conflict& e) {
        rollback();
        if (attempt == 20) throw Error(e.what());
        if (!rng_) rng_.emplace(std::random_device{}());
        std::this_thread::sleep_for(std::chrono::milliseconds(1 + (*rng_)() % (5 * attempt)));
      } catch (...) {
        // A connection lost before COMMIT: nothing was written; once more
        // on a new one. After COMMIT was sent nobody knows: the error stands.
        if (PQstatus(conn_) == CONNECTION_OK || committing || reconnected) {
          rollback();
          throw;
        }
        reconnected = true;
        reconnect_if_broken();
      }
    }
  }

  SqlRows query(const std::string& sql, const std::vector<SqlParam>& params) override {
    const std::string& name = prepare(sql);
    std::vector<std::string> texts(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    for (size_t k = 0; k < params.size(); ++k) {
      if (const auto* n = std::get_if<int64_t>(&params[k])) {
        texts[k] = std::to_string(*n);
      } else if (const auto* x = std::get_if<double>(&params[k])) {
        texts[k] = format_double(*x);  // exact: float8in reads it back to the same bits
      } else if (const auto* t = std::get_if<std::string>(&params[k])) {
        texts[k] = *t;
      } else {
        continue;  // NULL
      }
      values[k] = texts[k].c_str();
    }
    Result r(PQexecPrepared(conn_, name.c_str(), static_cast<int>(params.size()), values.data(),
                            nullptr, nullptr, 0));
    check(r.get(), sql);
    SqlRows rows(static_cast<size_t>(PQntuples(r.get())));
    const int columns = PQnfields(r.get());
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i].resize(static_cast<size_t>(columns));
      for (int c = 0; c < columns; ++c) {
        const int row = static_cast<int>(i);
        if (PQgetisnull(r.get(), row, c)) continue;
        rows[i][static_cast<size_t>(c)].emplace(PQgetvalue(r.get(), row, c),
                                                static_cast<size_t>(PQgetlength(r.get(), row, c)));
      }
    }
    return rows;
  }

 private:
  struct Result {
    explicit Result(PGresult* r) : r_(r) {}
    Result(const Result&) = delete;
    Result& operator=(const Result&) = delete;
    ~Result() { PQclear(r_); }
    PGresult* get() const { return r_; }
    PGresult* r_;
  };
  // A deadlock: the transaction may be run again.
  struct Conflict : Error {
    using Error::Error;
  };

  static std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  // The connection string's host, port, database and user (never a password).
  static std::string describe(const std::string& conninfo) {
    char* error = nullptr;
    PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
    if (!options) {
      const std::string why = error ? trimmed(error) : "out of memory";
      PQfreemem(error);
      throw Error("trainkit: PostgreSQL connection string is invalid: " + why);
    }
    std::string out;
    for (auto* o = options; o->keyword; ++o) {
      const std::string key = o->keyword;
      if (!o->val || (key != "host" && key != "hostaddr" && key != "port" && key != "dbname" &&
                      key != "user")) {
        continue;
      }
      out += (out.empty() ? "" : " ") + key + "=" + o->val;
    }
    PQconninfoFree(options);
    return out.empty() ? "default connection" : out;
  }

  void start_session() {
    statements_.clear();  // a new session has no prepared statements
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);  // "already exists"
    // Shortest exact text of doubles whatever the server's default.
    command("SET extra_float_digits = 3");
    // A worker that hangs inside a transaction does not hold its locks
    // (the study row) for ever.
    command("SET idle_in_transaction_session_timeout = 60000");
  }

  void reconnect_if_broken() {
    if (PQstatus(conn_) == CONNECTION_OK) return;
    PQreset(conn_);
    if (PQstatus(conn_) != CONNECTION_OK) {
      throw Error("trainkit: lost the connection to " + where() +
                  " and could not reconnect: " + trimmed(PQerrorMessage(conn_)));
    }
    start_session();
  }

  void command(const char* sql) {
    Result r(PQexec(conn_, sql));
    check(r.get(), sql);
  }

  void rollback() {
    const auto status = PQtransactionStatus(conn_);
    if (status == PQTRANS_INTRANS || status == PQTRANS_INERROR) PQclear(PQexec(conn_, "ROLLBACK"));
  }

  const std::string& prepare(const std::string& sql) {
    if (const auto it = statements_.find(sql); it != statements_.end()) return it->second;
    const std::string name = "trainkit_" + std::to_string(statements_.size());
    Result r(
        PQprepare(conn_, name.c_str(), render_sql(sql, SqlDialect::Postgres).c_str(), 0, nullptr));
    check(r.get(), sql);
    return statements_.emplace(sql, name).first->second;
  }

  void check(PGresult* r, const std::string& sql) const {
    const auto status = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return;
    const std::string why = trimmed(r ? PQresultErrorMessage(r) : PQerrorMessage(conn_));
    const std::string head = sql.size() > 60 ? sql.substr(0, 60) + "..." : sql;
    const std::string message = "trainkit: " + where() + ": " + why + " (in `" + head + "`)";
    const char* code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
    if (code && std::string(code) == "40P01") throw Conflict(message);  // deadlock detected
    throw Error(message);
  }

  std::string conninfo_;
  std::string where_;
  PGconn* conn_ = nullptr;
  std::unordered_map<std::string, std::string> statements_;  // SQL -> prepared name
  std::optional<std::mt19937> rng_;                          // backoff, made on first conflict
};

}  // namespace detail

/// A study database on a PostgreSQL server. `conninfo` is what libpq takes:
/// "host=db.example port=5432 dbname=studies user=me" or
/// "postgresql://me@db.example/studies"; libpq's environment variables
/// (PGHOST, PGPASSWORD, ...) and ~/.pgpass apply.
struct PostgresOptions {
  /// How a new study database is made (its Optuna revision, other tables).
  NewDatabaseOptions create{};
};

class PostgresStorage final : public detail::SqlStorage {
 public:
  explicit PostgresStorage(const std::string& conninfo, const PostgresOptions& options = {})
      : detail::SqlStorage(std::make_unique<detail::PostgresConnection>(conninfo), options.create) {
  }
};

}  // namespace trainkit::tune
