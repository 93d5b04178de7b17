// The CUDA paths, run where LibTorch sees a GPU (scripts/run.sh gpu) and
// reported as skipped elsewhere (CTest's SKIP_REGULAR_EXPRESSION matches the
// line REQUIRE_CUDA prints): fp16 with PyTorch's `_amp_*` kernels, bf16
// autocast, pinned side-stream batches, CUDA RNG in checkpoints, NCCL, fused
// optimizers, whole steps captured as CUDA graphs, activation checkpointing's
// CUDA generator replay, the batch-size finder meeting a real CUDA
// out-of-memory, the fused batch-norm kernels, and a model scripted in Python.
#include <trainkit/data.hpp>
#include <trainkit/finders.hpp>
#include <trainkit/io.hpp>
#include <trainkit/memory.hpp>
#include <trainkit/parallel/ddp.hpp>
#include <trainkit/parallel/full_shard.hpp>
#include <trainkit/parallel/shard_grad_op.hpp>
#include <trainkit/trainkit.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>
#if TRAINKIT_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "batch_norm_cases.hpp"
#include "checkpoint_cases.hpp"
#include "graph_cases.hpp"
#include "scaler_trajectory.hpp"
#include "scripted_models.hpp"
#include "support.hpp"

using namespace trainkit;

// scripts/run.sh gpu sets TRAINKIT_REQUIRE_CUDA: there a skip is a failure.
#define REQUIRE_CUDA()                                                                       \
  do {                                                                                       \
    if (!TRAINKIT_HAS_CUDA || !torch::cuda::is_available()) {                                \
      REQUIRE_MESSAGE((std::getenv("TRAINKIT_REQUIRE_CUDA") == nullptr),                     \
                      "TRAINKIT_REQUIRE_CUDA is set but this build or machine has no CUDA"); \
      std::puts("trainkit-skip: needs a CUDA device and a CUDA LibTorch");                   \
      return;                                                                                \
    }                                                                                        \
  } while (0)

namespace {

const torch::Device cuda(torch::kCUDA, 0);

using tk_test::DropNet;

std::vector<data::Batch> batches(int n, int64_t batch = 32, uint64_t seed = 3) {
  auto gen = data::generator(seed);
  std::vector<data::Batch> out;
  for (int i = 0; i < n; ++i)
    out.push_back({at::randn({batch, 16}, gen), at::randint(0, 4, {batch}, gen)});
  return out;
}

/// Saves a checkpoint at `at_step` and stops there.
struct StopAt {
  std::filesystem::path file;
  int64_t at_step;
  void on_step_end(TrainState& s) {
    if (s.step != at_step) return;
    s.save_checkpoint(file);
    s.request_stop("interrupted");
  }
};

/// DDP over NCCL as the only rank, on a port the kernel gives.
parallel::DDP::Options nccl_one_rank() {
  return {.backend = "nccl",
          .device = cuda,
          .timeout = std::chrono::seconds(60),
          .rendezvous = {.rank = 0,
                         .world_size = 1,
                         .local_rank = 0,
                         .master_addr = "127.0.0.1",
                         .master_port = tk_test::free_port()}};
}

}  // namespace

TEST_CASE("fp16 on CUDA: the _amp_ kernels follow PyTorch's scale trajectory") {
  REQUIRE_CUDA();
  tk_test::check_scaler_trajectory(cuda);
}

TEST_CASE("fp16 autocast on CUDA trains, and an inf step changes nothing") {
  REQUIRE_CUDA();
  using T = Trainer<optim::AdamW, sched::Constant, precision::Fp16>;
  torch::manual_seed(5);
  T trainer(DropNet(), {.optim = {.lr = 1e-2}, .parallel = {.device = cuda}});
  CHECK(trainer.device().is_cuda());
  const auto data = batches(20);
  const auto first = trainer.fit(task::Classification{}, data, {.epochs = 1});
  const auto later = trainer.fit(task::Classification{}, data, {.epochs = 3});
  CHECK(later.metrics.at("train_loss") < first.metrics.at("train_loss"));

  auto& fp16 = trainer.precision();
  const auto before = tk_test::snapshot(trainer.model());
  const double scale = fp16.scaler().scale_value();
  auto& flat = trainer.flat_params();
  flat.zero_grad();
  fp16.backward(trainer.model().parameters()[0].sum() * INFINITY);
  fp16.unscale(flat);
  fp16.step([&] { trainer.optimizer().step(); });
  fp16.update();
  const auto after = tk_test::snapshot(trainer.model());
  for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i], after[i]));
  CHECK(fp16.scaler().scale_value() == scale * 0.5);
}

