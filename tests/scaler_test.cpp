// GradScaler: the scale trajectory over a planted pattern of inf/NaN steps
// follows PyTorch's update rule (tests/reference/scaler.json), unscaling is
// exact for powers of two, and a step with inf gradients changes nothing.
#include <trainkit/optim.hpp>
#include <trainkit/precision.hpp>

#include "scaler_trajectory.hpp"
#include "support.hpp"

using namespace trainkit;

TEST_CASE("GradScaler's scale trajectory matches PyTorch's algorithm") {
  tk_test::check_scaler_trajectory(torch::kCPU);
}

TEST_CASE("GradScaler never grows the scale past float32's range") {
  const auto ref = tk_test::load_reference("scaler.json");
  precision::GradScaler scaler({.init_scale = std::ldexp(1.0, 126), .growth_interval = 1});
  auto w = torch::zeros({2}).requires_grad_(true);
  FlatParams flat(std::vector<at::Tensor>{w});
  for (const auto& expected : ref["overflow_cap"]) {
    scaler.unscale(flat);
    scaler.update();
    CHECK(scaler.scale_value() == expected.get<double>());
  }
}

TEST_CASE("Fp16 skips the optimizer step on inf gradients and leaves parameters untouched") {
  auto w = torch::randn({16}).requires_grad_(true);
  FlatParams flat(std::vector<at::Tensor>{w});
  optim::AdamW adamw(flat, {.lr = 0.1});
  precision::Fp16 fp16({.autocast = false});
  const auto before = w.detach().clone();
  fp16.backward((w * w).sum() * INFINITY);
  fp16.unscale(flat);
  fp16.step([&] { adamw.step(); });
  fp16.update();
  CHECK(torch::equal(w.detach(), before));
  CHECK(adamw.steps_taken() == 0);
  CHECK(fp16.scaler().scale_value() == 32768.0);
  // a finite step afterwards does move them
  flat.zero_grad();
  fp16.backward((w * w).sum());
  fp16.unscale(flat);
  CHECK(w.grad().allclose(2 * before));
  fp16.step([&] { adamw.step(); });
  fp16.update();
  CHECK(!torch::equal(w.detach(), before));
}
