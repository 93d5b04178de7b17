#pragma once
// parallel::DDP: data parallel training over c10d, as PyTorch's
// DistributedDataParallel does it, on trainkit's flat gradient buffer.
//
// - Start: join the process group (environment.hpp), place the model on
//   cuda:LOCAL_RANK or the CPU, check that every rank built the same model,
//   broadcast parameters and buffers from rank 0.
// - Backward: gradients are grouped into buckets (`bucket_mb`, the first one
//   1 MB so communication starts early), in reverse registration order, as
//   slices of the flat gradient: no copies. A post-hook on each parameter's
//   gradient accumulator counts it ready; a full bucket is divided by the
//   world size and all-reduced asynchronously while backward goes on.
//   Buckets start in index order on every rank, which collectives require.
// - Boundary (finish_sync): start what is left, wait for every bucket,
//   re-broadcast buffers when asked. Micro-batches inside an accumulation
//   window run under defer_sync() and communicate nothing.
// - Streams: autograd runs a gradient accumulator on the stream that was
//   current when it was made, and the hooks keep the accumulators alive. A
//   step on another stream (a captured step's side stream) re-makes them
//   there: a backward that waits across streams cannot be captured.
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/ScopeExit.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <type_traits>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/parallel/environment.hpp"
#include "trainkit/parallel/process_group.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::parallel {

class DDP {
 public:
  static constexpr const char* stable_name(std::type_identity<DDP>) {
    return "trainkit::parallel::DDP";
  }
  struct Options {
    std::string backend{};                  ///< "gloo" or "nccl"; empty: nccl on CUDA, else gloo
    std::optional<torch::Device> device{};  ///< empty: cuda:LOCAL_RANK when CUDA exists, else CPU
    double bucket_mb = 25.0;                ///< gradient bucket size (the first is 1 MB)
    bool broadcast_buffers = true;          ///< copy rank 0's buffers to all after each step
    /// Parameters may get no gradient in a step: reduce them anyway. When
    /// false, such a parameter is an error that names it.
    bool find_unused_parameters = false;
    std::chrono::milliseconds timeout = std::chrono::minutes(30);  ///< per collective
    Rendezvous rendezvous{};  ///< explicit rank/world/master, else from the environment
    /// Called on this rank's thread before each gradient collective and each
    /// all-gather of parameters, with the collective's name: tracing, or a
    /// test delaying ranks to expose ordering bugs.
    std::function<void(const std::string& collective)> before_collective{};
  };

  DDP() : DDP(Options{}) {}
  explicit DDP(const Options& o) : options_(o), env_(Environment::detect(o.rendezvous)) {
    using trainkit::detail::require_option;
    require_option(o.bucket_mb > 0.0, "parallel.bucket_mb", o.bucket_mb, "a size in MB > 0");
    const bool cuda = torch::cuda::is_available();
    device_ =
        o.device.value_or(cuda ? torch::Device(torch::kCUDA, c10::DeviceIndex(env_.local_rank))
                               : torch::Device(torch::kCPU));
    const std::string backend =
        o.backend.empty() ? (device_.is_cuda() ? "nccl" : "gloo") : o.backend;
    if (device_.is_cuda()) {
      require_option(env_.local_rank < int(torch::cuda::device_count()), "LOCAL_RANK",
                     env_.local_rank,
                     "less than the " + std::to_string(torch::cuda::device_count()) +
                         " visible CUDA devices (one process per device)");
    }
    group_ = std::make_shared<ProcessGroup>(env_, backend, o.timeout);
  }
  DDP(const DDP&) = delete;  // the gradient hooks point at this object
  DDP& operator=(const DDP&) = delete;
  virtual ~DDP() { remove_hooks(); }

  torch::Device device() const { return device_; }
  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  bool is_main() const { return env_.rank == 0; }
  const Environment& environment() const { return env_; }
  ProcessGroup& process_group() { return *group_; }