TEST_CASE("bf16 autocast on CUDA: bf16 matmuls, fp32 parameters, fp32-like training") {
  REQUIRE_CUDA();
  {
    trainkit::detail::AutocastScope scope(c10::DeviceType::CUDA, at::kBFloat16);
    const auto y = torch::matmul(torch::randn({8, 8}, cuda), torch::randn({8, 8}, cuda));
    CHECK((y.scalar_type() == at::kBFloat16));
  }
  using Bf16 = Trainer<optim::AdamW, sched::Constant, precision::Bf16>;
  using Fp32 = Trainer<optim::AdamW, sched::Constant, precision::Fp32>;
  const auto data = batches(20);
  torch::manual_seed(5);
  Bf16 low(tk_test::Mlp(16, 32, 4), {.optim = {.lr = 1e-2}, .parallel = {.device = cuda}});
  torch::manual_seed(5);
  Fp32 full(tk_test::Mlp(16, 32, 4), {.optim = {.lr = 1e-2}, .parallel = {.device = cuda}});
  const auto a = low.fit(task::Classification{}, data, {.epochs = 3});
  const auto b = full.fit(task::Classification{}, data, {.epochs = 3});
  for (const auto& p : low.model().parameters()) CHECK((p.scalar_type() == at::kFloat));
  CHECK(a.metrics.at("train_loss") == doctest::Approx(b.metrics.at("train_loss")).epsilon(0.05));
}

TEST_CASE("the loader's pinned side-stream batches on CUDA equal the CPU loader's") {
  REQUIRE_CUDA();
  auto gen = data::generator(2);
  const data::TensorDataset ds{at::randn({300, 3, 8, 8}, gen), at::randint(0, 10, {300}, gen)};
  auto make = [&](std::optional<torch::Device> device) {
    return data::Loader(ds, data::RandomSampler({.size = 300, .seed = 4}),
                        {.batch_size = 32,
                         .workers = 2,
                         .seed = 1,
                         .device = device,
                         .device_transform = data::transforms::HorizontalFlip{0.5}});
  };
  auto on_gpu = make(cuda);
  auto on_cpu = make(std::nullopt);
  for (int epoch = 0; epoch < 2; ++epoch) {
    on_gpu.set_epoch(epoch);
    on_cpu.set_epoch(epoch);
    std::vector<data::Batch> gpu, cpu;
    for (const auto& b : on_gpu) {
      CHECK(b.input.is_cuda());
      // A long kernel on the compute stream: the next batch's copy, on the
      // side stream, must still arrive intact behind it.
      at::Tensor busy = torch::randn({512, 512}, cuda);
      for (int i = 0; i < 20; ++i) busy = busy.matmul(busy).tanh_();
      gpu.push_back({b.input.cpu(), b.target.cpu()});
    }
    for (const auto& b : on_cpu) cpu.push_back({b.input.clone(), b.target.clone()});
    REQUIRE(gpu.size() == cpu.size());
    for (size_t i = 0; i < gpu.size(); ++i) {
      CHECK(torch::equal(gpu[i].input, cpu[i].input));
      CHECK(torch::equal(gpu[i].target, cpu[i].target));
    }
  }
}

TEST_CASE("a checkpoint carries the CUDA RNG: dropout on CUDA resumes bitwise") {
  REQUIRE_CUDA();
  using T =
      Trainer<optim::AdamW, sched::OneCycle, precision::Fp16, accumulate::Every<2>, clip::Norm>;
  auto make = [] {
    torch::manual_seed(11);
    return std::make_unique<T>(DropNet(), T::Options{.optim = {.lr = 1e-2},
                                                     .sched = {.max_lr = 2e-2},
                                                     .clip = {.max_norm = 0.5},
                                                     .parallel = {.device = cuda}});
  };
  const auto data = batches(12);
  const auto file = tk_test::temp_dir("trainkit_cuda_resume") / "step-5.ckpt";
  auto reference = make();
  reference->fit(task::Classification{}, data, {.epochs = 3});
  auto first = make();
  first->fit(task::Classification{}, data, {.epochs = 3}, StopAt{file, 5});
  // The next draws must come from the checkpoint, not from this state.
  torch::cuda::manual_seed_all(999);
  auto second = make();
  FitOptions resume{.epochs = 3};
  resume.resume_from = file;
  second->fit(task::Classification{}, data, resume);
  const auto a = second->model().parameters(), b = reference->model().parameters();
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
}

