#pragma once
// A storage named on a command line (tune_worker, tune_optuna_interop):
// sqlite:PATH or postgres:CONNINFO.
#include <memory>
#include <string>

#include <trainkit/tune/sqlite.hpp>
#if TRAINKIT_TUNE_HAS_POSTGRES
#include <trainkit/tune/postgres.hpp>
#endif

namespace tune_test {

inline std::shared_ptr<trainkit::tune::Storage> open_storage(const std::string& spec) {
  if (spec.rfind("sqlite:", 0) == 0)
    return std::make_shared<trainkit::tune::SqliteStorage>(spec.substr(7));
#if TRAINKIT_TUNE_HAS_POSTGRES
  if (spec.rfind("postgres:", 0) == 0)
    return std::make_shared<trainkit::tune::PostgresStorage>(spec.substr(9));
#endif
  throw trainkit::Error("trainkit test: unknown storage \"" + spec +
                        "\"; accepted: sqlite:PATH, postgres:CONNINFO");
}

}  // namespace tune_test
