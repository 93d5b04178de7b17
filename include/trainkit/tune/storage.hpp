#pragma once
// Where a study lives. Every storage gives the same guarantees, and
// tests/tune/storage_test.cpp checks them on each: trial numbers are unique
// and dense, a waiting trial is handed to one worker only, a final trial's
// state, value, parameters and intermediate values never change again (its
// attributes stay writable), and every write is one transaction (a worker
// killed mid-write leaves the study as it was before or after the write).
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/tune/record.hpp"
#include "trainkit/tune/system_attrs.hpp"

namespace trainkit::tune {

/// Who runs a trial: the host and process, so a worker that shares the
/// process's pid namespace (same boot, same namespace: `pid_space`) can tell
/// that the process is gone; and how often it beats, so that a worker that
/// does not beat is never judged silent.
struct WorkerId {
  std::string host;
  std::string pid_space;  ///< boot id and pid-namespace inode; "" when unknown
  int64_t pid = 0;
  double heartbeat_s = 0;
  nlohmann::json to_json() const {
    return {{"host", host}, {"pid_space", pid_space}, {"pid", pid}, {"heartbeat_s", heartbeat_s}};
  }
};

/// A write to a trial that is no longer running (another worker failed it
/// as lost, or it ended).
class TrialNotRunning : public Error {
 public:
  using Error::Error;
};

/// How a running trial ends, written in one transaction with its state.
struct TrialEnd {
  TrialState state = TrialState::Complete;
  std::optional<double> value{};
  nlohmann::json system_attrs = nlohmann::json::object();  ///< such as fail_reason
  /// Set: enqueue the trial's parameters again, with these system attrs.
  std::optional<nlohmann::json> retry{};
  std::vector<double> values{};  ///< a study of several objectives: one per objective
};

class Storage {
 public:
  virtual ~Storage() = default;

  /// The study's id; creates it unless it exists. An existing study must have
  /// the same directions (one per objective), and `load_if_exists` must be true.
  virtual int64_t create_study(const std::string& name, const std::vector<Direction>& directions,
                               bool load_if_exists) = 0;
  int64_t create_study(const std::string& name, Direction direction, bool load_if_exists) {
    return create_study(name, std::vector{direction}, load_if_exists);
  }
  /// One per objective.
  virtual std::vector<Direction> directions(int64_t study) = 0;
  /// A study of one objective's direction.
  Direction direction(int64_t study) {
    const auto all = directions(study);
    if (all.size() != 1)
      throw Error("trainkit: study " + std::to_string(study) + " has " +
                  std::to_string(all.size()) + " objectives; directions() gives each one's");
    return all[0];
  }
  virtual std::vector<std::string> study_names() = 0;

  /// Atomically: the oldest waiting trial becomes running (its fixed
  /// parameters are in its system attribute kFixedParams), else, unless
  /// `waiting_only`, a new running trial numbered after the last. With
  /// `max_trials`, no trial starts once that many have started and not
  /// failed (waiting trials do not count; they wait past the budget).
  virtual std::optional<FrozenTrial> start_trial(int64_t study, const WorkerId& worker,
                                                 std::optional<int64_t> max_trials,
                                                 bool waiting_only) = 0;
  /// A waiting trial whose parameters are fixed to `params` (name -> value).
  virtual void enqueue_trial(int64_t study, const nlohmann::json& params,
                             const nlohmann::json& system_attrs = nlohmann::json::object()) = 0;
  /// In one transaction: unless the study already has the mark `key`, sets
  /// it and enqueues a trial per element of `params` (a grid, exactly once
  /// however many workers start together). True when this call enqueued.
  virtual bool enqueue_trials_once(int64_t study, const std::string& key,
                                   const std::vector<nlohmann::json>& params) = 0;

  virtual void set_param(int64_t trial, const std::string& name, const Param& param) = 0;
  virtual void report(int64_t trial, int64_t step, double value) = 0;
  virtual void set_system_attr(int64_t trial, const std::string& key, const nlohmann::json& v) = 0;
  virtual void set_user_attr(int64_t trial, const std::string& key, const nlohmann::json& v) = 0;
  /// Makes a running trial final as `end` says; false (and no change) when
  /// it was no longer running, e.g. another worker failed it as lost.
  virtual bool finish_trial(int64_t trial, const TrialEnd& end) = 0;

  /// Every trial of the study, in number order.
  virtual std::vector<FrozenTrial> trials(int64_t study) = 0;