TEST_CASE("SGD's momentum loaded from CPU tensors stays on the parameters' device") {
  REQUIRE_CUDA();
  using T = Trainer<optim::SGD>;
  torch::manual_seed(3);
  T trainer(DropNet(),
            T::Options{.optim = {.lr = 1e-2, .momentum = 0.9}, .parallel = {.device = cuda}});
  const auto data = batches(4);
  trainer.fit(task::Classification{}, data, {.epochs = 1});
  auto state = trainer.optimizer().state_dict();  // as a checkpoint file gives it back
  for (auto& [name, t] : state.tensors) t = t.cpu();
  trainer.optimizer().load_state_dict(state);
  for (const auto& m : trainer.optimizer().momentum_buffers()) CHECK(m.device() == cuda);
  trainer.fit(task::Classification{}, data, {.epochs = 1});  // and the next steps run
}

TEST_CASE("NCCL with one rank: DDP trains exactly as one device") {
  REQUIRE_CUDA();
  using Single = Trainer<optim::SGD, sched::Constant>;
  using Nccl = Trainer<optim::SGD, sched::Constant, precision::Fp32, accumulate::None, clip::None,
                       parallel::DDP>;
  const auto data = batches(10);
  torch::manual_seed(5);
  Single one(tk_test::Mlp(16, 32, 4), {.optim = {.lr = 0.1}, .parallel = {.device = cuda}});
  torch::manual_seed(5);
  Nccl ddp(tk_test::Mlp(16, 32, 4), {.optim = {.lr = 0.1}, .parallel = nccl_one_rank()});
  one.fit(task::Classification{}, data, {.epochs = 2});
  ddp.fit(task::Classification{}, data, {.epochs = 2});
  const auto a = one.model().parameters(), b = ddp.model().parameters();
  for (size_t i = 0; i < a.size(); ++i) CHECK(tk_test::max_rel_error(b[i], a[i]) < 1e-6);
}

TEST_CASE("NCCL with one rank: ShardGradOp and FullShard train as DDP, in bf16 gathers too") {
  REQUIRE_CUDA();
  // The sharding strategies' collectives over NCCL (a reduce per owner, a
  // broadcast per slice) on the GPU; FullShard's mixed precision gathers
  // the Mlp's Linear weights in bf16, as bf16 autocast casts DDP's.
  const auto data = batches(10);
  const auto train = [&]<class Par, class Prec>(std::type_identity<Par>, std::type_identity<Prec>,
                                                const typename Par::Options& parallel) {
    using T = Trainer<optim::AdamW, sched::Constant, Prec, accumulate::None, clip::Norm, Par>;
    torch::manual_seed(5);
    T t(tk_test::Mlp(16, 32, 4),
        {.optim = {.lr = 1e-2}, .clip = {.max_norm = 1.0}, .parallel = parallel});
    t.fit(task::Classification{}, data, {.epochs = 2});
    [[maybe_unused]] auto whole = parallel::gathered_parameters(t.parallel());
    std::vector<at::Tensor> out;
    for (const auto& p : t.model().parameters()) out.push_back(p.detach().clone());
    return out;
  };
  const auto compare = [](const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CHECK((got[i].scalar_type() == at::kFloat));
      CHECK(tk_test::max_rel_error(got[i], want[i]) < 1e-6);
    }
  };
  using Fp32 = std::type_identity<precision::Fp32>;
  using Bf16 = std::type_identity<precision::Bf16>;
  const parallel::FullShard::Options root_only{.group = nccl_one_rank(),
                                               .wrap = parallel::wrap::names({})};
  const auto ddp = train(std::type_identity<parallel::DDP>{}, Fp32{}, nccl_one_rank());
  compare(train(std::type_identity<parallel::ShardGradOp>{}, Fp32{}, nccl_one_rank()), ddp);
  compare(train(std::type_identity<parallel::FullShard>{}, Fp32{}, root_only), ddp);
  auto mixed = root_only;
  mixed.group.rendezvous.master_port = tk_test::free_port();
  mixed.mixed_precision = {.param_dtype = at::kBFloat16, .reduce_dtype = at::kFloat};
  compare(train(std::type_identity<parallel::FullShard>{}, Bf16{}, mixed),
          train(std::type_identity<parallel::DDP>{}, Bf16{}, nccl_one_rank()));
}

