#pragma once
// data::Loader: batches from a dataset in the order a sampler gives, built
// ahead by worker threads: whole batches from the dataset (get_batch), or
// samples (get) combined by a collate (default data::Stack; collate.hpp),
// of any batch type trainkit can see tensors in (data/batch_traits.hpp).
//
// - Batch k of an epoch is a pure function of (sampler, epoch, k, seed, rank):
//   workers claim batch indices, build them into a bounded reorder buffer
//   (workers x prefetch batches), and the training thread takes them in order.
//   0, 1 or 8 workers give bitwise the same batches.
// - Random transforms get a generator seeded from (seed, rank, epoch, k), so
//   draws differ per batch, rank and epoch whichever thread runs them.
// - For a CUDA target, workers pin the batch; the training thread copies
//   batch k+1 non_blocking on a side stream while batch k trains, and the
//   compute stream waits on an event before using it.
// - A worker's exception reaches the training thread, naming the batch;
//   set_epoch(), a new begin() or the destructor stop and join the workers.
#include <c10/util/Type.h>
#include <torch/types.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif
#include "trainkit/detail/compat.hpp"
#if TRAINKIT_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "trainkit/data/batch.hpp"
#include "trainkit/data/batch_traits.hpp"
#include "trainkit/data/collate.hpp"
#include "trainkit/data/concepts.hpp"
#include "trainkit/data/seed.hpp"
#include "trainkit/data/shard.hpp"
#include "trainkit/data/transforms.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

/// The loader's options for batches of type B (LoaderOptions: data::Batch).
template <class B>
struct BasicLoaderOptions {
  int64_t batch_size = 32;
  int64_t workers = 0;   ///< threads building batches; 0: built on the training thread
  int64_t prefetch = 2;  ///< batches in flight per worker
  bool drop_last = false;
  uint64_t seed = 0;                      ///< for transforms' random draws
  int64_t rank = 0;                       ///< for transforms' random draws (distinct per process)
  std::optional<torch::Device> device{};  ///< where batches land; unset: stay on the CPU
  bool pin_memory = true;                 ///< pinned host batches for a CUDA target
  BasicTransform<B> transform{};          ///< on the CPU, in the workers
  BasicTransform<B> device_transform{};   ///< on the target device, after the copy
};
using LoaderOptions = BasicLoaderOptions<Batch>;

namespace detail {
template <class Dataset, class Collate, bool = BatchDataset<Dataset>>
struct LoaderBatch {  // a dataset of whole batches
  using type = std::remove_cvref_t<decltype(std::declval<Dataset&>().get_batch(at::Tensor()))>;
};
/// A collate called with the samples' dataset indices, or without them.
template <class Collate, class Sample>
auto collate(Collate& c, std::vector<Sample> samples, const std::vector<int64_t>& ids) {
  if constexpr (std::is_invocable_v<Collate&, std::vector<Sample>, const std::vector<int64_t>&>)
    return c(std::move(samples), ids);
  else
    return c(std::move(samples));
}
template <class Dataset, class Collate>
struct LoaderBatch<Dataset, Collate, false> {  // samples, collated
  using Sample = std::remove_cvref_t<decltype(std::declval<Dataset&>().get(int64_t{}))>;
  using type = std::remove_cvref_t<decltype(collate(std::declval<Collate&>(), std::vector<Sample>{},
                                                    std::vector<int64_t>{}))>;
};
}  // namespace detail

template <class Dataset, class SamplerT, class Collate = Stack>
class Loader {
  static_assert(BatchDataset<Dataset> || SampleDataset<Dataset>,
                "data::Loader: the dataset needs `int64_t size()` and either "
                "`B get_batch(const at::Tensor& indices)` or `S get(int64_t index)`, where B and "
                "S hold tensors (data::Batch, a struct, tuple or map of tensors)");
  static_assert(Sampler<SamplerT>,
                "data::Loader: the sampler needs `at::Tensor indices(int64_t epoch) const`");

 public:
  /// What iteration yields: the dataset's batches, or the collate's.
  using BatchType = typename detail::LoaderBatch<Dataset, Collate>::type;
  static_assert(has_tensors<BatchType>,
                "data::Loader: the collate's batch holds no tensor trainkit can see; see "
                "trainkit::BatchTraits");
  using Options = BasicLoaderOptions<BatchType>;

  Loader(Dataset dataset, SamplerT sampler, Options options, Collate collate = {})
      : dataset_(std::move(dataset)),
        sampler_(std::move(sampler)),
        options_(std::move(options)),
        collate_(std::move(collate)) {
    using trainkit::detail::require_option;
    require_option(options_.batch_size >= 1, "loader.batch_size", options_.batch_size,
                   "a number >= 1");
    require_option(options_.workers >= 0, "loader.workers", options_.workers, "a number >= 0");
    require_option(options_.prefetch >= 1, "loader.prefetch", options_.prefetch, "a number >= 1");
    set_epoch(0);
  }
  ~Loader() { stop(); }
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Selects the epoch (its sample order) and rewinds to its first batch.
  void set_epoch(int64_t epoch) {
    stop();
    epoch_ = epoch;
    order_ = sampler_.indices(epoch).to(at::kLong).contiguous();
    const auto bad =
        order_.numel() > 0 && (order_.min().item<int64_t>() < 0 ||
                               order_.max().item<int64_t>() >= int64_t(dataset_.size()));
    if (bad) throw Error("trainkit: the sampler drew an index outside the dataset");
    start_ = 0;
  }