  /// A running trial's sign of life.
  virtual void heartbeat(int64_t trial) = 0;
  /// Seconds since the trial's last heartbeat, by the storage's clock.
  virtual double seconds_since_heartbeat(int64_t trial) = 0;
};

namespace detail {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

[[noreturn]] inline void throw_study_exists(const std::string& name) {
  throw Error("trainkit: study \"" + name +
              "\" already exists; pass load_if_exists = true to add trials to it");
}

inline void require_same_direction(const std::string& name, const std::vector<Direction>& stored,
                                   const std::vector<Direction>& asked) {
  if (stored != asked) {
    throw Error(std::string("trainkit: study \"") + name + "\" is stored with direction" +
                (stored.size() > 1 ? "s " : " ") + to_string(stored) + ", opened with " +
                to_string(asked));
  }
}

inline void require_directions(const std::vector<Direction>& directions) {
  trainkit::detail::require_option(!directions.empty(), "directions", std::string("none"),
                                   "one direction per objective");
}

/// Checks a final trial's values against the study's objectives.
inline void require_values(const TrialEnd& end, size_t objectives) {
  if (objectives == 1 && !end.values.empty())
    throw Error(
        "trainkit: a trial of a study of one objective ended with `values`; accepted: "
        "`value`");
  const bool complete = end.state == TrialState::Complete;
  if (objectives == 1 && complete && !end.value)
    throw Error("trainkit: a trial ended complete without a value; accepted: a value");
  if (objectives > 1 && (end.value || (!end.values.empty() && end.values.size() != objectives) ||
                         (complete && end.values.empty())))
    throw Error("trainkit: a trial of a study of " + std::to_string(objectives) +
                " objectives ended " + to_string(end.state) + " with " +
                std::to_string(end.value ? 1 : end.values.size()) +
                " value(s); accepted: one per objective in `values` (none unless complete)");
}

inline bool counts_against_budget(TrialState s) {
  return s != TrialState::Fail && s != TrialState::Waiting;
}

}  // namespace detail

/// A study in this process only: for tests, single runs and benchmarks.
class InMemoryStorage final : public Storage {
 public:
  using Storage::create_study;
  int64_t create_study(const std::string& name, const std::vector<Direction>& directions,
                       bool load_if_exists) override {
    detail::require_directions(directions);
    std::lock_guard lock(mutex_);
    for (size_t k = 0; k < studies_.size(); ++k) {
      if (studies_[k].name != name) continue;
      if (!load_if_exists) detail::throw_study_exists(name);
      detail::require_same_direction(name, studies_[k].directions, directions);
      return static_cast<int64_t>(k);
    }
    studies_.push_back({name, directions, {}, {}});
    return static_cast<int64_t>(studies_.size() - 1);
  }
  std::vector<Direction> directions(int64_t study) override {
    std::lock_guard lock(mutex_);
    return at(study).directions;
  }
  std::vector<std::string> study_names() override {
    std::lock_guard lock(mutex_);
    std::vector<std::string> names;
    for (const auto& s : studies_) names.push_back(s.name);
    return names;
  }

  std::optional<FrozenTrial> start_trial(int64_t study, const WorkerId& worker,
                                         std::optional<int64_t> max_trials,
                                         bool waiting_only) override {
    std::lock_guard lock(mutex_);
    auto& s = at(study);
    if (max_trials) {
      int64_t n = 0;
      for (auto id : s.trial_ids) n += detail::counts_against_budget(trials_[size_t(id)].state);
      if (n >= *max_trials) return std::nullopt;
    }
    for (auto id : s.trial_ids) {
      auto& t = trials_[static_cast<size_t>(id)];
      if (t.state != TrialState::Waiting) continue;
      t.state = TrialState::Running;
      t.started_at = detail::now_seconds();
      t.system_attrs[system_attr::kWorker] = worker.to_json();
      heartbeats_[static_cast<size_t>(id)] = t.started_at;
      return t;
    }
    if (waiting_only) return std::nullopt;
    const double now = detail::now_seconds();
    auto& t = add_trial(study, TrialState::Running, now);
    t.started_at = now;
    t.system_attrs[system_attr::kWorker] = worker.to_json();
    return t;
  }
  void enqueue_trial(int64_t study, const nlohmann::json& params,
                     const nlohmann::json& system_attrs) override {
    std::lock_guard lock(mutex_);
    enqueue_locked(study, params, system_attrs);
  }
  bool enqueue_trials_once(int64_t study, const std::string& key,
                           const std::vector<nlohmann::json>& params) override {
    std::lock_guard lock(mutex_);
    auto& s = at(study);
    if (!s.marks.insert(key).second) return false;
    for (const auto& p : params) enqueue_locked(study, p, nlohmann::json::object());
    return true;
  }