TEST_CASE("NCCL with one rank: a captured DDP step equals the eager one") {
  REQUIRE_CUDA();
  REQUIRE(TRAINKIT_HAS_FUSED_OPTIMIZERS);
  // The gradient all-reduce is recorded in the CUDA graph (NCCL on the capturing stream).
  const auto run = [&]<class Capture>(std::type_identity<Capture>) {
    using Nccl = tk_test::SettingTrainer<parallel::DDP, Capture>;
    typename Nccl::Options o{.optim = {.lr = 1e-2, .fused = true},
                             .sched = {.max_lr = 2e-2, .cycle_momentum = false},
                             .clip = {.max_norm = 0.5},
                             .parallel = nccl_one_rank()};
    auto trainer = std::make_unique<Nccl>(tk_test::seeded_mlp(), o);
    trainer->fit(task::Classification{}, tk_test::graph_batches(41));
    return trainer;
  };
  const auto eager = run(std::type_identity<capture::None>{});
  const auto captured = run(std::type_identity<capture::CudaGraph>{});
  CHECK(captured->graph_recorded());
  CHECK(captured->graph_replays() > 10);
  CHECK(tk_test::max_param_rel_error(eager->model(), captured->model()) < 1e-5);
}

TEST_CASE("fused AdamW and SGD on CUDA: one kernel per buffer, as on the CPU") {
  REQUIRE_CUDA();
  REQUIRE(TRAINKIT_HAS_FUSED_OPTIMIZERS);
  // The unset option picks the fused kernels on CUDA; they match the CPU's to rounding.
  auto run = [](torch::Device device, bool sgd) {
    torch::manual_seed(3);
    auto model = tk_test::seeded_mlp();
    const auto data = tk_test::graph_batches(10);
    if (sgd) {
      Trainer<optim::SGD> t(model, {.optim = {.lr = 0.05, .momentum = 0.9, .fused = true},
                                    .parallel = {.device = device}});
      CHECK(t.optimizer().fused());
      t.fit(task::Classification{}, data);
    } else {
      Trainer<> t(model, {.optim = {.lr = 1e-2,
                                    .fused = device.is_cpu() ? std::optional(true) : std::nullopt},
                          .parallel = {.device = device}});
      CHECK(t.optimizer().fused());
      t.fit(task::Classification{}, data);
    }
    return tk_test::snapshot(*model.ptr());
  };
  for (const bool sgd : {false, true}) {
    const auto gpu = run(cuda, sgd), cpu = run(torch::kCPU, sgd);
    for (size_t i = 0; i < gpu.size(); ++i)
      CHECK(tk_test::max_rel_error(gpu[i].cpu(), cpu[i]) < 1e-4);
  }
}

TEST_CASE("a captured step on CUDA equals the eager step over 20 steps") {
  REQUIRE_CUDA();
  tk_test::check_graph_equals_eager(cuda);
}

TEST_CASE("a captured fp16 step on CUDA that meets inf skips the update like eager") {
  REQUIRE_CUDA();
  tk_test::check_graph_inf_skip(cuda);
}

TEST_CASE("a captured run on CUDA resumes from a checkpoint like an unbroken one") {
  REQUIRE_CUDA();
  tk_test::check_graph_resume(cuda);
}

TEST_CASE("a host-reading callback on CUDA keeps steps eager, with the reason") {
  REQUIRE_CUDA();
  tk_test::check_host_reader_fallback(cuda);
}

