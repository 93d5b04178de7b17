#pragma once
// The capture driver (capture::CudaGraph): for each full window of
// micro-batches it replays the recorded step when the window has the
// recorded shapes; once a window's shapes have run warmup_steps eager steps
// in a row, it probes the step on static buffers (a host read there is an
// error) and records it; otherwise it runs the Trainer's eager step. The
// step is the Trainer's own: the recorded body calls the pieces of the
// eager step (forward and backward per micro-batch, then the update) in
// the same order, so the two cannot drift apart. What a recorded step writes
// (losses, batch sizes, the pre-clip norm) stays here; the Trainer reads it
// to account for the step, and is the only writer of TrainState's counters.
#include <torch/types.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainkit/concepts.hpp"
#include "trainkit/data/batch_traits.hpp"
#include "trainkit/error.hpp"
#include "trainkit/state.hpp"
#include "trainkit/trainer/detail/step_graph.hpp"

namespace trainkit::detail {

/// What the recorded step writes, each replay anew.
struct RecordedStep {
  std::vector<at::Tensor> losses;  ///< one per micro-batch
  std::vector<int64_t> batch_sizes;
  at::Tensor grad_norm;  ///< the clip policy's pre-clip norm, when it has one
};

/// The capture state of one Trainer `T` (whose friend it is), reset by each fit.
template <class T>
class CapturedSteps {
 public:
  /// What the types of a fit with callbacks `Hooks` rule out, or nullptr.
  template <class Hooks>
  static constexpr const char* blocker_of() {
    using Optimizer = std::remove_cvref_t<decltype(std::declval<T&>().optimizer())>;
    if constexpr (Hooks::template defines<OnBeforeStep>) {
      return "a callback defines on_before_step, which runs on the host between backward and the "
             "optimizer step (and may skip it)";
    } else if constexpr (requires { std::declval<T&>().parallel().unit_of(); }) {
      return "parallel::FullShard gathers and frees each unit's parameters on the host between "
             "its kernels, which a replayed graph would not do";
    } else if constexpr (!HasCapturableStep<Optimizer>) {
      return "the optimizer has no capturable step (capturable, make_capturable, step_unless_inf)";
    } else {
      return nullptr;
    }
  }

  /// At fit's start: whether steps will be captured. If not, the reason goes
  /// to the run's configuration and, once, to stderr.
  template <class Hooks, class B>
  bool start(T& t, TrainState& state) {
    *this = CapturedSteps(std::move(last_report_));  // a graph holds the last fit's task
    if constexpr (constexpr const char* reason = blocker_of<Hooks>(); reason != nullptr) {
      blocker_ = reason;
    } else if constexpr (data::carries_values<B>) {
      blocker_ =
          "the batch type carries values other than tensors (lengths, ids), which a replayed "
          "step would not see: it would run with the recorded ones";
    } else {
      blocker_ = run_time_blocker(t);
    }
    report(t, state);
    return blocker_.empty();
  }

