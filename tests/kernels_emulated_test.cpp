// The fused batch-norm kernels, run on CPUs: their CUDA source itself,
// compiled as C++ against tests/cuda_emulation's runtime (a block's threads
// as fibers that take turns between barriers), checked against the composite
// formulas in double precision as test_cuda checks them on a GPU. Here every CI run checks the
// kernels' logic (indexing, the grid-stride loops, the fixed-order merges, the staged gradient);
// what only a GPU shows (speed, memory ordering between real warps, the compiler's device code)
// test_cuda checks.
#include <doctest/doctest.h>
#include <torch/torch.h>
#include <trainkit/layers/batch_norm_act.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support.hpp"

#if TRAINKIT_HAS_FUSED_KERNELS
#error \
    "this file defines the kernels' entry points for CPUs: it cannot share a program with trainkit::cuda_kernels"
#endif

// The kernels' dynamic shared memory (extern __shared__): one launch's block
// at a time uses it.
namespace trainkit::layers::detail::cuda::kernels {
float shared[48 * 1024 / sizeof(float)];
}
#include "trainkit/layers/detail/batch_norm_act_kernels.cuh"

namespace {

namespace bn = trainkit::layers::detail;
namespace kernels = bn::cuda::kernels;

// A NaN with a payload no arithmetic makes: the value of shared memory no
// thread wrote, and the mark of the bytes past a launch's size.
constexpr uint32_t kPoison = 0x7fc0dead;

// Shared memory poisoned before each block (a read of what no thread wrote
// shows), and checked after it: a write past the launch's size fails it.
void watch_shared_memory() {
  cuda_emulation::shared_bytes_available = sizeof(kernels::shared);
  cuda_emulation::before_block = [](size_t) {
    for (auto& v : kernels::shared) std::memcpy(&v, &kPoison, sizeof v);
  };
  cuda_emulation::after_block = [](size_t bytes) {
    const auto* words = reinterpret_cast<const unsigned char*>(kernels::shared);
    for (size_t at = (bytes + 3) / 4 * 4; at < sizeof(kernels::shared); at += 4)
      if (std::memcmp(words + at, &kPoison, 4) != 0) return false;
    return true;
  };
}

bn::cuda::Scalar scalar(at::ScalarType t) {
  return t == at::kFloat  ? bn::cuda::Scalar::f32
         : t == at::kHalf ? bn::cuda::Scalar::f16
                          : bn::cuda::Scalar::bf16;
}

at::Tensor nan_like(const at::Tensor& t) {
  return at::full_like(t, std::numeric_limits<double>::quiet_NaN());
}

at::Tensor floats(int64_t n) {
  return at::full({n}, std::numeric_limits<float>::quiet_NaN());
}

const void* ptr(const at::Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

struct Case {
  at::ScalarType type;
  int64_t channels;
  bool residual, fork;
  int64_t batch = 16;  // x 30 rows each
  bool relu = true;
  int multiprocessors = 1;  // bounds the grid: 8 blocks per multiprocessor
  bool training = true;     // else eval mode: the running statistics normalise
  bool affine = true;       // else no weight or bias, nor their gradients
};

/// One step through the kernels: statistics (training), forward (running
/// statistics moved in training, untouched in eval), backward; every output
/// checked against the composite.
void check_kernels(const Case& c, uint64_t seed) {
  CAPTURE(c.type);
  CAPTURE(c.channels);
  CAPTURE(c.residual);
  CAPTURE(c.fork);
  CAPTURE(c.relu);
  CAPTURE(c.multiprocessors);
  CAPTURE(c.training);
  CAPTURE(c.affine);
  CAPTURE(c.batch);
  watch_shared_memory();
  torch::manual_seed(seed);
  const double tol = c.type == at::kFloat ? 1e-5 : 1e-2;
  const double eps = 1e-5, momentum = 0.1;
  const std::vector<int64_t> shape{c.batch, c.channels, 6, 5};
  const auto nhwc = [&](const at::Tensor& t) {
    return t.to(c.type).contiguous(at::MemoryFormat::ChannelsLast);
  };
  const auto x = nhwc(torch::randn(shape) * 2 + 0.3);
  const auto r = c.residual ? nhwc(torch::randn(shape)) : at::Tensor();
  const auto dy = nhwc(torch::randn(shape));
  const auto dy2 = c.fork ? nhwc(torch::randn(shape)) : at::Tensor();
  const auto weight = c.affine ? torch::rand({c.channels}) + 0.5 : at::Tensor();
  const auto bias = c.affine ? torch::randn({c.channels}) : at::Tensor();
  auto running_mean = torch::randn({c.channels}), running_var = torch::rand({c.channels}) + 0.5;
  const int64_t rows = x.numel() / c.channels;
  const auto type = scalar(c.type);
  const int sms = c.multiprocessors;

  // the reference, in double, from the same (rounded) inputs
  const auto d = [](const at::Tensor& t) { return t.defined() ? t.to(at::kDouble) : t; };
  const auto [mean_ref, invstd_ref] =
      c.training ? bn::composite_stats(d(x), eps)
                 : std::pair{d(running_mean), (d(running_var) + eps).rsqrt()};
  const auto y_ref =
      bn::composite_forward(d(x), d(r), d(weight), d(bias), mean_ref, invstd_ref, c.relu);
  auto rm_ref = d(running_mean), rv_ref = d(running_var);
  if (c.training) bn::update_running(rm_ref, rv_ref, mean_ref, invstd_ref, momentum, eps, rows);

  if (c.training) {  // statistics
    auto mean = floats(c.channels), invstd = floats(c.channels);
    auto stats_ws = floats(bn::cuda::stats_workspace_floats(rows, c.channels, type, sms));
    bn::cuda::StatsArgs s;
    s.x = x.data_ptr(), s.mean = mean.data_ptr<float>(), s.invstd = invstd.data_ptr<float>();
    s.workspace = stats_ws.data_ptr<float>(), s.eps = float(eps);
    s.rows = rows, s.channels = c.channels, s.type = type;
    REQUIRE(bn::cuda::launch_stats(s, sms, nullptr) == nullptr);
    CHECK(tk_test::max_rel_error(mean, mean_ref) < 1e-5);
    CHECK(tk_test::max_rel_error(invstd, invstd_ref) < 1e-5);
  }

  // forward, from the reference statistics (rounded to float, as the kernels keep them)
  const auto mean32 = mean_ref.to(at::kFloat), invstd32 = invstd_ref.to(at::kFloat);
  auto y = nan_like(x);
  bn::cuda::ForwardArgs f;
  f.x = x.data_ptr(), f.residual = ptr(r), f.y = y.data_ptr();
  f.mean = mean32.data_ptr<float>(), f.invstd = invstd32.data_ptr<float>();
  f.weight = c.affine ? weight.data_ptr<float>() : nullptr;
  f.bias = c.affine ? bias.data_ptr<float>() : nullptr;
  if (c.training) {  // as the layer calls it: eval mode moves nothing
    f.running_mean = running_mean.data_ptr<float>();
    f.running_var = running_var.data_ptr<float>();
  }
  f.momentum = float(momentum), f.eps = float(eps);
  f.unbias = float(double(rows) / double(rows - 1));
  f.rows = rows, f.channels = c.channels, f.type = type, f.relu = c.relu;
  REQUIRE(bn::cuda::launch_forward(f, sms, nullptr) == nullptr);
  CHECK(tk_test::max_rel_error(y, y_ref) < tol);
  CHECK(tk_test::max_rel_error(running_mean, rm_ref) < 1e-5);
  CHECK(tk_test::max_rel_error(running_var, rv_ref) < 1e-5);

  // backward: the mask from the kernels' own output, as the layer saves it;
  // a fork's two gradients added in their own type, as autograd adds them
  const bn::BatchNormActConfig config{c.training, c.relu, c.residual, c.affine, c.affine};
  const auto dy_total = c.fork ? dy + dy2 : dy;
  const auto grads_ref =
      bn::composite_backward(d(dy_total), {}, d(y), d(x), d(weight), mean_ref, invstd_ref, config);
  auto dx = nan_like(x);
  auto dw = c.affine ? floats(c.channels) : at::Tensor(),
       db = c.affine ? floats(c.channels) : at::Tensor();
  auto dr = c.residual ? nan_like(x) : at::Tensor();
  auto ws = floats(bn::cuda::backward_workspace_floats(rows, c.channels, type, sms));
  bn::cuda::BackwardArgs b;
  b.grad_y = dy.data_ptr(), b.grad_y2 = ptr(dy2), b.y = y.data_ptr(), b.x = x.data_ptr();
  b.mean = mean32.data_ptr<float>(), b.invstd = invstd32.data_ptr<float>();
  b.weight = c.affine ? weight.data_ptr<float>() : nullptr;
  b.grad_weight = c.affine ? dw.data_ptr<float>() : nullptr;
  b.grad_bias = c.affine ? db.data_ptr<float>() : nullptr;
  b.grad_x = dx.data_ptr(), b.grad_residual = dr.defined() ? dr.data_ptr() : nullptr;
  b.workspace = ws.data_ptr<float>();
  b.rows = rows, b.channels = c.channels, b.type = type, b.relu = c.relu, b.training = c.training;
  REQUIRE(bn::cuda::launch_backward(b, sms, nullptr) == nullptr);
  const std::vector<at::Tensor> got{dx, dw, db, dr};
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);  // dx, dw, db, dr
    REQUIRE(got[i].defined() == grads_ref[i].defined());
    if (!got[i].defined()) continue;
    CHECK_FALSE(got[i].isnan().any().item<bool>());
    CHECK(tk_test::max_rel_error(got[i], grads_ref[i]) < tol);
  }
  // the residual's gradient is the masked sum itself, rounded once: exact
  if (c.residual) CHECK(torch::equal(dr, c.relu ? dy_total * (y > 0) : dy_total));
}

}  // namespace

