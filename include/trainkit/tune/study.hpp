#pragma once
// Study<Sampler, Pruner = pruner::None>: runs an objective over trials, keeps every trial in
// a Storage, and lets any number of workers (threads here, processes on this
// or other machines through a shared storage) add to one study. A worker
// that dies leaves its trial running; the next worker to start a trial
// fails it (same pid namespace: the process is gone; elsewhere: no
// heartbeat for `stale_after_s`) and, if asked, enqueues it again.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "trainkit/tune/concepts.hpp"
#include "trainkit/tune/pareto.hpp"
#include "trainkit/tune/pruners/none.hpp"
#include "trainkit/tune/storage.hpp"
#include "trainkit/tune/system_attrs.hpp"
#include "trainkit/tune/trial.hpp"
#include "trainkit/tune/worker.hpp"

namespace trainkit::tune {

struct StudyOptions {
  std::string name = "study";
  Direction direction = Direction::Minimize;
  /// Several objectives: one direction each (`direction` is then not read),
  /// and the objective returns a value per objective.
  std::vector<Direction> directions{};
  bool load_if_exists = true;  ///< false: an existing study of this name is an error
};

struct OptimizeOptions {
  std::optional<int64_t> n_trials{};  ///< trials this call runs
  /// The study's budget across all workers: no trial starts once this many
  /// have started and not failed.
  std::optional<int64_t> max_trials{};
  double timeout_s = 0;  ///< start no trial after this long (0: no limit)
  int n_threads = 1;     ///< trials run at once in this process (a thread-safe objective)
  /// A throwing objective fails its trial; with false, the exception is also
  /// rethrown (after the study recorded it) and the call ends.
  bool catch_exceptions = false;
  /// How often a running trial says it is alive (0: never; its trials are
  /// then judged lost only when their process is seen gone).
  double heartbeat_s = 5;
  /// A running trial silent this long (and three of its worker's beats) has
  /// lost its worker.
  double stale_after_s = 60;
  int retry_failed = 0;            ///< enqueue a lost worker's trial again, up to this many times
  std::ostream* log = &std::clog;  ///< one line per finished trial (nullptr: silent)
  /// Called after each trial, one call at a time however many threads run.
  std::function<void(const FrozenTrial&)> on_trial_end{};
};

/// Without a pruner, every trial runs to its end (pruner::None).
template <Sampler S, Pruner P = pruner::None>
class Study final : private detail::TrialDriver {
 public:
  Study(std::shared_ptr<Storage> storage, StudyOptions options, S sampler, P pruner = {})
      : storage_(std::move(storage)),
        options_(std::move(options)),
        sampler_(std::move(sampler)),
        pruner_(std::move(pruner)) {
    if (!storage_)
      throw Error("trainkit: Study needs a storage (InMemoryStorage, SqliteStorage, ...)");
    trainkit::detail::require_option(!options_.name.empty(), "StudyOptions.name",
                                     std::string("\"\""), "a non-empty name");
    if (options_.directions.empty()) options_.directions = {options_.direction};
    if (several()) {
      if (!MultiObjectiveSampler<S>)
        throw Error(
            "trainkit: StudyOptions.directions has " + std::to_string(options_.directions.size()) +
            " objectives; this sampler models one (accepted for several: NsgaII, Tpe, or one "
            "that never reads the values: Random, Grid, Halton)");
      if (!std::is_same_v<P, pruner::None>)
        throw Error(
            "trainkit: a study of several objectives cannot prune (a pruner compares "
            "one objective's intermediate values); accepted: pruner::None");
    }
    options_.direction = options_.directions[0];
    id_ = storage_->create_study(options_.name, options_.directions, options_.load_if_exists);
  }

  using Objective = std::function<double(Trial&)>;
  /// For a study of several objectives: one value per objective.
  using Objectives = std::function<std::vector<double>(Trial&)>;

