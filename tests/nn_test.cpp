// Batch norm fused with ReLU (and the residual add), on CPUs: the composite
// formulas that the CUDA kernels implement, against autograd of the unfused
// modules (BatchNorm2d, add, ReLU) in double precision and against finite
// differences; the running statistics, eval mode, the cumulative average,
// state dicts, Sequential, channels-last and the errors.
#include <trainkit/init.hpp>
#include <trainkit/layers/batch_norm_act.hpp>

#include <functional>
#include <sstream>
#include <vector>

#include "../examples/resnet.hpp"
#include "batch_norm_cases.hpp"
#include "support.hpp"

using namespace trainkit;
namespace tnn = torch::nn;

namespace {

const auto f64 = torch::TensorOptions().dtype(torch::kDouble);

void check_steps_equal(const tk_test::BnStep& a, const tk_test::BnStep& b, double tol) {
  const auto x = a.all(), y = b.all();
  for (size_t i = 0; i < x.size(); ++i) {
    CAPTURE(i);
    REQUIRE(x[i].defined() == y[i].defined());
    if (x[i].defined()) CHECK(tk_test::max_rel_error(x[i], y[i]) < tol);
  }
  CHECK(torch::equal(a.batches, b.batches));
}

/// Central differences of sum(f() * v) with respect to each entry of t.
at::Tensor numeric_grad(const std::function<at::Tensor()>& f, at::Tensor t, const at::Tensor& v) {
  torch::NoGradGuard no_grad;
  auto flat = t.view({-1});
  auto grad = torch::zeros_like(flat);
  const double h = 1e-6;
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double keep = flat[i].item<double>();
    flat[i] = keep + h;
    const double up = (f() * v).sum().item<double>();
    flat[i] = keep - h;
    const double down = (f() * v).sum().item<double>();
    flat[i] = keep;
    grad[i] = (up - down) / (2 * h);
  }
  return grad.view_as(t);
}

}  // namespace

TEST_CASE(
    "BatchNormReLU2d equals BatchNorm2d + add + ReLU in double: outputs, gradients, stats, "
    "forked") {
  for (const bool with_residual : {false, true}) {
    CAPTURE(with_residual);
    auto bn = tk_test::seeded_bn(5, torch::kCPU);
    bn->to(torch::kDouble);
    auto fused = tk_test::fused_copy(bn);
    const auto x = torch::randn({6, 5, 4, 3}, f64) * 2 + 0.5;
    const auto residual = with_residual ? torch::randn({6, 5, 4, 3}, f64) : at::Tensor();
    const auto dy = torch::randn({6, 5, 4, 3}, f64), dy2 = torch::randn({6, 5, 4, 3}, f64);
    // three steps: the running statistics compound as BatchNorm2d's do
    for (int i = 0; i < 3; ++i) {
      check_steps_equal(tk_test::fused_step(fused, x * (i + 1), residual, dy),
                        tk_test::unfused_step(bn, x * (i + 1), residual, dy), 1e-12);
    }
    // a fork: the backward adds its two uses' gradients as autograd would,
    // or takes the one use differentiated, either one
    check_steps_equal(tk_test::fused_fork_step(fused, x, residual, dy, dy2),
                      tk_test::unfused_step(bn, x, residual, dy + dy2), 1e-12);
    check_steps_equal(tk_test::fused_fork_step(fused, x, residual, {}, dy2),
                      tk_test::unfused_step(bn, x, residual, dy2), 1e-12);
    check_steps_equal(tk_test::fused_fork_step(fused, x, residual, dy, {}),
                      tk_test::unfused_step(bn, x, residual, dy), 1e-12);
    // eval mode: the running statistics normalise, and nothing moves
    bn->eval(), fused->eval();
    check_steps_equal(tk_test::fused_step(fused, x, residual, dy),
                      tk_test::unfused_step(bn, x, residual, dy), 1e-12);
  }
}

TEST_CASE("BatchNormReLU2d's fork: two tensors on one memory, neither changed in place") {
  trainkit::layers::BatchNormReLU2d fused(3);
  const auto x = torch::randn({4, 3, 2, 2}, torch::requires_grad());
  const auto [first, second] = fused->forward_fork(x);
  CHECK(first.data_ptr() == second.data_ptr());
  CHECK(torch::equal(first, fused(x.detach())));
  CHECK_THROWS_WITH_AS(first.mul_(2), doctest::Contains("modified inplace"), c10::Error);
  CHECK_THROWS_WITH_AS(second.mul_(2), doctest::Contains("modified inplace"), c10::Error);
}