  /// Moves the model to this rank's device, checks that all ranks built the
  /// same one, and gives every rank rank 0's parameters and buffers.
  void prepare(torch::nn::Module& model) {
    model.to(device_);
    buffers_ = model.buffers();
    std::string layout;
    for (const auto& item : model.named_parameters()) {
      names_[item.value().unsafeGetTensorImpl()] = item.key();
      layout += describe(item.key(), item.value());
    }
    for (const auto& item : model.named_buffers()) layout += describe(item.key(), item.value());
    check_same("model (parameter and buffer names, shapes, dtypes)", layout);
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> tensors = model.parameters();
    for (const auto& b : model.buffers()) tensors.push_back(b);
    broadcast_from_main(tensors, "broadcast of rank 0's parameters and buffers");
  }

  /// Every rank must pass the same `description` of `what`, or all fail
  /// with an error naming the ranks that differ.
  void check_same(const std::string& what, const std::string& description) {
    const auto hash = static_cast<int64_t>(fnv1a(description));
    auto all = at::zeros({env_.world_size}, at::kLong);
    all[env_.rank] = hash;
    const auto on_device = all.to(reduction_device());
    group_->all_reduce(on_device, "check that all ranks built the same " + what);
    all = on_device.cpu();
    std::string differ;
    for (int r = 1; r < env_.world_size; ++r) {
      if (all[r].item<int64_t>() != all[0].item<int64_t>()) differ += " " + std::to_string(r);
    }
    if (!differ.empty()) {
      throw Error("trainkit: rank " + std::to_string(env_.rank) + " of " +
                  std::to_string(env_.world_size) + ": the " + what +
                  " differs between rank 0 and rank(s)" + differ +
                  "; every rank must build the same one");
    }
  }

  /// Builds the buckets over `flat`'s gradients and hooks the accumulators.
  /// Returns the parameters this rank's optimizer steps (all of them).
  FlatParams& attach(FlatParams& flat) {
    remove_hooks();
    buckets_.clear();
    slots_.clear();
    const auto groups = flat.groups();
    for (const size_t gi : bucket_group_order(flat)) {
      const auto& g = groups[gi];
      const auto element = static_cast<double>(g.grad.element_size());
      const double first_bytes = 1024.0 * 1024.0;
      for (size_t k = g.params.size(); k-- > 0;) {  // reverse registration order
        const double cap =
            buckets_.size() <= 1 ? std::min(first_bytes, bucket_bytes()) : bucket_bytes();
        const auto& p = g.params[k];
        if (buckets_.empty() || buckets_.back().group != gi ||
            double(buckets_.back().end - g.offsets[k]) * element > cap) {
          Bucket b;
          b.group = gi;
          b.end = g.offsets[k] + p.numel();
          buckets_.push_back(std::move(b));
        }
        auto& b = buckets_.back();
        b.begin = g.offsets[k];
        b.params.push_back(slots_.size());
        b.grad = g.grad.narrow(0, b.begin, b.end - b.begin);
        slots_.push_back({p, buckets_.size() - 1, g.offsets[k], false});
      }
    }
    for (size_t i = 0; i < buckets_.size(); ++i) {
      buckets_[i].name = "all-reduce of gradient bucket " + std::to_string(i) + " of " +
                         std::to_string(buckets_.size());
    }
    hook_all();
    reset_window();
    return flat;
  }

  /// Before each backward: re-makes the hooked accumulators on the current
  /// stream when they were made on another (see the file comment).
  void follow_current_stream() {
    if (hooks_.empty() || current_stream_id() == hooks_stream_) return;
    remove_hooks();
    hook_all();
  }

  /// A scope inside which gradients accumulate locally (no bucket starts).
  auto defer_sync() {
    const bool was = deferred_;
    deferred_ = true;
    return c10::make_scope_exit([this, was] { deferred_ = was; });
  }

  /// At the boundary: starts the buckets still waiting, waits for all, and
  /// leaves every rank with the mean gradient.
  void finish_sync(FlatParams& flat) {
    if (buckets_.empty()) attach(flat);  // used outside a Trainer: no hooks ran
    start_unready_buckets();
    for (auto& b : buckets_) {
      if (!b.work) continue;
      group_->wait(b.work, b.name);
      b.work.reset();
    }
    reset_window();
    sync_buffers();
  }

