#pragma once
// The contracts of the search's two policies. A sampler and a pruner decide
// from a snapshot of the study (StudyView) and keep no memory of their own
// between trials (ASHA's estimated min_resource, once per process, is the
// one exception), so any number of workers, threads or processes can run
// one study and a seeded study replays exactly.
#include <concepts>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/tune/record.hpp"

namespace trainkit::tune {

/// Draws one parameter of `trial` from `dist`, as an internal value.
template <class S>
concept Sampler = requires(S& s, const StudyView& v, const FrozenTrial& t, const std::string& name,
                           const Distribution& d) {
  { s.sample(v, t, name, d) } -> std::convertible_to<double>;
};

/// Optionally, at the start of a trial, draws several parameters jointly
/// (name -> internal value); suggestions of other names go to `sample`.
template <class S>
concept RelativeSampler = Sampler<S> && requires(S& s, const StudyView& v, const FrozenTrial& t) {
  { s.sample_relative(v, t) } -> std::convertible_to<std::map<std::string, double>>;
};

/// A sampler with a finite list of configurations (a grid): the study
/// enqueues them once, under `grid_key()`, and ends when none is left.
template <class S>
concept FiniteSampler = Sampler<S> && requires(const S& s) {
  { s.grid() } -> std::convertible_to<std::vector<nlohmann::json>>;
  { s.grid_key() } -> std::convertible_to<std::string>;
};

/// A sampler that draws for a study of several objectives: one that never
/// reads the trials' values (random, grid, Halton), or one that reads every
/// objective's. It says so with `static constexpr bool multi_objective = true`.
template <class S>
concept MultiObjectiveSampler = Sampler<S> && S::multi_objective;

/// Decides, after a report, whether to stop `trial`: the reason when it
/// does. It may note values in trial.system_attrs (the study stores them).
template <class P>
concept Pruner = requires(P& p, const StudyView& v, FrozenTrial& t) {
  { p.prune(v, t) } -> std::convertible_to<std::optional<std::string>>;
};

}  // namespace trainkit::tune