  /// One full window's step: replayed, or probed and recorded, or `eager()`.
  /// `account()` is called when the step ran from the static buffers, with
  /// outputs() holding what it wrote.
  template <class TaskT, class B, class Eager, class Account>
  void step(T& t, TaskT& task, const std::vector<B>& window, TrainState& state, Eager&& eager,
            Account&& account) {
    if (graph_.recorded() && frozen_changed(t)) {
      // A group was frozen or unfrozen (callbacks::Freeze): the recorded step
      // steps the old set. Warm up and record again; a newly trainable
      // group's optimizer state is made in the eager steps.
      graph_ = StepGraph{};
      warm_steps_ = 0;
    }
    if (graph_.recorded() && recorded_shapes_.match(window)) {
      if constexpr (requires { t.optimizer_.momentum(); }) {
        // The fused kernels took it as a number when the step was recorded.
        require_option(t.optimizer_.momentum() == momentum_, "optim momentum",
                       t.optimizer_.momentum(), "its value when the step was recorded");
      }
      size_t i = 0;  // the shapes matched: the same tensors in the same order
      for (const auto& batch : window) {
        data::for_each_tensor(batch, [&](const at::Tensor& x) {
          static_tensors_[i++].copy_(x, /*non_blocking=*/true);  // from pinned memory
        });
      }
      graph_.replay();
      ++replays_;
      return account();
    }
    const auto settings = graph_settings(t);
    if (!graph_.recorded() && blocker_.empty() && warm_steps_ >= settings.warmup_steps &&
        warming_.match(window) && probe(t, task, window, state)) {
      // The probe was this window's step: accounted for with its own
      // outputs before recording reassigns them to the graph's.
      account();
      if constexpr (requires { t.optimizer_.momentum(); }) momentum_ = t.optimizer_.momentum();
      frozen_ = frozen_groups(t);
      graph_.record([this, &t, &task] { body<TaskT, B>(t, task); }, t.device_, settings.emulate,
                    settings.emulate_option);
      return;
    }
    {
      // Warm-up runs beside the default stream; other eager steps as usual,
      // among them a window whose probe just ruled capture out.
      std::optional<SideStream> side;
      if (!graph_.recorded() && blocker_.empty()) side.emplace(t.device_);
      eager();
    }
    if (warm_steps_ > 0 && warming_.match(window)) {
      ++warm_steps_;
    } else {
      warming_ = WindowShapes::of(window);
      warm_steps_ = 1;
    }
  }

  const RecordedStep& outputs() const { return outputs_; }
  const std::string& blocker() const { return blocker_; }
  bool recorded() const { return graph_.recorded(); }
  int64_t replays() const { return replays_; }

 private:
  struct Settings {
    int64_t warmup_steps;
    bool emulate;
    const char* emulate_option;
  };

  CapturedSteps() = default;
  explicit CapturedSteps(std::string last_report) : last_report_(std::move(last_report)) {}
  friend T;

  /// The capture policy's options.
  static Settings graph_settings(const T& t) {
    const auto& o = t.capture_.graph_options();
    return {o.warmup_steps, o.emulate, "capture.emulate"};
  }

  static std::vector<char> frozen_groups(const T& t) {
    std::vector<char> frozen;
    for (size_t g = 0; g < t.flat_.param_groups().size(); ++g) frozen.push_back(t.flat_.frozen(g));
    return frozen;
  }
  /// Whether the frozen groups differ from the recorded step's (every
  /// replay asks: no allocation).
  bool frozen_changed(const T& t) const {
    for (size_t g = 0; g < frozen_.size(); ++g)
      if (t.flat_.frozen(g) != (frozen_[g] != 0)) return true;
    return false;
  }

  static std::string run_time_blocker(const T& t) {
    if (!graph_settings(t).emulate) {
      if (!t.device_.is_cuda()) return "the device is " + t.device_.str() + ", not CUDA";
      if (!TRAINKIT_HAS_CUDA) return "this build has no CUDA (TRAINKIT_HAS_CUDA is 0)";
    }
    if constexpr (requires {
                    t.schedules_.front().momentum_at(0);
                    t.optimizer_.momentum();
                  }) {
      if (t.schedules_.front().momentum_at(0).has_value()) {
        return "the schedule cycles momentum (beta1), which the fused kernels take as a number: "
               "sched.cycle_momentum = false captures the step";
      }
    }
    if (!t.optimizer_.capturable()) {
      return "the optimizer steps with host-side values: optim.fused = true (LibTorch >= 2.4) "
             "gives a capturable step";
    }
    return "";
  }

  void report(const T& t, TrainState& state) {
    auto& entry = state.config["cuda_graph"];
    const auto settings = graph_settings(t);
    if (blocker_.empty()) {
      entry = std::string(settings.emulate ? "emulated" : "captured") + " after " +
              std::to_string(settings.warmup_steps) + " eager steps";
      return;
    }
    entry = "eager: " + blocker_;
    if (blocker_ != last_report_ && t.parallel_.is_main()) {
      std::fprintf(stderr, "trainkit: capture: steps stay eager: %s\n", blocker_.c_str());
    }
    last_report_ = blocker_;
  }