  /// Runs trials until `n_trials` ran here, the study has `max_trials`, the
  /// time is up or a finite sampler has nothing left.
  void optimize(const Objective& objective, const OptimizeOptions& o) {
    if (several())
      throw Error("trainkit: study \"" + options_.name + "\" has " +
                  std::to_string(options_.directions.size()) +
                  " objectives; its objective returns one value per objective "
                  "(std::vector<double>)");
    optimize_values([&](Trial& t) { return std::vector{objective(t)}; }, o);
  }
  /// The same for a study of several objectives.
  void optimize(const Objectives& objective, const OptimizeOptions& o) {
    if (!several())
      throw Error("trainkit: study \"" + options_.name +
                  "\" has one objective; its objective returns a double");
    optimize_values(objective, o);
  }

 private:
  void optimize_values(const Objectives& objective, const OptimizeOptions& o) {
    using trainkit::detail::require_option;
    require_option(o.n_trials || o.max_trials || o.timeout_s > 0 || FiniteSampler<S>, "n_trials",
                   std::string("none"), "n_trials, max_trials or timeout_s (or a grid sampler)");
    require_option(!o.n_trials || *o.n_trials >= 0, "n_trials", o.n_trials.value_or(0), ">= 0");
    require_option(o.n_threads >= 1, "n_threads", o.n_threads, ">= 1");
    require_option(!o.max_trials || *o.max_trials >= 1, "max_trials", o.max_trials.value_or(0),
                   ">= 1");
    require_option(std::isfinite(o.timeout_s) && o.timeout_s >= 0, "timeout_s", o.timeout_s,
                   "a finite number of seconds >= 0 (0: no limit)");
    require_option(o.heartbeat_s >= 0 && o.heartbeat_s <= 86400, "heartbeat_s", o.heartbeat_s,
                   "0 <= heartbeat_s <= 86400 seconds (0: no heartbeat)");
    require_option(std::isfinite(o.stale_after_s) && o.stale_after_s >= 2 * o.heartbeat_s &&
                       o.stale_after_s > 0,
                   "stale_after_s", o.stale_after_s, "a finite number > 0 and >= 2 * heartbeat_s");
    require_option(o.retry_failed >= 0, "retry_failed", o.retry_failed, ">= 0");
    if constexpr (FiniteSampler<S>)
      storage_->enqueue_trials_once(id_, sampler_.grid_key(), sampler_.grid());

    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(o.timeout_s > 0 ? o.timeout_s : 1e9);
    std::atomic<int64_t> started{0};
    std::atomic<bool> stop{false};
    std::exception_ptr error;
    std::mutex error_mutex;
    detail::Heartbeat heartbeat(*storage_, o.heartbeat_s);

    auto work = [&] {
      while (!stop) {
        if (o.n_trials && started.fetch_add(1) >= *o.n_trials) break;
        if (std::chrono::steady_clock::now() >= deadline) break;
        try {
          if (!run_trial(objective, o, heartbeat)) break;
        } catch (...) {
          std::lock_guard lock(error_mutex);
          if (!error) error = std::current_exception();
          stop = true;
        }
      }
    };
    if (o.n_threads == 1) {
      work();
    } else {
      std::vector<std::jthread> threads;
      for (int k = 0; k < o.n_threads; ++k) threads.emplace_back(work);
    }
    if (error) std::rethrow_exception(error);
  }

 public:
  /// A trial whose parameters are fixed (name -> value); runs before new ones.
  void enqueue(const nlohmann::json& params) {
    trainkit::detail::require_option(params.is_object(), "enqueue.params", params.dump(),
                                     "an object of name -> value, such as {{\"lr\", 1e-3}}");
    storage_->enqueue_trial(id_, params);
  }