TEST_CASE("a task that reads the host on CUDA: the probe falls back, and training equals eager") {
  REQUIRE_CUDA();
  struct Reading {  // a task that synchronises: .item() on the loss
    StepOutput step(ModelRef& model, const data::Batch& batch) {
#if TRAINKIT_HAS_CUDA
      // (in the probe: host reads are reported; on a side stream)
      calls.emplace_back(
          c10::cuda::warning_state().get_sync_debug_mode() != c10::cuda::SyncDebugMode::L_DISABLED,
          c10::cuda::getCurrentCUDAStream() != c10::cuda::getDefaultCUDAStream());
#endif
      auto out = task::Classification{}.step(model, batch);
      seen += out.loss.item<double>();
      return out;
    }
    double seen = 0;
    std::vector<std::pair<bool, bool>> calls;
  };
  const auto data = tk_test::graph_batches(12);
  tk_test::EagerTrainer eager(tk_test::seeded_mlp(),
                              tk_test::setting_options<tk_test::EagerTrainer>(cuda));
  tk_test::GraphTrainer graph(tk_test::seeded_mlp(), tk_test::setting_options(cuda));
  Reading a, b;
  eager.fit(a, data);
  graph.fit(b, data);
  CHECK_FALSE(graph.graph_recorded());
  CHECK(graph.graph_fallback_reason().find("reads the device") != std::string::npos);
  CHECK(graph.optimizer().steps_taken() == eager.optimizer().steps_taken());
  CHECK(tk_test::max_param_rel_error(eager.model(), graph.model()) < 1e-5);
  // Once the probe ruled capture out, its window and the rest run as eager
  // steps do, on the default stream (the probe's window once ran on a side stream).
  const auto probe = std::find_if(b.calls.begin(), b.calls.end(), [](auto c) { return c.first; });
  REQUIRE(probe != b.calls.end());
  CHECK(std::none_of(probe + 1, b.calls.end(), [](auto c) { return c.second; }));
}

TEST_CASE(
    "checkpoint on CUDA: dropout recomputed from the CUDA generator gives the plain gradients") {
  REQUIRE_CUDA();
  torch::manual_seed(1);
  auto blocks = tk_test::dropout_mlp(64, 6, 0.3);
  blocks->to(cuda);
  memory::CheckpointedSequential segmented(blocks, 2);
  const auto x = torch::randn({32, 64}, cuda);
  // The CUDA generator must go on as if nothing was recomputed.
  const auto [plain, draw_plain] = tk_test::grads_from_seed(
      *blocks, [&] { return blocks->forward(x); }, cuda);
  const auto [ckpt, draw_ckpt] = tk_test::grads_from_seed(
      *blocks, [&] { return segmented(x); }, cuda);
  REQUIRE(plain.size() == ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) CHECK(tk_test::max_rel_error(ckpt[i], plain[i]) < 1e-5);
  CHECK(torch::equal(draw_plain, draw_ckpt));
}

TEST_CASE(
    "scale_batch_size on CUDA: a real out-of-memory ends the growth, the trainer trains after") {
  REQUIRE_CUDA();
#if TRAINKIT_HAS_CUDA
  // The caching allocator refuses past 1% of the card: a real CUDA
  // out-of-memory at a batch of some thousands.
  namespace allocator = c10::cuda::CUDACachingAllocator;
  (void)torch::ones({1}, cuda);  // the allocator starts with the first allocation
  allocator::emptyCache();
  allocator::setMemoryFraction(0.01, 0);
  struct Restore {
    ~Restore() {
      allocator::setMemoryFraction(1.0, 0);
      allocator::emptyCache();
    }
  } restore;
  using T = Trainer<optim::SGD>;
  torch::manual_seed(5);
  T trainer(torch::nn::Sequential(torch::nn::Linear(256, 4096), torch::nn::ReLU(),
                                  torch::nn::Linear(4096, 1)),
            T::Options{.optim = {.lr = 1e-3, .momentum = 0.9}, .parallel = {.device = cuda}});
  const auto before = trainer.flat_params().groups()[0].data.clone();
  const auto make = [](int64_t b) {
    std::vector<data::Batch> out;
    for (int i = 0; i < 2; ++i) {
      const auto x = at::randn({b, 256});
      out.push_back({x, x.sum(1, true)});
    }
    return out;
  };
  const auto result = finders::scale_batch_size(trainer, task::Regression{}, make,
                                                {.init_batch_size = 64, .max_batch_size = 1 << 22});
  MESSAGE("batch size " << result.batch_size << " after " << result.trials.size() << " trials");
  int64_t largest_fit = 0, smallest_fail = std::numeric_limits<int64_t>::max(), cuda_ooms = 0;
  for (const auto& t : result.trials) {
    if (t.fits) {
      largest_fit = std::max(largest_fit, t.batch_size);
    } else {
      MESSAGE("batch " << t.batch_size << ": " << t.error);
      CHECK_FALSE(t.error.empty());
      cuda_ooms += t.error.find("CUDA out of memory") != std::string::npos;
      smallest_fail = std::min(smallest_fail, t.batch_size);
    }
  }
  CHECK(cuda_ooms > 0);
  CHECK(smallest_fail < (int64_t(1) << 22));  // memory ran out before the cap
  CHECK(result.batch_size == largest_fit);
  CHECK(largest_fit < smallest_fail);
  CHECK(largest_fit >= 256);
  CHECK(torch::equal(trainer.flat_params().groups()[0].data, before));  // put back
  // Half the answer: at the answer itself the cache's fragments may not fit.
  const auto after = trainer.fit(task::Regression{}, make(largest_fit / 2), {.epochs = 1});
  CHECK(std::isfinite(after.metrics.at("train_loss")));
#endif
}

