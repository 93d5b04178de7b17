// PyTorch's distributed checkpoint (DCP), both ways: a folder PyTorch 2.6's
// dcp.save wrote (tests/reference/make_dcp_reference.py) reads tensor for
// tensor and resumes a trainkit run that trains on as PyTorch's did; the
// `.metadata` trainkit writes lists what its own index does; hostile or
// foreign metadata is refused naming the file, nothing changed. Python's
// dcp.load of trainkit's multi-rank checkpoints: tests/reference/check_dcp_load.py
// (CTest sharding.dcp_python).
#include <trainkit/io.hpp>
#include <trainkit/trainkit.hpp>

#include <filesystem>
#include <fstream>

#include "step_record.hpp"
#include "support.hpp"

using namespace trainkit;

namespace {

const std::filesystem::path kPytorchCheckpoint =
    std::filesystem::path(TRAINKIT_REFERENCE_DIR) / "dcp" / "adamw";

/// make_dcp_reference.py's model: Linear(3, 4), Tanh, Linear(4, 2), named
/// as nn.Sequential names them.
struct DcpNetImpl : torch::nn::Module {
  DcpNetImpl() {
    first = register_module("0", torch::nn::Linear(3, 4));
    last = register_module("2", torch::nn::Linear(4, 2));
  }
  at::Tensor forward(const at::Tensor& x) { return last(torch::tanh(first(x))); }
  torch::nn::Linear first{nullptr}, last{nullptr};
};
TORCH_MODULE(DcpNet);

struct MseTask {
  StepOutput step(DcpNet& model, const data::Batch& b) {
    return {torch::mse_loss(model(b.input), b.target)};
  }
};

at::Tensor values_of(const nlohmann::json& v) {
  return tk_test::to_tensor(v.get<std::vector<double>>());
}

}  // namespace

TEST_CASE("PyTorch's DCP checkpoint: every tensor reads bit for bit as PyTorch saved it") {
  const auto ref = tk_test::load_reference("dcp.json");
  const auto ckpt = io::read_checkpoint(kPytorchCheckpoint);
  REQUIRE(ckpt.written_by_pytorch);
  REQUIRE(ckpt.sharded);
  CHECK(ckpt.parts.empty());
  std::set<std::string> names;
  for (const auto& [name, info] : ckpt.sharded->tensors()) names.insert(name);
  std::set<std::string> saved;
  for (const auto& [name, v] : ref["saved"].items()) saved.insert(name);
  CHECK(names == saved);
  for (const auto& [name, v] : ref["saved"].items()) {
    INFO(name);
    const auto t = ckpt.sharded->read_whole(name);
    CHECK((t.scalar_type() == at::kFloat));
    CHECK(torch::equal(t.to(at::kDouble).reshape({-1}), values_of(v)));
  }
  // the model through the weights reader too
  DcpNet net;
  io::load_weights(*net, kPytorchCheckpoint);
  CHECK(torch::equal(net->first->weight.reshape({-1}).to(at::kDouble),
                     values_of(ref["saved"]["model.0.weight"])));
}

TEST_CASE("a run resumed from PyTorch's DCP checkpoint trains on as PyTorch's run did") {
  const auto ref = tk_test::load_reference("dcp.json");
  const auto& o = ref["options"];
  at::set_num_threads(1);
  const auto x = values_of(ref["x"]).to(at::kFloat).view({8, 3});
  const auto y = values_of(ref["y"]).to(at::kFloat).view({8, 2});
  data::TensorBatches train({x, y}, {.batch_size = 8});
  Trainer<optim::AdamW> trainer(DcpNet(),
                                {.optim = {.lr = o["lr"].get<double>(),
                                           .beta1 = o["betas"][0].get<double>(),
                                           .beta2 = o["betas"][1].get<double>(),
                                           .eps = o["eps"].get<double>(),
                                           .weight_decay = o["weight_decay"].get<double>()}});
  std::vector<double> losses;
  FitOptions fit{.epochs = 10, .max_steps = 6};
  fit.resume_from = kPytorchCheckpoint;
  trainer.fit(MseTask{}, train, fit, tk_test::StepRecord{&losses});
  // PyTorch took 3 steps before saving: the run goes on at step 3 (AdamW's
  // bias correction with it) and stops at max_steps 6
  const auto want = ref["losses_after"].get<std::vector<double>>();
  REQUIRE(losses.size() == want.size());
  double worst_loss = 0, worst_param = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("step " << i + 4);
    CHECK(losses[i] == doctest::Approx(want[i]).epsilon(1e-6));
    worst_loss = std::max(worst_loss, std::abs(losses[i] - want[i]) / std::abs(want[i]));
  }
  for (const auto& [name, v] : ref["params_after"].items()) {
    INFO(name);
    const auto* p = trainer.model().named_parameters().find(name);
    REQUIRE(p != nullptr);
    const double error = tk_test::max_rel_error(*p, values_of(v).view_as(*p));
    CHECK(error < 1e-6);
    worst_param = std::max(worst_param, error);
  }
  std::printf(
      "resumed from PyTorch's DCP checkpoint: 3 steps, losses within %.2g, parameters %.2g\n",
      worst_loss, worst_param);
}