  /// This process's place in a multi-process run (the Trainer calls it from
  /// its parallel policy): a sampler with set_shard takes its shard, and
  /// random transforms draw per rank. Rewinds to the epoch's first batch.
  void set_shard(int64_t rank, int64_t world_size) {
    if constexpr (requires { sampler_.set_shard(rank, world_size); }) {
      sampler_.set_shard(rank, world_size);
    } else if (world_size > 1) {
      detail::refuse_unsharded(
          std::string("the loader's sampler (") + c10::demangle_type<SamplerT>() + ")", world_size);
    }
    options_.rank = rank;
    set_epoch(epoch_);
  }

  /// The next iteration starts at batch `index` of the epoch (exact resume).
  void set_start(int64_t index) {
    trainkit::detail::require_option(index >= 0 && index <= size(), "loader.start", index,
                                     "a batch index between 0 and size()");
    start_ = index;
  }

  /// The epoch goes on after the first `samples` of its order, which the
  /// ranks of an interrupted run took: this rank's share of the rest, among
  /// this run's ranks (a resume on another number of ranks). Until the
  /// next set_epoch, size() counts this rank's batches of the rest.
  void set_start_sample(int64_t samples) requires requires(SamplerT& s) { s.set_skip(samples); }
  {
    stop();
    sampler_.set_skip(samples);
    try {
      set_epoch(epoch_);
    } catch (...) {
      sampler_.set_skip(0);
      throw;
    }
    sampler_.set_skip(0);
  }

  /// Batches in the current epoch: this rank's share once the loader has
  /// its shard (fit takes it; data::take_shard(loader, trainer.parallel())
  /// takes it before fit).
  int64_t size() const {
    const int64_t n = order_.numel(), b = options_.batch_size;
    return options_.drop_last ? n / b : (n + b - 1) / b;
  }
  int64_t epoch() const { return epoch_; }
  const Options& options() const { return options_; }

  class iterator {
   public:
    using value_type = BatchType;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(Loader* loader, int64_t index) : loader_(loader), index_(index) {}
    const BatchType& operator*() const { return loader_->fetch(index_); }
    iterator& operator++() {
      ++index_;
      return *this;
    }
    void operator++(int) { ++index_; }
    bool operator==(const iterator& other) const { return index_ == other.index_; }

   private:
    Loader* loader_ = nullptr;
    int64_t index_ = 0;
  };

  /// Starts the epoch's pipeline at the start batch (0 unless set_start).
  iterator begin() {
    stop();
    const int64_t first = start_;
    start_ = 0;
    current_ = -1;
    staged_.reset();
    if (options_.workers > 0 && first < size()) launch(first);
    return {this, first};
  }
  iterator end() { return {this, size()}; }

  /// Batch `index` exactly as iteration yields it (on the CPU, before the
  /// device transfer and device transform).
  BatchType build(int64_t index) {
    const int64_t start = index * options_.batch_size;
    const int64_t len = std::min(options_.batch_size, order_.numel() - start);
    const auto indices = order_.narrow(0, start, len);
    BatchType batch = [&] {
      if constexpr (BatchDataset<Dataset>) {
        return BatchType(dataset_.get_batch(indices));
      } else {
        using Samples = detail::LoaderBatch<Dataset, Collate>;
        const int64_t* p = indices.data_ptr<int64_t>();
        const std::vector<int64_t> ids(p, p + len);
        std::vector<typename Samples::Sample> samples;
        samples.reserve(ids.size());
        for (int64_t id : ids) samples.push_back(dataset_.get(id));
        return detail::collate(collate_, std::move(samples), ids);
      }
    }();
    if (options_.transform) {
      auto gen = batch_generator(index, 0);
      batch = options_.transform(std::move(batch), gen);
    }
    if (pinned()) batch = map_tensors(batch, [](const at::Tensor& t) { return t.pin_memory(); });
    return batch;
  }

 private:
  struct Slot {
    BatchType batch;
    std::exception_ptr error;
  };
  struct Pipeline {
    std::mutex mutex;
    std::condition_variable produced, consumed;
    std::map<int64_t, Slot> ready;
    int64_t next_claim = 0, next_take = 0, end = 0, capacity = 0;
    bool stop = false;
    std::vector<std::thread> threads;
  };

  at::Generator batch_generator(int64_t index, uint64_t stage) const {
    return generator(
        mix_seed({options_.seed, static_cast<uint64_t>(options_.rank),
                  static_cast<uint64_t>(epoch_), static_cast<uint64_t>(index), stage}));
  }
  bool pinned() const {
    return options_.pin_memory && options_.device && options_.device->is_cuda();
  }

