// The Storage contract (storage.hpp), checked the same way on every storage:
// InMemoryStorage (the reference), SqliteStorage and PostgresStorage.
#include "storage_suite.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <latch>
#include <limits>
#include <map>
#include <set>
#include <thread>
#include <vector>

using namespace trainkit::tune;
using tune_test::Backend;
using tune_test::unique_name;

namespace {

const WorkerId me{"test-host", "boot/4026531836", 1, 5.0};

bool same_bits(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const trainkit::Error& e) {
    return e.what();
  }
  return "(no error)";
}

void create_and_load(const Backend& b) {
  auto s = b.open();
  const auto name = unique_name("create");
  const auto id = s->create_study(name, Direction::Minimize, false);
  CHECK(s->direction(id) == Direction::Minimize);
  CHECK(error_of([&] {
          s->create_study(name, Direction::Minimize, false);
        }).find("already exists") != std::string::npos);
  auto other = b.open();  // another connection sees the same study
  CHECK(other->create_study(name, Direction::Minimize, true) == id);
  const auto mismatch = error_of([&] { other->create_study(name, Direction::Maximize, true); });
  CHECK(mismatch.find("stored with direction minimize, opened with maximize") != std::string::npos);

  const auto name2 = unique_name("create");
  const auto id2 = other->create_study(name2, Direction::Maximize, false);
  CHECK(id2 != id);
  CHECK(s->direction(id2) == Direction::Maximize);
  const auto names = s->study_names();
  const auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n); };
  REQUIRE(at(name) != names.end());
  REQUIRE(at(name2) != names.end());
  CHECK(at(name) < at(name2));  // in creation order

  CHECK(s->trials(id).empty());
  const int64_t missing = 987654321;
  CHECK(error_of([&] { s->direction(missing); }).find("no study with id") != std::string::npos);
  CHECK(error_of([&] { s->trials(missing); }).find("no study with id") != std::string::npos);
  CHECK(error_of([&] {
          s->start_trial(missing, me, std::nullopt, false);
        }).find("no study with id") != std::string::npos);
}
TUNE_STORAGE_CASE_IMPL("storage", "create and load a study and refuse a direction mismatch",
                       create_and_load)

