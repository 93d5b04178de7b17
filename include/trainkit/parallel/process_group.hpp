#pragma once
// parallel::ProcessGroup: a c10d process group (Gloo on CPUs, NCCL on GPUs)
// joined through a c10d::TCPStore that rank 0 serves (or torchrun's agent). Every collective is
// waited with the configured timeout, and a failure becomes a trainkit::Error
// that names the collective and this rank: a dead or hung peer ends the run
// with a message, never an endless hang.
#include <torch/types.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "trainkit/detail/compat.hpp"
#include "trainkit/error.hpp"
#include "trainkit/parallel/detail/roll_call.hpp"
#include "trainkit/parallel/environment.hpp"

// LibTorch's CMake target defines USE_C10D_GLOO when it was built with Gloo;
// the Gloo headers come from Debian's libgloo-dev (or LibTorch's own copy).
#if defined(USE_C10D_GLOO) && __has_include(<gloo/algorithm.h>) && \
    __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "trainkit/parallel/detail/gloo_interface.hpp"
#define TRAINKIT_HAS_GLOO 1
#else
#define TRAINKIT_HAS_GLOO 0
#endif
#if TRAINKIT_HAS_CUDA
#include <c10/cuda/CUDAGraphsC10Utils.h>
#endif
#if TRAINKIT_HAS_CUDA && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define TRAINKIT_HAS_NCCL 1
#else
#define TRAINKIT_HAS_NCCL 0
#endif

namespace trainkit::parallel {

class ProcessGroup {
 public:
  using Work = c10::intrusive_ptr<c10d::Work>;
  using Op = c10d::ReduceOp::RedOpType;

  /// Joins the group described by `env` with `backend` ("gloo" or "nccl").
  /// Blocks until all `env.world_size` ranks arrive, or `timeout` passes.
  ProcessGroup(const Environment& env, const std::string& backend,
               std::chrono::milliseconds timeout)
      : env_(env), backend_(backend), timeout_(timeout) {
    using trainkit::detail::require_option;
    require_option(timeout.count() > 0, "parallel.timeout", timeout.count(), "a duration > 0 ms");
    const auto start = std::chrono::steady_clock::now();
    try {
      c10d::TCPStoreOptions store_options;
      store_options.port = static_cast<std::uint16_t>(env.master_port);
      // Under torchrun's agent store every rank is a client, and each
      // restart of the group uses its own prefix, as torch.distributed does.
      store_options.isServer = env.rank == 0 && !env.agent_store;
      store_options.numWorkers = static_cast<std::size_t>(env.world_size);
      store_options.waitWorkers = true;
      store_options.timeout = timeout;
      store_ = trainkit::detail::make_tcp_store(store_options, [&](const auto& o) {
        return c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
      });
      if (env.agent_store) {
        store_ = c10::make_intrusive<c10d::PrefixStore>(
            "/worker/attempt_" + std::to_string(env.restart_count), store_);
      }
    } catch (const std::exception& e) {
      // Say how long it really waited: a refusal at once is not a timeout.
      throw Error(where() + "cannot join the rendezvous at " + env.master_addr + ":" +
                  std::to_string(env.master_port) + " (failed after " + seconds(since(start)) +
                  ", timeout " + seconds(timeout) + "; are all " + std::to_string(env.world_size) +
                  " processes started, with the same MASTER_ADDR/MASTER_PORT?): " + e.what());
    }
    if (backend == "gloo") {
      make_gloo();
    } else if (backend == "nccl") {
      make_nccl();
    } else {
      trainkit::detail::throw_option_error("parallel.backend", backend, "\"gloo\" or \"nccl\"");
    }
  }