  std::vector<FrozenTrial> trials() const { return storage_->trials(id_); }
  /// The best complete trial whose constraints hold; throws when there is none.
  FrozenTrial best_trial() const {
    if (several())
      throw Error("trainkit: study \"" + options_.name +
                  "\" has several objectives: best_trials() gives its Pareto front");
    const auto all = trials();
    const FrozenTrial* best = view(all).best();
    if (!best)
      throw Error("trainkit: study \"" + options_.name + "\" has no complete feasible trial yet");
    return *best;
  }
  /// The complete trials whose constraints hold that no other such trial
  /// beats in every objective (the Pareto front; with one objective, the
  /// best trial and its equals), in number order.
  std::vector<FrozenTrial> best_trials() const {
    const auto all = trials();
    std::vector<FrozenTrial> out;
    for (const auto* t : tune::best_trials(view(all))) out.push_back(*t);
    return out;
  }
  const std::string& name() const { return options_.name; }
  /// A study of one objective's direction.
  Direction direction() const {
    if (several())
      throw Error("trainkit: study \"" + options_.name +
                  "\" has several objectives: directions() gives each one's");
    return options_.direction;
  }
  const std::vector<Direction>& directions() const { return options_.directions; }
  Storage& storage() { return *storage_; }
  S& sampler() { return sampler_; }
  P& pruner() { return pruner_; }

 private:
  // Trial-local state the driver needs besides the record.
  struct Active {
    std::map<std::string, double> relative;
    std::vector<FrozenTrial> snapshot;  // the history the sampler decides from
  };

  // One trial from start to its final state; false when none could start.
  bool several() const { return options_.directions.size() > 1; }

  bool run_trial(const Objectives& objective, const OptimizeOptions& o,
                 detail::Heartbeat& heartbeat) {
    fail_lost_trials(o);
    auto record = storage_->start_trial(id_, detail::this_worker(o.heartbeat_s), o.max_trials,
                                        FiniteSampler<S>);
    if (!record) return false;
    heartbeat.add(record->id);
    // Whatever throws from here on (a sampler, a storage write), the trial
    // does not stay running: it fails, and the exception goes on.
    struct Unwind {
      Study& study;
      detail::Heartbeat& heartbeat;
      int64_t id;
      bool finished = false;
      ~Unwind() {
        if (finished) return;
        {
          std::lock_guard lock(study.active_mutex_);
          study.active_.erase(id);
        }
        heartbeat.remove(id);
        try {
          study.storage_->finish_trial(id,
                                       {TrialState::Fail,
                                        std::nullopt,
                                        {{system_attr::kFailReason,
                                          "the study failed while running it (sampler or storage)"},
                                         {system_attr::kStudyError, true}}});
        } catch (...) {  // the storage itself is failing: the heartbeat check will fail it
        }
      }
    } unwind{*this, heartbeat, record->id};
    Active active;
    {
      std::lock_guard lock(policy_mutex_);
      active.snapshot = storage_->trials(id_);
      if constexpr (RelativeSampler<S>) {
        active.relative = sampler_.sample_relative(view(active.snapshot), *record);
      }
    }
    {
      std::lock_guard lock(active_mutex_);
      active_[record->id] = &active;
    }
    Trial trial(*this, *record);
    TrialState state = TrialState::Complete;
    std::vector<double> values;
    std::string why;
    std::exception_ptr error;
    try {
      values = objective(trial);
      if (trial.prune_reason()) {
        state = TrialState::Pruned;
        why = *trial.prune_reason();
        values.clear();
      } else if (values.size() != options_.directions.size()) {
        state = TrialState::Fail;
        why = "the objective returned " + std::to_string(values.size()) + " values for " +
              std::to_string(options_.directions.size()) + " objectives";
        values.clear();
      } else if (std::any_of(values.begin(), values.end(),
                             [](double v) { return std::isnan(v); })) {
        state = TrialState::Fail;  // as Optuna: infinities are values, NaN is not
        why = "the objective returned NaN";
        values.clear();
      }
    } catch (const TrialPruned& e) {
      state = TrialState::Pruned;
      why = trial.prune_reason().value_or(e.what());
    } catch (const TrialNotRunning& e) {  // another worker failed it as lost: not ours to end
      state = TrialState::Fail;
      why = e.what();
    } catch (const std::exception& e) {
      state = TrialState::Fail;
      why = e.what();
      if (!o.catch_exceptions) error = std::current_exception();
    } catch (...) {
      state = TrialState::Fail;
      why = "unknown exception";
      if (!o.catch_exceptions) error = std::current_exception();
    }
    if (state != TrialState::Complete) values.clear();  // an exception after a value
    // as Optuna records a pruned trial of one objective (of several: no values)
    if (state == TrialState::Pruned && !several() && !trial.record().intermediate.empty()) {
      values = {trial.record().intermediate.rbegin()->second};
    }
    {
      std::lock_guard lock(active_mutex_);
      active_.erase(record->id);
    }
    heartbeat.remove(record->id);
    TrialEnd end{state};
    if (several()) {
      end.values = values;
    } else if (!values.empty()) {
      end.value = values[0];
    }
    if (!why.empty())
      end.system_attrs[state == TrialState::Fail ? system_attr::kFailReason
                                                 : system_attr::kPruneReason] = why;
    const bool recorded = storage_->finish_trial(record->id, end);
    unwind.finished = true;
    log_end(o, trial.record(), state, values, why, recorded);
    if (o.on_trial_end) {
      auto final = trial.record();
      final.state = state;
      final.value = end.value;
      final.values = end.values;
      std::lock_guard lock(callback_mutex_);
      o.on_trial_end(final);
    }
    if (error) std::rethrow_exception(error);
    return true;
  }