TEST_CASE("PyTorch's DCP checkpoint of another optimizer or model is refused, nothing changed") {
  data::TensorBatches train({torch::randn({8, 3}), torch::randn({8, 2})}, {.batch_size = 8});
  FitOptions fit{.epochs = 1};
  fit.resume_from = kPytorchCheckpoint;
  SUBCASE("SGD does not keep AdamW's moments") {
    Trainer<optim::SGD> trainer(DcpNet(), {.optim = {.lr = 0.1, .momentum = 0.9}});
    const auto before = tk_test::snapshot(trainer.model());
    const auto error = tk_test::error_of([&] { trainer.fit(MseTask{}, train, fit); });
    CHECK(error.find(kPytorchCheckpoint.string()) != std::string::npos);
    CHECK(error.find("\"optim.state.0.weight.exp_avg\"") != std::string::npos);
    CHECK(error.find("does not keep") != std::string::npos);
    const auto after = tk_test::snapshot(trainer.model());
    for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i], after[i]));
  }
  SUBCASE("a wider model") {
    struct WideImpl : torch::nn::Module {
      WideImpl() {
        register_module("0", torch::nn::Linear(3, 5));
        register_module("2", torch::nn::Linear(5, 2));
      }
    };
    auto wide = std::make_shared<WideImpl>();
    const auto error = tk_test::error_of([&] { io::load_weights(*wide, kPytorchCheckpoint); });
    CHECK(error.find("0.weight") != std::string::npos);
  }
}

TEST_CASE("a sharded checkpoint's .metadata lists the tensors, boxes and bytes of its index") {
  const auto dir = tk_test::temp_dir("trainkit_dcp_metadata");
  const auto file = dir / "run.ckpt";
  struct Save {
    std::filesystem::path file;
    void on_fit_end(TrainState& s) { s.save_checkpoint(file); }
  };
  data::TensorBatches train({torch::randn({16, 8}), torch::randint(0, 3, {16})}, {.batch_size = 4});
  Trainer<optim::AdamW> trainer(tk_test::seeded_mlp(),
                                {.checkpoint = {.form = CheckpointOptions::Form::Sharded}});
  trainer.fit(task::Classification{}, train, {.epochs = 1, .max_steps = 2}, Save{file});
  const auto ours = io::read_checkpoint(file);
  const auto metadata = io::dcp::read_metadata(io::read_file(file / ".metadata"), "m");
  REQUIRE(metadata.size() == ours.sharded->tensors().size());
  for (const auto& [name, info] : ours.sharded->tensors()) {
    INFO(name);
    REQUIRE(metadata.count(name));
    const auto& t = metadata.at(name);
    CHECK((t.dtype == info.dtype));
    CHECK(t.shape == info.shape);
    REQUIRE(!t.chunks.empty());
    CHECK(!t.chunks[0].crc);  // DCP's index has none
  }
  // the PyTorch-side reader of the same folder reads every tensor the same
  const auto dcp_only = dir / "dcp_only.ckpt";
  std::filesystem::copy(file, dcp_only);
  std::filesystem::remove(dcp_only / "trainkit.json");
  const auto theirs = io::read_checkpoint(dcp_only);
  CHECK(theirs.written_by_pytorch);
  for (const auto& [name, info] : ours.sharded->tensors())
    CHECK(torch::equal(ours.sharded->read_whole(name), theirs.sharded->read_whole(name)));
  CHECK(io::dcp::metadata_pickle(metadata) == io::read_file(file / ".metadata"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("hostile DCP metadata is refused with trainkit::Error naming the file") {
  const auto metadata = io::read_file(kPytorchCheckpoint / ".metadata");
  const auto read = [](const std::string& bytes) {
    return tk_test::error_of([&] { io::dcp::read_metadata(bytes, "x/.metadata"); });
  };
  CHECK(read("\x80\x02"
             "cos\nsystem\n.")
            .rfind(
                "trainkit: x/.metadata: not a readable DCP metadata file: holds a os.system, which "
                "trainkit does not read",
                0) == 0);
  CHECK(read("PK\3\4").find("not a pickle") != std::string::npos);
  // a torch.save-style pickle of a plain dict is not DCP's Metadata
  CHECK(read(std::string("\x80\x02}.", 4)).find("expected a Metadata where it holds a dict") !=
        std::string::npos);
  // every truncation and a flipped byte at each position: read or refused, never a crash
  int refused = 0;
  for (size_t cut = 0; cut < metadata.size(); cut += 7)
    refused += read(metadata.substr(0, cut)) != "(no error)";
  CHECK(refused == int((metadata.size() + 6) / 7));
  for (size_t at = 0; at < metadata.size(); at += 3) {
    auto bytes = metadata;
    bytes[at] = char(bytes[at] ^ 0x5a);
    const auto error = read(bytes);
    CHECK((error == "(no error)" || error.rfind("trainkit: x/.metadata: ", 0) == 0));
  }
}
