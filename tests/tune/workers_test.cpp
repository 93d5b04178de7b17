// Several processes on one study (tune_worker), on the storages that
// processes share: the budget holds across them, and a worker killed
// mid-trial or mid-write loses nothing but its own trial, which the next
// worker fails and runs again.
#include "storage_suite.hpp"

#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

using namespace trainkit::tune;
using tune_test::Backend;
using tune_test::unique_name;

namespace {

pid_t spawn_worker(const Backend& b, const std::string& study, const std::string& mode,
                   int max_trials, int retry_failed = 0) {
  std::vector<std::string> args = {
      TRAINKIT_TUNE_WORKER,        b.spec, study, mode, std::to_string(max_trials),
      std::to_string(retry_failed)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
  return pid;
}

// The worker's exit status (-signal when a signal ended it); kills it
// after `limit`.
int wait_worker(pid_t pid, std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL_CHECK("tune_worker " << pid << " ran past " << limit.count() << " s");
      return -SIGKILL;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// Kills the worker once `ready` holds for the study's trials (polled on a
// connection of our own), and reaps it: a zombie would still look alive to
// the next worker.
void kill_when(pid_t pid, Storage& storage, const std::string& study,
               const std::function<bool(const std::vector<FrozenTrial>&)>& ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto names = storage.study_names();
    if (std::find(names.begin(), names.end(), study) == names.end()) continue;
    seen = ready(storage.trials(storage.create_study(study, Direction::Minimize, true)));
  }
  CHECK_MESSAGE(seen, "the worker never got to the point to kill it at");
  ::kill(pid, SIGKILL);
  CHECK(wait_worker(pid) == -SIGKILL);
}

const FrozenTrial* running(const std::vector<FrozenTrial>& trials) {
  for (const auto& t : trials) {
    if (t.state == TrialState::Running) return &t;
  }
  return nullptr;
}

std::string params_of(const FrozenTrial& t) {
  return t.param_values().dump();
}

void four_workers(const Backend& b) {
  const auto name = unique_name("four");
  std::vector<pid_t> pids;
  for (int k = 0; k < 4; ++k) pids.push_back(spawn_worker(b, name, "run", 40));
  for (auto pid : pids) CHECK(wait_worker(pid) == 0);

  auto s = b.open();
  const auto trials = s->trials(s->create_study(name, Direction::Minimize, true));
  REQUIRE(trials.size() == 40);
  std::set<std::string> params;
  std::set<int64_t> workers;
  for (size_t k = 0; k < trials.size(); ++k) {
    const auto& t = trials[k];
    CHECK(t.number == static_cast<int64_t>(k));
    CHECK(t.state == TrialState::Complete);
    CHECK(t.params.size() == 3);
    CHECK(t.intermediate.size() == 3);
    params.insert(params_of(t));
    workers.insert(t.system_attrs.at("worker").at("pid").get<int64_t>());
  }
  CHECK(params.size() == 40);  // each trial drew its own (no trial ran twice)
  CHECK(workers.size() >= 2);  // they did run at once
  MESSAGE(workers.size() << " of 4 workers ran trials");
}
TUNE_SHARED_STORAGE_CASE_IMPL("workers", "four processes share one study with max_trials = 40",
                              four_workers)

void killed_in_trial(const Backend& b) {
  const auto name = unique_name("killed");
  auto s = b.open();
  const auto pid = spawn_worker(b, name, "sleep-in-trial", 3);
  kill_when(pid, *s, name, [](const std::vector<FrozenTrial>& trials) {
    const auto* t = running(trials);
    return t && t->params.size() == 3;
  });
  REQUIRE(wait_worker(spawn_worker(b, name, "run", 3, 1)) == 0);

  const auto trials = s->trials(s->create_study(name, Direction::Minimize, true));
  REQUIRE(trials.size() == 4);
  const auto& lost = trials[0];
  CHECK(lost.state == TrialState::Fail);
  CHECK(lost.system_attrs.at("fail_reason") == "its worker process is gone");
  CHECK(lost.system_attrs.at("worker").at("pid") == pid);
  const auto& retry = trials[1];  // enqueued, so run before new ones
  CHECK(retry.state == TrialState::Complete);
  CHECK(retry.system_attrs.at("retry_of") == 0);
  CHECK(params_of(retry) == params_of(lost));
  for (size_t k = 1; k < trials.size(); ++k) CHECK(trials[k].state == TrialState::Complete);
}
TUNE_SHARED_STORAGE_CASE_IMPL("workers", "a worker killed mid-trial is failed and its trial rerun",
                              killed_in_trial)

void killed_mid_write(const Backend& b) {
  const auto name = unique_name("write");
  auto s = b.open();
  const auto pid = spawn_worker(b, name, "write-loop", 1);
  kill_when(pid, *s, name, [](const std::vector<FrozenTrial>& trials) {
    const auto* t = running(trials);
    return t && t->intermediate.size() >= 300;
  });
  if (b.name == "sqlite") {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(b.spec.substr(7).c_str(), &db) == SQLITE_OK);
    std::string result;
    sqlite3_exec(
        db, "PRAGMA integrity_check",
        [](void* out, int, char** values, char**) {
          *static_cast<std::string*>(out) += values[0] ? values[0] : "NULL";
          return 0;
        },
        &result, nullptr);
    sqlite3_close(db);
    CHECK(result == "ok");
  }
  // Every write landed whole: steps 0..k-1, each with its value.
  const auto study = s->create_study(name, Direction::Minimize, true);
  auto trials = s->trials(study);
  REQUIRE(trials.size() == 1);
  const auto& t = trials[0];
  CHECK(t.state == TrialState::Running);
  CHECK(t.intermediate.size() >= 300);
  int64_t expected = 0;
  for (const auto& [step, value] : t.intermediate) {
    CHECK(step == expected++);
    CHECK(value == static_cast<double>(step) / 4);
  }
  // The study goes on: the next worker fails the lost trial and runs its own.
  REQUIRE(wait_worker(spawn_worker(b, name, "run", 2)) == 0);
  trials = s->trials(study);
  REQUIRE(trials.size() == 3);
  CHECK(trials[0].state == TrialState::Fail);
  CHECK(trials[1].state == TrialState::Complete);
  CHECK(trials[2].state == TrialState::Complete);
}
TUNE_SHARED_STORAGE_CASE_IMPL("workers", "a worker killed mid-write leaves a sound database",
                              killed_mid_write)

}  // namespace
