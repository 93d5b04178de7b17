#pragma once
// callbacks::Ema: an exponential moving average of the model's weights,
// updated after every optimizer step as timm's ModelEmaV3 updates it:
//   ema = lerp(ema, weight, 1 - decay_t)
// over the parameters and the floating-point buffers (other buffers, such as
// BatchNorm's batch count, are copied). Parameters that are views of one
// flat buffer (a Trainer's) are averaged in one pass per buffer. The
// average is saved in checkpoints, and validation can run on it.
// Under full sharding each rank averages its own slice of the flat buffers
// (TrainState::parameter_shards): the average is sharded as the weights
// are, and gathered whole only for state_dict and copy_to, which are then
// collectives (every rank calls them; checkpoints do).
#include <ATen/Parallel.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/state.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::callbacks {

class Ema {
 public:
  struct Options {
    double decay = 0.9999;  ///< the decay once warmed up (timm's `decay`)
    /// timm's warm-up: decay_t = 1 - (1 + t / warmup_gamma)^-warmup_power,
    /// clamped to [min_decay, decay], t counting from update_after_step.
    bool warmup = false;
    double warmup_gamma = 1.0;
    double warmup_power = 2.0 / 3.0;
    double min_decay = 0.0;
    int64_t update_after_step = 0;  ///< until then the average is a copy of the weights
    int64_t every = 1;              ///< update after every N-th optimizer step
    bool validate = false;          ///< validation (`val_*` metrics) runs on the average
  };
  Ema() : Ema(Options{}) {}
  explicit Ema(const Options& o) : options_(o) {
    using detail::require_option;
    require_option(o.decay >= 0 && o.decay <= 1, "Ema.decay", o.decay, "a number in [0, 1]");
    require_option(o.min_decay >= 0 && o.min_decay <= o.decay, "Ema.min_decay", o.min_decay,
                   "a number in [0, decay]");
    require_option(o.warmup_gamma > 0, "Ema.warmup_gamma", o.warmup_gamma, "a number > 0");
    require_option(o.warmup_power > 0, "Ema.warmup_power", o.warmup_power, "a number > 0");
    require_option(o.update_after_step >= 0, "Ema.update_after_step", o.update_after_step,
                   "a number >= 0");
    require_option(o.every >= 1, "Ema.every", o.every, "a number >= 1");
  }

  /// The decay of the update after optimizer step `step` (timm's get_decay):
  /// 0, a plain copy, up to and including step update_after_step + 1.
  double decay_at(int64_t step) const {
    const int64_t t = std::max<int64_t>(0, step - options_.update_after_step - 1);
    if (t <= 0) return 0.0;
    if (!options_.warmup) return options_.decay;
    const double d =
        1.0 - std::pow(1.0 + double(t) / options_.warmup_gamma, -options_.warmup_power);
    return std::clamp(d, options_.min_decay, options_.decay);
  }

