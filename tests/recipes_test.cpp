// Training recipes: weight initialisation against torch.nn.init (the same
// draws from the same seed, and the statistics the schemes promise) and
// label smoothing against F.cross_entropy (tests/reference/recipes.json,
// made by make_recipes_reference.py).
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <trainkit/init.hpp>
#include <trainkit/task.hpp>

#include "support.hpp"

using namespace trainkit;

namespace {

at::Tensor from_values(const nlohmann::json& values, const nlohmann::json& shape) {
  return torch::tensor(values.get<std::vector<double>>(), at::kDouble)
      .reshape(shape.get<std::vector<int64_t>>())
      .to(at::kFloat);
}

init::Scheme scheme_of(const std::string& name) {
  using init::FanMode, init::Nonlinearity;
  if (name == "kaiming_normal_fan_out_relu") return init::Kaiming{.mode = FanMode::kFanOut};
  if (name == "kaiming_uniform_fan_in_leaky") {
    return init::Kaiming{
        .nonlinearity = Nonlinearity::kLeakyRelu, .negative_slope = 0.1, .uniform = true};
  }
  if (name == "xavier_uniform_tanh") return init::Xavier{.gain = init::gain(Nonlinearity::kTanh)};
  if (name == "xavier_normal") return init::Xavier{.uniform = false};
  if (name == "orthogonal_wide") return init::Orthogonal{.gain = 2.0};
  if (name == "orthogonal_tall") return init::Orthogonal{};
  REQUIRE(name == "trunc_normal");
  return init::TruncatedNormal{.mean = 0.5, .std = 0.3, .low = 0.0, .high = 1.0};
}

struct Net : torch::nn::Module {
  torch::nn::Conv2d conv{register_module("conv", torch::nn::Conv2d(3, 8, 3))};
  torch::nn::BatchNorm2d bn1{register_module("bn1", torch::nn::BatchNorm2d(8))};
  torch::nn::BatchNorm2d bn2{register_module("bn2", torch::nn::BatchNorm2d(8))};
  torch::nn::Linear fc{register_module("fc", torch::nn::Linear(200, 10))};
};

}  // namespace

TEST_CASE("init: each scheme draws what torch.nn.init draws from the same seed") {
  const auto ref = tk_test::load_reference("recipes.json").at("init");
  for (const auto& c : ref.at("cases")) {
    const auto name = c.at("name").get<std::string>();
    CAPTURE(name);
    const auto expected = from_values(c.at("values"), c.at("shape"));
    torch::manual_seed(c.at("seed").get<uint64_t>());
    auto w = torch::empty(expected.sizes());
    init::fill(w, scheme_of(name));
    // Orthogonal goes through a QR factorisation: LAPACK's rounding, not the draws.
    const double tol = name.rfind("orthogonal", 0) == 0 ? 1e-5 : 1e-7;
    CHECK(torch::allclose(w, expected, 0, tol));
  }
  const auto& gains = ref.at("gains");
  using N = init::Nonlinearity;
  CHECK(init::gain(N::kLinear) == doctest::Approx(gains.at("linear").get<double>()));
  CHECK(init::gain(N::kRelu) == doctest::Approx(gains.at("relu").get<double>()));
  CHECK(init::gain(N::kTanh) == doctest::Approx(gains.at("tanh").get<double>()));
  CHECK(init::gain(N::kSigmoid) == doctest::Approx(gains.at("sigmoid").get<double>()));
  CHECK(init::gain(N::kSelu) == doctest::Approx(gains.at("selu").get<double>()));
  CHECK(init::gain(N::kLeakyRelu, 0.2) ==
        doctest::Approx(gains.at("leaky_relu_0.2").get<double>()));
}

TEST_CASE("init: large tensors have the mean and variance each scheme promises") {
  torch::manual_seed(0);
  const int64_t out = 256, in = 1024;  // a weight [out, in]: fan_in = in, fan_out = out
  const auto stats = [](const at::Tensor& w) {
    return std::pair{w.mean().item<double>(), w.std().item<double>()};
  };
  auto w = torch::empty({out, in});
  init::fill(w, init::Kaiming{});  // fan_in, relu: std = sqrt(2 / in)
  auto [mean, std] = stats(w);
  CHECK(std::abs(mean) < 3e-3);
  CHECK(std == doctest::Approx(std::sqrt(2.0 / in)).epsilon(0.01));
  init::fill(w, init::Kaiming{.mode = init::FanMode::kFanOut, .uniform = true});
  std::tie(mean, std) = stats(w);
  CHECK(std == doctest::Approx(std::sqrt(2.0 / out)).epsilon(0.01));
  CHECK(w.abs().max().item<double>() <= std::sqrt(6.0 / out) + 1e-6);  // U(-b, b), b = sqrt(3) std
  init::fill(w, init::Xavier{.gain = 2.0, .uniform = false});
  std::tie(mean, std) = stats(w);
  CHECK(std == doctest::Approx(2.0 * std::sqrt(2.0 / (in + out))).epsilon(0.01));

  init::fill(w, init::Orthogonal{.gain = 3.0});  // rows orthogonal, each of norm 3
  CHECK(torch::allclose(w.mm(w.t()), 9.0 * torch::eye(out), 0, 1e-3));

  // N(0.5, 0.3^2) truncated to [0, 1]: symmetric about its mean, so the mean
  // is 0.5, and its variance is 0.09 * (1 - 2 a phi(a) / (2 Phi(a) - 1)), a = 1/0.6.
  init::fill(w, init::TruncatedNormal{.mean = 0.5, .std = 0.3, .low = 0.0, .high = 1.0});
  std::tie(mean, std) = stats(w);
  const double a = 0.5 / 0.3, phi = std::exp(-a * a / 2) / std::sqrt(2 * M_PI);
  const double big_phi = 0.5 * (1 + std::erf(a / std::sqrt(2.0)));
  const double variance = 0.09 * (1 - 2 * a * phi / (2 * big_phi - 1));
  CHECK(mean == doctest::Approx(0.5).epsilon(0.005));
  CHECK(std == doctest::Approx(std::sqrt(variance)).epsilon(0.01));
  CHECK(w.min().item<double>() >= 0.0);
  CHECK(w.max().item<double>() <= 1.0);
}