  void set_param(int64_t trial, const std::string& name, const Param& param) override {
    std::lock_guard lock(mutex_);
    running(trial).params[name] = param;
  }
  void report(int64_t trial, int64_t step, double value) override {
    std::lock_guard lock(mutex_);
    running(trial).intermediate[step] = value;
  }
  void set_system_attr(int64_t trial, const std::string& key, const nlohmann::json& v) override {
    std::lock_guard lock(mutex_);
    trial_at(trial).system_attrs[key] = v;
  }
  void set_user_attr(int64_t trial, const std::string& key, const nlohmann::json& v) override {
    std::lock_guard lock(mutex_);
    trial_at(trial).user_attrs[key] = v;
  }
  bool finish_trial(int64_t trial, const TrialEnd& end) override {
    std::lock_guard lock(mutex_);
    auto& t = trial_at(trial);
    detail::require_values(end, studies_[size_t(study_of_[size_t(trial)])].directions.size());
    if (t.state != TrialState::Running) return false;
    t.state = end.state;
    t.value = end.value;
    t.values = end.values;
    t.finished_at = detail::now_seconds();
    for (const auto& [key, v] : end.system_attrs.items()) t.system_attrs[key] = v;
    if (end.retry) {
      const auto params = t.param_values();  // t may move as the vector grows
      enqueue_locked(study_of_[static_cast<size_t>(trial)], params, *end.retry);
    }
    return true;
  }
  std::vector<FrozenTrial> trials(int64_t study) override {
    std::lock_guard lock(mutex_);
    std::vector<FrozenTrial> out;
    for (auto id : at(study).trial_ids) out.push_back(trials_[static_cast<size_t>(id)]);
    return out;
  }
  void heartbeat(int64_t trial) override {
    std::lock_guard lock(mutex_);
    trial_at(trial);  // an unknown id is a trainkit::Error, as elsewhere
    heartbeats_[static_cast<size_t>(trial)] = detail::now_seconds();
  }
  double seconds_since_heartbeat(int64_t trial) override {
    std::lock_guard lock(mutex_);
    trial_at(trial);
    return detail::now_seconds() - heartbeats_[static_cast<size_t>(trial)];
  }

 private:
  struct Study {
    std::string name;
    std::vector<Direction> directions;
    std::vector<int64_t> trial_ids;
    std::set<std::string> marks;
  };
  // A new trial numbered after the study's last, in every by-id vector.
  FrozenTrial& add_trial(int64_t study, TrialState state, double heartbeat) {
    auto& s = at(study);
    FrozenTrial t;
    t.id = static_cast<int64_t>(trials_.size());
    t.number = static_cast<int64_t>(s.trial_ids.size());
    t.state = state;
    s.trial_ids.push_back(t.id);
    heartbeats_.push_back(heartbeat);
    study_of_.push_back(study);
    return trials_.emplace_back(std::move(t));
  }
  void enqueue_locked(int64_t study, const nlohmann::json& params,
                      const nlohmann::json& system_attrs) {
    auto& t = add_trial(study, TrialState::Waiting, 0);
    t.system_attrs = system_attrs;
    t.system_attrs[system_attr::kFixedParams] = params;
  }

  Study& at(int64_t study) {
    if (study < 0 || study >= static_cast<int64_t>(studies_.size())) {
      throw Error("trainkit: no study with id " + std::to_string(study));
    }
    return studies_[static_cast<size_t>(study)];
  }
  FrozenTrial& trial_at(int64_t trial) {
    if (trial < 0 || trial >= static_cast<int64_t>(trials_.size())) {
      throw Error("trainkit: no trial with id " + std::to_string(trial));
    }
    return trials_[static_cast<size_t>(trial)];
  }
  FrozenTrial& running(int64_t trial) {
    auto& t = trial_at(trial);
    if (t.state != TrialState::Running) {
      throw TrialNotRunning("trainkit: trial " + std::to_string(t.number) + " is " +
                            to_string(t.state) + ", not running: it can no longer change");
    }
    return t;
  }

  std::mutex mutex_;
  std::vector<Study> studies_;
  std::vector<FrozenTrial> trials_;
  std::vector<double> heartbeats_;  // by trial id, as is study_of_
  std::vector<int64_t> study_of_;
};

}  // namespace trainkit::tune
