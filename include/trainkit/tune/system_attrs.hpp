#pragma once
// The system attributes trainkit writes on trials and studies (Optuna's
// trial_system_attributes and study_system_attributes), each key named
// once. A study file may hold others (Optuna's own); they are kept as read.
#include <cstdint>
#include <string>
#include <string_view>

namespace trainkit::tune::system_attr {

/// An enqueued trial's parameters (Optuna's key: its samplers honour them).
inline constexpr const char* kFixedParams = "fixed_params";
/// Trial::set_constraints's values (Optuna's key: <= 0 is feasible).
inline constexpr const char* kConstraints = "constraints";
/// Why a trial was pruned, and why one failed.
inline constexpr const char* kPruneReason = "prune_reason";
inline constexpr const char* kFailReason = "fail_reason";
/// The worker that ran the trial (WorkerId::to_json).
inline constexpr const char* kWorker = "worker";
/// On a trial failed for its worker (its heartbeat stopped) or for the
/// study (a sampler or storage error), not for its objective.
inline constexpr const char* kLostWorker = "lost_worker";
inline constexpr const char* kStudyError = "study_error";
/// On a lost trial's retry: the lost trial's number, and how many retries
/// came before it.
inline constexpr const char* kRetryOf = "retry_of";
inline constexpr const char* kRetries = "retries";

/// pruner::Asha's record of a trial's value at rung k.
inline std::string completed_rung(int64_t k) {
  return "completed_rung_" + std::to_string(k);
}
/// A study's mark that trials were enqueued once under `key`
/// (Storage::enqueue_trials_once: sampler::Grid's points).
inline std::string enqueued_once(std::string_view key) {
  return "trainkit:enqueued:" + std::string(key);
}

}  // namespace trainkit::tune::system_attr