TEST_CASE("the fused batch-norm kernels, run on CPUs, against the composite formulas") {
  uint64_t seed = 40;
  // 64 channels: 16-byte vectors in every type; 12: in fp32 only; 3: none
  for (const auto type : {at::kFloat, at::kHalf, at::kBFloat16})
    for (const int64_t channels : {64, 12, 3})
      for (const bool residual : {false, true})
        for (const bool fork : {false, true})
          check_kernels({.type = type, .channels = channels, .residual = residual, .fork = fork},
                        ++seed);
  const Case more[] = {
      // no ReLU; one block per row group (the grid not bound); the widest block
      {.type = at::kHalf,
       .channels = 64,
       .residual = true,
       .fork = true,
       .relu = false,
       .multiprocessors = 64},
      {.type = at::kFloat, .channels = 2048, .residual = false, .fork = true, .multiprocessors = 2},
      // eval mode (no statistics pass; dx = weight * invstd * g), with and without affine
      {.type = at::kHalf, .channels = 64, .residual = true, .fork = true, .training = false},
      {.type = at::kFloat, .channels = 12, .residual = false, .fork = false, .training = false},
      {.type = at::kHalf,
       .channels = 64,
       .residual = true,
       .fork = true,
       .training = false,
       .affine = false},
      {.type = at::kFloat,
       .channels = 12,
       .residual = false,
       .fork = false,
       .training = false,
       .affine = false},
      {.type = at::kBFloat16, .channels = 64, .residual = true, .fork = false, .affine = false},
      // 60 blocks: each lane of the per-channel merges takes several partials;
      // one block; 512 groups of 8 half-precision channels (the most shared memory)
      {.type = at::kHalf,
       .channels = 64,
       .residual = true,
       .fork = true,
       .batch = 64,
       .multiprocessors = 8},
      {.type = at::kFloat, .channels = 12, .residual = false, .fork = true, .batch = 1},
      {.type = at::kHalf, .channels = 4096, .residual = true, .fork = true, .batch = 2}};
  for (const auto& c : more) check_kernels(c, ++seed);
}

