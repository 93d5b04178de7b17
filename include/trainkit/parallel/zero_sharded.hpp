#pragma once
// parallel::ZeroSharded: ZeRO stage 1 on top of DDP. Gradients are averaged
// as in DDP; the optimizer is built on this rank's slice of each flat group
// (FlatParams::shard), so its state is 1/world_size of DDP's; after the step
// every rank broadcasts its updated slice. Checkpoints hold the full state
// (gathered), so a run resumes on any number of ranks.
//
// Contract with the optimizer: per-element state is one tensor per group,
// named "<state>.<group>" (optim::SGD, Adam, AdamW); other entries are
// values shared by all ranks.
#include <string>
#include <vector>

#include "trainkit/parallel/ddp.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::parallel {

class ZeroSharded : public DDP {
 public:
  using Options = DDP::Options;
  ZeroSharded() : ZeroSharded(Options{}) {}
  explicit ZeroSharded(const Options& o) : DDP(o) {}

  /// Hooks the gradients (DDP) and returns this rank's shard to optimize.
  FlatParams& attach(FlatParams& flat) {
    DDP::attach(flat);
    full_ = &flat;
    shard_ = flat.shard(rank(), world_size());
    return shard_;
  }

  /// After the optimizer step: every rank sends its updated slice to all.
  void after_step(FlatParams& flat) {
    std::vector<ProcessGroup::Work> works;
    for (auto& g : flat.groups()) {
      for (int r = 0; r < world_size(); ++r) {
        const auto [begin, end] = FlatParams::shard_range(g.numel(), r, world_size());
        if (end > begin)
          works.push_back(group_->broadcast_async(g.data.narrow(0, begin, end - begin), r));
      }
    }
    for (auto& w : works) group_->wait(w, "broadcast of updated parameter shards");
  }

  /// The optimizer state of all ranks, assembled on every rank (a collective).
  StateDict gather_optimizer_state(StateDict local) {
    for (auto& [name, t] : local.tensors) {
      const auto group = group_in(shard_, name, t);
      if (group < 0) continue;
      const int64_t numel = full_->groups()[size_t(group)].numel();
      auto full = at::empty({numel}, t.options());
      std::vector<ProcessGroup::Work> works;
      for (int r = 0; r < world_size(); ++r) {
        const auto [begin, end] = FlatParams::shard_range(numel, r, world_size());
        auto part = full.narrow(0, begin, end - begin);
        if (r == rank()) part.copy_(t.detach().reshape({-1}));
        if (end > begin) works.push_back(group_->broadcast_async(part, r));
      }
      for (auto& w : works) group_->wait(w, "gather of optimizer state " + name);
      t = full;
    }
    return local;
  }

  /// This rank's slice of a full optimizer state (no communication).
  StateDict shard_optimizer_state(const StateDict& full) const {
    StateDict out = full;
    for (auto& [name, t] : out.tensors) {
      const auto group = group_in(*full_, name, t);
      if (group < 0) continue;
      const auto [begin, end] = FlatParams::shard_range(t.numel(), rank(), world_size());
      t = t.reshape({-1}).narrow(0, begin, end - begin);
    }
    return out;
  }

  FlatParams& shard() { return shard_; }

 private:
  static int group_of(const std::string& name) {
    const auto dot = name.rfind('.');
    if (dot == std::string::npos || dot + 1 == name.size()) return -1;
    for (size_t i = dot + 1; i < name.size(); ++i) {
      if (name[i] < '0' || name[i] > '9') return -1;
    }
    return std::stoi(name.substr(dot + 1));
  }
  /// The group whose per-element state `t` is in `params` (a shard or the
  /// full buffers), or -1 for shared values.
  static int group_in(const FlatParams& params, const std::string& name, const at::Tensor& t) {
    const int g = group_of(name);
    const bool ok = g >= 0 && size_t(g) < params.groups().size() && t.dim() == 1 &&
                    t.numel() == params.groups()[size_t(g)].numel();
    return ok ? g : -1;
  }

  FlatParams* full_ = nullptr;
  FlatParams shard_;
};

}  // namespace trainkit::parallel
