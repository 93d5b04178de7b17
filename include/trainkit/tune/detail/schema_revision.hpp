#pragma once
// Which revisions of Optuna's schema (its alembic `version_num`) a study
// database may have: the ones trainkit reads and writes, the older ones
// Optuna's own upgrade takes on, and the error for any other.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "trainkit/error.hpp"

namespace trainkit::tune::detail {

/// The revisions of Optuna's schema this storage reads and writes: 4.x's
/// (the first, written in a new database), and 3.x's, whose tables are the same.
inline constexpr std::string_view kOptunaRevisions[] = {"v3.2.0.a", "v3.0.0.d"};
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
  const auto among = [&](const auto& list) {
    return found && std::find(std::begin(list), std::end(list), *found) != std::end(list);
  };
  if (among(kOptunaRevisions)) return;
  throw Error("trainkit: " + where + " has Optuna schema revision " + found.value_or("(none)") +
              "; this trainkit reads " + std::string(kOptunaRevisions[0]) + " (Optuna 4) and " +
              std::string(kOptunaRevisions[1]) + " (Optuna 3); " +
              (among(kOlderOptunaRevisions)
                   ? "this older one needs `optuna storage upgrade` first"
                   : "it is not one Optuna made before this trainkit: a newer trainkit may read "
                     "it (upgrade trainkit, not the database)"));
}

}  // namespace trainkit::tune::detail