TEST_CASE(
    "fused batch norm + ReLU (+ residual, forked) on CUDA: the kernels against the unfused "
    "modules") {
  REQUIRE_CUDA();
#if TRAINKIT_HAS_CUDA
  REQUIRE_MESSAGE(TRAINKIT_HAS_FUSED_KERNELS, "test_cuda is built without trainkit::cuda_kernels");
  const auto channels_last = [](const at::Tensor& t) {
    return t.contiguous(at::MemoryFormat::ChannelsLast);
  };
  uint64_t seed = 10;
  // 64 channels: 16-byte vectors in every type; 12: vectors in fp32 only; 3: none.
  for (const auto& [type, tol] :
       {std::pair{at::kFloat, 1e-5}, std::pair{at::kHalf, 1e-2}, std::pair{at::kBFloat16, 1e-2}}) {
    for (const int64_t channels : {64, 12, 3}) {
      for (const auto& [with_residual, fork] : {std::pair{false, false}, std::pair{true, false},
                                                std::pair{false, true}, std::pair{true, true}}) {
        CAPTURE(type);
        CAPTURE(channels);
        CAPTURE(with_residual);
        CAPTURE(fork);
        // fresh inputs each check, off-centre so that the normalisation matters
        torch::manual_seed(++seed);
        const std::vector<int64_t> shape{32, channels, 9, 7};
        const auto x = channels_last((torch::randn(shape, cuda) * 2 + 0.3).to(type));
        const auto r =
            with_residual ? channels_last(torch::randn(shape, cuda).to(type)) : at::Tensor();
        const auto dy = channels_last(torch::randn(shape, cuda).to(type));
        // a fork's second gradient: NCHW once (the layer copies it to the kernels' layout)
        auto dy2 = fork ? torch::randn(shape, cuda).to(type) : at::Tensor();
        if (fork && with_residual) dy2 = channels_last(dy2);
        // the unfused modules get the sum, added in the gradients' type as autograd adds
        const auto dy_total = (fork ? dy + dy2 : dy).to(at::kFloat);
        const auto fused_step = [&](trainkit::layers::BatchNormReLU2d m) {
          return fork ? tk_test::fused_fork_step(m, x, r, dy, dy2)
                      : tk_test::fused_step(m, x, r, dy);
        };
        auto bn = tk_test::seeded_bn(channels, cuda, seed);
        auto fused = tk_test::fused_copy(bn);
        REQUIRE(trainkit::layers::detail::fused_kernels_apply(
            x, r, fused->weight, fused->bias, fused->running_mean, fused->running_var));
        {  // NaN in the allocator's free blocks: an output the kernels skip shows
          std::vector<at::Tensor> poison;
          for (int i = 0; i < 64; ++i) poison.push_back(torch::full({1 << 18}, NAN, cuda));
          poison.push_back(torch::full({1 << 24}, NAN, cuda));
        }
        const auto got = fused_step(fused);
        const auto want = tk_test::unfused_step(bn, x.to(at::kFloat),
                                                r.defined() ? r.to(at::kFloat) : r, dy_total);
        torch::cuda::synchronize();  // throws on an asynchronous kernel error
        const auto a = got.all(), b = want.all();
        for (size_t i = 0; i < a.size(); ++i) {
          CAPTURE(i);
          REQUIRE(a[i].defined() == b[i].defined());
          if (!a[i].defined()) continue;
          CHECK_FALSE(a[i].isnan().any().item<bool>());
          CHECK(tk_test::max_rel_error(a[i], b[i]) < tol);
        }
        CHECK(torch::equal(got.batches, want.batches));
        // the same gradients on every run: partial sums added in a fixed order
        auto again = tk_test::fused_copy(bn);
        const auto repeat = fused_step(fused);
        const auto first = fused_step(again);
        CHECK(torch::equal(repeat.dx, first.dx));
        CHECK(torch::equal(repeat.dw, first.dw));
        // eval mode: the running statistics normalise (the kernels skip the statistics pass)
        bn->eval();
        auto evaluated = tk_test::fused_copy(bn);
        evaluated->eval();
        const auto eval_got = fused_step(evaluated);
        const auto eval_want = tk_test::unfused_step(bn, x.to(at::kFloat),
                                                     r.defined() ? r.to(at::kFloat) : r, dy_total);
        CHECK(tk_test::max_rel_error(eval_got.y, eval_want.y) < tol);
        CHECK(tk_test::max_rel_error(eval_got.dx, eval_want.dx) < tol);
        CHECK(tk_test::max_rel_error(eval_got.dw, eval_want.dw) < tol);
      }
    }
  }
#endif
}