  void launch(int64_t first) {
    pipe_ = std::make_unique<Pipeline>();
    pipe_->next_claim = pipe_->next_take = first;
    pipe_->end = size();
    pipe_->capacity = options_.workers * options_.prefetch;
    for (int64_t w = 0; w < options_.workers; ++w) {
      pipe_->threads.emplace_back([this, p = pipe_.get()] { work(*p); });
    }
  }

  void work(Pipeline& p) {
#if defined(_OPENMP)
    omp_set_num_threads(1);  // workers are the parallelism; no nested OpenMP teams
#endif
    torch::NoGradGuard no_grad;
    for (;;) {
      int64_t index = 0;
      {
        std::unique_lock lock(p.mutex);
        p.consumed.wait(lock, [&] {
          return p.stop || p.next_claim >= p.end || p.next_claim < p.next_take + p.capacity;
        });
        if (p.stop || p.next_claim >= p.end) return;
        index = p.next_claim++;
      }
      Slot slot;
      try {
        slot.batch = build(index);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard lock(p.mutex);
        p.ready.emplace(index, std::move(slot));
      }
      p.produced.notify_all();
    }
  }

  void stop() {
    if (!pipe_) return;
    {
      std::lock_guard lock(pipe_->mutex);
      pipe_->stop = true;
    }
    pipe_->consumed.notify_all();
    for (auto& t : pipe_->threads) t.join();
    pipe_.reset();
  }

  [[noreturn]] void rethrow_for(int64_t index, std::exception_ptr error) const {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {  // the cause stays nested, for who asks its type
      std::throw_with_nested(Error("trainkit: loading batch " + std::to_string(index) +
                                   " of epoch " + std::to_string(epoch_) + " failed: " + e.what()));
    }
  }

  /// The CPU batch `index`, from the workers or built here.
  BatchType take(int64_t index) {
    if (!pipe_) {
      try {
        return build(index);
      } catch (...) {
        rethrow_for(index, std::current_exception());
      }
    }
    Slot slot;
    {
      std::unique_lock lock(pipe_->mutex);
      pipe_->produced.wait(lock, [&] { return pipe_->ready.count(index) > 0; });
      auto node = pipe_->ready.extract(index);
      slot = std::move(node.mapped());
      pipe_->next_take = index + 1;
    }
    pipe_->consumed.notify_all();
    if (slot.error) rethrow_for(index, slot.error);
    return std::move(slot.batch);
  }

  /// Starts copying a CPU batch to the target device (side stream on CUDA).
  BatchType transfer(BatchType cpu) {
    if (!options_.device) return cpu;
#if TRAINKIT_HAS_CUDA
    if (options_.device->is_cuda()) {
      if (!copy_stream_)
        copy_stream_ = c10::cuda::getStreamFromPool(false, options_.device->index());
      c10::cuda::CUDAStreamGuard guard(*copy_stream_);
      auto out = to_device(cpu, *options_.device);
      copied_.record(*copy_stream_);
      return out;
    }
#endif
    return to_device(cpu, *options_.device);
  }

  /// Makes the compute stream wait for the copy of `batch` (CUDA only).
  void ready_for_compute([[maybe_unused]] BatchType& batch) {
#if TRAINKIT_HAS_CUDA
    if (options_.device && options_.device->is_cuda()) {
      const auto compute = c10::cuda::getCurrentCUDAStream(options_.device->index());
      copied_.block(compute);
      // freed memory must wait for compute too
      for_each_tensor(batch, [&](at::Tensor& t) { t.record_stream(compute); });
    }
#endif
  }

  const BatchType& fetch(int64_t index) {
    if (index == current_) return current_batch_;
    BatchType batch =
        staged_ && staged_->first == index ? std::move(staged_->second) : transfer(take(index));
    staged_.reset();
    ready_for_compute(batch);
    // Overlap: batch index+1 is copied while batch index trains.
    if (options_.device && options_.device->is_cuda() && index + 1 < size()) {
      staged_.emplace(index + 1, transfer(take(index + 1)));
    }
    if (options_.device_transform) {
      auto gen = batch_generator(index, 1);
      batch = options_.device_transform(std::move(batch), gen);
    }
    current_ = index;
    current_batch_ = std::move(batch);
    return current_batch_;
  }

  Dataset dataset_;
  SamplerT sampler_;
  Options options_;
  [[no_unique_address]] Collate collate_;
  int64_t epoch_ = 0;
  int64_t start_ = 0;
  at::Tensor order_;
  std::unique_ptr<Pipeline> pipe_;
  int64_t current_ = -1;
  BatchType current_batch_;
  std::optional<std::pair<int64_t, BatchType>> staged_;
#if TRAINKIT_HAS_CUDA
  std::optional<c10::cuda::CUDAStream> copy_stream_;
  at::cuda::CUDAEvent copied_;
#endif
};

}  // namespace trainkit::data
