// The device options and the captured step (capture::CudaGraph) on CPUs: the
// emulated replay runs the recorded step body from its static buffers, with
// the device-side learning rate, step count and inf skip a CUDA graph uses,
// so its data flow is checked here; tests/cuda_test.cpp captures real graphs.
#include <trainkit/optim/wrap.hpp>
#include <trainkit/parallel/ddp.hpp>

#include "graph_cases.hpp"

using namespace trainkit;
using tk_test::ConfigProbe;
using tk_test::EagerTrainer;
using tk_test::graph_batches;
using tk_test::GraphTrainer;
using tk_test::HostReader;
using tk_test::setting_options;

namespace {

/// Restores the process-wide settings DeviceOptions change.
struct GlobalSettings {
  bool tf32_matmul = at::globalContext().allowTF32CuBLAS();
  bool tf32_cudnn = at::globalContext().allowTF32CuDNN();
  bool benchmark = at::globalContext().benchmarkCuDNN();
  ~GlobalSettings() {
    at::globalContext().setAllowTF32CuBLAS(tf32_matmul);
    at::globalContext().setAllowTF32CuDNN(tf32_cudnn);
    at::globalContext().setBenchmarkCuDNN(benchmark);
  }
};

struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(8 * 6 * 6, 4));
  }
  at::Tensor forward(at::Tensor x) { return fc(torch::relu(conv(x)).flatten(1)); }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ConvNet);

}  // namespace

TEST_CASE("device options: applied process-wide and reported in the configuration") {
  GlobalSettings restore;
  std::map<std::string, std::string> config;
  Trainer<> t(tk_test::seeded_mlp(), {.device = {.tf32 = true, .cudnn_benchmark = false}});
  t.fit(task::Classification{}, graph_batches(2), {}, ConfigProbe{&config});
  CHECK(at::globalContext().allowTF32CuBLAS());
  CHECK(at::globalContext().allowTF32CuDNN());
  CHECK_FALSE(at::globalContext().benchmarkCuDNN());
  CHECK(config.at("tf32_matmul") == "on");
  CHECK(config.at("tf32_cudnn") == "on");
  CHECK(config.at("cudnn_benchmark") == "off");
  CHECK(config.at("channels_last") == "off");
  // Defaults: TF32 as it was, cuDNN's autotuner on unless determinism was asked for.
  Trainer<> u(tk_test::seeded_mlp(), {.device = {.tf32 = false}});
  CHECK(at::globalContext().benchmarkCuDNN());
  CHECK_FALSE(at::globalContext().allowTF32CuBLAS());
  Trainer<> v(tk_test::seeded_mlp());
  CHECK_FALSE(at::globalContext().allowTF32CuBLAS());
  set_deterministic(true);
  Trainer<> w(tk_test::seeded_mlp());
  CHECK_FALSE(at::globalContext().benchmarkCuDNN());
  set_deterministic(false);
  at::globalContext().setDeterministicAlgorithms(false, false);
}

TEST_CASE("channels_last: NHWC views of the flat buffer train like the contiguous model") {
  torch::manual_seed(11);
  ConvNet a, b;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < a->parameters().size(); ++i)
      b->parameters()[i].copy_(a->parameters()[i]);
  }
  auto gen = data::generator(5);
  std::vector<data::Batch> data;
  for (int i = 0; i < 6; ++i)
    data.push_back({at::randn({4, 3, 6, 6}, gen), at::randint(0, 4, {4}, gen)});
  Trainer<> plain(a, {.optim = {.lr = 1e-2}});
  Trainer<> nhwc(b, {.optim = {.lr = 1e-2}, .device = {.channels_last = true}});
  const auto& w = b->conv->weight;
  CHECK(w.is_contiguous(at::MemoryFormat::ChannelsLast));
  CHECK_FALSE(w.is_contiguous());
  CHECK(w.grad().is_contiguous(at::MemoryFormat::ChannelsLast));
  // Still a view of the one flat buffer: the optimizer steps it there.
  const auto& flat = nhwc.flat_params().groups()[0].data;
  const auto* begin = flat.data_ptr<float>();
  CHECK(w.data_ptr<float>() >= begin);
  CHECK(w.data_ptr<float>() + w.numel() <= begin + flat.numel());
  plain.fit(task::Classification{}, data, {.epochs = 2});
  nhwc.fit(task::Classification{}, data, {.epochs = 2});
  CHECK(w.is_contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(tk_test::max_param_rel_error(*a, *b) < 1e-5);
}

TEST_CASE("cuda_graph: the recorded step equals the eager step over 20 steps") {
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) {
    // The optimizer cannot step without host reads: steps stay eager, and say why.
    GraphTrainer t(tk_test::seeded_mlp(), setting_options());
    t.fit(task::Classification{}, graph_batches(4));
    CHECK(t.graph_fallback_reason().find("optim.fused = true") != std::string::npos);
    CHECK_FALSE(t.graph_recorded());
    return;
  }
  tk_test::check_graph_equals_eager(torch::kCPU);
}

TEST_CASE("cuda_graph: a recorded fp16 step that meets inf skips the update like eager") {
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) return;  // the case above checks the fallback
  tk_test::check_graph_inf_skip(torch::kCPU);
}

TEST_CASE("cuda_graph: a recorded run resumes from a checkpoint like an unbroken one") {
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) return;
  tk_test::check_graph_resume(torch::kCPU);
}