TEST_CASE("the fused batch norm on CUDA in eval mode on an empty batch: zero parameter gradients") {
  REQUIRE_CUDA();
#if TRAINKIT_HAS_CUDA
  REQUIRE_MESSAGE(TRAINKIT_HAS_FUSED_KERNELS, "test_cuda is built without trainkit::cuda_kernels");
  // frozen statistics, trainable affine parameters (a detection head with no proposals)
  auto bn = tk_test::seeded_bn(64, cuda);
  bn->eval();
  auto fused = tk_test::fused_copy(bn);
  fused->eval();
  const auto x =
      torch::randn({0, 64, 7, 7}, cuda).to(at::kHalf).contiguous(at::MemoryFormat::ChannelsLast);
  REQUIRE(trainkit::layers::detail::fused_kernels_apply(x, {}, fused->weight, fused->bias,
                                                        fused->running_mean, fused->running_var));
  {  // NaN in the allocator's free blocks: gradients the kernels leave unwritten show
    const auto poison = torch::full({1 << 20}, NAN, cuda);
  }
  const auto got = tk_test::fused_step(fused, x, {}, at::zeros_like(x));
  torch::cuda::synchronize();
  CHECK(torch::equal(got.dw, torch::zeros({64}, cuda)));
  CHECK(torch::equal(got.db, torch::zeros({64}, cuda)));
#endif
}

TEST_CASE("the fused batch norm's statistics kernel on CUDA: Welford's moments against float64") {
  REQUIRE_CUDA();
#if TRAINKIT_HAS_CUDA
  REQUIRE_MESSAGE(TRAINKIT_HAS_FUSED_KERNELS, "test_cuda is built without trainkit::cuda_kernels");
  uint64_t seed = 100;
  // Far off-centre (a sum of squares in fp32 would cancel), many rows (every
  // block and the finalize's lanes), odd and wide channel counts.
  struct Case {
    at::ScalarType type;
    int64_t batch, channels, side;
    double centre, tol;
  };
  for (const auto& c :
       {Case{at::kFloat, 64, 64, 32, 1000.0, 1e-5}, Case{at::kFloat, 8, 2048, 4, 3.0, 1e-5},
        Case{at::kFloat, 16, 3, 15, -50.0, 1e-5}, Case{at::kHalf, 64, 64, 32, 20.0, 1e-3},
        Case{at::kBFloat16, 32, 128, 16, 5.0, 1e-3}, Case{at::kHalf, 2, 12, 1, 0.0, 1e-3}}) {
    CAPTURE(c.type);
    CAPTURE(c.channels);
    CAPTURE(c.batch);
    torch::manual_seed(++seed);
    const auto x = (torch::randn({c.batch, c.channels, c.side, c.side}, cuda) + c.centre)
                       .to(c.type)
                       .contiguous(at::MemoryFormat::ChannelsLast);
    const auto wide = x.to(at::kDouble);
    const auto want_mean = wide.mean({0, 2, 3});
    const auto want_invstd = (wide.var({0, 2, 3}, /*unbiased=*/false) + 1e-5).rsqrt();
    const auto [mean, invstd] = trainkit::layers::detail::fused_stats(x, 1e-5);
    const auto [aten_mean, aten_invstd] = at::batch_norm_stats(x, 1e-5);
    torch::cuda::synchronize();
    // within the tolerance, or at worst twice ATen's own error (its Welford, in fp32 too)
    const auto bound = [&](const at::Tensor& aten, const at::Tensor& want) {
      return std::max(c.tol, 2 * tk_test::max_rel_error(aten, want));
    };
    CHECK(tk_test::max_rel_error(mean, want_mean) <= bound(aten_mean, want_mean));
    CHECK(tk_test::max_rel_error(invstd, want_invstd) <= bound(aten_invstd, want_invstd));
    // the same bits on every run: partials merged in a fixed order
    const auto [mean2, invstd2] = trainkit::layers::detail::fused_stats(x, 1e-5);
    CHECK(torch::equal(mean, mean2));
    CHECK(torch::equal(invstd, invstd2));
  }
#endif
}

