// Writes a study database in the schema trainkit 0.1.0 wrote (its own
// tables, tune_*), which later versions convert to Optuna's on open
// (storage_test.cpp): tests/reference/tune_study_0_1_0.db for SQLite, and
// for PostgreSQL the tables of an empty database, dumped as plain SQL to
// tests/reference/tune_study_0_1_0.pg.sql. Built against v0.1.0's headers,
// once:
//   git worktree add /tmp/tk-0.1.0 v0.1.0
//   g++ -std=c++20 -I /tmp/tk-0.1.0/include -I /usr/include/postgresql \
//       tests/reference/make_tune_study_0_1_0.cpp -lsqlite3 -lpq -o /tmp/make_study
//   /tmp/make_study tests/reference/tune_study_0_1_0.db
//   scripts/postgres.sh start /tmp/pg01 55401
//   createdb -h 127.0.0.1 -p 55401 -U postgres legacy
//   /tmp/make_study postgres:postgresql://postgres@127.0.0.1:55401/legacy
//   pg_dump -h 127.0.0.1 -p 55401 -U postgres --no-owner --no-privileges --inserts legacy |
//       grep -v '^\\' > tests/reference/tune_study_0_1_0.pg.sql  # SQL alone, no psql commands
//   scripts/postgres.sh stop /tmp/pg01
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include <trainkit/tune/postgres.hpp>
#include <trainkit/tune/sqlite.hpp>

using namespace trainkit::tune;

namespace {

void write(Storage& s) {
  const WorkerId me{"host", "", 4242, 5};
  const double inf = std::numeric_limits<double>::infinity();
  const auto study = s.create_study("legacy", Direction::Minimize, false);
  // 0: complete, every kind of parameter, odd intermediate values and attrs.
  auto t = *s.start_trial(study, me, std::nullopt, false);
  s.set_param(t.id, "lr", {FloatDistribution{1e-5, 0.3, true, std::nullopt}, 0.1 + 0.2});
  s.set_param(t.id, "grid", {FloatDistribution{0.1, 0.9, false, 0.1}, 0.30000000000000004});
  s.set_param(t.id, "units", {IntDistribution{-3, 1000, 7, false}, 4});
  s.set_param(t.id, "layers", {IntDistribution{1, 64, 1, true}, 17});
  s.set_param(t.id, "choice", {CategoricalDistribution{{"a", 1, 2.5, true, nullptr}}, 3});
  s.report(t.id, 0, 0.5);
  s.report(t.id, 1, std::nan(""));
  s.report(t.id, 2, inf);
  s.report(t.id, 3, -inf);
  s.set_user_attr(t.id, "note", {{"list", {1, "x"}}, {"nan", std::nan("")}, {"inf", inf}});
  s.finish_trial(t.id, {TrialState::Complete, 0.125});
  // 1: pruned with its last value; 2: failed, and enqueued again; 3: infinite.
  t = *s.start_trial(study, me, std::nullopt, false);
  s.set_param(t.id, "lr", {FloatDistribution{1e-5, 0.3, true, std::nullopt}, 0.01});
  s.report(t.id, 0, 2.0);
  s.finish_trial(t.id, {TrialState::Pruned, 2.0, {{"prune_reason", "rung 0"}}});
  t = *s.start_trial(study, me, std::nullopt, false);
  s.set_param(t.id, "lr", {FloatDistribution{1e-5, 0.3, true, std::nullopt}, 0.2});
  s.finish_trial(t.id, {TrialState::Fail,
                        std::nullopt,
                        {{"fail_reason", "gone"}, {"lost_worker", true}},
                        nlohmann::json{{"retry_of", 2}, {"retries", 1}}});
  t = *s.start_trial(study, me, std::nullopt, true);  // claims the retry (number 3)
  s.finish_trial(t.id, {TrialState::Complete, inf});
  // 4: still running; 5: waiting.
  t = *s.start_trial(study, me, std::nullopt, false);
  s.set_param(t.id, "lr", {FloatDistribution{1e-5, 0.3, true, std::nullopt}, 0.05});
  s.heartbeat(t.id);
  s.enqueue_trial(study, {{"lr", 0.001}, {"choice", "a"}}, nlohmann::json::object());
  // A second study, maximised, with a grid enqueued once.
  const auto other = s.create_study("other", Direction::Maximize, false);
  s.enqueue_trials_once(other, "grid:x", {{{"x", 1}}, {{"x", 2}}});
  t = *s.start_trial(other, me, std::nullopt, false);
  s.set_param(t.id, "x", {IntDistribution{1, 2, 1, false}, 1});
  s.finish_trial(t.id, {TrialState::Complete, 7.0});
}

}  // namespace

// ARG: a file for SQLite, or postgres:CONNINFO (an empty database).
int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string arg = argv[1];
  if (arg.rfind("postgres:", 0) == 0) {
    PostgresStorage s(arg.substr(9));
    write(s);
    return 0;
  }
  std::filesystem::remove(arg);
  SqliteStorage s(arg);
  write(s);
}
