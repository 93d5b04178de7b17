#pragma once
// parallel::FullShard: ZeRO stage 3, FSDP's FULL_SHARD. Parameters,
// gradients and optimizer state are all sharded; between uses each rank
// holds only its slice of each parameter.
//
// - Units: the modules a wrap rule selects (wrap.hpp), each with its
//   parameters in flat buffers of its own (per parameter group and dtype);
//   what no unit takes is the root unit, gathered through each forward and
//   its backward. A model says where a unit's forward runs with
//   parallel::unit (unit.hpp): C++ modules have no forward hooks.
// - Forward: a unit's parameters are gathered (each owner broadcasts its
//   slice) as it starts and freed as it ends; the next unit's gather starts
//   first, so it overlaps this one's compute. The order is the first
//   training step's, which gathers every unit up front so that a unit the
//   model never announces is named in an error, not met as a wrong shape.
// - Backward: a hook on a unit's outputs gathers it again before its
//   backward and starts the gather of the unit before it; gradients are
//   ShardGradOp's (buckets reduce-scattered as they fill, made per unit in
//   backward's order), and a unit is freed once its buckets have started.
// - Memory: a unit's flat buffer keeps its storage object between uses and
//   only its bytes are freed, so tensors autograd saved in forward (views of
//   the parameters) see the gathered values again in backward, as in FSDP.
//   The parameters point at empty tensors at rest (set_data keeps their
//   autograd identity): whole parameters outside a step are read inside
//   gather_parameters() (checkpoints do).
// - Mixed precision (FSDP's MixedPrecision): a unit can be gathered in a
//   narrower dtype than its shards (param_dtype), into a second buffer per
//   flat group, and its gradients reduced in another (reduce_dtype). The
//   shards stay in the parameters' own dtype: fp32 master weights for the
//   optimizer, checkpoints and gather_parameters().
#include <c10/core/Allocator.h>
#include <c10/util/ScopeExit.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "trainkit/detail/compat.hpp"
#include "trainkit/parallel/shard_grad_op.hpp"
#include "trainkit/parallel/unit.hpp"
#include "trainkit/parallel/wrap.hpp"

namespace trainkit::parallel {

class FullShard : public ShardGradOp, private UnitRunner {
 public:
  static constexpr const char* stable_name(std::type_identity<FullShard>) {
    return "trainkit::parallel::FullShard";
  }
  /// FSDP's MixedPrecision knobs; unset, a unit computes and reduces in
  /// its parameters' own dtype.
  struct MixedPrecision {
    /// The dtype units are gathered in and run forward and backward in (at
    /// bf16 half the gathers' bytes). The forward must run under autocast
    /// to it: precision::Bf16 for at::kBFloat16, Fp16 for at::kHalf.
    std::optional<at::ScalarType> param_dtype{};
    /// The dtype gradients are reduce-scattered in; unset: param_dtype, as
    /// in FSDP. at::kFloat sums low-precision gradients without rounding.
    std::optional<at::ScalarType> reduce_dtype{};
  };
  struct Options {
    DDP::Options group{};                ///< the process group, buckets and hooks (DDP's)
    wrap::Rule wrap = wrap::children();  ///< which modules are units
    MixedPrecision mixed_precision{};
  };
  FullShard() : FullShard(Options{}) {}
  explicit FullShard(const Options& o)
      : ShardGradOp(checked(o).group), wrap_(o.wrap), param_dtype_(o.mixed_precision.param_dtype) {
    reduce_dtype_ = o.mixed_precision.reduce_dtype ? o.mixed_precision.reduce_dtype : param_dtype_;
  }
  ~FullShard() override {
    UnitRunner* self = this;
    trainkit::detail::active_unit_runner().compare_exchange_strong(self, nullptr);
  }