TEST_CASE_TEMPLATE("captured Muon, Lamb, Lars and schedule-free steps on CUDA equal eager ones",
                   Optimizer, optim::Muon, optim::Lamb, optim::Lars, optim::ScheduleFreeAdamW) {
  REQUIRE_CUDA();
  tk_test::check_device_step_equals_eager<Optimizer>(cuda);
  tk_test::check_device_step_resume<Optimizer>(cuda);
}

TEST_CASE(
    "a scripted model trains on CUDA as on the CPU, and its captured steps equal eager ones") {
  REQUIRE_CUDA();
  // The CNN PyTorch 2.6 scripted (tests/reference/make_scripted_reference.py):
  // convolutions, batch norm and its buffers, by Python's names.
  const auto archive =
      std::filesystem::path(TRAINKIT_REFERENCE_DIR) / "scripted" / "cnn_script_torch2.6.pt";
  using Eager = Trainer<optim::SGD, sched::Step>;
  using Captured = Trainer<optim::SGD, sched::Step, precision::Fp32, accumulate::None, clip::None,
                           parallel::Single, capture::CudaGraph>;
  const auto options = [](torch::Device device) {
    Eager::Options o{.optim = {.lr = 0.1, .momentum = 0.9, .nesterov = true, .fused = true},
                     .sched = {.step_size = 5, .gamma = 0.5},
                     .param_groups = {{.name = "norms",
                                       .select = params::name_matches("^bn"),
                                       .options = {.lr = 0.05}}},
                     // full fp32 convolutions and fixed algorithms: comparable with the CPU's
                     .device = {.tf32 = false, .cudnn_benchmark = false}};
    o.parallel.device = device;
    return o;
  };
  std::vector<data::Batch> batches;
  for (int64_t s = 0; s < 20; ++s) batches.push_back(scripted_models::cnn_batch(s % 4));

  ScriptModule on_cpu(archive), eager_model(archive, ScriptModuleOptions{.device = cuda}),
      captured_model(archive, ScriptModuleOptions{.device = cuda});
  const auto o = options(cuda);
  Eager cpu_trainer(on_cpu, options(torch::kCPU));
  Eager eager(eager_model, o);
  Captured captured(captured_model, {.optim = o.optim,
                                     .sched = o.sched,
                                     .parallel = o.parallel,
                                     .capture = {.warmup_steps = 2},
                                     .param_groups = o.param_groups,
                                     .device = o.device});
  cpu_trainer.fit(task::Classification{}, batches);
  eager.fit(task::Classification{}, batches);
  captured.fit(task::Classification{}, batches);
  CHECK(captured.graph_fallback_reason().empty());
  CHECK(captured.graph_replays() > 10);

  const double cuda_vs_cpu = tk_test::max_param_rel_error(*eager_model, *on_cpu);
  const double captured_vs_eager = tk_test::max_param_rel_error(*captured_model, *eager_model);
  MESSAGE("scripted CNN, 20 steps: CUDA against the CPU "
          << cuda_vs_cpu << ", captured against eager " << captured_vs_eager);
  CHECK(cuda_vs_cpu < 1e-4);
  CHECK(captured_vs_eager < 1e-5);
  CHECK(eager_model->named_buffers()["bn1.running_mean"].is_cuda());
}