  // Fails running trials whose worker is gone, and enqueues them again.
  void fail_lost_trials(const OptimizeOptions& o) {
    const auto me = detail::this_worker(o.heartbeat_s);
    for (const auto& t : storage_->trials(id_)) {
      if (t.state != TrialState::Running) continue;
      {
        std::lock_guard lock(active_mutex_);
        if (active_.contains(t.id)) continue;
      }
      std::string why;
      const auto worker = t.system_attrs.value(system_attr::kWorker, nlohmann::json::object());
      const auto alive = detail::liveness(worker, me);
      if (alive == detail::Liveness::Alive) continue;  // a slow beat is not a lost worker
      const double beat = worker.value("heartbeat_s", 0.0);
      const double silent_for = std::max(o.stale_after_s, 3 * beat);
      if (alive == detail::Liveness::Gone) {
        why = "its worker process is gone";
      } else if (beat > 0 && storage_->seconds_since_heartbeat(t.id) > silent_for) {
        why = "no heartbeat for " + std::to_string(silent_for) + " s";
      } else {
        continue;  // a worker that does not beat is judged by its process only
      }
      TrialEnd end{TrialState::Fail,
                   std::nullopt,
                   {{system_attr::kFailReason, why}, {system_attr::kLostWorker, true}}};
      const int retries = t.system_attrs.value(system_attr::kRetries, 0);
      if (retries < o.retry_failed)
        end.retry =
            nlohmann::json{{system_attr::kRetryOf, t.number}, {system_attr::kRetries, retries + 1}};
      if (!storage_->finish_trial(t.id, end)) continue;  // another worker did
      write_log(o, "trainkit tune: trial " + std::to_string(t.number) + " failed: " + why + "\n");
    }
  }

  void log_end(const OptimizeOptions& o, const FrozenTrial& t, TrialState state,
               const std::vector<double>& values, const std::string& why, bool recorded) {
    if (!o.log) return;
    std::ostringstream out;
    out << "trainkit tune: trial " << t.number << " " << to_string(state);
    if (values.size() == 1) out << " with value " << values[0];
    if (values.size() > 1) out << " with values " << nlohmann::json(values).dump();
    if (!why.empty()) out << " (" << why << ")";
    out << " params " << t.param_values().dump();
    if (!recorded) out << " [not recorded: another worker had failed it as lost]";
    out << "\n";
    write_log(o, out.str());
  }

  // One line at a time, whichever thread writes it.
  void write_log(const OptimizeOptions& o, const std::string& line) {
    if (!o.log) return;
    std::lock_guard lock(callback_mutex_);
    *o.log << line << std::flush;
  }

