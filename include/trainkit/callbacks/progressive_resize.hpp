#pragma once
// callbacks::ProgressiveResize: a curriculum on input resolution. Small images
// early make the first epochs cheap; the side length grows linearly from
// `start_size` at epoch 0 to `end_size` at `end_epoch` (rounded to a multiple
// of `multiple`), then stays. Put transform() in the loader's
// device_transform and pass the callback to fit: they share the size.
#include <algorithm>
#include <cmath>

#include "trainkit/data/transforms.hpp"
#include "trainkit/error.hpp"
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

class ProgressiveResize {
 public:
  struct Options {
    int64_t start_size = 16;
    int64_t end_size = 32;
    int64_t end_epoch = 5;
    int64_t multiple = 4;
  };
  explicit ProgressiveResize(const Options& o) : options_(o), resize_(o.start_size) {
    using detail::require_option;
    require_option(o.start_size >= 1, "progressive_resize.start_size", o.start_size,
                   "a side length >= 1");
    require_option(o.end_size >= 1, "progressive_resize.end_size", o.end_size,
                   "a side length >= 1");
    require_option(o.end_epoch >= 1, "progressive_resize.end_epoch", o.end_epoch,
                   "an epoch number >= 1");
    require_option(o.multiple >= 1, "progressive_resize.multiple", o.multiple, "a number >= 1");
  }

  /// The side length for `epoch`.
  int64_t size_at(int64_t epoch) const {
    const auto& o = options_;
    const double t = std::min(1.0, double(epoch) / double(o.end_epoch));
    const double raw = double(o.start_size) + t * double(o.end_size - o.start_size);
    return std::max<int64_t>(o.multiple,
                             int64_t(std::lround(raw / double(o.multiple))) * o.multiple);
  }

  /// The transform to put in the loader; it follows this callback's schedule.
  const data::transforms::Resize& transform() const { return resize_; }

  void on_epoch_begin(TrainState& state) { resize_.set_size(size_at(state.epoch)); }

 private:
  Options options_;
  data::transforms::Resize resize_;
};

}  // namespace trainkit::callbacks