TEST_CASE("the example ResNet-10 with fused, forked blocks equals the unfused one (double)") {
  torch::manual_seed(8);
  examples::ResNet10<false> plain;
  examples::ResNet10<true> fused;
  plain->to(torch::kDouble), fused->to(torch::kDouble);
  // the same weights: the state-dict names are the same
  REQUIRE(plain->named_parameters().size() == fused->named_parameters().size());
  tk_test::copy_state(*plain, *fused);
  const auto x = torch::randn({4, 3, 16, 16}, f64);
  const auto y = torch::randn({4, 10}, f64);
  const auto loss = [&](torch::nn::Module& m, const at::Tensor& out) {
    m.zero_grad();
    const auto l = (out * y).sum();
    l.backward();
    return l.item<double>();
  };
  CHECK(loss(*fused, fused(x)) == doctest::Approx(loss(*plain, plain(x))).epsilon(1e-12));
  const auto want = plain->named_parameters(), got = fused->named_parameters();
  for (const auto& p : want) {
    CAPTURE(p.key());
    CHECK(tk_test::max_rel_error(got[p.key()].grad(), p.value().grad()) < 1e-10);
  }
}

TEST_CASE("batch_norm_relu's gradients match finite differences (double)") {
  torch::manual_seed(3);
  auto x = torch::randn({3, 2, 2, 2}, f64), r = torch::randn({3, 2, 2, 2}, f64);
  auto w = torch::rand({2}, f64) + 0.5, b = torch::randn({2}, f64);
  const auto v = torch::randn({3, 2, 2, 2}, f64);
  for (const bool training : {true, false}) {
    CAPTURE(training);
    auto rm = torch::randn({2}, f64), rv = torch::rand({2}, f64) + 0.5;
    // momentum 0: the running statistics stay put between evaluations
    const auto f = [&] {
      return trainkit::layers::functional::batch_norm_relu(x, rm, rv, w, b, training, 0.0, 1e-5, r);
    };
    // the fork's two uses, weighted apart: its backward adds their gradients
    const auto forked = [&] {
      const auto [first, second] = trainkit::layers::functional::batch_norm_relu_fork(
          x, rm, rv, w, b, training, 0.0, 1e-5, r);
      return first + 2 * second;
    };
    std::vector<at::Tensor> inputs{x, r, w, b};
    for (const auto& g : {std::function<at::Tensor()>(f), std::function<at::Tensor()>(forked)}) {
      for (auto& t : inputs) t.requires_grad_(true);
      (g() * v).sum().backward();
      for (auto& t : inputs) {
        const auto analytic = t.grad().clone();
        t.mutable_grad().reset();
        t.requires_grad_(false);
        CHECK(tk_test::max_rel_error(analytic, numeric_grad(g, t, v)) < 1e-6);
      }
    }
  }
}

TEST_CASE(
    "BatchNormReLU2d in eval mode on an empty batch: zero parameter gradients, as BatchNorm2d") {
  auto bn = tk_test::seeded_bn(4, torch::kCPU);
  bn->eval();
  auto fused = tk_test::fused_copy(bn);
  fused->eval();
  const auto x = torch::randn({0, 4, 3, 3});
  const auto got = tk_test::fused_step(fused, x, {}, torch::zeros_like(x));
  const auto want = tk_test::unfused_step(bn, x, {}, torch::zeros_like(x));
  CHECK(got.y.numel() == 0);
  CHECK(torch::equal(got.dw, torch::zeros({4})));
  CHECK(torch::equal(got.db, torch::zeros({4})));
  CHECK(torch::equal(got.dw, want.dw));
  CHECK(torch::equal(got.db, want.db));
}

TEST_CASE("BatchNormReLU2d: momentum none is the cumulative average, as BatchNorm2d's") {
  auto bn = tk_test::seeded_bn(3, torch::kCPU);
  bn->options.momentum({});
  bn->to(torch::kDouble);
  auto fused = tk_test::fused_copy(bn);
  for (int i = 0; i < 3; ++i) {
    const auto x = torch::randn({4, 3, 2, 2}, f64) + i;
    const auto dy = torch::randn({4, 3, 2, 2}, f64);
    check_steps_equal(tk_test::fused_step(fused, x, {}, dy), tk_test::unfused_step(bn, x, {}, dy),
                      1e-12);
  }
}

