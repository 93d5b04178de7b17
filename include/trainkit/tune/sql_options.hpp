#pragma once
// What SqliteStorage and PostgresStorage do with a database that holds no
// study yet: which Optuna its schema is written for, and whether it may
// hold other tables.

namespace trainkit::tune {

/// The Optuna a new study database is written for: the schema revision
/// (alembic's `version_num`) it is stamped with. The tables are the same;
/// each Optuna opens only its own revision without a step:
/// - Optuna3 (`v3.0.0.d`): Optuna 3.x opens it as it is, Optuna 4 after
///   `optuna storage upgrade` (one command; every row kept, and trainkit
///   goes on reading the upgraded file).
/// - Optuna4 (`v3.2.0.a`): Optuna 4 opens it as it is; no Optuna 3 does.
/// An existing database keeps the revision it has.
enum class OptunaSchema { Optuna3, Optuna4 };

/// How a storage makes Optuna's tables in a database that has none.
struct NewDatabaseOptions {
  /// Optuna3 by default: the one revision that every Optuna from 3.0 on can
  /// reach (docs/tune.md, "Studies, storages and workers").
  OptunaSchema schema = OptunaSchema::Optuna3;
  /// Whether Optuna's tables may be made in a database that holds other
  /// tables. By default such a database is refused, untouched: it is more
  /// often a wrong path than a database meant to be shared.
  bool beside_other_tables = false;
};

}  // namespace trainkit::tune