TEST_CASE("cuda_graph: what cannot be captured stays eager and says why") {
  SUBCASE("a callback that reads the host before the step") {
    tk_test::check_host_reader_fallback(torch::kCPU);
  }
  SUBCASE("a CPU device without emulation") {
    auto o = setting_options();
    o.capture.emulate = false;
    GraphTrainer t(tk_test::seeded_mlp(), o);
    t.fit(task::Classification{}, graph_batches(8));
    CHECK(t.graph_fallback_reason() == "the device is cpu, not CUDA");
  }
  SUBCASE("a schedule that cycles momentum") {
    auto o = setting_options();
    o.sched.cycle_momentum = true;
    GraphTrainer t(tk_test::seeded_mlp(), o);
    t.fit(task::Classification{}, graph_batches(8));
    CHECK(t.graph_fallback_reason().find("cycle_momentum = false") != std::string::npos);
  }
  SUBCASE("what the types tell, at compile time") {
    static_assert(GraphTrainer::capturable_with<ConfigProbe>());
    static_assert(!GraphTrainer::capturable_with<ConfigProbe, HostReader>());
    static_assert(!Trainer<optim::Wrap<torch::optim::SGD>>::capturable_with<>());
    static_assert(!Trainer<>::capturable_with<>());  // parallel::Single never captures
    static_assert(!TrainerWith<parallel::DDP>::capturable_with<>());
  }
  SUBCASE("a bad warm-up count") {
    CHECK_THROWS_WITH_AS(capture::CudaGraph({.warmup_steps = 0}),
                         doctest::Contains("capture.warmup_steps"), Error);
  }
}

TEST_CASE("capture::CudaGraph warms up per window shape, and waits for SGD's momentum buffers") {
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) return;
  SUBCASE("shapes") {
    auto data = graph_batches(4);  // 2 windows of 16 samples, then 8 windows of 8
    auto more = graph_batches(16, 5);
    for (auto& b : more) data.push_back({b.input.narrow(0, 0, 8), b.target.narrow(0, 0, 8)});
    EagerTrainer eager(tk_test::seeded_mlp(), setting_options<EagerTrainer>());
    GraphTrainer graph(tk_test::seeded_mlp(), setting_options());
    eager.fit(task::Classification{}, data);
    graph.fit(task::Classification{}, data);
    // 2 eager of the first shape, 3 warm-up and the probe of the second, then replays.
    CHECK(graph.graph_replays() == 4);
    CHECK(tk_test::max_param_rel_error(eager.model(), graph.model()) < 1e-5);
  }
  SUBCASE("SGD's first momentum step is not recorded") {
    using Eager = Trainer<optim::SGD, sched::Constant, precision::Fp16>;
    using Graph = TrainerWith<optim::SGD, precision::Fp16, capture::CudaGraph>;
    auto data = graph_batches(12);
    for (int i = 0; i < 5; ++i) data[i].input[0][0] = INFINITY;  // 5 skipped steps: no buffers
    const auto options = []<class T>(std::type_identity<T>) {
      typename T::Options o{.optim = {.lr = 0.05, .momentum = 0.9, .fused = true},
                            .precision = {.autocast = false}};
      if constexpr (std::is_same_v<T, Graph>) o.capture.emulate = true;
      return o;
    };
    Eager eager(tk_test::seeded_mlp(), options(std::type_identity<Eager>{}));
    Graph graph(tk_test::seeded_mlp(), options(std::type_identity<Graph>{}));
    eager.fit(task::Classification{}, data);
    graph.fit(task::Classification{}, data);
    CHECK(graph.graph_replays() == 5);  // step 6 made the buffers, 7 was the probe
    CHECK(tk_test::max_param_rel_error(eager.model(), graph.model()) < 1e-5);
  }
}

TEST_CASE("capture::CudaGraph refuses a momentum changed after the step was recorded") {
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) return;
  GraphTrainer t(tk_test::seeded_mlp(), setting_options());
  struct Meddler {
    GraphTrainer* trainer;
    void on_step_end(TrainState& s) {
      if (s.step == 6) trainer->optimizer().set_momentum(0.8);  // recorded at step 4
    }
  };
  CHECK_THROWS_WITH_AS(t.fit(task::Classification{}, graph_batches(20), {}, Meddler{&t}),
                       doctest::Contains("optim momentum"), Error);
}

TEST_CASE_TEMPLATE("cuda_graph: optimizers without fused kernels record a step equal to eager",
                   Optimizer, optim::Muon, optim::Lamb, optim::Lars, optim::ScheduleFreeAdamW) {
  tk_test::check_device_step_equals_eager<Optimizer>(torch::kCPU);
}

TEST_CASE_TEMPLATE("cuda_graph: optimizers without fused kernels resume a recorded run exactly",
                   Optimizer, optim::Muon, optim::Lamb, optim::Lars, optim::ScheduleFreeAdamW) {
  tk_test::check_device_step_resume<Optimizer>(torch::kCPU);
}

TEST_CASE("a step on the device's inf flag needs make_capturable first") {
  auto model = tk_test::seeded_mlp();
  FlatParams flat(model->parameters());
  optim::Lamb lamb(flat, {});
  CHECK_THROWS_WITH_AS(lamb.step_unless_inf(at::zeros({1})), doctest::Contains("make_capturable"),
                       Error);
}
