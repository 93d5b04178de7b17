#pragma once
// A storage named on a command line (tune_worker, tune_optuna_interop):
// sqlite:PATH or postgres:CONNINFO.
#include <cstdlib>
#include <memory>
#include <string>

#include <trainkit/tune/sqlite.hpp>
#if TRAINKIT_TUNE_HAS_POSTGRES
#include <trainkit/tune/postgres.hpp>
#endif

namespace tune_test {

// A new database's schema: the storages' default, or Optuna 4's where
// TRAINKIT_TEST_OPTUNA_SCHEMA is "optuna4" (optuna_interop_test.py).
inline trainkit::tune::NewDatabaseOptions new_database_options() {
  const char* schema = std::getenv("TRAINKIT_TEST_OPTUNA_SCHEMA");
  trainkit::tune::NewDatabaseOptions o;
  if (schema && std::string(schema) == "optuna4") o.schema = trainkit::tune::OptunaSchema::Optuna4;
  return o;
}

inline std::shared_ptr<trainkit::tune::Storage> open_storage(const std::string& spec) {
  if (spec.rfind("sqlite:", 0) == 0) {
    return std::make_shared<trainkit::tune::SqliteStorage>(
        spec.substr(7), trainkit::tune::SqliteOptions{.create = new_database_options()});
  }
#if TRAINKIT_TUNE_HAS_POSTGRES
  if (spec.rfind("postgres:", 0) == 0) {
    return std::make_shared<trainkit::tune::PostgresStorage>(
        spec.substr(9), trainkit::tune::PostgresOptions{.create = new_database_options()});
  }
#endif
  throw trainkit::Error("trainkit test: unknown storage \"" + spec +
                        "\"; accepted: sqlite:PATH, postgres:CONNINFO");
}

}  // namespace tune_test
