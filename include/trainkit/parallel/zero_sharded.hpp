#pragma once
// parallel::ZeroSharded: ZeRO stage 1 on top of DDP. Gradients are averaged
// as in DDP; the optimizer is built on this rank's slice of each flat group
// (FlatParams::shard), so its state is 1/world_size of DDP's; after the step
// every rank broadcasts its updated slice. Checkpoints hold the full state
// (gathered), so a run resumes on any number of ranks.
//
// Contract with the optimizer: `elementwise_state()` lists every state tensor
// and the flat group it follows (optim::SGD, Adam, AdamW); plain values are
// shared by all ranks.
#include <string>
#include <type_traits>
#include <vector>

#include "trainkit/parallel/ddp.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::parallel {

class ZeroSharded : public DDP {
 public:
  static constexpr const char* stable_name(std::type_identity<ZeroSharded>) {
    return "trainkit::parallel::ZeroSharded";
  }
  using Options = DDP::Options;
  ZeroSharded() : ZeroSharded(Options{}) {}
  explicit ZeroSharded(const Options& o) : DDP(o), shards_(group_) {}

  /// Hooks the gradients (DDP) and returns this rank's shard to optimize.
  FlatParams& attach(FlatParams& flat) {
    DDP::attach(flat);
    full_ = &flat;
    shard_ = flat.shard(shard_rank(), shard_count());
    // What the optimizer totals over its slices (a trust ratio's norms),
    // with the other ranks' slices of the same parameters.
    shard_.set_across_ranks([this](at::Tensor& partial, FlatParams::Reduction how) {
      shards_->all_reduce(
          partial, "total over the ranks' parameter shards",
          how == FlatParams::Reduction::Max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM);
    });
    // What needs whole tensors (Muon's matrices) from the ranks' slices.
    shard_.set_gather_across_ranks([this](const at::Tensor& mine, size_t group) {
      return gather_group(
          mine, group,
          "all-gather of flat group " + std::to_string(group) + " for the optimizer step");
    });
    return shard_;
  }

  /// After the optimizer step: every rank sends its updated slice to all.
  void after_step(FlatParams& flat) {
    if (options_.before_collective) options_.before_collective("all-gather of updated parameters");
    std::vector<ProcessGroup::Work> works;
    for (auto& g : flat.groups()) {
      for (int r = 0; r < shard_count(); ++r) {
        const auto [begin, end] = FlatParams::shard_range(g.numel(), r, shard_count());
        if (end > begin)
          works.push_back(shards_->broadcast_async(g.data.narrow(0, begin, end - begin), r));
      }
    }
    for (auto& w : works) shards_->wait(w, "broadcast of updated parameter shards");
  }

  /// The optimizer state of all ranks, assembled on every rank (a
  /// collective): each tensor in `elementwise` is this rank's slice of its group.
  StateDict gather_optimizer_state(StateDict local, const ElementwiseState& elementwise) {
    require_listed(local, elementwise);
    for (const auto& [name, group] : elementwise) {
      const auto it = local.tensors.find(name);
      if (it == local.tensors.end()) continue;  // not made yet: on no rank (all step alike)
      it->second = gather_group(it->second, group, "gather of optimizer state " + name);
    }
    return local;
  }

  /// This rank's slice of a full optimizer state (no communication).
  StateDict shard_optimizer_state(const StateDict& full,
                                  const ElementwiseState& elementwise) const {
    StateDict out = full;
    for (const auto& [name, group] : elementwise) {
      const auto it = out.tensors.find(name);
      if (it == out.tensors.end()) continue;  // load_state_dict names what is missing
      it->second = slice_of_group(it->second);
    }
    return out;
  }

  /// Flat group `group` whole, from `mine`: a tensor of this rank's slice
  /// of it (each rank passes its own; a collective, `what` names it in errors).
  at::Tensor gather_group(const at::Tensor& mine, size_t group, const std::string& what) {
    const int64_t numel = full_->groups()[group].numel();
    auto whole = at::empty({numel}, mine.options());
    std::vector<ProcessGroup::Work> works;
    for (int r = 0; r < shard_count(); ++r) {
      const auto [begin, end] = FlatParams::shard_range(numel, r, shard_count());
      auto part = whole.narrow(0, begin, end - begin);
      if (r == shard_rank()) part.copy_(mine.detach().reshape({-1}));
      if (end > begin) works.push_back(shards_->broadcast_async(part, r));
    }
    for (auto& w : works) shards_->wait(w, what);
    return whole;
  }
  /// The reverse: this rank's slice of a whole flat group's tensor (a view).
  at::Tensor slice_of_group(const at::Tensor& whole) const {
    const auto [begin, end] = FlatParams::shard_range(whole.numel(), shard_rank(), shard_count());
    return whole.reshape({-1}).narrow(0, begin, end - begin);
  }

  FlatParams& shard() { return shard_; }
  /// Its shard of each group, written whole to a sharded checkpoint.
  GroupShare held_share() const { return {shard_rank(), shard_count()}; }
  GroupShare written_share() const { return {}; }

 protected:
  /// The ranks the state is sharded over, and this one's place among them:
  /// all ranks, or under hybrid sharding this host's.
  int shard_rank() const { return shards_->rank(); }
  int shard_count() const { return shards_->world_size(); }
  std::shared_ptr<ProcessGroup> shards_;

 private:
  /// A tensor state the optimizer did not list could not be gathered.
  static void require_listed(const StateDict& local, const ElementwiseState& elementwise) {
    for (const auto& [name, t] : local.tensors) {
      if (elementwise.count(name) == 0) {
        throw Error("trainkit: parallel::ZeroSharded: the optimizer's state tensor \"" + name +
                    "\" is not in its elementwise_state(); a sharded optimizer must list every "
                    "per-element state tensor (optim::SGD, Adam and AdamW do)");
      }
    }
  }

  FlatParams* full_ = nullptr;
  FlatParams shard_;
};

}  // namespace trainkit::parallel