  /// The average starts from the weights here, or from the checkpoint's
  /// average when the fit resumed.
  void on_fit_begin(TrainState& state) {
    shards_.reset();
    if (state.parameters_sharded()) shards_ = state.parameter_shards();
    track(state.model());
    if (!pending_.tensors.empty()) {
      const auto sources = matching(pending_);
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < sources.size(); ++i) {
        if (sources[i].defined()) average_of(i).copy_(sources[i]);
      }
    }
    pending_ = {};
  }
  void on_step_end(TrainState& state) {
    if (state.step % options_.every != 0) return;
    torch::NoGradGuard no_grad;
    const double weight = 1.0 - decay_at(state.step);
    for (auto& [ema, live] : fused_) average_into(ema, live, weight);  // one op per flat buffer
    for (auto& [ema, live] : copied_) ema.copy_(live);
    ++updates_;
  }
  void on_validation_begin(TrainState&) {
    if (options_.validate) swap_in();
  }
  void on_validation_end(TrainState&) { swap_out(); }
  void on_exception(TrainState&) { swap_out(); }

  /// The averaged tensors by name ("param.<name>", "buffer.<name>"), whole.
  /// Under full sharding a collective: every rank calls it.
  StateDict state_dict() const {
    StateDict d;
    const auto whole = gathered();
    for (size_t i = 0; i < names_.size(); ++i) d.tensors[names_[i]] = whole[i];
    d.values["updates"] = updates_;
    return d;
  }
  /// Before fit (resume_from): kept until on_fit_begin, which starts the
  /// average from it. Checked here against the model this Ema averaged
  /// before, if any; else in on_fit_begin. An empty state (an average that
  /// did not exist yet) loads as none.
  void load_state_dict(const StateDict& d) {
    const auto updates = d.values.count("updates") ? d.value<int64_t>("updates") : int64_t{0};
    if (!d.tensors.empty() && !names_.empty()) (void)matching(d);
    pending_ = {};
    for (const auto& [name, t] : d.tensors) pending_.tensors[name] = t.clone();
    updates_ = updates;
  }

  /// Copies the average into `model` (the same architecture as the trained
  /// one, whole). Under full sharding a collective, while the trainer lives.
  void copy_to(torch::nn::Module& model) const {
    const auto whole = gathered();
    const auto live = named_tensors(model);
    if (live.size() != names_.size())
      throw Error("trainkit: Ema::copy_to: the model has " + std::to_string(live.size()) +
                  " tensors, the average " + std::to_string(names_.size()));
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < live.size(); ++i) {
      if (live[i].first != names_[i])
        throw Error("trainkit: Ema::copy_to: the model's tensor \"" + live[i].first +
                    "\" is not the average's \"" + names_[i] + "\"");
      live[i].second.copy_(whole[i]);
    }
  }
  int64_t updates() const { return updates_; }
  /// The passes one update takes: one per flat buffer, one per other tensor.
  int64_t fused_updates() const { return static_cast<int64_t>(fused_.size()); }

 private:
  static std::vector<std::pair<std::string, at::Tensor>> named_tensors(torch::nn::Module& m) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& p : m.named_parameters()) out.emplace_back(kParam + p.key(), p.value());
    for (const auto& b : m.named_buffers()) out.emplace_back("buffer." + b.key(), b.value());
    return out;
  }

  // ema += weight * (live - ema). On contiguous CPU floats one pass of a
  // loop the compiler vectorises: LibTorch's lerp_ took 1.7x an AdamW step
  // over the same buffer (bench_optim, ema_200_small); elsewhere lerp_.
  static void average_into(at::Tensor& ema, const at::Tensor& live, double weight) {
    if (weight == 1.0) {
      ema.copy_(live);  // the first update copies exactly
    } else if (ema.is_cpu() && ema.scalar_type() == at::kFloat && ema.is_contiguous() &&
               live.is_contiguous()) {
      float* e = ema.data_ptr<float>();
      const float* l = live.data_ptr<float>();
      const float w = static_cast<float>(weight);
      at::parallel_for(0, ema.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) e[i] += w * (l[i] - e[i]);
      });
    } else {
      ema.lerp_(live, weight);
    }
  }

  // The tensors of `d` in the average's order (sharded ones: this rank's
  // slices), checked against it.
  std::vector<at::Tensor> matching(const StateDict& d) const {
    if (d.tensors.size() != names_.size())
      throw Error("trainkit: the checkpoint's Ema has " + std::to_string(d.tensors.size()) +
                  " tensors, this model " + std::to_string(names_.size()));
    std::vector<at::Tensor> sources;
    std::map<std::string, at::Tensor> whole;  // of the sharded parameters
    for (size_t i = 0; i < names_.size(); ++i) {
      if (ema_[i].defined()) {
        sources.push_back(d.tensor_like(names_[i], ema_[i]));
      } else {
        sources.emplace_back();
        const auto found = d.tensors.find(names_[i]);
        if (found == d.tensors.end())
          throw Error("trainkit: the checkpoint's Ema has no tensor \"" + names_[i] + "\"");
        whole[names_[i].substr(kParam.size())] = found->second;
      }
    }
    if (!shards_) return sources;
    const auto mine = shards_->slice(whole);
    for (size_t g = 0; g < mine.size(); ++g) sources.push_back(mine[g]);
    return sources;
  }
  // The tensor that `matching`'s i-th source goes into.
  at::Tensor average_of(size_t i) {
    return i < ema_.size() ? ema_[i] : shard_ema_[i - ema_.size()];
  }
  // Every average whole, in names_' order (sharded ones gathered: a collective).
  std::vector<at::Tensor> gathered() const {
    std::vector<at::Tensor> out = ema_;
    if (!shards_) return out;
    const auto whole = shards_->gather(shard_ema_);
    for (size_t i = 0; i < names_.size(); ++i) {
      if (!out[i].defined()) out[i] = whole.at(names_[i].substr(kParam.size()));
    }
    return out;
  }

  // Whether `next` continues `run` back to back in the same storage.
  static bool continues(const std::vector<at::Tensor>& run, const at::Tensor& next) {
    const auto& last = run.back();
    return next.is_contiguous() && last.is_contiguous() && next.is_alias_of(last) &&
           next.scalar_type() == last.scalar_type() &&
           next.storage_offset() == last.storage_offset() + last.numel();
  }

  // Pairs every tensor with its average: the sharded parameters by their
  // flat buffers' slices, the others as they are laid out.
  void track(torch::nn::Module& model) {
    torch::NoGradGuard no_grad;
    names_.clear();
    ema_.clear();
    fused_.clear();
    copied_.clear();
    shard_ema_.clear();
    std::set<std::string> sharded;
    if (shards_) {
      for (const auto& name : shards_->names) sharded.insert(kParam + name);
    }
    std::vector<at::Tensor> floats;  // parameters, then floating-point buffers, in order
    for (const auto& [name, t] : named_tensors(model)) {
      names_.push_back(name);
      if (sharded.count(name)) continue;
      if (at::isFloatingType(t.scalar_type())) {
        floats.push_back(t.detach());
      } else {
        ema_.push_back(t.detach().clone());
        copied_.emplace_back(ema_.back(), t.detach());
      }
    }
    // Runs of tensors that tile one buffer become one fused pair; the
    // others pair one by one. ema_ keeps the names' order for checkpoints.
    std::vector<at::Tensor> float_ema;
    for (size_t i = 0; i < floats.size();) {
      std::vector<at::Tensor> run{floats[i]};
      while (i + run.size() < floats.size() && continues(run, floats[i + run.size()]))
        run.push_back(floats[i + run.size()]);
      int64_t total = 0;
      for (const auto& t : run) total += t.numel();
      if (run.size() == 1) {  // a tensor of its own: averaged as it is laid out
        fused_.emplace_back(run[0].clone(), run[0]);
        float_ema.push_back(fused_.back().first);
      } else {
        const auto live = run[0].as_strided({total}, {1}, run[0].storage_offset());
        fused_.emplace_back(live.clone(), live);
        int64_t offset = 0;
        for (const auto& t : run) {
          float_ema.push_back(fused_.back().first.narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
      }
      i += run.size();
    }
    // Put the float averages back among the others in the names' order
    // (undefined for the sharded parameters).
    std::vector<at::Tensor> ordered;
    size_t f = 0, c = 0;
    for (const auto& [name, t] : named_tensors(model)) {
      if (sharded.count(name)) {
        ordered.emplace_back();
      } else {
        ordered.push_back(at::isFloatingType(t.scalar_type()) ? float_ema[f++] : ema_[c++]);
      }
    }
    ema_ = std::move(ordered);
    if (!shards_) return;
    for (const auto& live : shards_->live) {
      shard_ema_.push_back(live.detach().clone());
      fused_.emplace_back(shard_ema_.back(), live.detach());
    }
  }

  void swap_in() {
    torch::NoGradGuard no_grad;
    backup_.clear();
    for (auto& [ema, live] : fused_) {
      backup_.push_back(live.clone());
      live.copy_(ema);
    }
  }
  void swap_out() {
    if (backup_.empty()) return;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < fused_.size(); ++i) fused_[i].second.copy_(backup_[i]);
    backup_.clear();
  }

  static inline const std::string kParam = "param.";

  Options options_;
  std::vector<std::string> names_;
  /// per tensor, in names_' order (views of the fused buffers); undefined
  /// for the sharded parameters, whose averages are shard_ema_
  std::vector<at::Tensor> ema_;
  std::optional<TrainState::ParameterShards> shards_;      ///< under full sharding
  std::vector<at::Tensor> shard_ema_;                      ///< per flat group, this rank's slice
  std::vector<std::pair<at::Tensor, at::Tensor>> fused_;   ///< (average, live) flat pairs
  std::vector<std::pair<at::Tensor, at::Tensor>> copied_;  ///< non-float buffers
  std::vector<at::Tensor> backup_;                         ///< live weights while validating
  StateDict pending_;                                      ///< loaded before on_fit_begin
  int64_t updates_ = 0;
};

}  // namespace trainkit::callbacks