TEST_CASE("BatchNormReLU2d has BatchNorm2d's state-dict names, and sits in a Sequential") {
  auto bn = tk_test::seeded_bn(4, torch::kCPU);
  auto fused = tk_test::fused_copy(bn);
  CHECK(fused->named_parameters().keys() == bn->named_parameters().keys());
  CHECK(fused->named_buffers().keys() == bn->named_buffers().keys());
  // a Sequential's call passes no residual (the default argument)
  tnn::Sequential seq(tnn::Conv2d(tnn::Conv2dOptions(2, 4, 3).padding(1)), fused);
  tnn::Sequential ref(tnn::Conv2d(tnn::Conv2dOptions(2, 4, 3).padding(1)), bn, tnn::ReLU());
  {
    torch::NoGradGuard no_grad;
    seq[0]->as<tnn::Conv2d>()->weight.copy_(ref[0]->as<tnn::Conv2d>()->weight);
    seq[0]->as<tnn::Conv2d>()->bias.copy_(ref[0]->as<tnn::Conv2d>()->bias);
  }
  const auto x = torch::randn({3, 2, 5, 5});
  CHECK(tk_test::max_rel_error(seq->forward(x), ref->forward(x)) < 1e-6);
  std::ostringstream printed;
  printed << *fused;
  CHECK(printed.str() == "trainkit::layers::BatchNormReLU2d(4, eps=1e-05)");
}

