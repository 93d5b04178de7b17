#pragma once
// The batch-size finder, after Lightning's scale_batch_size: a few steps at
// growing batch sizes (doubling from init_batch_size) until one does not
// fit, then, in binary_search mode, bisection between the largest that fit
// and the smallest that did not. "Does not fit" is an out-of-memory error:
// on CUDA the device's (the cache is emptied after it), on CPUs a budget the
// user gives, enforced by a memory::CpuMeter whose limit fails allocations
// the same way. The throughput mode grows the same way and picks the size
// with the most samples per second. The trainer is put back afterwards (and
// before every trial), bit for bit, from a copy kept in CPU memory (a copy
// on the device would take the memory being measured).
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "trainkit/detail/compat.hpp"
#include "trainkit/error.hpp"
#include "trainkit/finders/detail/trial.hpp"
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/memory/cpu_meter.hpp"
#include "trainkit/state.hpp"
#include "trainkit/trainer.hpp"
#if TRAINKIT_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace trainkit::finders {

enum class BatchSizeMode {
  power,          ///< the largest init_batch_size x 2^k (or max_batch_size) that fits
  binary_search,  ///< then bisect up to the one that does not: the largest that fits
  throughput,     ///< of the powers of two that fit, the one with the most samples/s
};

struct BatchSizeFindOptions {
  BatchSizeMode mode = BatchSizeMode::binary_search;
  int64_t init_batch_size = 2;
  int64_t max_batch_size = int64_t(1) << 20;  ///< never tries more
  int64_t max_trials = 25;
  int64_t steps_per_trial = 3;  ///< optimizer steps each trial takes
  /// throughput: steps of each trial before its clock starts (allocator and
  /// cache warm-up); the rest are timed.
  int64_t warmup_steps = 1;
  /// CPU: the most bytes a trial may allocate beyond what was allocated
  /// before it (batches, activations, gradients, new optimizer state), as a
  /// memory::CpuMeter counts them; 0: no budget (only real out-of-memory).
  int64_t cpu_memory_budget = 0;
};

struct BatchSizeTrial {
  int64_t batch_size = 0;
  bool fits = false;
  int64_t samples_per_batch = 0;  ///< what the data gave (fewer: the data ran short)
  int64_t peak_bytes = -1;        ///< CPU bytes allocated at most (-1: no budget, not counted)
  double samples_per_s = 0;       ///< timed steps only; 0 when none were timed
  std::string error;              ///< the out-of-memory message when it did not fit
};

struct BatchSizeFindResult {
  int64_t batch_size = 0;  ///< the answer
  std::vector<BatchSizeTrial> trials;

  /// batch_size,fits,samples_per_batch,peak_bytes,samples_per_s per trial,
  /// in the order run, written atomically.
  void write_csv(const std::filesystem::path& path) const {
    std::ostringstream out;
    out.precision(10);
    out << "batch_size,fits,samples_per_batch,peak_bytes,samples_per_s\n";
    for (const auto& t : trials)
      out << t.batch_size << ',' << (t.fits ? 1 : 0) << ',' << t.samples_per_batch << ','
          << t.peak_bytes << ',' << t.samples_per_s << '\n';
    io::write_file_atomically(path, out.str());
  }
};

/// Whether `e` says that memory ran out: c10::OutOfMemoryError (CUDA's
/// caching allocator, a CpuMeter's limit), std::bad_alloc, or the messages
/// of allocation failures that arrive as other errors (Lightning's list and
/// the CPU allocator's); also when `e` nests such an error (data::Loader
/// nests its workers' errors in its own).
inline bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) || dynamic_cast<const std::bad_alloc*>(&e))
    return true;
  const std::string_view what = e.what();
  for (const std::string_view needle :
       {"CUDA out of memory.", "CUDA error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED",
        "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.", "DefaultCPUAllocator: not enough memory"}) {
    if (what.find(needle) != std::string_view::npos) return true;
  }
  try {
    std::rethrow_if_nested(e);
  } catch (const std::exception& inner) {
    return is_out_of_memory(inner);
  } catch (...) {
  }
  return false;
}

