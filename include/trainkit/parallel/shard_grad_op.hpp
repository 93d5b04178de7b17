#pragma once
// parallel::ShardGradOp: ZeRO stage 2, FSDP's SHARD_GRAD_OP. Every rank
// keeps all parameters; gradients and optimizer state are sharded.
//
// - Backward: DDP's buckets, without DDP's flat gradient. As a parameter's
//   gradient completes it is copied into its bucket's buffer and dropped; a
//   full bucket is divided by the world size and reduce-scattered (a reduce
//   to each rank owning part of it, since Gloo has no reduce-scatter), and
//   each owner adds its part to its shard of the gradient. At most two
//   buckets are in flight: the third waits for the oldest. No rank ever
//   holds the whole gradient.
// - Accumulation: each micro-batch is reduce-scattered as it ends and the
//   shard sums them, so gradient memory stays at the shard's size through
//   the window, at N times the traffic (docs/decisions.md).
// - Update: the trainer unscales, clips and steps this rank's shard; the
//   norm and the inf flag are totalled over the ranks
//   (FlatParams::reduce_across_ranks); then every rank sends its updated
//   slice to all (ZeroSharded::after_step). Optimizer state and checkpoints
//   are ZeroSharded's.
#include <c10/util/ScopeExit.h>

#include <cstdint>
#include <deque>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainkit/parallel/zero_sharded.hpp"

namespace trainkit::parallel {

class ShardGradOp : public ZeroSharded {
 public:
  static constexpr const char* stable_name(std::type_identity<ShardGradOp>) {
    return "trainkit::parallel::ShardGradOp";
  }
  using Options = DDP::Options;
  /// No rank holds all the gradients: checkpoints are sharded unless asked otherwise.
  static constexpr bool kShardedCheckpoints = true;
  ShardGradOp() : ShardGradOp(Options{}) {}
  explicit ShardGradOp(const Options& o) : ZeroSharded(o) {}

  /// Hooks the gradients, gives this rank's shard gradients of its own and
  /// drops the full ones; returns the shard to optimize.
  FlatParams& attach(FlatParams& flat) {
    ZeroSharded::attach(flat);
    auto& mine = shard();
    group_numel_.clear();
    for (size_t i = 0; i < flat.groups().size(); ++i) {
      auto& full = flat.groups()[i];
      group_numel_.push_back(full.numel());
      mine.groups()[i].grad = at::zeros({mine.groups()[i].numel()}, full.grad.options());
      full.grad = full.grad.new_empty({0});
      for (auto& p : full.params) p.mutable_grad().reset();
    }
    for (size_t i = 0; i < buckets_.size(); ++i) {
      buckets_[i].grad = at::Tensor();  // made as its first gradient arrives
      buckets_[i].name = "reduce-scatter of gradient bucket " + std::to_string(i) + " of " +
                         std::to_string(buckets_.size());
    }
    return mine;  // its norms and inf flags total over the ranks (ZeroSharded::attach)
  }

  /// Inside an accumulation window: gradients sync as each micro-batch
  /// ends. An error there (a parameter without a gradient) waits for
  /// finish_sync to throw it: the end of a scope cannot.
  auto defer_sync() {
    return c10::make_scope_exit([this, unwinding = std::uncaught_exceptions()] {
      if (std::uncaught_exceptions() != unwinding) return;  // not while throwing
      try {
        end_micro_batch();
      } catch (...) {
        if (!deferred_error_) deferred_error_ = std::current_exception();
        reset_window();
      }
    });
  }

  /// At the boundary: the last buckets started and folded into the shard.
  void finish_sync(FlatParams& flat) {
    if (buckets_.empty()) attach(flat);  // used outside a Trainer: no hooks ran
    if (deferred_error_) std::rethrow_exception(std::exchange(deferred_error_, nullptr));
    end_micro_batch();
    while (!in_flight_.empty()) fold_oldest();
    sync_buffers();
  }

  /// The gradients the update reads: this rank's shard.
  FlatParams& gradients(FlatParams&) { return shard(); }

 protected:
  void take_grad(Slot& slot) override {
    auto& grad = slot.param.mutable_grad();
    if (!grad.defined()) return;
    auto& b = buckets_[slot.bucket];
    if (!b.grad.defined()) b.grad = at::zeros({b.end - b.begin}, bucket_options(slot.param));
    // The parameter's layout in the flat buffers (channels-last strides included).
    auto into = b.grad.as_strided(slot.param.sizes(), slot.param.strides(), slot.offset - b.begin);
    if (grad.is_sparse()) {  // an Embedding's sparse gradient
      into.add_(grad);
    } else {
      into.copy_(grad);
    }
    grad.reset();
  }

  void start_bucket(size_t index) override {
    auto& b = buckets_[index];
    if (!b.grad.defined()) {  // no parameter in it got a gradient
      b.grad = at::zeros({b.end - b.begin}, bucket_options(slots_[b.params.front()].param));
    }
    if (in_flight_.size() == kMaxInFlight) fold_oldest();
    if (options_.before_collective) options_.before_collective(b.name);
    b.grad.div_(static_cast<double>(shard_count()));
    InFlight f{index, std::exchange(b.grad, at::Tensor()), {}};
    for (int r = 0; r < shard_count(); ++r) {
      const auto [lo, hi] = owned(b, r);
      if (hi > lo)
        f.works.push_back(shards_->reduce_async(f.buffer.narrow(0, lo - b.begin, hi - lo), r));
    }
    in_flight_.push_back(std::move(f));
  }

  std::exception_ptr deferred_error_;  ///< thrown by the next finish_sync
  /// The dtype gradients are reduced in (FullShard's mixed precision);
  /// unset: the parameter's as backward made it.
  std::optional<at::ScalarType> reduce_dtype_;

  at::TensorOptions bucket_options(const at::Tensor& param) const {
    return reduce_dtype_ ? param.options().dtype(*reduce_dtype_) : param.options();
  }

 private:
  static constexpr size_t kMaxInFlight = 2;
  struct InFlight {
    size_t bucket;
    at::Tensor buffer;  ///< the bucket's gradients; this rank's part reduced in place
    std::vector<ProcessGroup::Work> works;
  };

  /// Elements [lo, hi) of bucket `b`'s group that rank `r` owns.
  std::pair<int64_t, int64_t> owned(const Bucket& b, int r) const {
    const auto [begin, end] = FlatParams::shard_range(group_numel_[b.group], r, shard_count());
    return {std::max(begin, b.begin), std::min(end, b.end)};
  }

  void end_micro_batch() {
    start_unready_buckets();
    reset_window();
  }

  /// Waits for the oldest bucket in flight and adds this rank's part to its shard.
  void fold_oldest() {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    const auto& b = buckets_[f.bucket];
    for (auto& w : f.works) shards_->wait(w, b.name);
    const auto [lo, hi] = owned(b, shard_rank());
    if (hi <= lo) return;
    const auto begin =
        FlatParams::shard_range(group_numel_[b.group], shard_rank(), shard_count()).first;
    shard()
        .groups()[b.group]
        .grad.narrow(0, lo - begin, hi - lo)
        .add_(f.buffer.narrow(0, lo - b.begin, hi - lo));
  }

  std::vector<int64_t> group_numel_;  ///< of each flat group, whole
  std::deque<InFlight> in_flight_;
};

}  // namespace trainkit::parallel