  /// A group of some of this group's ranks (`ranks`, this one among them),
  /// over the same store under the prefix `name`: only its members make it.
  std::shared_ptr<ProcessGroup> subgroup(const std::string& name, const std::vector<int>& ranks) {
    const auto at = std::find(ranks.begin(), ranks.end(), env_.rank);
    if (at == ranks.end()) throw Error(where() + "not a member of the group " + name);
    auto sub = std::shared_ptr<ProcessGroup>(new ProcessGroup(*this));
    sub->env_.rank = static_cast<int>(at - ranks.begin());
    sub->env_.world_size = static_cast<int>(ranks.size());
    sub->store_ = c10::make_intrusive<c10d::PrefixStore>(name, store_);
    sub->name_ = name;
    if (backend_ == "gloo") {
      sub->make_gloo();
    } else {
      sub->make_nccl();
    }
    return sub;
  }

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const Environment& environment() const { return env_; }
  const std::string& backend() const { return backend_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// Starts an in-place all-reduce of one contiguous tensor.
  Work all_reduce_async(const at::Tensor& t, Op op = c10d::ReduceOp::SUM) {
    std::vector<at::Tensor> tensors{t};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    o.timeout = timeout_;
    return pg_->allreduce(tensors, o);
  }
  /// Starts an in-place broadcast of one contiguous tensor from `root`.
  /// A copy moves bits, so bfloat16 travels as float16, its width (Gloo in
  /// LibTorch 1.13 has no bfloat16, nor int16).
  Work broadcast_async(const at::Tensor& t, int root) {
    std::vector<at::Tensor> tensors{t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = timeout_;
    return pg_->broadcast(tensors, o);
  }

  /// Starts a reduction of one contiguous tensor into `root`'s copy (the
  /// others' copies are scratch afterwards): a reduce-scatter is one per owner.
  Work reduce_async(const at::Tensor& t, int root, Op op = c10d::ReduceOp::SUM) {
    std::vector<at::Tensor> tensors{t};
    c10d::ReduceOptions o;
    o.reduceOp = op;
    o.rootRank = root;
    o.timeout = timeout_;
    return pg_->reduce(tensors, o);
  }

  /// Waits for `work`; on failure or timeout throws an Error naming `what`.
  /// Under CUDA graph capture the wait is recorded (the stream waits for the
  /// collective) and nothing is polled: the host cannot query a captured event.
  void wait(const Work& work, const std::string& what) const {
    const auto start = std::chrono::steady_clock::now();
    try {
      if (capturing()) {
        work->wait();
        return;
      }
      work->wait(timeout_);
    } catch (const std::exception& e) {
      const auto waited = since(start);
      std::string cause = e.what();
      if (const auto nl = cause.find('\n'); nl != std::string::npos) cause.resize(nl);
      // Which peers are gone: a timeout names none. The survivors fail by
      // the timeout (those that met a reset, at once): the answers are
      // awaited until 2 s past it (at most 30 s from the start), at least 1 s.
      if (!rolled_) {
        const auto window = std::min<std::chrono::milliseconds>(timeout_ + std::chrono::seconds(2),
                                                                std::chrono::seconds(30));
        const auto until = std::max(
            start + window, std::chrono::steady_clock::now() + std::chrono::milliseconds(1000));
        roll_ = trainkit::detail::roll_call(
            store_, env_.rank, env_.world_size, until,
            "by " +
                seconds(since(start) + std::chrono::duration_cast<std::chrono::milliseconds>(
                                           until - std::chrono::steady_clock::now())) +
                " after this collective began");
        rolled_ = true;
      }
      const auto& present = roll_;
      throw Error(where() + "collective `" + what + "` failed after " + seconds(waited) +
                  " (timeout " + seconds(timeout_) +
                  "): another rank died, hangs, or runs a different step; " + backend_ +
                  " says: " + cause + (present.empty() ? "" : "; " + present));
    }
  }

  void all_reduce(const at::Tensor& t, const std::string& what, Op op = c10d::ReduceOp::SUM) {
    wait(all_reduce_async(t, op), what);
  }
  void broadcast(const at::Tensor& t, int root, const std::string& what) {
    wait(broadcast_async(t, root), what);
  }
  void barrier(const std::string& what) {
    c10d::BarrierOptions o;
    o.timeout = timeout_;
    wait(pg_->barrier(o), what);
  }

  /// Element-wise sums of `values` over all ranks (CPU doubles, any backend).
  std::vector<double> sum(std::vector<double> values, const std::string& what) {
    auto t = at::tensor(values, at::kDouble).to(device_for_reductions());
    all_reduce(t, what);
    t = t.cpu();
    std::copy_n(t.data_ptr<double>(), values.size(), values.begin());
    return values;
  }
  /// The largest `value` over all ranks.
  int64_t max(int64_t value, const std::string& what) {
    auto t = at::tensor({value}, at::kLong).to(device_for_reductions());
    all_reduce(t, what, c10d::ReduceOp::MAX);
    return t.cpu().item<int64_t>();
  }
  /// Every rank's `mine`, by rank, on every rank (small texts: the lengths
  /// are summed, then each rank broadcasts its bytes).
  std::vector<std::string> all_gather(const std::string& mine, const std::string& what) {
    std::vector<double> lengths(size_t(env_.world_size), 0.0);
    lengths[size_t(env_.rank)] = double(mine.size());
    lengths = sum(std::move(lengths), what + " (lengths)");
    std::vector<at::Tensor> bytes;
    std::vector<Work> works;
    for (int r = 0; r < env_.world_size; ++r) {
      auto t = at::empty({int64_t(lengths[size_t(r)])}, at::kByte);
      if (r == env_.rank && !mine.empty()) std::memcpy(t.data_ptr(), mine.data(), mine.size());
      bytes.push_back(t.to(device_for_reductions()));
      if (bytes.back().numel() > 0) works.push_back(broadcast_async(bytes.back(), r));
    }
    for (auto& w : works) wait(w, what);
    std::vector<std::string> out;
    for (auto& t : bytes) {
      const auto cpu = t.cpu();
      out.emplace_back(static_cast<const char*>(cpu.data_ptr()), size_t(cpu.numel()));
    }
    return out;
  }

 private:
  // LibTorch 1.13 derives the backends from ProcessGroup, 2.x from Backend.
#if TRAINKIT_HAS_GLOO
  using Base = std::conditional_t<std::is_base_of_v<c10d::Backend, c10d::ProcessGroupGloo>,
                                  c10d::Backend, c10d::ProcessGroup>;
#elif TRAINKIT_HAS_NCCL
  using Base = std::conditional_t<std::is_base_of_v<c10d::Backend, c10d::ProcessGroupNCCL>,
                                  c10d::Backend, c10d::ProcessGroup>;
#else
  using Base = c10d::ProcessGroup;
#endif

  /// Whether this NCCL group's collectives are being recorded into a CUDA graph.
  bool capturing() const {
#if TRAINKIT_HAS_CUDA
    return backend_ == "nccl" &&
           c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
#else
    return false;
#endif
  }

  std::string where() const {
    return "trainkit: rank " + std::to_string(env_.rank) + " of " +
           std::to_string(env_.world_size) + (name_.empty() ? "" : " in group " + name_) + ": ";
  }
  static std::chrono::milliseconds since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  }
  static std::string seconds(std::chrono::milliseconds ms) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ms.count()) / 1000.0);
    return text;
  }
  at::Device device_for_reductions() const {
    return backend_ == "nccl"
               ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env_.local_rank))
               : at::Device(at::kCPU);
  }

  void make_gloo() {
#if TRAINKIT_HAS_GLOO
    auto options = c10d::ProcessGroupGloo::Options::create(timeout_);
    options->devices.push_back(gloo_device());
    options->threads = 2;
    pg_ = connect_gloo(options);
#elif __has_include(<gloo/algorithm.h>) && \
    __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>)
    trainkit::detail::throw_option_error(
        "parallel.backend", backend_,
        "\"nccl\" (this program was compiled without -DUSE_C10D_GLOO, which LibTorch's CMake "
        "target adds: add it to a compiler line that does not use CMake)");