  // ---- collectives the Trainer uses for metrics, stops and checkpoints ----
  std::vector<double> sum(std::vector<double> values, const std::string& what) {
    return group_->sum(std::move(values), what);
  }
  int64_t max(int64_t value, const std::string& what) { return group_->max(value, what); }
  std::vector<std::string> all_gather(const std::string& mine, const std::string& what) {
    return group_->all_gather(mine, what);
  }
  void barrier(const std::string& what) { group_->barrier(what); }

  /// Every rank holds all of the optimizer's state: nothing to gather or shard.
  StateDict gather_optimizer_state(StateDict local, const ElementwiseState&) { return local; }
  StateDict shard_optimizer_state(const StateDict& full, const ElementwiseState&) const {
    return full;
  }
  void after_step(FlatParams&) {}
  /// The gradients the update reads: every rank holds all of them.
  FlatParams& gradients(FlatParams& flat) { return flat; }
  /// Every rank holds all; each writes its part to a sharded checkpoint.
  GroupShare written_share() const { return {rank(), world_size()}; }

  /// Buckets of the open step already started (all-reducing in the background).
  size_t buckets_started() const { return next_; }

  /// Gradient buckets: (first element, elements) in the flat gradient of their group.
  std::vector<std::pair<int64_t, int64_t>> bucket_ranges() const {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const auto& b : buckets_) out.emplace_back(b.begin, b.end - b.begin);
    return out;
  }

 protected:
  struct Bucket {
    size_t group = 0;
    int64_t begin = 0, end = 0;  ///< elements of the group's flat gradient
    at::Tensor grad;             ///< that slice
    std::vector<size_t> params;  ///< slots in it
    size_t pending = 0;
    ProcessGroup::Work work;
    std::string name;  ///< for errors, made once in attach()
  };
  struct Slot {
    at::Tensor param;
    size_t bucket;
    int64_t offset;  ///< of the parameter in its group's flat buffers
    bool ready;
  };

  /// Hooks `slot`'s accumulator again if its parameter has a new one:
  /// set_data to another dtype makes one (full sharding's mixed precision).
  void rehook(size_t slot) {
    auto acc = torch::autograd::impl::grad_accumulator(slots_[slot].param);
    auto& [hooked, key] = hooks_[slot];
    if (!acc || acc == hooked) return;  // none: frozen
    hooked->del_post_hook(key);
    hooked = std::move(acc);
    key = hooked->add_post_hook(ready_hook(slot));
  }

  /// Starts bucket `index`'s collective, all its gradients in: DDP divides
  /// by the world size and all-reduces the slice in place.
  virtual void start_bucket(size_t index) {
    auto& b = buckets_[index];
    if (options_.before_collective) options_.before_collective(b.name);
    b.grad.div_(static_cast<double>(env_.world_size));
    b.work = group_->all_reduce_async(b.grad);
  }
  /// A parameter's gradient is complete in its `.grad()` (DDP: already in
  /// the bucket, a view of the flat gradient).
  virtual void take_grad(Slot&) {}
  /// The flat groups in the order their buckets are made (and start): the
  /// groups' own; full sharding puts the last unit's first, as backward runs.
  virtual std::vector<size_t> bucket_group_order(const FlatParams& flat) const {
    std::vector<size_t> order(flat.groups().size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    return order;
  }

  /// Counts the parameters that got no gradient as ready (their slices hold
  /// zeros, or earlier micro-batches'), which starts every bucket left; an
  /// error names them unless find_unused_parameters allows them.
  void start_unready_buckets() {
    std::string unused;
    for (auto& slot : slots_) {
      if (slot.ready) continue;
      if (!options_.find_unused_parameters && any_ready_) unused += " " + name_of(slot.param);
      mark_ready(slot);
    }
    if (!unused.empty()) {
      throw Error("trainkit: rank " + std::to_string(env_.rank) +
                  ": these parameters got no gradient in this step:" + unused +
                  ". Set parallel.find_unused_parameters = true if that is intended, or make "
                  "the loss depend on them");
    }
  }

  /// Every rank counts its gradients anew (the next step, or micro-batch).
  void reset_window() {
    for (auto& b : buckets_) b.pending = b.params.size();
    for (auto& s : slots_) s.ready = false;
    next_ = 0;
    any_ready_ = false;
  }

  void sync_buffers() {
    if (options_.broadcast_buffers && !buffers_.empty()) {
      broadcast_from_main(buffers_, "broadcast of rank 0's buffers");
    }
  }

  void broadcast_from_main(const std::vector<at::Tensor>& tensors, const std::string& what) {
    std::vector<ProcessGroup::Work> works;
    std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (target, contiguous stand-in)
    for (const auto& t : tensors) {
      at::Tensor data = t.detach();
      if (data.scalar_type() == at::kBool) {  // Gloo has no bool: sent as bytes
        copies.emplace_back(data, data.to(at::kByte).contiguous());
        data = copies.back().second;
      } else if (!data.is_contiguous()) {
        copies.emplace_back(data, data.contiguous());
        data = copies.back().second;
      }
      works.push_back(group_->broadcast_async(data, 0));
    }
    for (auto& w : works) group_->wait(w, what);
    torch::NoGradGuard no_grad;
    for (auto& [target, stand_in] : copies) target.copy_(stand_in);
  }

  at::Device reduction_device() const {
    return group_->backend() == "nccl" ? device_ : at::Device(at::kCPU);
  }

  Options options_;
  Environment env_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;

 private:
  double bucket_bytes() const { return options_.bucket_mb * 1024.0 * 1024.0; }

  static std::string describe(const std::string& name, const at::Tensor& t) {
    std::string s = name + ":" + std::string(c10::toString(t.scalar_type())) + "[";
    for (const auto d : t.sizes()) s += std::to_string(d) + ",";
    return s + "];";
  }
  static uint64_t fnv1a(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  }
  std::string name_of(const at::Tensor& p) const {
    const auto it = names_.find(p.unsafeGetTensorImpl());
    return it == names_.end() ? "(unnamed)" : it->second;
  }

  c10::StreamId current_stream_id() const {  // on the parameters' device (it has an index)
    const auto device = slots_.front().param.device();
    return c10::impl::VirtualGuardImpl(device.type()).getStream(device).id();
  }

  /// Hooks every parameter's accumulator, made on (or kept from) the current stream.
  void hook_all() {
    if (slots_.empty()) return;
    hooks_stream_ = current_stream_id();
    for (size_t i = 0; i < slots_.size(); ++i) hook(i);
  }

  void hook(size_t slot) {
    auto acc = torch::autograd::impl::grad_accumulator(slots_[slot].param);
    const auto key = acc->add_post_hook(ready_hook(slot));
    hooks_.push_back({std::move(acc), key});
  }
  std::unique_ptr<torch::autograd::FunctionPostHook> ready_hook(size_t slot) {
    return std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, slot](const torch::autograd::variable_list& outputs,
                     const torch::autograd::variable_list&) {
          if (!deferred_) on_grad_ready(slot);
          return outputs;
        });
  }

  void remove_hooks() {
    for (auto& [acc, key] : hooks_) acc->del_post_hook(key);
    hooks_.clear();
  }

  void on_grad_ready(size_t index) {
    auto& slot = slots_[index];
    if (slot.ready) {
      throw Error("trainkit: parameter " + name_of(slot.param) +
                  " got its gradient twice in one step (two backward passes through it "
                  "without defer_sync)");
    }
    any_ready_ = true;
    take_grad(slot);
    mark_ready(slot);
  }

  void mark_ready(Slot& slot) {
    slot.ready = true;
    if (--buckets_[slot.bucket].pending == 0) launch_ready();
  }

  /// Starts the ready buckets at the front of the line, in index order.
  void launch_ready() {
    while (next_ < buckets_.size() && buckets_[next_].pending == 0) start_bucket(next_++);
  }

  torch::Device device_{torch::kCPU};
  std::vector<at::Tensor> buffers_;  ///< the model's, listed once in prepare()
  std::unordered_map<const void*, std::string> names_;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
  c10::StreamId hooks_stream_ = 0;  ///< the stream the hooked accumulators run on
  size_t next_ = 0;
  bool any_ready_ = false;
  bool deferred_ = false;
};

}  // namespace trainkit::parallel