void dense_numbers(const Backend& b) {
  auto s = b.open();
  const auto study = s->create_study(unique_name("dense"), Direction::Minimize, false);
  // Four threads start and enqueue at once (a start claims an enqueued
  // trial when there is one); two share a handle (as a study's heartbeat
  // thread does), two have connections of their own.
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&b, &created, s, study, k] {
      auto mine = k < 2 ? s : b.open();
      for (int i = 0; i < 10; ++i) {
        if (i % 3 == 2) {
          mine->enqueue_trial(study, {{"k", k}});
          ++created;
        } else {
          const auto t = mine->start_trial(study, me, std::nullopt, false);
          CHECK(t.has_value());  // (REQUIRE would throw out of the thread)
          if (!t) continue;
          created += !t->system_attrs.contains("fixed_params");
          if (i % 2 == 0) mine->finish_trial(t->id, {TrialState::Complete, i});
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto trials = s->trials(study);
  REQUIRE(trials.size() == static_cast<size_t>(created.load()));
  CHECK(trials.size() >= 28);
  std::set<int64_t> ids;
  for (size_t k = 0; k < trials.size(); ++k) {
    CHECK(trials[k].number == static_cast<int64_t>(k));
    ids.insert(trials[k].id);
  }
  CHECK(ids.size() == trials.size());
}
TUNE_STORAGE_CASE_IMPL("storage", "trial numbers are unique and dense", dense_numbers)

void waiting_first(const Backend& b) {
  auto s = b.open();
  const auto study = s->create_study(unique_name("waiting"), Direction::Minimize, false);
  s->enqueue_trial(study, {{"x", 1}});
  s->enqueue_trial(study, {{"x", 2}}, {{"retry_of", 7}});
  CHECK_FALSE(s->start_trial(study, me, std::nullopt, true) == std::nullopt);
  const auto second = s->start_trial(study, me, std::nullopt, false);
  REQUIRE(second);
  CHECK(second->number == 1);
  CHECK(second->state == TrialState::Running);
  CHECK(second->system_attrs.at("fixed_params") == nlohmann::json{{"x", 2}});
  CHECK(second->system_attrs.at("retry_of") == 7);
  CHECK(second->system_attrs.at("worker") == me.to_json());
  CHECK(second->started_at > 1e9);
  CHECK(s->start_trial(study, me, std::nullopt, true) == std::nullopt);
  const auto fresh = s->start_trial(study, me, std::nullopt, false);
  REQUIRE(fresh);
  CHECK(fresh->number == 2);
  CHECK_FALSE(fresh->system_attrs.contains("fixed_params"));

  // 30 waiting trials, six threads claiming: each handed out exactly once.
  const auto grid = s->create_study(unique_name("claims"), Direction::Minimize, false);
  for (int k = 0; k < 30; ++k) s->enqueue_trial(grid, {{"k", k}});
  std::mutex mutex;
  std::multiset<int64_t> claimed;
  std::vector<std::thread> threads;
  for (int k = 0; k < 6; ++k) {
    threads.emplace_back([&] {
      auto mine = b.open();
      while (const auto t = mine->start_trial(grid, me, std::nullopt, true)) {
        std::lock_guard lock(mutex);
        claimed.insert(t->system_attrs.at("fixed_params").at("k").get<int64_t>());
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(claimed.size() == 30);
  CHECK(std::set<int64_t>(claimed.begin(), claimed.end()).size() == 30);
  for (const auto& t : s->trials(grid)) CHECK(t.state == TrialState::Running);
}
TUNE_STORAGE_CASE_IMPL("storage", "waiting trials are handed out once, before new ones",
                       waiting_first)

void budget(const Backend& b) {
  auto s = b.open();
  const auto study = s->create_study(unique_name("budget"), Direction::Minimize, false);
  std::vector<int64_t> ids;
  for (int k = 0; k < 3; ++k) ids.push_back(s->start_trial(study, me, 3, false)->id);
  CHECK(s->start_trial(study, me, 3, false) == std::nullopt);
  CHECK(s->start_trial(study, me, 4, false) != std::nullopt);  // 4 now
  s->finish_trial(ids[0], {TrialState::Fail});                 // failed: not counted
  CHECK(s->start_trial(study, me, 4, false) != std::nullopt);
  CHECK(s->start_trial(study, me, 4, false) == std::nullopt);
  // A waiting trial does not count until it starts, and waits past the budget
  // (a grid or enqueued trials never run beyond max_trials).
  s->enqueue_trial(study, {{"x", 1}});
  CHECK(s->start_trial(study, me, 4, true) == std::nullopt);
  const auto w = s->start_trial(study, me, 5, true);
  REQUIRE(w);
  CHECK(w->system_attrs.contains("fixed_params"));
  CHECK(s->start_trial(study, me, 6, false) != std::nullopt);
  CHECK(s->start_trial(study, me, 6, false) == std::nullopt);
  CHECK(s->trials(study).size() == 7);
}
TUNE_STORAGE_CASE_IMPL("storage", "max_trials counts every started trial not failed", budget)

void enqueue_once(const Backend& b) {
  auto s = b.open();
  const auto study = s->create_study(unique_name("once"), Direction::Minimize, false);
  const std::vector<nlohmann::json> grid = {{{"x", 1}}, {{"x", 2}}, {{"x", 3}}};
  // Five workers start together: one of them enqueues the grid.
  std::atomic<int> enqueued{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 5; ++k) {
    threads.emplace_back([&] {
      auto mine = b.open();
      enqueued += mine->enqueue_trials_once(study, "grid-a", grid);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(enqueued == 1);
  CHECK_FALSE(s->enqueue_trials_once(study, "grid-a", grid));
  CHECK(s->enqueue_trials_once(study, "grid-b", {{{"x", 9}}}));
  const auto trials = s->trials(study);
  REQUIRE(trials.size() == 4);
  for (size_t k = 0; k < 3; ++k) {
    CHECK(trials[k].state == TrialState::Waiting);
    CHECK(trials[k].system_attrs.at("fixed_params") == grid[k]);
  }
  CHECK(trials[3].system_attrs.at("fixed_params").at("x") == 9);
  // The marks are per study.
  const auto other = s->create_study(unique_name("once"), Direction::Minimize, false);
  CHECK(s->enqueue_trials_once(other, "grid-a", grid));
}
TUNE_STORAGE_CASE_IMPL("storage", "enqueue_trials_once enqueues exactly once", enqueue_once)

void immutable(const Backend& b) {
  auto s = b.open();
  const auto study = s->create_study(unique_name("final"), Direction::Minimize, false);
  const auto t = *s->start_trial(study, me, std::nullopt, false);
  const Param x{FloatDistribution{0, 1, false, std::nullopt}, 0.5};
  s->set_param(t.id, "x", x);
  CHECK(s->finish_trial(t.id, {TrialState::Complete, 1.5}));
  CHECK_FALSE(s->finish_trial(t.id, {TrialState::Fail, std::nullopt, {{"fail_reason", "late"}}}));
  CHECK(error_of([&] { s->set_param(t.id, "y", x); }).find("trial 0 is complete, not running") !=
        std::string::npos);
  CHECK(error_of([&] { s->report(t.id, 0, 1.0); }).find("can no longer change") !=
        std::string::npos);
  s->set_system_attr(t.id, "fail_reason", "noted after the end");  // attrs stay writable
  const auto after = b.open()->trials(study).at(0);
  CHECK(after.state == TrialState::Complete);
  CHECK(after.value == 1.5);
  CHECK(after.params.size() == 1);
  CHECK(after.intermediate.empty());
  CHECK(after.finished_at >= after.started_at);
  CHECK(after.system_attrs.at("fail_reason") == "noted after the end");  // not "late"

  s->enqueue_trial(study, {{"x", 0.25}});
  const auto waiting = s->trials(study).at(1);
  CHECK_FALSE(s->finish_trial(waiting.id, {TrialState::Complete, 1.0}));  // not running
  CHECK(error_of([&] { s->set_param(waiting.id, "x", x); }).find("is waiting, not running") !=
        std::string::npos);
  CHECK(error_of([&] {
          s->finish_trial(987654321, {TrialState::Complete, 1.0});
        }).find("no trial with id") != std::string::npos);
}
TUNE_STORAGE_CASE_IMPL("storage", "a finished trial never changes", immutable)

void round_trip(const Backend& b) {
  auto s = b.open();
  const auto study = s->create_study(unique_name("exact"), Direction::Maximize, false);
  const auto t = *s->start_trial(study, me, std::nullopt, false);
  const std::map<std::string, Param> params = {
      {"lr", {FloatDistribution{1e-5, 0.3, true, std::nullopt}, 0.1 + 0.2}},
      {"tiny", {FloatDistribution{-1, 1, false, std::nullopt}, 4.9406564584124654e-324}},
      {"neg0", {FloatDistribution{-1, 1, false, std::nullopt}, -0.0}},
      {"grid", {FloatDistribution{0.1, 0.9, false, 0.1}, 0.30000000000000004}},
      {"units", {IntDistribution{-3, int64_t{1} << 40, 7, false}, 1099511627772.0}},
      {"layers", {IntDistribution{1, 64, 1, true}, 17}},
      {"choice",
       {CategoricalDistribution{
            {"a", 1, 2.5, true, nullptr, "ünï \"q\"", 0.1, int64_t{9007199254740993}}},
        5}},
  };
  for (const auto& [name, p] : params) s->set_param(t.id, name, p);
  const std::map<int64_t, double> values = {
      {0, 0.1},
      {1, std::numeric_limits<double>::quiet_NaN()},
      {2, -0.0},
      {3, std::numeric_limits<double>::infinity()},
      {4, -std::numeric_limits<double>::infinity()},
      {5, std::numeric_limits<double>::denorm_min()},
      {6, std::numeric_limits<double>::max()},
      {7, 1.0 / 3},
      {1000000000000, -1e-300},
  };
  s->report(t.id, 7, 42.0);  // reported again below: the last value stays
  for (const auto& [step, v] : values) s->report(t.id, step, v);
  const nlohmann::json user = {{"list", {1, "x", {{"y", nullptr}}}},
                               {"big", int64_t{9007199254740993}},
                               {"text", "ünï \"quoted\"\n"},
                               {"third", 1.0 / 3},
                               {"neg", -12},
                               {"empty", nlohmann::json::object()}};
  for (const auto& [key, v] : user.items()) s->set_user_attr(t.id, key, v);
  s->set_system_attr(t.id, "rung_0", 0.5);
  s->set_system_attr(t.id, "rung_0", 0.25);  // overwritten
  // JSON has no NaN or infinities; an attribute keeps them all the same.
  const double inf = std::numeric_limits<double>::infinity();
  const nlohmann::json odd = {inf, -inf, {{"deep", {{"nan", std::nan("")}}}}, {{"$double", 1}}};
  s->set_system_attr(t.id, "rung_1", inf);
  s->set_user_attr(t.id, "odd", odd);
  s->set_user_attr(t.id, "latin1", std::string("caf\xe9"));  // not UTF-8: replaced, not lost
  CHECK(s->finish_trial(t.id, {TrialState::Pruned, 0.1 + 0.2, {{"prune_reason", "rung 1"}}}));

  const auto r = b.open()->trials(study).at(0);  // read back on a new connection
  // Optuna's schema keeps numbers in FLOAT columns, where SQLite stores -0.0 as 0.
  const auto as_stored = [&](double x) { return b.name == "sqlite" && x == 0 ? 0.0 : x; };
  CHECK(r.state == TrialState::Pruned);
  REQUIRE(r.value);
  CHECK(same_bits(*r.value, 0.1 + 0.2));
  REQUIRE(r.params.size() == params.size());
  for (const auto& [name, p] : params) {
    const std::string& which = name;  // (Clang 14 cannot capture a binding in INFO)
    INFO(which);
    const auto& got = r.params.at(name);
    CHECK(got.distribution == p.distribution);
    CHECK(same_bits(got.internal, as_stored(p.internal)));
    CHECK(got.value() == p.value());
  }
  CHECK(r.params.at("choice").value() == "ünï \"q\"");
  REQUIRE(r.intermediate.size() == values.size());
  for (const auto& [step, v] : values) {
    const int64_t at = step;
    INFO(at);
    CHECK(same_bits(r.intermediate.at(step), as_stored(v)));
  }
  for (const auto& [key, v] : user.items()) CHECK(r.user_attrs.at(key) == v);
  CHECK(r.user_attrs.at("big").get<int64_t>() == 9007199254740993);
  CHECK(r.system_attrs.at("rung_0") == 0.25);
  CHECK(r.system_attrs.at("rung_1").get<double>() == inf);
  CHECK(r.system_attrs.at("prune_reason") == "rung 1");
  const auto& o = r.user_attrs.at("odd");
  CHECK(o.at(0).get<double>() == inf);
  CHECK(o.at(1).get<double>() == -inf);
  CHECK(std::isnan(o.at(2).at("deep").at("nan").get<double>()));
  CHECK(o.at(3) == odd.at(3));  // an object that merely looks like an encoded double
  const auto latin1 = r.user_attrs.at("latin1").get<std::string>();
  CHECK((latin1 == "caf\xef\xbf\xbd" || latin1 == "caf\xe9"));  // SQL: U+FFFD; memory: as is
  CHECK(r.system_attrs.at("worker") == me.to_json());
}
TUNE_STORAGE_CASE_IMPL("storage", "params, intermediates and attrs read back exactly", round_trip)

void several_objectives(const Backend& b) {
  auto s = b.open();
  const auto name = unique_name("pareto");
  const std::vector directions{Direction::Minimize, Direction::Maximize, Direction::Minimize};
  const auto study = s->create_study(name, directions, false);
  CHECK(b.open()->directions(study) == directions);
  CHECK(error_of([&] { s->direction(study); }).find("has 3 objectives") != std::string::npos);
  CHECK(error_of([&] {
          s->create_study(name, std::vector{Direction::Minimize, Direction::Maximize}, true);
        })
            .find("stored with directions minimize, maximize, minimize, opened with minimize, "
                  "maximize") != std::string::npos);
  CHECK(error_of([&] {
          s->create_study(unique_name("none"), std::vector<Direction>{}, false);
        }).find("one direction per objective") != std::string::npos);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values{0.1 + 0.2, -inf, 1e300};
  const auto done = *s->start_trial(study, me, std::nullopt, false);
  const auto pruned = *s->start_trial(study, me, std::nullopt, false);
  const auto wrong = *s->start_trial(study, me, std::nullopt, false);
  CHECK(s->finish_trial(done.id, {.state = TrialState::Complete, .values = values}));
  CHECK(s->finish_trial(pruned.id, {.state = TrialState::Pruned}));
  // a value count that is not the study's is refused, and nothing is written
  CHECK(error_of([&] {
          s->finish_trial(wrong.id, {TrialState::Complete, 1.0});
        }).find("study of 3 objectives ended complete with 1 value(s)") != std::string::npos);
  CHECK(error_of([&] {
          s->finish_trial(wrong.id, {.state = TrialState::Complete, .values = {1.0, 2.0}});
        }).find("ended complete with 2 value(s)") != std::string::npos);
  CHECK(error_of([&] {
          s->finish_trial(wrong.id, {.state = TrialState::Complete});
        }).find("ended complete with 0 value(s)") != std::string::npos);
  const auto trials = b.open()->trials(study);
  REQUIRE(trials.size() == 3);
  CHECK_FALSE(trials[0].value);
  REQUIRE(trials[0].values.size() == 3);
  for (size_t k = 0; k < 3; ++k) CHECK(same_bits(trials[0].values[k], values[k]));
  CHECK(trials[0].objective_values() == values);
  CHECK(trials[1].values.empty());
  CHECK(trials[2].state == TrialState::Running);

  // a study of one objective takes one value, never `values`
  const auto one = s->create_study(unique_name("one"), Direction::Minimize, false);
  CHECK(s->directions(one) == std::vector{Direction::Minimize});
  const auto t = *s->start_trial(one, me, std::nullopt, false);
  CHECK(error_of([&] {
          s->finish_trial(t.id, {.state = TrialState::Complete, .values = {1.0}});
        }).find("study of one objective ended with `values`") != std::string::npos);
  CHECK(error_of([&] {
          s->finish_trial(t.id, {TrialState::Complete});
        }).find("ended complete without a value") != std::string::npos);
}
TUNE_STORAGE_CASE_IMPL("storage", "a study of several objectives keeps a value per objective",
                       several_objectives)

void heartbeats(const Backend& b) {
  auto s = b.open();
  const auto study = s->create_study(unique_name("beat"), Direction::Minimize, false);
  const auto t = *s->start_trial(study, me, std::nullopt, false);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double old = b.open()->seconds_since_heartbeat(t.id);
  CHECK(old >= 0.25);
  CHECK(old < 30);
  s->heartbeat(t.id);
  const double fresh = s->seconds_since_heartbeat(t.id);
  CHECK(fresh >= -0.01);
  // SQL storages keep beats in whole seconds, as Optuna does.
  CHECK(fresh < (b.name == "memory" ? 0.25 : 1.25));
  CHECK(error_of([&] { s->heartbeat(987654321); }).find("no trial with id") != std::string::npos);
}
TUNE_STORAGE_CASE_IMPL("storage", "heartbeats age by the storage's clock", heartbeats)

void end_with_retry(const Backend& b) {
  auto s = b.open();
  const auto study = s->create_study(unique_name("retry"), Direction::Minimize, false);
  const auto t = *s->start_trial(study, me, std::nullopt, false);
  s->set_param(t.id, "x", {FloatDistribution{0, 1, false, std::nullopt}, 0.75});
  s->set_param(t.id, "n", {IntDistribution{1, 8, 1, false}, 3});
  const TrialEnd lost{
      TrialState::Fail, std::nullopt, {{"fail_reason", "gone"}}, nlohmann::json{{"retries", 1}}};
  CHECK(s->finish_trial(t.id, lost));
  CHECK_FALSE(s->finish_trial(t.id, lost));  // a second detector: no second retry
  const auto all = b.open()->trials(study);
  REQUIRE(all.size() == 2);
  CHECK(all[0].state == TrialState::Fail);
  CHECK(all[0].system_attrs.at("fail_reason") == "gone");
  CHECK(all[1].state == TrialState::Waiting);
  CHECK(all[1].number == 1);
  CHECK(all[1].system_attrs.at("retries") == 1);
  CHECK(all[1].system_attrs.at("fixed_params") == nlohmann::json{{"x", 0.75}, {"n", 3}});
}
TUNE_STORAGE_CASE_IMPL("storage", "a trial fails, says why and is enqueued again in one write",
                       end_with_retry)

}  // namespace

// SQLite alone: its file, its schema, its errors.

TEST_CASE("storage sqlite: errors name the file - the schema is Optuna's, of a known revision") {
  tune_test::TempDir dir;
  const auto missing = dir.path / "no" / "such" / "folder" / "study.db";
  const auto open_error = error_of([&] { SqliteStorage s(missing); });
  CHECK(open_error.find(missing.string()) != std::string::npos);
  CHECK(open_error.find("unable to open database file") != std::string::npos);

  const auto file = dir.path / "study.db";
  { SqliteStorage s(file); }
  { SqliteStorage s(file); }  // the schema is created once, then found
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
  const auto rows = [&](const std::string& sql) {
    std::vector<std::string> out;
    sqlite3_exec(
        db, sql.c_str(),
        [](void* to, int n, char** cells, char**) {
          std::string row;
          for (int k = 0; k < n; ++k) row += (k ? "|" : "") + std::string(cells[k] ? cells[k] : "");
          static_cast<std::vector<std::string>*>(to)->push_back(row);
          return 0;
        },
        &out, nullptr);
    return out;
  };
  // Optuna's tables and bookkeeping rows (docs/optuna-schema.md, Appendix
  // A), by default as Optuna 3 makes them.
  const std::vector<std::string> optuna_tables{"alembic_version",
                                               "studies",
                                               "study_directions",
                                               "study_system_attributes",
                                               "study_user_attributes",
                                               "trial_heartbeats",
                                               "trial_intermediate_values",
                                               "trial_params",
                                               "trial_system_attributes",
                                               "trial_user_attributes",
                                               "trial_values",
                                               "trials",
                                               "version_info"};
  CHECK(rows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name") == optuna_tables);
  CHECK(rows("SELECT version_num FROM alembic_version") == std::vector<std::string>{"v3.0.0.d"});
  CHECK(rows("SELECT name FROM sqlite_master WHERE name = 'ix_trials_study_id'").empty());
  CHECK(rows("SELECT version_info_id, schema_version FROM version_info") ==
        std::vector<std::string>{"1|12"});
  // Optuna 4's when asked (Appendix B: one index more).
  const auto file4 = dir.path / "optuna4.db";
  { SqliteStorage s(file4, {.create = {.schema = OptunaSchema::Optuna4}}); }
  {
    sqlite3* db4 = nullptr;
    REQUIRE(sqlite3_open(file4.c_str(), &db4) == SQLITE_OK);
    std::swap(db, db4);
    CHECK(rows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name") ==
          optuna_tables);
    CHECK(rows("SELECT version_num FROM alembic_version") == std::vector<std::string>{"v3.2.0.a"});
    CHECK(rows("SELECT name FROM sqlite_master WHERE name = 'ix_trials_study_id'").size() == 1);
    std::swap(db, db4);
    sqlite3_close(db4);
  }
  // Either revision is read and written as it is.
  const auto exec = [&](const char* sql) {
    return sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  };
  CHECK(exec("UPDATE alembic_version SET version_num = 'v3.2.0.a'") == SQLITE_OK);
  { SqliteStorage(file).create_study("s", Direction::Minimize, false); }
  CHECK(rows("SELECT version_num FROM alembic_version") == std::vector<std::string>{"v3.2.0.a"});
  CHECK(exec("UPDATE alembic_version SET version_num = 'v2.6.0.a'") == SQLITE_OK);
  sqlite3_close(db);
  const auto old = error_of([&] { SqliteStorage s(file); });
  CHECK(old.find("has Optuna schema revision v2.6.0.a") != std::string::npos);
  CHECK(old.find("this older one needs `optuna storage upgrade` first") != std::string::npos);
  // A revision newer than this trainkit's: upgrading trainkit is the fix.
  REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
  CHECK(exec("UPDATE alembic_version SET version_num = 'v4.5.0.a'") == SQLITE_OK);
  sqlite3_close(db);
  const auto newer = error_of([&] { SqliteStorage s(file); });
  CHECK(newer.find("has Optuna schema revision v4.5.0.a") != std::string::npos);
  CHECK(newer.find("upgrade trainkit, not the database") != std::string::npos);
  CHECK(newer.find("optuna storage upgrade") == std::string::npos);
  // Optuna's tables without alembic_version: said so, with no SQL placeholder.
  REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
  CHECK(exec("DROP TABLE alembic_version") == SQLITE_OK);
  sqlite3_close(db);
  const auto headless = error_of([&] { SqliteStorage s(file); });
  CHECK(headless.find("has Optuna's table `studies` but no `alembic_version`") !=
        std::string::npos);
  CHECK(headless.find("{serial}") == std::string::npos);
}

namespace {

std::string bytes_of(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A file in SQLite's default journal mode (as Optuna and most programs
// leave one) made by `sql`.
void make_sqlite_file(const std::filesystem::path& file, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
  char* why = nullptr;
  CHECK_MESSAGE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &why) == SQLITE_OK,
                (why ? why : ""));
  sqlite3_free(why);
  sqlite3_close(db);
}

}  // namespace

// Each file a storage refuses is refused before anything is written to it:
// the switch to WAL changed 4 bytes of its header, and a database of
// another application gained Optuna's 13 tables.
TEST_CASE("storage sqlite: a file it refuses is left as it was, byte for byte") {
  tune_test::TempDir dir;
  const auto study_file = dir.path / "study.db";
  { SqliteStorage s(study_file); }
  make_sqlite_file(study_file, "PRAGMA journal_mode = DELETE");
  const auto with_study = [&](const std::string& name, const std::string& sql) {
    const auto file = dir.path / name;
    std::filesystem::copy_file(study_file, file);
    make_sqlite_file(file, sql);
    return file;
  };
  const auto made = [&](const std::string& name, const std::string& sql) {
    make_sqlite_file(dir.path / name, sql);
    return dir.path / name;
  };
  const auto junk = dir.path / "junk.db";
  std::ofstream(junk, std::ios::binary) << std::string(4096, 'x');
  const auto legacy = dir.path / "legacy2.db";
  std::filesystem::copy_file(TRAINKIT_REFERENCE_DIR "/tune_study_0_1_0.db", legacy);
  make_sqlite_file(legacy, "UPDATE tune_meta SET value = '2' WHERE key = 'schema_version'");
  const std::pair<std::filesystem::path, std::string> refused[] = {
      {with_study("newer.db", "UPDATE alembic_version SET version_num = 'v4.5.0.a'"),
       "upgrade trainkit, not the database"},
      {with_study("older.db", "UPDATE alembic_version SET version_num = 'v2.6.0.a'"),
       "this older one needs `optuna storage upgrade` first"},
      {with_study("headless.db", "DROP TABLE alembic_version"),
       "has Optuna's table `studies` but no `alembic_version`"},
      {made("foreign.db", "CREATE TABLE inventory (id INTEGER, item TEXT)"),
       "holds no study but 1 other table(s) (inventory): is it the right database? To make "
       "Optuna's tables beside them, set NewDatabaseOptions.beside_other_tables"},
      {made("alembic.db",
            "CREATE TABLE alembic_version (version_num VARCHAR(32)); INSERT INTO "
            "alembic_version VALUES ('ae1027a6acf'); CREATE TABLE users (id INTEGER)"),
       "another application's `alembic_version`, which Optuna's tables cannot share"},
      {junk, "file is not a database"},
      {legacy, "has trainkit schema version 2; this trainkit converts version 1"},
  };
  for (const auto& [file, why] : refused) {
    CAPTURE(file);
    const auto before = bytes_of(file);
    const auto e = error_of([&] { SqliteStorage s(file); });
    CHECK_MESSAGE(e.find(why) != std::string::npos, e);
    CHECK(e.find(file.string()) != std::string::npos);
    if (file.filename() != "foreign.db") {  // refused whatever the option
      const auto asked =
          error_of([&] { SqliteStorage s(file, {.create = {.beside_other_tables = true}}); });
      CHECK_MESSAGE(asked.find(why) != std::string::npos, asked);
    }
    CHECK(bytes_of(file) == before);
    CHECK_FALSE(std::filesystem::exists(file.string() + "-wal"));
  }
  // Asked, Optuna's tables join another application's, which stay.
  const auto foreign = dir.path / "foreign.db";
  {
    SqliteStorage s(foreign, {.create = {.beside_other_tables = true}});
    s.create_study("beside", Direction::Minimize, false);
  }
  { CHECK(SqliteStorage(foreign).study_names() == std::vector<std::string>{"beside"}); }
  make_sqlite_file(foreign, "INSERT INTO inventory VALUES (1, 'kept')");
}

namespace {

// What a database trainkit 0.1 wrote (its own tables; tests/reference/
// make_tune_study_0_1_0.cpp made it) holds once converted to Optuna's on
// open: every row, and the study goes on where it was. `started` and
// `finished` are its first trial's times; `old_tables` counts the tune_*
// tables left.
void check_converted_0_1(const std::function<std::shared_ptr<Storage>()>& open, double started,
                         double finished, const std::function<int()>& old_tables) {
  const auto s = open();
  CHECK(old_tables() == 0);
  CHECK(s->study_names() == std::vector<std::string>{"legacy", "other"});
  const auto study = s->create_study("legacy", Direction::Minimize, true);
  CHECK(s->direction(s->create_study("other", Direction::Maximize, true)) == Direction::Maximize);
  const auto t = s->trials(study);
  REQUIRE(t.size() == 6);
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < t.size(); ++k) CHECK(t[k].number == static_cast<int64_t>(k));
  CHECK(t[0].state == TrialState::Complete);
  CHECK(t[0].value == 0.125);
  CHECK(t[0].params.at("lr").distribution ==
        Distribution{FloatDistribution{1e-5, 0.3, true, std::nullopt}});
  CHECK(same_bits(t[0].params.at("lr").internal, 0.1 + 0.2));
  CHECK(t[0].params.at("grid").distribution ==
        Distribution{FloatDistribution{0.1, 0.9, false, 0.1}});
  // 0.1 stored -3..1000 step 7; converted as Optuna stores it.
  CHECK(t[0].params.at("units").distribution == Distribution{IntDistribution{-3, 998, 7, false}});
  CHECK(t[0].params.at("layers").value() == 17);
  CHECK(t[0].params.at("choice").value() == true);
  CHECK(t[0].intermediate.at(0) == 0.5);
  CHECK(std::isnan(t[0].intermediate.at(1)));
  CHECK(t[0].intermediate.at(2) == inf);
  CHECK(t[0].intermediate.at(3) == -inf);
  CHECK(std::isnan(t[0].user_attrs.at("note").at("nan").get<double>()));
  CHECK(t[0].user_attrs.at("note").at("inf").get<double>() == inf);
  CHECK(t[0].user_attrs.at("note").at("list") == nlohmann::json{1, "x"});
  CHECK(t[0].system_attrs.at("worker").at("pid") == 4242);
  // 0.1 kept seconds since the epoch; Optuna's columns local time, to the
  // millisecond (the tests run in a time zone with daylight saving time).
  CHECK(std::abs(t[0].started_at - started) < 2e-3);
  CHECK(std::abs(t[0].finished_at - finished) < 2e-3);
  CHECK(t[1].state == TrialState::Pruned);
  CHECK(t[1].value == 2.0);
  CHECK(t[1].system_attrs.at("prune_reason") == "rung 0");
  CHECK(t[2].state == TrialState::Fail);
  CHECK_FALSE(t[2].value);
  CHECK(t[2].system_attrs.at("lost_worker") == true);
  CHECK(t[3].value == inf);
  CHECK(t[3].system_attrs.at("retry_of") == 2);
  CHECK(t[4].state == TrialState::Running);
  CHECK(t[4].finished_at == 0);
  CHECK(s->seconds_since_heartbeat(t[4].id) > 0);
  CHECK(t[5].state == TrialState::Waiting);
  CHECK(t[5].started_at == 0);
  CHECK(t[5].system_attrs.at("fixed_params") == nlohmann::json{{"choice", "a"}, {"lr", 0.001}});
  // The grid's mark came along: it is not enqueued twice.
  const auto other = s->create_study("other", Direction::Maximize, true);
  CHECK_FALSE(s->enqueue_trials_once(other, "grid:x", {{{"x", 1}}}));
  CHECK(s->trials(other).size() == 2);
  // The study goes on where it was: the waiting trial first, then number 6.
  CHECK(s->start_trial(study, me, std::nullopt, false)->number == 5);
  CHECK(s->start_trial(study, me, std::nullopt, false)->number == 6);
  // Converted once: opened again, it is as it was left.
  CHECK(open()->trials(study).size() == 7);
  CHECK(old_tables() == 0);
}

}  // namespace

TEST_CASE("storage sqlite: a study database of trainkit 0.1 is converted on open") {
  tune_test::TempDir dir;
  const auto file = dir.path / "study.db";
  std::filesystem::copy_file(TRAINKIT_REFERENCE_DIR "/tune_study_0_1_0.db", file);
  const auto old_tables = [&] {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db,
                               "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                               "name LIKE 'tune\\_%' ESCAPE '\\'",
                               -1, &st, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    const int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
  };
  CHECK(old_tables() == 7);
  check_converted_0_1([&] { return std::make_shared<SqliteStorage>(file); }, 1795790349.41901,
                      1795790349.42002, old_tables);
}

// Workers that open a new study at the same moment all switch its file to
// WAL. SQLite answers that race with SQLITE_BUSY at once, not after the busy
// timeout (the 4-worker test failed so about one run in ten).
TEST_CASE("storage sqlite: connections that open a new database at once all succeed") {
  tune_test::TempDir dir;
  constexpr int kRounds = 30, kThreads = 6;
  int failures = 0;
  std::string first_error;
  for (int round = 0; round < kRounds; ++round) {
    const auto file = dir.path / ("race" + std::to_string(round) + ".db");
    std::latch start(kThreads);
    std::vector<std::string> errors(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        errors[size_t(t)] = error_of([&] { SqliteStorage s(file); });
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors) {
      if (e == "(no error)") continue;
      if (failures++ == 0) first_error = e;
    }
  }
  CHECK_MESSAGE(failures == 0, first_error);
}

// Found by the fuzz target `study` (docs/fuzzing.md): cells a study's own
// writes never hold are a trainkit::Error naming the cell, not a JSON
// library's exception, an out-of-range index or a cast of 1e300 to int64.
TEST_CASE("storage sqlite: a study database with hostile cells reads as a trainkit::Error") {
  tune_test::TempDir dir;
  const auto file = dir.path / "study.db";
  int64_t study = 0;
  {
    SqliteStorage s(file);
    study = s.create_study("s", Direction::Minimize, false);
    const auto t = *s.start_trial(study, me, std::nullopt, false);
    s.set_param(t.id, "c", {CategoricalDistribution{{"a", "b"}}, 1});
    s.set_user_attr(t.id, "note", "x");
    s.finish_trial(t.id, {TrialState::Complete, 1.0});
  }
  const auto read_with = [&](const std::string& update) {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "SAVEPOINT hostile", nullptr, nullptr, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, update.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "RELEASE hostile", nullptr, nullptr, nullptr) == SQLITE_OK);
    const auto error = error_of([&] { SqliteStorage(file).trials(study); });
    const std::string restore =
        "UPDATE trial_params SET distribution_json = '{\"choices\":[\"a\",\"b\"],"
        "\"type\":\"categorical\"}', param_value = 1; UPDATE trial_user_attributes SET "
        "value_json = '\"x\"' WHERE key = 'note'";
    REQUIRE(sqlite3_exec(db, restore.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    return error;
  };
  CHECK(read_with("UPDATE trials SET state = state") == "(no error)");
  const auto check = [&](const std::string& update, const std::string& expected) {
    const auto error = read_with(update);
    CHECK_MESSAGE(error.find(expected) != std::string::npos, (update + " -> " + error));
  };
  check("UPDATE trial_params SET distribution_json = '{\"type\":'",
        "the study database's parameter \"c\": its distribution is not JSON");
  check("UPDATE trial_user_attributes SET value_json = '\"Infinity\xff' WHERE key = 'note'",
        "the study database's attribute \"note\" is not JSON");
  check("UPDATE trial_params SET param_value = 7",
        "parameter \"c\" holds 7, which its distribution "
        "{\"choices\":[\"a\",\"b\"],\"type\":\"categorical\"} cannot take");
  check(
      "UPDATE trial_params SET distribution_json = "
      "'{\"type\":\"int\",\"low\":1e300,\"high\":2}'",
      "has \"low\" 1e+300, not an int64");
  check(
      "UPDATE trial_params SET distribution_json = "
      "'{\"type\":\"float\",\"low\":2,\"high\":1}', param_value = 1.5",
      "parameter \"c\": it has a bad distribution: option `suggest(\"c\").low`");
  check(
      "UPDATE trial_params SET distribution_json = "
      "'{\"type\":\"float\",\"low\":0,\"high\":1}', param_value = 'NaN'",
      "parameter \"c\" holds NaN, which its distribution");
  check("UPDATE trial_params SET distribution_json = '[1]'",
        "parameter \"c\": stored distribution [1] is not one");
  // last: the restore leaves values alone
  check("UPDATE trial_values SET objective = 1",
        "trial 0 has a value of objective 1 in a study of 1 objective(s)");
}

TEST_CASE("storage sqlite: a failed call writes nothing") {
  tune_test::TempDir dir;
  SqliteStorage s(dir.path / "study.db");
  const auto study = s.create_study("s", Direction::Minimize, false);
  // A direction mismatch throws inside the transaction: no second study.
  CHECK_THROWS_AS(s.create_study("s", Direction::Maximize, true), trainkit::Error);
  CHECK(s.study_names() == std::vector<std::string>{"s"});
  const auto t = *s.start_trial(study, me, std::nullopt, false);
  s.finish_trial(t.id, {TrialState::Complete, 1.0});
  CHECK_THROWS_AS(s.report(t.id, 0, 1.0), trainkit::tune::TrialNotRunning);
  CHECK(s.trials(study).at(0).intermediate.empty());
}

#if TRAINKIT_TUNE_HAS_POSTGRES
namespace {

// The test server's connection string with one more option.
std::string postgres_with(const std::string& key, const std::string& value) {
  std::string c = tune_test::postgres_conninfo();
  if (c.find("://") == std::string::npos) return c + " " + key + "=" + value;
  return c + (c.find('?') == std::string::npos ? "?" : "&") + key + "=" + value;
}

// SQL on a connection of its own; the first cell of its last result.
std::string sql(const std::string& conninfo, const std::string& statements) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  REQUIRE(PQstatus(c) == CONNECTION_OK);
  PGresult* r = PQexec(c, statements.c_str());
  const auto status = PQresultStatus(r);
  CHECK_MESSAGE((status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK), PQerrorMessage(c));
  const std::string cell = status == PGRES_TUPLES_OK && PQntuples(r) ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  PQfinish(c);
  return cell;
}

}  // namespace

TEST_CASE("storage postgres: connection errors carry the server's message" *
          doctest::skip(!tune_test::postgres_conninfo())) {
  const auto e = error_of([&] { PostgresStorage s(postgres_with("dbname", "trainkit_no_db")); });
  CHECK(e.find("cannot connect to PostgreSQL database (") != std::string::npos);
  CHECK(e.find("host=127.0.0.1") != std::string::npos);
  CHECK(e.find("database \"trainkit_no_db\" does not exist") != std::string::npos);
  CHECK(error_of([&] { PostgresStorage s("nonsense"); }).find("connection string is invalid") !=
        std::string::npos);
}

TEST_CASE("storage postgres: a call on a connection the server dropped reconnects and goes on" *
          doctest::skip(!tune_test::postgres_conninfo())) {
  const auto app = "trainkit_reset_" + std::to_string(::getpid());
  PostgresStorage s(postgres_with("application_name", app));
  const auto study = s.create_study(unique_name("reset"), Direction::Maximize, false);
  PGconn* admin = PQconnectdb(tune_test::postgres_conninfo());
  REQUIRE(PQstatus(admin) == CONNECTION_OK);
  const auto sql =
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
      "application_name = '" +
      app + "'";
  PGresult* r = PQexec(admin, sql.c_str());
  CHECK(PQntuples(r) == 1);
  PQclear(r);
  PQfinish(admin);
  // Nothing was written when the connection broke: the call runs again on a
  // new connection, with its statements prepared again.
  CHECK(s.direction(study) == Direction::Maximize);
  CHECK(s.trials(study).empty());
}

TEST_CASE("storage postgres: a study database of trainkit 0.1 is converted on open" *
          doctest::skip(!tune_test::postgres_conninfo())) {
  // A database of its own, holding 0.1's tables as its PostgresStorage made
  // them (pg_dump of make_tune_study_0_1_0.cpp's).
  const std::string admin = tune_test::postgres_conninfo(), name = "trainkit_0_1_converted";
  sql(admin, "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
  sql(admin, "CREATE DATABASE " + name);
  const auto conninfo = postgres_with("dbname", name);
  std::ifstream dump(TRAINKIT_REFERENCE_DIR "/tune_study_0_1_0.pg.sql");
  REQUIRE(dump.good());
  sql(conninfo, std::string(std::istreambuf_iterator<char>(dump), {}));
  const auto old_tables = [&] {
    return std::stoi(sql(conninfo,
                         "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND "
                         "tablename LIKE 'tune\\_%'"));
  };
  CHECK(old_tables() == 7);
  check_converted_0_1([&] { return std::make_shared<PostgresStorage>(conninfo); },
                      1795825891.928773, 1795825891.934572, old_tables);
  sql(admin, "DROP DATABASE " + name);
}

TEST_CASE("storage postgres: a database of another application is refused untouched, unless asked" *
          doctest::skip(!tune_test::postgres_conninfo())) {
  const std::string admin = tune_test::postgres_conninfo();
  sql(admin, "DROP DATABASE IF EXISTS trainkit_foreign WITH (FORCE)");
  sql(admin, "CREATE DATABASE trainkit_foreign");
  const auto foreign = postgres_with("dbname", "trainkit_foreign");
  sql(foreign, "CREATE TABLE inventory (id INTEGER)");
  const auto tables = [&] {
    return std::stoi(
        sql(foreign, "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"));
  };
  const auto e = error_of([&] { PostgresStorage s(foreign); });
  CHECK(e.find("holds no study but 1 other table(s) (inventory)") != std::string::npos);
  CHECK(tables() == 1);
  PostgresStorage(foreign,
                  {.create = {.schema = OptunaSchema::Optuna4, .beside_other_tables = true}})
      .create_study("beside", Direction::Minimize, false);
  CHECK(tables() == 14);
  CHECK(sql(foreign, "SELECT version_num FROM alembic_version") == "v3.2.0.a");
  sql(admin, "DROP DATABASE trainkit_foreign WITH (FORCE)");
}
#endif

TEST_CASE("storage: the cases that need a database server" *
          doctest::skip(tune_test::postgres_conninfo() != nullptr)) {
  MESSAGE(
      "skipped: TRAINKIT_TEST_POSTGRES is not set; CTest's test_tune.postgres runs them "
      "against a server of its own when the build found PostgreSQL's server binaries");
}
