// Activation checkpointing: gradients equal the plain model's (MLP and CNN
// with dropout, nested segments, a Trainer under Every<2>), the random
// generators go on as if nothing ran, and the peak of CPU tensor memory
// (memory::CpuMeter) falls as the segments promise.
#include <trainkit/memory.hpp>
#include <trainkit/trainkit.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "checkpoint_cases.hpp"
#include "support.hpp"

using namespace trainkit;
namespace nn = torch::nn;

namespace {

using tk_test::dropout_mlp;
using tk_test::grads_from_seed;
using tk_test::grads_of;

void check_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("tensor " << i << ": max abs difference " << (a[i] - b[i]).abs().max().item<double>()
                   << ", max abs value " << a[i].abs().max().item<double>());
    CHECK(torch::allclose(a[i], b[i], 1e-6, 1e-6));
  }
}

}  // namespace

TEST_CASE("checkpoint: an MLP with dropout, in segments, has the plain model's gradients") {
  torch::manual_seed(1);
  auto blocks = dropout_mlp(16, 6, 0.3);
  memory::CheckpointedSequential segmented(blocks, 2);
  const auto x = torch::randn({8, 16});
  const auto [plain, draw_plain] = grads_from_seed(*blocks, [&] { return blocks->forward(x); });
  const auto [ckpt, draw_ckpt] = grads_from_seed(*blocks, [&] { return segmented(x); });
  check_close(plain, ckpt);
  CHECK(torch::equal(draw_plain, draw_ckpt));
  // an input that requires grad gets the plain gradient too
  auto xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
  torch::manual_seed(3);
  blocks->forward(xa).sum().backward();
  torch::manual_seed(3);
  segmented(xb).sum().backward();
  CHECK(torch::allclose(xa.grad(), xb.grad(), 1e-6, 1e-6));
  CHECK_THROWS_WITH_AS(memory::CheckpointedSequential(dropout_mlp(2, 1, 0), 0),
                       doctest::Contains("CheckpointedSequential.segment_size"), Error);
}

TEST_CASE("checkpoint: a CNN with dropout, and nested segments") {
  torch::manual_seed(2);
  nn::Conv2d c1(nn::Conv2dOptions(3, 8, 3).padding(1)), c2(nn::Conv2dOptions(8, 8, 3).padding(1));
  nn::Dropout2d drop(0.25);
  nn::Sequential holder(c1, c2);  // one module to collect the gradients from
  const auto x = torch::randn({4, 3, 12, 12});
  const auto body = [&](const at::Tensor& in) { return c2(drop(torch::relu(c1(in)))).relu(); };
  const auto [plain, d1] = grads_from_seed(*holder, [&] { return body(x); });
  const auto [once, d2] = grads_from_seed(*holder, [&] { return memory::checkpoint(body, x); });
  const auto nested = [&] {
    return memory::checkpoint(
        [&](const at::Tensor& in) {
          const auto h =
              memory::checkpoint([&](const at::Tensor& a) { return drop(torch::relu(c1(a))); }, in);
          return c2(h).relu();
        },
        x);
  };
  const auto [twice, d3] = grads_from_seed(*holder, nested);
  check_close(plain, once);
  check_close(plain, twice);
  CHECK(torch::equal(d1, d2));
  CHECK(torch::equal(d1, d3));
}

TEST_CASE("checkpoint: a Trainer under Every<2> trains the same weights") {
  using T = Trainer<optim::SGD, sched::Constant, precision::Fp32, accumulate::Every<2>>;
  auto gen = data::generator(4);
  std::vector<data::Batch> data;
  for (int i = 0; i < 6; ++i)
    data.push_back({at::randn({8, 16}, gen), at::randint(0, 16, {8}, gen)});
  const auto train = [&](auto make_model) {
    torch::manual_seed(5);
    auto blocks = dropout_mlp(16, 4, 0.2);
    T trainer(make_model(blocks), {.optim = {.lr = 0.05, .momentum = 0.9}});
    torch::manual_seed(6);
    trainer.fit(task::Classification{}, data, {.epochs = 2});
    std::vector<at::Tensor> out;
    for (const auto& p : blocks->parameters()) out.push_back(p.detach().clone());
    return out;
  };
  const auto plain = train([](nn::Sequential b) { return b; });
  const auto segmented =
      train([](nn::Sequential b) { return memory::CheckpointedSequential(b, 2); });
  check_close(plain, segmented);
}

