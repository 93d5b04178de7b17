#pragma once
// parallel::HybridShard: FSDP's HYBRID_SHARD. Full sharding among the ranks
// of one host, a replica of that on every host: parameters are gathered and
// gradients reduce-scattered over the host's fast links only, and across
// hosts each rank all-reduces just its gradient shard with the ranks that
// hold the same shard elsewhere (1/L of DDP's traffic over the slow links,
// for L ranks per host). Memory per rank is full sharding's over L ranks.
//
// Ranks are laid out host by host, as torchrun and Slurm number them: host
// h holds ranks h*L .. h*L + L - 1, L from LOCAL_WORLD_SIZE (or
// SLURM_NTASKS_PER_NODE, or Rendezvous::local_world_size).
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "trainkit/parallel/full_shard.hpp"

namespace trainkit::parallel {

class HybridShard : public FullShard {
 public:
  static constexpr const char* stable_name(std::type_identity<HybridShard>) {
    return "trainkit::parallel::HybridShard";
  }
  using Options = FullShard::Options;
  HybridShard() : HybridShard(Options{}) {}
  explicit HybridShard(const Options& o) : FullShard(o) {
    const auto& env = environment();
    const int per_host = env.local_world_size;
    trainkit::detail::require_option(
        per_host >= 1 && env.world_size % per_host == 0 && env.rank % per_host == env.local_rank,
        "local_world_size", per_host,
        "the ranks per host, dividing world_size = " + std::to_string(env.world_size) +
            ", with ranks numbered host by host (LOCAL_RANK = RANK mod it: here RANK " +
            std::to_string(env.rank) + ", LOCAL_RANK " + std::to_string(env.local_rank) +
            "); set LOCAL_WORLD_SIZE as torchrun does, or Rendezvous::local_world_size");
    const int host = env.rank / per_host, hosts = env.world_size / per_host;
    std::vector<int> same_host, same_shard;
    for (int i = 0; i < per_host; ++i) same_host.push_back(host * per_host + i);
    for (int h = 0; h < hosts; ++h) same_shard.push_back(h * per_host + env.local_rank);
    shards_ = group_->subgroup("hybrid/host_" + std::to_string(host), same_host);
    replicas_ = group_->subgroup("hybrid/shard_" + std::to_string(env.local_rank), same_shard);
  }

  /// Full sharding's boundary, then each gradient shard averaged with the
  /// same shard on the other hosts.
  void finish_sync(FlatParams& flat) {
    FullShard::finish_sync(flat);
    if (replicas_->world_size() == 1) return;
    if (options_.before_collective) options_.before_collective("all-reduce of gradient shards");
    std::vector<ProcessGroup::Work> works;
    for (auto& g : shard().groups()) {
      if (g.grad.numel() == 0) continue;
      g.grad.div_(static_cast<double>(replicas_->world_size()));
      works.push_back(replicas_->all_reduce_async(g.grad));
    }
    for (auto& w : works) replicas_->wait(w, "all-reduce of gradient shards across hosts");
  }

  /// The same shard is on every host: each writes a part of it.
  GroupShare written_share() const { return {replicas_->rank(), replicas_->world_size()}; }

  /// This rank's host among the hosts, and the ranks on each.
  int hosts() const { return replicas_->world_size(); }
  int ranks_per_host() const { return shards_->world_size(); }

 private:
  std::shared_ptr<ProcessGroup> replicas_;  ///< the ranks holding this rank's shard
};

}  // namespace trainkit::parallel