  /// The recorded step: the Trainer's pieces on the static buffers, with
  /// no host read (the fused step skips on the device's inf flag).
  template <class TaskT, class B>
  void body(T& t, TaskT& task) {
    const auto& inputs = *static_cast<const std::vector<B>*>(inputs_.get());
    const auto n = static_cast<int64_t>(inputs.size());
    for (int64_t k = 0; k < n; ++k) {
      const StepOutput out = t.forward_backward(task, inputs[k], k + 1 == n, n);
      outputs_.losses[k] = out.loss.detach();  // a graph's output: each replay writes it
      outputs_.batch_sizes[k] = out.batch_size;
    }
    t.prepare_update(n, n);
    if constexpr (requires { t.clip_.last_norm(); }) outputs_.grad_norm = t.clip_.last_norm();
    t.template apply_update</*recorded=*/true>(/*skip=*/false);
  }

  /// Stages `window` in static buffers and runs its step as the graph will,
  /// with host reads on CUDA an error. Returns whether the window's step ran.
  /// One that reads the host leaves steps eager with that reason, and its
  /// window runs again eagerly (its forwards ran twice: BatchNorm statistics
  /// and dropout's RNG see them).
  template <class TaskT, class B>
  bool probe(T& t, TaskT& task, const std::vector<B>& window, TrainState& state) {
    if constexpr (requires { t.optimizer_.ready_to_capture(); }) {
      if (!t.optimizer_.ready_to_capture()) return false;  // e.g. SGD's first momentum step
    }
    auto inputs = std::make_shared<std::vector<B>>();
    static_tensors_.clear();
    for (const auto& batch : window) {
      // clone keeps the memory format
      inputs->push_back(
          data::map_tensors(t.to_device(batch), [](const at::Tensor& x) { return x.clone(); }));
      data::for_each_tensor(inputs->back(),
                            [this](const at::Tensor& x) { static_tensors_.push_back(x); });
    }
    inputs_ = inputs;
    recorded_shapes_ = WindowShapes::of(window);
    outputs_.losses.assign(window.size(), at::Tensor());
    outputs_.batch_sizes.assign(window.size(), 0);
    t.optimizer_.make_capturable();
    t.apply_schedule(state);  // the rates now on the device, where each replay reads them
    try {
      SideStream side(t.device_);
      HostSyncTrap trap(t.device_);
      body<TaskT, B>(t, task);
    } catch (const HostSync& e) {
      const std::string reason =
          std::string("the step reads the device from the host: ") + e.what();
      if (t.parallel_.world_size() > 1) {
        // Collectives of the probe may be in flight: no clean way back.
        throw Error("trainkit: capture::CudaGraph with " +
                    std::to_string(t.parallel_.world_size()) + " ranks: " + reason +
                    "; train without capture (capture::None) or keep the "
                    "step on the device");
      }
      blocker_ = reason;
      inputs_.reset();
      static_tensors_.clear();
      t.gradients().zero_grad();
      report(t, state);
      return false;
    }
    return true;
  }

  std::string blocker_;  ///< why steps stay eager, or ""
  std::string last_report_;
  StepGraph graph_;
  WindowShapes recorded_shapes_;  ///< the shapes the graph was recorded for
  /// Static buffers: a std::vector<B> of the fit's batch type B, one per
  /// micro-batch, and their tensors in visiting order.
  std::shared_ptr<void> inputs_;
  std::vector<at::Tensor> static_tensors_;
  RecordedStep outputs_;
  WindowShapes warming_;    ///< the shapes of the last eager windows
  int64_t warm_steps_ = 0;  ///< consecutive eager windows of those shapes
  int64_t replays_ = 0;
  double momentum_ = 0;       ///< the optimizer's momentum (beta1) the graph holds
  std::vector<char> frozen_;  ///< the parameter groups frozen when the graph was recorded
};

}  // namespace trainkit::detail