namespace detail {

/// Records what a trial's data gives per micro-batch and times the steps
/// after the warm-up (reading the loss so that the device has finished).
struct TrialClock {
  int64_t warmup_steps, last_step;
  BatchSizeTrial* trial;
  std::chrono::steady_clock::time_point start{};
  int64_t start_samples = 0;

  void on_fit_begin(TrainState&) { start = std::chrono::steady_clock::now(); }
  void on_step_end(TrainState& state) {
    if (state.step == 1)
      trial->samples_per_batch = state.samples_seen / std::max<int64_t>(1, state.batch);
    if (state.step != warmup_steps && state.step != last_step) return;
    (void)state.loss();  // waits for the device
    const auto now = std::chrono::steady_clock::now();
    if (state.step == warmup_steps) {
      start = now, start_samples = state.samples_seen;
    } else if (last_step > warmup_steps) {
      const double seconds = std::chrono::duration<double>(now - start).count();
      if (seconds > 0) trial->samples_per_s = double(state.samples_seen - start_samples) / seconds;
    }
  }
};

inline void check(const BatchSizeFindOptions& o) {
  using trainkit::detail::require_option;
  require_option(o.init_batch_size >= 1, "scale_batch_size.init_batch_size", o.init_batch_size,
                 "a number >= 1");
  require_option(o.max_batch_size >= o.init_batch_size, "scale_batch_size.max_batch_size",
                 o.max_batch_size,
                 "a number >= init_batch_size = " + std::to_string(o.init_batch_size));
  require_option(o.max_trials >= 1, "scale_batch_size.max_trials", o.max_trials, "a number >= 1");
  require_option(o.steps_per_trial >= 1, "scale_batch_size.steps_per_trial", o.steps_per_trial,
                 "a number >= 1");
  require_option(o.warmup_steps >= 0 &&
                     (o.mode != BatchSizeMode::throughput || o.warmup_steps < o.steps_per_trial),
                 "scale_batch_size.warmup_steps", o.warmup_steps,
                 "a number >= 0, and in throughput mode < steps_per_trial = " +
                     std::to_string(o.steps_per_trial));
  require_option(o.cpu_memory_budget >= 0, "scale_batch_size.cpu_memory_budget",
                 o.cpu_memory_budget, "a number of bytes >= 0 (0: no budget)");
}

/// Gives the device's cached blocks back after an out-of-memory error, so
/// that the next, smaller trial starts from an empty cache.
inline void free_device_cache([[maybe_unused]] const torch::Device& device) {
#if TRAINKIT_HAS_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

}  // namespace detail

/// Finds the batch size for `trainer` and `task`: `make_data(batch_size)`
/// gives the training data at that batch size (e.g. a data::Loader), which
/// is repeated as needed. Growth stops at max_batch_size, at max_trials, or
/// when the data gives fewer samples per batch than asked (it has no more:
/// that count is the answer). Throws trainkit::Error when not even a batch
/// of one fits, and rethrows any error that is not out-of-memory after
/// putting the trainer back. One process: under DDP an out-of-memory error
/// on one rank would leave the others waiting in an all-reduce.
template <class TrainerT, class TaskT, class MakeData>
BatchSizeFindResult scale_batch_size(TrainerT& trainer, TaskT&& task, MakeData&& make_data,
                                     const BatchSizeFindOptions& options = {}) {
  detail::check(options);
  if (trainer.parallel().world_size() > 1)
    throw Error("trainkit: scale_batch_size runs in one process; this trainer has " +
                std::to_string(trainer.parallel().world_size()) +
                " (find the size with a Single trainer, then start the DDP run)");
  if (options.cpu_memory_budget > 0 && !trainer.device().is_cpu())
    throw Error("trainkit: scale_batch_size.cpu_memory_budget = " +
                std::to_string(options.cpu_memory_budget) + " applies to CPU training; on " +
                trainer.device().str() + " the device's memory is the limit (set it to 0)");
  BatchSizeFindResult result;
  detail::Snapshot<TrainerT> snapshot(trainer);

  auto run = [&](int64_t batch_size) -> const BatchSizeTrial& {
    BatchSizeTrial& trial = result.trials.emplace_back();
    trial.batch_size = batch_size;
    try {
      std::optional<memory::CpuMeter> meter;  // the batches count against the budget too
      if (options.cpu_memory_budget > 0) {
        meter.emplace();
        meter->set_limit(options.cpu_memory_budget);
      }
      try {
        auto data = make_data(batch_size);
        detail::fit_steps(
            trainer, task, data, options.steps_per_trial, options.steps_per_trial,
            detail::TrialClock{options.warmup_steps, options.steps_per_trial, &trial});
        trial.fits = true;
      } catch (const std::exception& e) {
        if (!is_out_of_memory(e)) throw;
        const std::string what = e.what();
        trial.error = what.substr(0, what.find('\n'));
      }
      if (meter) trial.peak_bytes = meter->peak_bytes();
    } catch (...) {
      snapshot.restore();
      throw;
    }
    snapshot.restore();
    if (!trial.fits) detail::free_device_cache(trainer.device());
    return trial;
  };

  int64_t fits = 0, fails = 0;  // the largest size that fit, the smallest that did not
  bool data_ran_short = false;
  // A trial that ran: whether the data gave full batches. Fewer samples than
  // asked (or none, as a drop_last loader past its data gives) mean there is
  // no larger batch: the largest that ran full is the answer.
  auto full = [&](const BatchSizeTrial& trial) {
    if (trial.samples_per_batch == 0 && fits == 0)
      throw Error("trainkit: scale_batch_size: make_data(" + std::to_string(trial.batch_size) +
                  ") gave no batch");
    if (trial.samples_per_batch >= trial.batch_size) return true;
    fits = std::max(fits, trial.samples_per_batch);
    data_ran_short = true;
    return false;
  };
  auto trials_left = [&] { return int64_t(result.trials.size()) < options.max_trials; };

  // Growth: doubling while trials fit, halving while they do not.
  for (int64_t size = options.init_batch_size; trials_left();) {
    const auto& trial = run(size);
    if (trial.fits) {
      if (!full(trial)) break;
      fits = size;
      if (fails > 0 || size >= options.max_batch_size) break;
      size = size > options.max_batch_size / 2 ? options.max_batch_size : size * 2;
    } else {
      fails = size;
      if (fits > 0 || size == 1) break;
      size /= 2;
    }
  }
  if (options.mode == BatchSizeMode::binary_search) {
    while (!data_ran_short && fits > 0 && fails > fits + 1 && trials_left()) {
      const int64_t mid = fits + (fails - fits) / 2;
      const auto& trial = run(mid);
      if (!trial.fits) {
        fails = mid;
      } else if (full(trial)) {
        fits = mid;
      }
    }
  }
  if (fits == 0 && fails == 1)
    throw Error("trainkit: scale_batch_size: not even a batch of 1 fits: " +
                result.trials.back().error);
  if (fits == 0)
    throw Error("trainkit: scale_batch_size: no batch size fitted within max_trials = " +
                std::to_string(options.max_trials) + " (the smallest tried: " +
                std::to_string(fails) + "): " + result.trials.back().error);
  result.batch_size = fits;
  if (options.mode == BatchSizeMode::throughput && !data_ran_short) {
    double best = -1;
    for (const auto& t : result.trials) {
      if (t.fits && t.samples_per_s > best)
        best = t.samples_per_s, result.batch_size = t.batch_size;
    }
  }
  return result;
}

}  // namespace trainkit::finders