  StudyView view(const std::vector<FrozenTrial>& trials) const {
    return StudyView::of(options_.directions, trials);
  }

  Active& active(const FrozenTrial& t) {
    std::lock_guard lock(active_mutex_);
    return *active_.at(t.id);
  }

  // detail::TrialDriver
  double suggest(FrozenTrial& trial, const std::string& name, const Distribution& asked) override {
    validate(name, asked);
    const auto dist = normalized(asked);  // as Optuna stores it
    if (const auto it = trial.params.find(name); it != trial.params.end()) {
      if (!(it->second.distribution == dist)) {
        throw Error("trainkit: trial " + std::to_string(trial.number) + " suggested \"" + name +
                    "\" twice with different distributions: " +
                    to_json(it->second.distribution).dump() + " and " + to_json(dist).dump());
      }
      return it->second.internal;
    }
    auto& a = active(trial);
    for (const auto& t : a.snapshot) {
      const auto p = t.params.find(name);
      if (p != t.params.end() && !compatible(p->second.distribution, dist)) {
        throw Error("trainkit: parameter \"" + name + "\" is " + to_json(dist).dump() +
                    " here but was " + to_json(p->second.distribution).dump() + " in trial " +
                    std::to_string(t.number) +
                    "; a name keeps its kind (and its choices) in a study");
      }
    }
    std::optional<double> x;
    const auto fixed = trial.system_attrs.find(system_attr::kFixedParams);
    if (fixed != trial.system_attrs.end() && fixed->contains(name)) {
      x = internal(dist, fixed->at(name));
      if (!x) {
        throw Error("trainkit: enqueued value " + fixed->at(name).dump() + " of \"" + name +
                    "\" is outside " + to_json(dist).dump());
      }
    } else if (const auto r = a.relative.find(name);
               r != a.relative.end() && contains(dist, r->second)) {
      x = r->second;
    } else {
      std::lock_guard lock(policy_mutex_);
      x = sampler_.sample(view(a.snapshot), trial, name, dist);
      if (!contains(dist, *x)) {
        throw Error("trainkit: the sampler returned " + std::to_string(*x) + " for \"" + name +
                    "\", outside " + to_json(dist).dump());
      }
    }
    const Param param{dist, *x};
    storage_->set_param(trial.id, name, param);
    trial.params[name] = param;
    return *x;
  }

  void report(FrozenTrial& trial, double value, int64_t step) override {
    trainkit::detail::require_option(step >= 0, "report.step", step, ">= 0");
    storage_->report(trial.id, step, value);
    trial.intermediate[step] = value;
  }

  std::optional<std::string> should_prune(FrozenTrial& trial) override {
    std::lock_guard lock(policy_mutex_);
    const auto all = storage_->trials(id_);  // fresh: other workers' progress counts
    const auto before = trial.system_attrs;
    auto why = pruner_.prune(view(all), trial);
    for (const auto& [key, v] : trial.system_attrs.items()) {
      if (!before.contains(key) || before.at(key) != v) storage_->set_system_attr(trial.id, key, v);
    }
    return why;
  }

  void set_user_attr(FrozenTrial& trial, const std::string& key, const nlohmann::json& v) override {
    storage_->set_user_attr(trial.id, key, v);
    trial.user_attrs[key] = v;
  }
  void set_system_attr(FrozenTrial& trial, const std::string& key,
                       const nlohmann::json& v) override {
    storage_->set_system_attr(trial.id, key, v);
    trial.system_attrs[key] = v;
  }

  std::shared_ptr<Storage> storage_;
  StudyOptions options_;
  S sampler_;
  P pruner_;
  int64_t id_ = -1;
  std::mutex policy_mutex_;    // samplers and pruners are called one at a time
  std::mutex callback_mutex_;  // the log and on_trial_end, one thread at a time
  std::mutex active_mutex_;
  std::map<int64_t, Active*> active_;
};

}  // namespace trainkit::tune