TEST_CASE("init: a whole model by module type, the last norm of a block, the bias prior") {
  torch::manual_seed(1);
  Net net;
  const auto linear_before = net.fc->weight.clone();
  net.bn1->weight.data().fill_(0.3);
  const auto counts = init::model(net);
  CHECK(counts.conv == 1);
  CHECK(counts.norm == 2);
  CHECK(counts.linear == 0);
  // torchvision ResNet's defaults: conv fan_out relu (fan_out = 8 * 3 * 3), bias 0
  CHECK(net.conv->weight.std().item<double>() ==
        doctest::Approx(std::sqrt(2.0 / 72)).epsilon(0.15));
  CHECK(net.conv->bias.abs().max().item<double>() == 0.0);
  CHECK(net.bn1->weight.eq(1).all().item<bool>());
  CHECK(net.fc->weight.equal(linear_before));  // no scheme for Linear: LibTorch's own kept

  torch::nn::Embedding words(torch::nn::EmbeddingOptions(10, 4).padding_idx(0));
  CHECK(init::model(*words, {.embedding = init::TruncatedNormal{.std = 1}}).embedding == 1);
  CHECK(words->weight[0].abs().sum().item<double>() == 0.0);  // the padding row stays zero
  CHECK(words->weight[1].abs().sum().item<double>() > 0.0);

  init::model(net, {.linear = init::TruncatedNormal{}, .norm_identity = false});
  CHECK(net.fc->weight.abs().max().item<double>() <= 2.0);
  CHECK(net.fc->bias.abs().max().item<double>() == 0.0);

  CHECK(init::zero_last_norm(net) == "bn2");
  CHECK(net.bn2->weight.eq(0).all().item<bool>());
  CHECK(net.bn1->weight.eq(1).all().item<bool>());
  torch::nn::Sequential plain(torch::nn::Linear(2, 2));
  CHECK_THROWS_WITH_AS(init::zero_last_norm(*plain), doctest::Contains("has no norm layer"), Error);

  init::set_bias_prior(*net.fc, 0.01);  // RetinaNet's prior: sigmoid(b) = 0.01
  CHECK(torch::sigmoid(net.fc->bias.to(at::kDouble)).sub(0.01).abs().max().item<double>() < 1e-8);
  CHECK(init::bias_prior(0.5) == 0.0);
  CHECK_THROWS_WITH_AS(init::bias_prior(1.0),
                       "trainkit: option `init.bias_prior` = 1 is invalid; accepted: a "
                       "probability in (0, 1)",
                       Error);
  torch::nn::Linear no_bias(torch::nn::LinearOptions(2, 2).bias(false));
  CHECK_THROWS_WITH_AS(init::set_bias_prior(*no_bias, 0.1), doctest::Contains("has no bias"),
                       Error);
  auto vector = torch::empty({5});
  CHECK_THROWS_WITH_AS(init::fill(vector, init::Kaiming{}),
                       doctest::Contains("a weight of at least 2 dimensions"), Error);
  CHECK_THROWS_WITH_AS(init::fill(vector, init::TruncatedNormal{.low = 1, .high = 0}),
                       doctest::Contains("init.TruncatedNormal.low"), Error);
}

TEST_CASE("task::Classification's label_smoothing is F.cross_entropy's, loss and gradient") {
  const auto ref = tk_test::load_reference("recipes.json").at("label_smoothing");
  const auto logits = from_values(ref.at("logits"), ref.at("shape"));
  const auto target = torch::tensor(ref.at("target").get<std::vector<int64_t>>());
  for (const auto& c : ref.at("cases")) {
    const double s = c.at("label_smoothing").get<double>();
    CAPTURE(s);
    auto x = logits.clone().requires_grad_(true);
    ModelRef model{torch::nn::Identity{}};
    const auto out = task::Classification{.label_smoothing = s}.step(model, {x, target});
    CHECK(out.loss.item<double>() == doctest::Approx(c.at("loss").get<double>()).epsilon(1e-6));
    out.loss.backward();
    CHECK(torch::allclose(x.grad(), from_values(c.at("grad"), ref.at("shape")), 1e-5, 1e-7));
  }
  ModelRef model{torch::nn::Identity{}};
  CHECK_THROWS_WITH_AS(
      task::Classification{.label_smoothing = 1.5}.step(model, {logits, target}),
      "trainkit: option `task.label_smoothing` = 1.5 is invalid; accepted: a number in [0, 1]",
      Error);
}

TEST_CASE("init::set_dropout takes the stochastic layers out of a model") {
  torch::nn::Sequential net(torch::nn::Linear(8, 8), torch::nn::Dropout(0.5), torch::nn::ReLU(),
                            torch::nn::Dropout(0.3), torch::nn::AlphaDropout(0.2));
  const auto x = torch::randn({4, 8});
  CHECK(init::set_dropout(*net, 0.0) == 3);
  net->train();
  const auto a = net->forward(x), b = net->forward(x);
  CHECK(torch::equal(a, b));  // no draws left: training mode is deterministic
  net->eval();
  CHECK(torch::equal(a, net->forward(x)));
  CHECK_THROWS_WITH_AS(init::set_dropout(*net, 1.5), doctest::Contains("init.set_dropout"), Error);
}