TEST_CASE("checkpoint: the peak of activation memory falls with the segments") {
  // 64 blocks of Linear(128) + ReLU at batch 256: each block keeps its input
  // (128 KiB) for backward. In segments of 8 only the 8 segment inputs and
  // one segment's activations are alive at once: about a quarter.
  torch::manual_seed(8);
  auto blocks = dropout_mlp(128, 64, 0);
  memory::CheckpointedSequential segmented(blocks, 8);
  const auto x = torch::randn({256, 128});
  blocks->forward(x).sum().backward();  // the gradients exist before measuring
  const auto peak = [&](const std::function<at::Tensor()>& forward) {
    for (const auto& p : blocks->parameters()) p.grad().zero_();  // kept, not reallocated
    memory::CpuMeter meter;
    forward().sum().backward();
    return meter.peak_bytes();
  };
  const auto plain = peak([&] { return blocks->forward(x); });
  const auto ckpt = peak([&] { return segmented(x); });
  MESSAGE("peak bytes: plain " << plain << ", segments of 8 " << ckpt);
  const int64_t activation = 256 * 128 * 4;
  CHECK(plain >= 64 * activation);
  CHECK(ckpt < 0.5 * plain);
  {
    memory::CpuMeter meter;
    const auto t = torch::empty({1000}, at::kFloat);
    CHECK(meter.bytes() >= 4000);
    CHECK_THROWS_WITH_AS(memory::CpuMeter(), doctest::Contains("counting already"), Error);
  }
}

TEST_CASE("CpuMeter counts the scratch ATen's kernels take through raw_allocate") {
  // GELU's CPU kernel is one such: under the meter it failed an internal
  // assert of LibTorch (a counted block was not its own context).
  const auto x = torch::randn({1 << 16});
  memory::CpuMeter meter;
  void* block = c10::GetCPUAllocator()->raw_allocate(1000);
  CHECK(meter.bytes() == 1000);
  c10::GetCPUAllocator()->raw_deallocate(block);
  CHECK(meter.bytes() == 0);
  const auto y = torch::gelu(x);
  CHECK(meter.bytes() >= x.nbytes());
  CHECK(y.allclose(x * 0.5 * (1 + torch::erf(x / std::sqrt(2.0))), 1e-6, 1e-6));
}

TEST_CASE("checkpoint: the recomputation runs with the forward's autocast, on or off") {
  torch::manual_seed(9);
  nn::Linear a(16, 16), b(16, 4);
  nn::Sequential holder(a, b);
  const auto x = torch::randn({8, 16});
  const auto body = [a = a.ptr(),
                     b = b.ptr()](const at::Tensor& in) {  // by value: runs again in backward
    return b->forward(torch::relu(a->forward(in)));
  };
  using trainkit::detail::AutocastScope;
  // forward in bf16 autocast, backward outside it
  const auto bf16 = [&](bool segmented) {
    holder->zero_grad();
    at::Tensor y;
    {
      AutocastScope cpu(c10::DeviceType::CPU, at::kBFloat16);
      y = segmented ? memory::checkpoint(body, x) : body(x);
    }
    y.to(at::kFloat).pow(2).sum().backward();
    return grads_of(*holder);
  };
  check_close(bf16(false), bf16(true));
  // forward in fp32, backward inside a bf16 region: recomputed in fp32
  const auto fp32 = [&](bool segmented) {
    holder->zero_grad();
    const auto y = segmented ? memory::checkpoint(body, x) : body(x);
    AutocastScope cpu(c10::DeviceType::CPU, at::kBFloat16);
    y.pow(2).sum().backward();
    return grads_of(*holder);
  };
  check_close(fp32(false), fp32(true));
}

TEST_CASE("CpuMeter: a limit fails allocations past it as a full device does") {
  memory::CpuMeter meter;
  const auto kept = torch::empty({1000}, at::kFloat);  // 4000 bytes held
  meter.set_limit(meter.bytes() + 8000);
  const auto fits = torch::empty({2000}, at::kFloat);  // exactly up to the limit
  CHECK(meter.bytes() >= 12000);
  const auto held = meter.bytes();
  CHECK_THROWS_WITH_AS(torch::empty({1}, at::kFloat), doctest::Contains("meter's limit"),
                       c10::OutOfMemoryError);
  CHECK(meter.bytes() == held);  // nothing counted for the failed allocation
  meter.set_limit(-1);
  CHECK(torch::empty({4000}, at::kFloat).numel() == 4000);
}