TEST_CASE("BatchNormReLU2d on channels-last float and bfloat16 CPU tensors") {
  auto bn = tk_test::seeded_bn(6, torch::kCPU);
  auto fused = tk_test::fused_copy(bn);
  const auto x = torch::randn({4, 6, 3, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  const auto r = torch::randn({4, 6, 3, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  const auto dy = torch::randn({4, 6, 3, 5});
  check_steps_equal(tk_test::fused_step(fused, x, r, dy), tk_test::unfused_step(bn, x, r, dy),
                    1e-5);
  // bf16 activations with fp32 parameters (autocast's mix): the fp32 math, rounded once
  auto bn16 = tk_test::seeded_bn(6, torch::kCPU);
  auto fused16 = tk_test::fused_copy(bn16);
  const auto x16 = x.to(torch::kBFloat16), r16 = r.to(torch::kBFloat16);
  const auto y = fused16(x16, r16);
  CHECK((y.scalar_type() == torch::kBFloat16));
  CHECK(tk_test::max_rel_error(
            y, torch::relu(bn16(x16.to(torch::kFloat)) + r16.to(torch::kFloat))) < 1e-2);
}

TEST_CASE("batch_norm_relu refuses what it cannot normalise, naming it") {
  trainkit::layers::BatchNormReLU2d m(3);
  CHECK_THROWS_WITH_AS(m(torch::randn({2, 3})),
                       "trainkit: BatchNormReLU2d: expected a 4-D input (N, C, H, W), got 2 "
                       "dimensions",
                       Error);
  CHECK_THROWS_WITH_AS(m(torch::randn({2, 3, 4, 4}), torch::randn({2, 3, 4, 5})),
                       "trainkit: batch_norm_relu: residual's shape [2, 3, 4, 5] differs from "
                       "the input's [2, 3, 4, 4]; accepted: a residual of the input's shape",
                       Error);
  CHECK_THROWS_WITH_AS(m(torch::randn({1, 3, 1, 1})),
                       "trainkit: batch_norm_relu: one value per channel in training mode "
                       "(input [1, 3, 1, 1]); accepted: more than one",
                       Error);
  CHECK_THROWS_WITH_AS(trainkit::layers::functional::batch_norm_relu(torch::randn({2, 3}), {}, {},
                                                                     {}, {}, false, 0.1, 1e-5),
                       "trainkit: batch_norm_relu: training is false and the running statistics "
                       "are missing; accepted: running_mean and running_var, or training = true",
                       Error);
  // a module of the wrong width (BatchNorm2d refuses it too)
  trainkit::layers::BatchNormReLU2d four(4);
  CHECK_THROWS_WITH_AS(four(torch::randn({2, 3, 4, 4})),
                       "trainkit: batch_norm_relu: weight of shape [4] on cpu; accepted: 3 values "
                       "(the input's channels) on cpu",
                       Error);
  CHECK_THROWS_WITH_AS(trainkit::layers::functional::batch_norm_relu(torch::randn({2, 0, 3}), {},
                                                                     {}, {}, {}, true, 0.1, 1e-5),
                       "trainkit: batch_norm_relu: input of shape [2, 0, 3]; accepted: (N, C, ...) "
                       "with C > 0",
                       Error);
  // second derivatives would hold the statistics constant: refused, not wrong
  const auto x = torch::randn({4, 3, 2, 2}, torch::requires_grad());
  const auto y = m(x).pow(2).sum();
  CHECK_THROWS_WITH_AS(torch::autograd::grad({y}, {x}, {}, /*retain_graph=*/true,
                                             /*create_graph=*/true),
                       doctest::Contains("batch_norm_relu has no double backward"), Error);
}

TEST_CASE("batch_norm_relu with only a weight, only a bias, or neither: the gradients each has") {
  namespace F = torch::nn::functional;
  torch::manual_seed(8);
  const auto x0 = torch::randn({5, 3, 2, 2}, f64), dy = torch::randn({5, 3, 2, 2}, f64);
  for (const int which : {0, 1, 2}) {  // weight only, bias only, neither
    CAPTURE(which);
    auto w = which == 0 ? (torch::rand({3}, f64) + 0.5).requires_grad_(true) : at::Tensor();
    auto b = which == 1 ? torch::randn({3}, f64).requires_grad_(true) : at::Tensor();
    auto x = x0.clone().requires_grad_(true), xr = x0.clone().requires_grad_(true);
    trainkit::layers::functional::batch_norm_relu(x, {}, {}, w, b, true, 0.1, 1e-5).backward(dy);
    at::Tensor wr = w.defined() ? w.detach().clone().requires_grad_(true) : w;
    at::Tensor br = b.defined() ? b.detach().clone().requires_grad_(true) : b;
    torch::relu(
        F::batch_norm(xr, {}, {}, F::BatchNormFuncOptions().weight(wr).bias(br).training(true)))
        .backward(dy);
    CHECK(tk_test::max_rel_error(x.grad(), xr.grad()) < 1e-12);
    if (w.defined()) CHECK(tk_test::max_rel_error(w.grad(), wr.grad()) < 1e-12);
    if (b.defined()) CHECK(tk_test::max_rel_error(b.grad(), br.grad()) < 1e-12);
  }
}

TEST_CASE("BatchNormReLU2d without affine parameters or running statistics, as BatchNorm2d") {
  for (const bool affine : {false, true}) {
    for (const bool track : {false, true}) {
      CAPTURE(affine);
      CAPTURE(track);
      const auto options = torch::nn::BatchNormOptions(3).affine(affine).track_running_stats(track);
      torch::nn::BatchNorm2d bn(options);
      trainkit::layers::BatchNormReLU2d fused(options);
      bn->to(torch::kDouble), fused->to(torch::kDouble);
      for (const bool train : {true, false}) {
        bn->train(train), fused->train(train);
        const auto x0 = torch::randn({4, 3, 3, 2}, f64) + 1, dy = torch::randn({4, 3, 3, 2}, f64);
        auto xa = x0.clone().requires_grad_(true), xb = x0.clone().requires_grad_(true);
        const auto ya = fused(xa), yb = torch::relu(bn(xb));
        ya.backward(dy), yb.backward(dy);
        CHECK(tk_test::max_rel_error(ya, yb) < 1e-12);
        CHECK(tk_test::max_rel_error(xa.grad(), xb.grad()) < 1e-12);
        if (track) CHECK(torch::allclose(fused->running_var, bn->running_var, 1e-12, 1e-14));
      }
    }
  }
}

TEST_CASE("init sees BatchNormReLU2d as a norm layer: zero_last_norm zeroes its weight") {
  torch::nn::Sequential block(torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 4, 3)),
                              trainkit::layers::BatchNormReLU2d(4));
  init::zero_last_norm(*block);
  CHECK(block[1]->named_parameters()["weight"].abs().sum().item<double>() == 0.0);
  CHECK(init::model(*block).norm == 1);
}