#else
    trainkit::detail::throw_option_error("parallel.backend", backend_,
                                         "\"nccl\" (this LibTorch has no Gloo headers)");
#endif
  }

#if TRAINKIT_HAS_GLOO
  /// GLOO_SOCKET_IFNAME's interface when it is set, else the one whose route
  /// reaches MASTER_ADDR (detail/gloo_interface.hpp), named once per host.
  std::shared_ptr<::gloo::transport::Device> gloo_device() const {
    if (const auto ifname = trainkit::detail::env_var("GLOO_SOCKET_IFNAME")) {
      return c10d::ProcessGroupGloo::createDeviceForInterface(*ifname);
    }
    const auto chosen = detail::interface_toward(where(), env_.master_addr, env_.master_port);
    if (!chosen.loopback && env_.local_rank == 0 && name_.empty()) {
      std::fprintf(stderr, "%sgloo binds to %s (%s), the route to MASTER_ADDR %s\n",
                   where().c_str(), chosen.name.empty() ? "?" : chosen.name.c_str(),
                   chosen.address.c_str(), env_.master_addr.c_str());
    }
    return c10d::ProcessGroupGloo::createDeviceForHostname(chosen.address);
  }

  /// Makes the Gloo group on a thread while watching the store: a rank that
  /// cannot connect says so there, and the others stop with its words at once
  /// instead of waiting out the timeout for it (the thread, left to that
  /// timeout, owns what it uses).
  c10::intrusive_ptr<Base> connect_gloo(
      const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& options) {
    struct Attempt {
      std::mutex mutex;
      std::condition_variable done_cv;
      bool done = false;
      c10::intrusive_ptr<Base> group;
      std::string error;
    };
    auto attempt = std::make_shared<Attempt>();
    std::thread([attempt, store = store_, rank = env_.rank, size = env_.world_size, options] {
      c10::intrusive_ptr<Base> group;
      std::string error;
      try {
        group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
      } catch (const std::exception& e) {
        error = e.what();
      }
      const std::lock_guard lock(attempt->mutex);
      attempt->group = std::move(group);
      attempt->error = std::move(error);
      attempt->done = true;
      attempt->done_cv.notify_all();
    }).detach();
    const std::string failed_key = "trainkit/gloo_connect_failed";
    const std::string read_key = "trainkit/gloo_connect_failed_read";
    std::unique_lock lock(attempt->mutex);
    while (!attempt->done_cv.wait_for(lock, std::chrono::milliseconds(200),
                                      [&] { return attempt->done; })) {
      lock.unlock();
      std::string said;
      try {
        if (store_->check({failed_key})) {
          const auto bytes = store_->get(failed_key);
          said.assign(bytes.begin(), bytes.end());
          store_->add(read_key, 1);  // the failed rank may serve the store: it waits for this
        }
      } catch (const std::exception& e) {
        said = "the rendezvous store at " + env_.master_addr + ":" +
               std::to_string(env_.master_port) +
               " went away (the rank or agent serving it ended): " + e.what();
      }
      if (!said.empty()) throw Error(where() + "cannot connect the gloo process group: " + said);
      lock.lock();
    }
    if (attempt->error.empty()) return attempt->group;
    const std::string said = "rank " + std::to_string(env_.rank) + " says: " + attempt->error;
    try {
      store_->set(failed_key, std::vector<uint8_t>(said.begin(), said.end()));
      // Stay until the others have read it (the store may end with this
      // process), or 2 s: some may have failed too, or be gone.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (store_->add(read_key, 0) < env_.world_size - 1 &&
             std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    } catch (const std::exception&) {  // the store is gone too: the others time out
    }
    throw Error(where() + "cannot connect the gloo process group: " + attempt->error);
  }
#endif

  void make_nccl() {
#if TRAINKIT_HAS_NCCL
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout_;
    pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, env_.rank, env_.world_size, options);
#else
    trainkit::detail::throw_option_error("parallel.backend", backend_,
                                         "\"gloo\" (this build has no CUDA/NCCL)");
#endif
  }

  Environment env_;
  std::string backend_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Base> pg_;
  std::string name_;  ///< a subgroup's, "" for the whole world
  /// The roll call after this group's first failed collective (roll_call.hpp).
  mutable bool rolled_ = false;
  mutable std::string roll_;
};

}  // namespace trainkit::parallel
