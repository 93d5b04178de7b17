#pragma once
// A rank's share of an epoch, as torch.utils.data.DistributedSampler splits
// one: every rank draws the same epoch order (from seed and epoch, never the
// rank), pads it by wrapping around to a multiple of the world size (or cuts
// it, with drop_last), and takes every world_size-th index from its rank. The
// shares are disjoint before the padding, of equal length, and together the
// order one process would draw, so weighted, repeat-factor and curriculum
// draws keep their distributions across the ranks.
#include <c10/util/Type.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "trainkit/error.hpp"

namespace trainkit {
/// Training data that takes this rank's share (concepts.hpp lists fit's
/// optional members of training data).
template <class D>
concept HasSetShard = requires(D& d, int64_t rank, int64_t world_size) {
  d.set_shard(rank, world_size);
};
}  // namespace trainkit

namespace trainkit::data {

/// `rank`'s share of `order` among `world_size` ranks, after its first
/// `skip` samples (those an interrupted epoch's ranks had taken: a resume on
/// another number of ranks shares the rest).
inline at::Tensor shard_of(const at::Tensor& order, int64_t rank, int64_t world_size,
                           bool drop_last = false, int64_t skip = 0) {
  if (skip > 0) {
    const int64_t taken = std::min(skip, order.numel());
    return shard_of(order.narrow(0, taken, order.numel() - taken), rank, world_size, drop_last);
  }
  const int64_t n = order.numel(), w = world_size;
  if (w == 1) return order;
  const int64_t per_rank = drop_last && n % w != 0 ? n / w : (n + w - 1) / w;
  const int64_t total = per_rank * w;
  at::Tensor all = order;
  if (total > n && n > 0) {
    all = all.repeat({(total + n - 1) / n}).narrow(0, 0, total);  // wrap around
  } else {
    all = all.narrow(0, 0, total);
  }
  return all.narrow(0, rank, total - rank).slice(0, 0, total, w).contiguous();
}

/// The base of what shards itself (the library's samplers, TensorBatches):
/// `set_shard`, which the Trainer calls through the loader, and the share of
/// an epoch's order for this rank.
class Sharded {
 public:
  /// Takes `rank`'s share of each epoch among `world_size` ranks.
  void set_shard(int64_t rank, int64_t world_size) {
    using trainkit::detail::require_option;
    require_option(world_size >= 1, "sampler.world_size", world_size, "a number >= 1");
    require_option(rank >= 0 && rank < world_size, "sampler.rank", rank, "0 <= rank < world_size");
    rank_ = rank;
    world_size_ = world_size;
  }
  /// The orders drawn from now on skip their first `samples` (shard_of):
  /// the loader sets it around the one draw of a resumed epoch.
  void set_skip(int64_t samples) {
    trainkit::detail::require_option(samples >= 0, "sampler.skip", samples, "a count >= 0");
    skip_ = samples;
  }

 protected:
  at::Tensor shard(const at::Tensor& order) const {
    return shard_of(order, rank_, world_size_, /*drop_last=*/false, skip_);
  }
  int64_t world_size() const { return world_size_; }
  int64_t skip() const { return skip_; }

 private:
  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  int64_t skip_ = 0;
};

namespace detail {
/// Data that cannot take a shard, under several ranks: every rank would
/// train on the same samples, so it is refused, naming the fixes.
[[noreturn]] inline void refuse_unsharded(const std::string& what, int64_t world_size) {
  throw Error("trainkit: " + what + " cannot give each of the " + std::to_string(world_size) +
              " ranks its own share of the data (it has no set_shard(rank, world_size)), so "
              "every rank would train on the same samples: use data::Loader with a library "
              "sampler (all of them shard), data::TensorBatches, or data with set_shard; or, "
              "if each rank already has its own data (or the same data on purpose), set "
              "fit.data_is_per_rank = true");
}
}  // namespace detail

/// The training data's share for this rank (fit calls it): `set_shard` where
/// the data has it, unless `per_rank` says each rank already holds its own;
/// data without it is refused under several ranks.
template <class Data>
void take_shard(Data& data, int64_t rank, int64_t world_size, bool per_rank) {
  if (per_rank) return;
  if constexpr (HasSetShard<Data>) {
    data.set_shard(rank, world_size);
  } else if (world_size > 1) {
    detail::refuse_unsharded(std::string("the training data (") + c10::demangle_type<Data>() + ")",
                             world_size);
  }
}

/// The same for the rank a Parallel policy is (a Trainer's parallel()), as
/// fit takes it: under several ranks, a loader's size() is the whole epoch's
/// until then, so take it first to size a schedule by it.
template <class Data, class Parallel>
void take_shard(Data& data, const Parallel& parallel, bool per_rank = false) {
  take_shard(data, parallel.rank(), parallel.world_size(), per_rank);
}

}  // namespace trainkit::data
