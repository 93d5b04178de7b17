#pragma once
// A rank's share of an epoch, as torch.utils.data.DistributedSampler splits
// one: every rank draws the same epoch order (from seed and epoch, never the
// rank), pads it by wrapping around to a multiple of the world size (or cuts
// it, with drop_last), and takes every world_size-th index from its rank. The
// shares are disjoint before the padding, of equal length, and together the
// order one process would draw, so weighted, repeat-factor and curriculum
// draws keep their distributions across the ranks.
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "trainkit/error.hpp"

namespace trainkit::data {

/// `rank`'s share of `order` among `world_size` ranks.
inline at::Tensor shard_of(const at::Tensor& order, int64_t rank, int64_t world_size,
                           bool drop_last = false) {
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

/// A sampler's place among the ranks; set by the Trainer through the
/// loader's set_shard.
struct Shard {
  int64_t rank = 0;
  int64_t world_size = 1;

  void set(int64_t r, int64_t w) {
    using trainkit::detail::require_option;
    require_option(w >= 1, "sampler.world_size", w, "a number >= 1");
    require_option(r >= 0 && r < w, "sampler.rank", r, "0 <= rank < world_size");
    rank = r;
    world_size = w;
  }
  at::Tensor of(const at::Tensor& order, bool drop_last = false) const {
    return shard_of(order, rank, world_size, drop_last);
  }
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

}  // namespace trainkit::data