TEST_CASE("the backward kernels on an empty batch (eval mode): zero parameter gradients") {
  watch_shared_memory();
  for (const auto type : {at::kFloat, at::kHalf}) {
    CAPTURE(type);
    const int64_t channels = 64;
    const auto x = at::empty({0, channels, 4, 4}, type).contiguous(at::MemoryFormat::ChannelsLast);
    const auto mean = torch::zeros({channels}), invstd = torch::ones({channels});
    const auto weight = torch::ones({channels});
    auto dw = floats(channels), db = floats(channels);
    auto ws = floats(bn::cuda::backward_workspace_floats(0, channels, scalar(type), 1));
    bn::cuda::BackwardArgs b;
    b.grad_y = x.data_ptr(), b.y = x.data_ptr(), b.x = x.data_ptr();
    b.mean = mean.data_ptr<float>(), b.invstd = invstd.data_ptr<float>();
    b.weight = weight.data_ptr<float>();
    b.grad_weight = dw.data_ptr<float>(), b.grad_bias = db.data_ptr<float>();
    b.grad_x = x.data_ptr(), b.workspace = ws.data_ptr<float>();
    b.rows = 0, b.channels = channels, b.type = scalar(type), b.training = false;
    REQUIRE(bn::cuda::launch_backward(b, 1, nullptr) == nullptr);
    CHECK(torch::equal(dw, torch::zeros({channels})));
    CHECK(torch::equal(db, torch::zeros({channels})));
  }
}

TEST_CASE("a launch the GPU refuses comes back as its error's text, and leaves no error behind") {
  watch_shared_memory();
  const auto kernel = +[](int) {};
  // more than 1024 threads in a block
  const char* error = kernels::launch(kernel, dim3(1), dim3(33, 32), 0, nullptr, 0);
  REQUIRE(error != nullptr);
  CHECK(std::string(error) == "invalid configuration argument");
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(kernels::launch(kernel, dim3(2), dim3(32, 32), 0, nullptr, 0) == nullptr);
}
