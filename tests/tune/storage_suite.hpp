#pragma once
// The storages under test, for the cases that run on each of them
// (storage_test.cpp, workers_test.cpp). PostgreSQL's cases run when
// TRAINKIT_TEST_POSTGRES holds a connection string (CTest's
// test_tune.postgres starts a server and sets it); without it they are
// skipped, and not listed, so that CTest registers them once, there.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "../scratch.hpp"

#include <trainkit/tune/sqlite.hpp>
#include <trainkit/tune/storage.hpp>
#if TRAINKIT_TUNE_HAS_POSTGRES
#include <trainkit/tune/postgres.hpp>
#endif

namespace tune_test {

using namespace trainkit::tune;

inline const char* postgres_conninfo() {
#if TRAINKIT_TUNE_HAS_POSTGRES
  const char* c = std::getenv("TRAINKIT_TEST_POSTGRES");
  return c && *c ? c : nullptr;
#else
  return nullptr;
#endif
}

/// A fresh folder, removed with its last owner.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = tk_test::temp_dir("tune_" + std::to_string(counter++));
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// One database of one kind.
struct Backend {
  std::string name;
  /// Another handle on the database: a new connection where the storage
  /// has them (the in-memory one is shared).
  std::function<std::shared_ptr<Storage>()> open;
  /// What tune_worker takes ("" where other processes cannot share it).
  std::string spec;
  std::shared_ptr<TempDir> dir;
};

inline Backend memory_backend() {
  auto s = std::make_shared<InMemoryStorage>();
  return {"memory", [s] { return s; }, "", nullptr};
}

inline Backend sqlite_backend() {
  auto dir = std::make_shared<TempDir>();
  const auto file = dir->path / "study.db";
  return {"sqlite", [file] { return std::make_shared<SqliteStorage>(file); },
          "sqlite:" + file.string(), dir};
}

inline Backend postgres_backend() {
#if TRAINKIT_TUNE_HAS_POSTGRES
  const char* c = postgres_conninfo();
  REQUIRE_MESSAGE(c, "TRAINKIT_TEST_POSTGRES is not set");
  const std::string conninfo = c;
  return {"postgres", [conninfo] { return std::make_shared<PostgresStorage>(conninfo); },
          "postgres:" + conninfo, nullptr};
#else
  FAIL("trainkit::tune was built without libpq");
  return {};
#endif
}

/// A study name no other test, process or earlier run uses (the
/// PostgreSQL database outlives a run).
inline std::string unique_name(const std::string& what) {
  static std::atomic<int> counter{0};
  const auto ns = std::chrono::system_clock::now().time_since_epoch().count();
  return what + "-" + std::to_string(::getpid()) + "-" + std::to_string(ns) + "-" +
         std::to_string(counter++);
}

}  // namespace tune_test

// A case for each storage: "<prefix> memory: title", "... sqlite: ...",
// "... postgres: ..." (the last skipped without a server; see above).
#define TUNE_STORAGE_CASE_IMPL(prefix, title, check)                                      \
  TEST_CASE(prefix " memory: " title) {                                                   \
    check(tune_test::memory_backend());                                                   \
  }                                                                                       \
  TEST_CASE(prefix " sqlite: " title) {                                                   \
    check(tune_test::sqlite_backend());                                                   \
  }                                                                                       \
  TEST_CASE(prefix " postgres: " title* doctest::skip(!tune_test::postgres_conninfo())) { \
    check(tune_test::postgres_backend());                                                 \
  }
// Only the storages that processes share.
#define TUNE_SHARED_STORAGE_CASE_IMPL(prefix, title, check)                               \
  TEST_CASE(prefix " sqlite: " title) {                                                   \
    check(tune_test::sqlite_backend());                                                   \
  }                                                                                       \
  TEST_CASE(prefix " postgres: " title* doctest::skip(!tune_test::postgres_conninfo())) { \
    check(tune_test::postgres_backend());                                                 \
  }