  /// DDP's (device, same model on all ranks, rank 0's weights), then the units.
  void prepare(torch::nn::Module& model) {
    DDP::prepare(model);
    find_units(model);
  }
  /// For FlatParams: the unit of each parameter, by name (0: the root).
  FlatParams::UnitOf unit_of() const {
    return [map = unit_of_](const std::string& name) {
      const auto it = map.find(name);
      return it == map.end() ? size_t{0} : it->second;
    };
  }
  /// The units' module names, the root ("") first.
  std::vector<std::string> unit_names() const {
    std::vector<std::string> out;
    for (const auto& u : units_) out.push_back(u.name);
    return out;
  }

  /// ShardGradOp's buckets and shards; then every unit's bytes are freed.
  FlatParams& attach(FlatParams& flat) {
    ShardGradOp::attach(flat);
    full_ = &flat;
    for (auto& u : units_) u.groups.clear(), u.buckets = 0;
    compute_.clear();
    for (size_t i = 0; i < flat.groups().size(); ++i) {
      auto& g = flat.groups()[i];
      auto& mine = shard().groups()[i];
      mine.data = mine.data.clone();  // the shard's own bytes: the whole buffer's go
      units_[g.unit].groups.push_back(i);
      const bool narrower = param_dtype_ && *param_dtype_ != g.data.scalar_type();
      compute_.push_back(narrower ? at::empty_like(g.data, g.data.options().dtype(*param_dtype_))
                                  : at::Tensor());
    }
    if (reduce_dtype_) require_reducible(*reduce_dtype_, flat);
    slots_of_group_.assign(flat.groups().size(), {});
    for (const auto& b : buckets_) {
      ++units_[flat.groups()[b.group].unit].buckets;
      for (const size_t slot : b.params) slots_of_group_[b.group].push_back(slot);
    }
    for (auto& u : units_) u.state = State::Gathered;
    for (size_t u = 0; u < units_.size(); ++u) release_unit(u);
    UnitRunner* self = this;
    trainkit::detail::active_unit_runner().store(self);
    return shard();
  }

  /// Around a forward and its backward (the Trainer opens it): the root
  /// gathered; in the first training step every unit too.
  auto forward_scope() {
    begin_forward();
    return c10::make_scope_exit([this] { end_forward(); });
  }

  /// Whole parameters for the scope's length (a collective: every rank
  /// calls it): checkpoints, evaluation by hand, generation. At its end each
  /// rank keeps its slice of what they hold then, and frees the rest.
  auto gather_parameters() {
    if (pinned_ == 0) {  // units gathered for compute in param_dtype come again whole
      for (size_t u = 0; u < units_.size(); ++u)
        if (!units_[u].whole) release_unit(u);
    }
    ++pinned_;  // forwards inside (sampling, evaluate) free nothing
    for (size_t u = 0; u < units_.size(); ++u) gather(u);
    return c10::make_scope_exit([this] {
      if (--pinned_ > 0) return;
      for (size_t u = 0; u < units_.size(); ++u) {
        write_back(u);
        release_unit(u);
      }
    });
  }

  /// Sharded at rest: the next gathers read the updated shards.
  void after_step(FlatParams&) {}

