#pragma once
// Batched transforms: whole-batch tensor ops, meant to run on the device after
// the transfer (Loader's `device_transform`), or on the CPU in the workers
// (`transform`). Each is `Batch(Batch, at::Generator&)`; the generator is the
// batch's own (seeded from seed, rank, epoch and batch index), and random
// draws are made on the CPU with it, so results do not depend on the device,
// the worker or the thread.
#include <torch/nn/functional/upsampling.h>
#include <torch/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <tuple>
#include <vector>

#include "trainkit/data/batch.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

/// A transform of batches of type B, with the batch's own generator.
template <class B>
using BasicTransform = std::function<B(B, at::Generator&)>;
using Transform = BasicTransform<Batch>;

namespace transforms {

/// uint8 images become float in [0, 1]; then (x - mean) / std per channel.
struct Normalize {
  std::vector<double> mean{};
  std::vector<double> std{};

  Batch operator()(Batch b, at::Generator&) const {
    auto x = b.input;
    if (x.scalar_type() == at::kByte) x = x.to(at::kFloat).div_(255.0);
    const int64_t c = x.size(1);
    trainkit::detail::require_option(int64_t(mean.size()) == c && int64_t(std.size()) == c,
                                     "transforms.Normalize.mean", int64_t(mean.size()),
                                     "one mean and one std per channel of the input");
    const auto opts = x.options();
    const auto m = at::tensor(mean, opts.dtype(at::kDouble)).to(opts).view({1, c, 1, 1});
    const auto s = at::tensor(std, opts.dtype(at::kDouble)).to(opts).view({1, c, 1, 1});
    b.input = (x - m) / s;
    return b;
  }
};

/// Random `size` x `size` crops of the zero-padded images, one offset per sample.
struct RandomCrop {
  int64_t size = 32;
  int64_t padding = 0;

  Batch operator()(Batch b, at::Generator& gen) const {
    const auto& x = b.input;  // [B, C, H, W]
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2) + 2 * padding,
                  w = x.size(3) + 2 * padding;
    trainkit::detail::require_option(size >= 1 && size <= h && size <= w,
                                     "transforms.RandomCrop.size", size,
                                     "at most the padded image height and width");
    const auto padded =
        padding > 0 ? at::constant_pad_nd(x, {padding, padding, padding, padding}, 0) : x;
    const auto dev = x.device();
    const auto ys = at::randint(h - size + 1, {n, 1}, gen, at::kLong).to(dev);
    const auto xs = at::randint(w - size + 1, {n, 1}, gen, at::kLong).to(dev);
    const auto span = at::arange(size, at::TensorOptions().dtype(at::kLong).device(dev));
    const auto rows = (ys + span).view({n, 1, size, 1}).expand({n, c, size, w});
    const auto cols = (xs + span).view({n, 1, 1, size}).expand({n, c, size, size});
    b.input = padded.gather(2, rows).gather(3, cols);
    return b;
  }
};

/// Mirrors each sample along its last dimension (left-right for images) with probability p.
struct HorizontalFlip {
  double p = 0.5;

  Batch operator()(Batch b, at::Generator& gen) const {
    const int64_t n = b.input.size(0);
    std::vector<int64_t> mask_shape(size_t(b.input.dim()), 1);
    mask_shape[0] = n;
    const auto flip = at::rand({n}, gen).lt(p).to(b.input.device()).view(mask_shape);
    b.input = at::where(flip, b.input.flip({-1}), b.input);
    return b;
  }
};

/// Bilinear resize to a side length that can change between epochs (see
/// callbacks::ProgressiveResize); copies share the length.
class Resize {
 public:
  explicit Resize(int64_t size) : size_(std::make_shared<std::atomic<int64_t>>(size)) {}
  void set_size(int64_t size) { size_->store(size); }
  int64_t size() const { return size_->load(); }

  Batch operator()(Batch b, at::Generator&) const {
    const int64_t s = size();
    if (b.input.size(2) == s && b.input.size(3) == s) return b;
    namespace F = torch::nn::functional;
    b.input = F::interpolate(b.input, F::InterpolateFuncOptions()
                                          .size(std::vector<int64_t>{s, s})
                                          .mode(torch::kBilinear)
                                          .align_corners(false));
    return b;
  }

 private:
  std::shared_ptr<std::atomic<int64_t>> size_;
};

/// Applies transforms left to right.
template <class... Ts>
struct Compose {
  std::tuple<Ts...> steps;
  explicit Compose(Ts... ts) : steps(std::move(ts)...) {}
  Batch operator()(Batch b, at::Generator& gen) const {
    std::apply([&](const auto&... t) { ((b = t(std::move(b), gen)), ...); }, steps);
    return b;
  }
};

}  // namespace transforms
}  // namespace trainkit::data
