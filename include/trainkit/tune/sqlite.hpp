#pragma once
// SqliteStorage: a study in one SQLite file that several processes on one
// machine share (WAL journal, so readers never wait for the writer; every
// write transaction starts with BEGIN IMMEDIATE and waits up to
// `busy_timeout` for the lock). A process killed mid-write leaves the study
// as it was before the write. Not for network file systems: WAL needs
// shared memory between the processes.
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/tune/detail/sql_storage.hpp"
#include "trainkit/tune/sql_options.hpp"

namespace trainkit::tune {

struct SqliteOptions {
  /// How long a write waits for another process's transaction.
  std::chrono::milliseconds busy_timeout{60000};
  /// How a new study file is made (its Optuna revision, other tables).
  NewDatabaseOptions create{};
};

namespace detail {

class SqliteConnection final : public SqlConnection {
 public:
  SqliteConnection(const std::filesystem::path& file, const SqliteOptions& o)
      : path_(file.string()), busy_timeout_(o.busy_timeout) {
    trainkit::detail::require_file_path("SqliteStorage file", file, "study.db");
    trainkit::detail::require_option(
        o.busy_timeout.count() >= 0 && o.busy_timeout.count() <= std::numeric_limits<int>::max(),
        "SqliteOptions.busy_timeout", o.busy_timeout.count(), "0 to 2^31 - 1 milliseconds");
    if (sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
        SQLITE_OK) {
      const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close_v2(db_);
      throw Error("trainkit: cannot open SQLite database \"" + path_ + "\": " + why);
    }
    try {
      sqlite3_extended_result_codes(db_, 1);
      sqlite3_busy_timeout(db_, static_cast<int>(o.busy_timeout.count()));
      // WAL (ready_to_write) + NORMAL: a killed process never loses a
      // commit; only a power cut may lose the last ones (never corrupts).
      query("PRAGMA synchronous = NORMAL", {});
      query("PRAGMA foreign_keys = ON", {});
    } catch (...) {
      close();
      throw;
    }
  }
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;
  ~SqliteConnection() override { close(); }

  SqlDialect dialect() const override { return SqlDialect::Sqlite; }
  void ready_to_write() override {
    const auto mode = switch_to_wal();
    if (mode.empty() || !mode[0][0] || *mode[0][0] != "wal") {
      throw Error("trainkit: SQLite database \"" + path_ +
                  "\" cannot use a write-ahead log (journal_mode " +
                  (mode.empty() || !mode[0][0] ? std::string("?") : *mode[0][0]) +
                  "); is it on a network file system?");
    }
  }
  std::string where() const override { return "SQLite database \"" + path_ + "\""; }

  void transaction(bool write, const std::function<void()>& body) override {
    query(write ? "BEGIN IMMEDIATE" : "BEGIN", {});
    try {
      body();
      query("COMMIT", {});
    } catch (...) {
      // An I/O error may have rolled back already.
      if (!sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  SqlRows query(const std::string& sql, const std::vector<SqlParam>& params) override {
    sqlite3_stmt* s = prepare(sql);
    struct Reset {  // leaves the statement ready (and its read lock released)
      sqlite3_stmt* s;
      ~Reset() {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
      }
    } reset{s};
    for (size_t k = 0; k < params.size(); ++k) {
      const int i = static_cast<int>(k + 1);
      int rc = SQLITE_OK;
      if (const auto* n = std::get_if<int64_t>(&params[k])) {
        rc = sqlite3_bind_int64(s, i, *n);
      } else if (const auto* x = std::get_if<double>(&params[k])) {
        rc = sqlite3_bind_double(s, i, *x);
      } else if (const auto* t = std::get_if<std::string>(&params[k])) {
        rc = sqlite3_bind_text(s, i, t->data(), static_cast<int>(t->size()), SQLITE_TRANSIENT);
      } else {
        rc = sqlite3_bind_null(s, i);
      }
      if (rc != SQLITE_OK) fail(sql);
    }
    SqlRows rows;
    for (;;) {
      const int rc = sqlite3_step(s);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) fail(sql);
      SqlRow row(static_cast<size_t>(sqlite3_column_count(s)));
      for (int c = 0; c < static_cast<int>(row.size()); ++c) {
        const int type = sqlite3_column_type(s, c);
        if (type == SQLITE_NULL) continue;
        if (type == SQLITE_FLOAT) {  // SQLite's own text of a double keeps 15 digits
          row[static_cast<size_t>(c)] = format_double(sqlite3_column_double(s, c));
          continue;
        }
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, c));
        row[static_cast<size_t>(c)].emplace(p, static_cast<size_t>(sqlite3_column_bytes(s, c)));
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

 private:
  /// PRAGMA journal_mode = WAL, retried while the file is busy for up to
  /// `timeout`. Switching a new database takes an exclusive lock, and when
  /// several connections switch it at once SQLite answers SQLITE_BUSY at
  /// once rather than wait (its deadlock rule), so the busy timeout alone
  /// does not cover workers that open a new study together (nor does this
  /// with a busy timeout of 0).
  SqlRows switch_to_wal() {
    const auto deadline = std::chrono::steady_clock::now() + busy_timeout_;
    for (int attempt = 1;; ++attempt) {
      try {
        return query("PRAGMA journal_mode = WAL", {});
      } catch (const Error&) {
        const bool busy = (sqlite3_extended_errcode(db_) & 0xff) == SQLITE_BUSY;  // any BUSY_*
        if (!busy || std::chrono::steady_clock::now() >= deadline) throw;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(attempt, 50)));
    }
  }

  sqlite3_stmt* prepare(const std::string& sql) {
    if (const auto it = statements_.find(sql); it != statements_.end()) return it->second;
    const std::string rendered = render_sql(sql, SqlDialect::Sqlite);
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v3(db_, rendered.c_str(), static_cast<int>(rendered.size()),
                           SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) {
      fail(sql);
    }
    statements_.emplace(sql, s);
    return s;
  }

  [[noreturn]] void fail(const std::string& sql) const {
    const std::string head = sql.size() > 60 ? sql.substr(0, 60) + "..." : sql;
    throw Error("trainkit: " + where() + ": " + sqlite3_errmsg(db_) + " (in `" + head + "`)");
  }

  void close() {
    for (auto& [sql, s] : statements_) sqlite3_finalize(s);
    statements_.clear();
    sqlite3_close_v2(db_);
    db_ = nullptr;
  }

  std::string path_;
  std::chrono::milliseconds busy_timeout_;
  sqlite3* db_ = nullptr;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

}  // namespace detail

/// A study database in one file, shared by the processes of one machine.
class SqliteStorage final : public detail::SqlStorage {
 public:
  explicit SqliteStorage(const std::filesystem::path& file, SqliteOptions options = {})
      : detail::SqlStorage(std::make_unique<detail::SqliteConnection>(file, options),
                           options.create),
        path_(file) {}
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace trainkit::tune