 protected:
  void start_bucket(size_t index) override {
    ShardGradOp::start_bucket(index);
    const size_t u = full_->groups()[buckets_[index].group].unit;
    if (u != 0 && --units_[u].buckets_left == 0) release_unit(u);  // its backward is done
  }
  /// Backward's order: the last unit's groups first, the root's last.
  std::vector<size_t> bucket_group_order(const FlatParams& flat) const override {
    std::vector<size_t> order = DDP::bucket_group_order(flat);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return flat.groups()[a].unit > flat.groups()[b].unit;
    });
    return order;
  }

 private:
  enum class State { Sharded, Gathering, Gathered };
  struct Unit {
    std::string name;  ///< the module's dotted name, "" for the root
    const torch::nn::Module* module = nullptr;
    std::vector<size_t> groups;  ///< its flat groups
    State state = State::Sharded;
    std::vector<ProcessGroup::Work> works;
    bool whole = true;  ///< gathered in the shards' dtype, not param_dtype
    size_t buckets = 0, buckets_left = 0;
    bool entered = false;  ///< announced through parallel::unit in the first training forward
  };
  /// Top-down: a module the rule selects is a unit with everything under
  /// it. A parameter registered by two units (or by a unit and the root)
  /// goes to the root, which stays gathered through forward and backward.
  void find_units(torch::nn::Module& model) {
    units_.assign(1, Unit{});
    unit_of_.clear();
    index_.clear();
    std::unordered_map<const void*, std::set<size_t>> owners;
    const std::function<void(torch::nn::Module&, const std::string&)> visit =
        [&](torch::nn::Module& m, const std::string& prefix) {
          for (const auto& p : m.named_parameters(/*recurse=*/false))
            owners[p.value().unsafeGetTensorImpl()].insert(0);
          for (const auto& child : m.named_children()) {
            const std::string name = prefix + child.key();
            if (!wrap_(name, *child.value())) {
              visit(*child.value(), name + ".");
              continue;
            }
            const size_t u = units_.size();
            auto& unit = units_.emplace_back();
            unit.name = name;
            unit.module = child.value().get();
            index_[child.value().get()] = u;
            for (const auto& p : child.value()->named_parameters()) {
              unit_of_[name + "." + p.key()] = u;
              owners[p.value().unsafeGetTensorImpl()].insert(u);
            }
          }
        };
    visit(model, "");
    for (const auto& p : model.named_parameters()) {
      if (owners[p.value().unsafeGetTensorImpl()].size() > 1) unit_of_[p.key()] = 0;
    }
  }

  // ---- a flat group's bytes: whole (`data`) or in param_dtype (`compute_`) ----
  at::Tensor& buffer(size_t g, bool whole) {
    return whole || !compute_[g].defined() ? full_->groups()[g].data : compute_[g];
  }
  static void free_storage(const at::Tensor& buffer) {
    auto* storage = buffer.storage().unsafeGetStorageImpl();
    storage->set_data_ptr_noswap(c10::DataPtr(nullptr, buffer.device()));
    storage->set_nbytes(0);
  }
  /// The parameters keep the dtype they were gathered in (a new dtype would
  /// make their gradient accumulators anew, between forward and backward).
  void free_bytes(size_t g, bool whole) {
    auto& group = full_->groups()[g];
    for (auto& p : group.params) p.set_data(at::empty({0}, buffer(g, whole).options()));
    free_storage(group.data);
    if (compute_[g].defined()) free_storage(compute_[g]);
  }
  static void allocate_storage(const at::Tensor& buffer) {
    auto* storage = buffer.storage().unsafeGetStorageImpl();
    const size_t bytes = size_t(buffer.numel()) * buffer.element_size();
    // the device's allocator now (a storage's own may be a meter since gone)
    storage->set_data_ptr_noswap(c10::GetAllocator(buffer.device().type())->allocate(bytes));
    storage->set_nbytes(bytes);
  }
  void point_params(size_t g, bool whole) {
    auto& group = full_->groups()[g];
    const auto& from = buffer(g, whole);
    for (size_t k = 0; k < group.params.size(); ++k)
      group.params[k].set_data(
          from.as_strided(group.views[k].sizes, group.views[k].strides, group.offsets[k]));
  }

  // ---- units ----
  void start_gather(size_t u) {
    auto& unit = units_[u];
    if (unit.state != State::Sharded) return;
    if (options_.before_collective) options_.before_collective("all-gather of unit " + label(u));
    torch::NoGradGuard no_grad;
    unit.whole = !param_dtype_ || pinned_ > 0;  // gather_parameters() reads the shards' dtype
    for (const size_t g : unit.groups) {
      auto& data = buffer(g, unit.whole);
      allocate_storage(data);
      const int64_t numel = data.numel();
      const auto [begin, end] = FlatParams::shard_range(numel, shard_rank(), shard_count());
      data.narrow(0, begin, end - begin).copy_(shard().groups()[g].data);
      for (int r = 0; r < shard_count(); ++r) {
        const auto [b, e] = FlatParams::shard_range(numel, r, shard_count());
        if (e > b) unit.works.push_back(shards_->broadcast_async(data.narrow(0, b, e - b), r));
      }
    }
    unit.state = State::Gathering;
  }
  void gather(size_t u) {
    auto& unit = units_[u];
    start_gather(u);
    if (unit.state != State::Gathering) return;
    for (auto& w : unit.works) shards_->wait(w, "all-gather of unit " + label(u));
    unit.works.clear();
    for (const size_t g : unit.groups) {
      point_params(g, unit.whole);
      // Into or out of param_dtype: the parameters have new accumulators.
      for (const size_t slot : slots_of_group_[g]) rehook(slot);
    }
    unit.state = State::Gathered;
  }
  void release_unit(size_t u) {
    auto& unit = units_[u];
    if (unit.state == State::Sharded || pinned_ > 0) return;
    for (auto& w : unit.works) shards_->wait(w, "all-gather of unit " + label(u));
    unit.works.clear();
    for (const size_t g : unit.groups) free_bytes(g, unit.whole);
    unit.state = State::Sharded;
  }
  void write_back(size_t u) {
    torch::NoGradGuard no_grad;
    for (const size_t g : units_[u].groups) {
      const auto& data = full_->groups()[g].data;
      const auto [b, e] = FlatParams::shard_range(data.numel(), shard_rank(), shard_count());
      shard().groups()[g].data.copy_(data.narrow(0, b, e - b));
    }
  }
  std::string label(size_t u) const { return u == 0 ? "(root)" : units_[u].name; }

  // ---- UnitRunner: parallel::unit's calls ----
  void enter(const torch::nn::Module& m) override {
    const auto found = index_.find(&m);
    if (found == index_.end()) return;  // a module the rule left out: part of its parent's unit
    const size_t u = found->second;
    if (param_dtype_ && pinned_ == 0 && !in_backward_) require_autocast();
    if (recording_ && !units_[u].entered) {
      order_.push_back(u);
      units_[u].entered = true;
    }
    gather(u);
    if (!in_backward_) {
      if (const auto next = neighbour(u, +1)) start_gather(*next);  // overlaps this forward
    }
  }
  void leave(const torch::nn::Module& m, std::vector<at::Tensor>& outputs) override {
    const auto found = index_.find(&m);
    if (found == index_.end()) return;
    const size_t u = found->second;
    if (torch::autograd::GradMode::is_enabled()) {
      for (auto& t : outputs) {
        if (t.requires_grad())
          t.register_hook([this, u](const at::Tensor&) { before_backward(u); });
      }
    }
    if (!in_backward_) release_unit(u);  // a recomputation inside backward keeps it
  }
  void before_backward(size_t u) {
    in_backward_ = true;
    gather(u);
    if (const auto previous = neighbour(u, -1)) start_gather(*previous);
  }

  void begin_forward() {
    const bool training = torch::autograd::GradMode::is_enabled();
    if (training && !recorded_) {
      recording_ = true;
      for (size_t u = 1; u < units_.size(); ++u) gather(u);
    }
    gather(0);
    for (auto& unit : units_) unit.buckets_left = unit.buckets;
    in_backward_ = false;
  }
  /// At a scope's end, so it throws nothing: a unit the model never
  /// announced is kept as an error for finish_sync.
  void end_forward() noexcept {
    try {
      for (size_t u = 0; u < units_.size(); ++u) release_unit(u);
    } catch (...) {
      if (!deferred_error_) deferred_error_ = std::current_exception();
    }
    in_backward_ = false;
    if (!recording_) return;
    recording_ = false;
    recorded_ = true;
    std::string missing;
    for (size_t u = 1; u < units_.size(); ++u) {
      if (!units_[u].entered) missing += " " + units_[u].name;
    }
    if (!missing.empty() && !deferred_error_) {
      deferred_error_ = std::make_exception_ptr(Error(
          "trainkit: parallel::FullShard: the forward of these units did not run through "
          "parallel::unit:" +
          missing +
          ". Call each as x = parallel::unit(block, [&] { return block->forward(x); }), or leave "
          "it out of parallel.wrap (a TorchScript model cannot announce units: give it "
          "parallel.wrap = parallel::wrap::none())"));
    }
  }

  static const Options& checked(const Options& o) {
    trainkit::detail::require_option(
        static_cast<bool>(o.wrap), "parallel.wrap", "an empty rule",
        "a rule: parallel::wrap::children(), names({...}), of_type<M>() or a predicate");
    const auto floating = [](const char* option, const std::optional<at::ScalarType>& dtype) {
      trainkit::detail::require_option(
          !dtype || at::isFloatingType(*dtype), option, dtype ? c10::toString(*dtype) : "",
          "a floating dtype (at::kBFloat16, at::kHalf, at::kFloat), or unset");
    };
    floating("parallel.mixed_precision.param_dtype", o.mixed_precision.param_dtype);
    floating("parallel.mixed_precision.reduce_dtype", o.mixed_precision.reduce_dtype);
    return o;
  }
  /// Gloo in LibTorch 1.13 reduces no bfloat16: a one-element reduction
  /// finds out, on every rank alike, before training starts.
  void require_reducible(at::ScalarType dtype, const FlatParams& flat) {
    if (flat.groups().empty()) return;
    try {
      shards_->all_reduce(at::zeros({1}, flat.groups()[0].data.options().dtype(dtype)),
                          "trial reduction in parallel.mixed_precision.reduce_dtype");
    } catch (const std::exception& e) {
      trainkit::detail::require_option(
          false, "parallel.mixed_precision.reduce_dtype", c10::toString(dtype),
          std::string("a dtype the ") + shards_->backend() +
              " process group reduces, as at::kFloat (it answered: " + e.what() + ")");
    }
  }
  /// Units gathered in param_dtype meet the model's inputs and buffers in
  /// their own dtype: autocast to param_dtype reconciles them.
  void require_autocast() const {
    const auto device = full_->groups().front().data.device().type();
    if (trainkit::detail::autocast_enabled(device) &&
        trainkit::detail::autocast_dtype(device) == *param_dtype_)
      return;
    trainkit::detail::require_option(
        false, "parallel.mixed_precision.param_dtype", c10::toString(*param_dtype_),
        std::string("a dtype the forward autocasts to; this forward runs ") +
            (trainkit::detail::autocast_enabled(device)
                 ? std::string("under autocast to ") +
                       c10::toString(trainkit::detail::autocast_dtype(device))
                 : std::string("without autocast")) +
            ": use precision::Bf16 for at::kBFloat16, Fp16 for at::kHalf");
  }
  std::optional<size_t> neighbour(size_t u, int step) const {
    const auto at = std::find(order_.begin(), order_.end(), u);
    if (at == order_.end()) return std::nullopt;
    const auto i = (at - order_.begin()) + step;
    if (i < 0 || i >= static_cast<std::ptrdiff_t>(order_.size())) return std::nullopt;
    return order_[size_t(i)];
  }

  wrap::Rule wrap_;
  std::vector<Unit> units_{Unit{}};  ///< [0]: the root (the parameters no unit takes)
  std::unordered_map<std::string, size_t> unit_of_;
  std::unordered_map<const torch::nn::Module*, size_t> index_;
  FlatParams* full_ = nullptr;
  std::optional<at::ScalarType> param_dtype_;
  std::vector<at::Tensor> compute_;  ///< per flat group: its buffer in param_dtype, or none
  std::vector<std::vector<size_t>> slots_of_group_;  ///< DDP's slots, per flat group
  std::vector<size_t> order_;  ///< units in the first training forward's order
  bool recording_ = false, recorded_ = false, in_backward_ = false;
  int pinned_ = 0;  ///< open gather_parameters() scopes
};

}  // namespace trainkit::parallel
