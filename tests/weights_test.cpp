// Pretrained weights: files PyTorch 1.13 and 2.6 wrote with torch.save, a
// safetensors file written by Python, a trainkit checkpoint's model part;
// non-strict loads with their report, renaming, and a fine-tuning run that
// freezes the loaded backbone, trains the new head, then unfreezes; files
// saved here read by Python's torch.load. The files and weights.json come
// from tests/reference/make_weights_reference.py.
#include <trainkit/callbacks.hpp>
#include <trainkit/io/weights.hpp>
#include <trainkit/trainer.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "support.hpp"

using namespace trainkit;
namespace nn = torch::nn;

namespace {

const std::filesystem::path kFiles = std::filesystem::path(TRAINKIT_REFERENCE_DIR) / "weights";
const std::vector<std::string> kVersions = {"113", "26"};  // the PyTorch that wrote the file

/// make_weights_reference.py's Net: a backbone and a head of `classes`.
struct NetImpl : nn::Module {
  explicit NetImpl(int64_t classes) {
    backbone = register_module("backbone", nn::Sequential(nn::Linear(4, 16), nn::BatchNorm1d(16),
                                                          nn::ReLU(), nn::Linear(16, 16)));
    head = register_module("head", nn::Linear(16, classes));
  }
  at::Tensor forward(at::Tensor x) { return head(torch::relu(backbone->forward(x))); }
  nn::Sequential backbone{nullptr};
  nn::Linear head{nullptr};
};
TORCH_MODULE(Net);

at::ScalarType dtype_of(const std::string& name) {
  static const std::map<std::string, at::ScalarType> names = {
      {"float32", at::kFloat},  {"float16", at::kHalf}, {"bfloat16", at::kBFloat16},
      {"float64", at::kDouble}, {"int64", at::kLong},   {"int32", at::kInt},
      {"int8", at::kChar},      {"uint8", at::kByte},   {"bool", at::kBool}};
  return names.at(name);
}

/// weights.json's description of a tensor ({dtype, shape, values}) as a tensor.
at::Tensor described(const nlohmann::json& d) {
  const auto dtype = dtype_of(d["dtype"]);
  const auto shape = d["shape"].get<std::vector<int64_t>>();
  const auto values = at::isFloatingType(dtype)
                          ? at::tensor(d["values"].get<std::vector<double>>(), at::kDouble)
                          : at::tensor(d["values"].get<std::vector<int64_t>>(), at::kLong);
  return values.reshape(shape).to(dtype);
}

/// `tensors` are exactly the ones `expected` describes: names, dtypes, shapes, bits.
void expect_exactly(const io::NamedTensors& tensors, const nlohmann::json& expected) {
  CHECK(tensors.size() == expected.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    REQUIRE(expected.contains(name));
    const auto want = described(expected[name]);
    CHECK((t.scalar_type() == want.scalar_type()));
    CHECK((t.sizes() == want.sizes()));
    CHECK(torch::equal(t, want));
  }
}

/// Copies of `tensors` by name.
std::map<std::string, at::Tensor> by_name(const io::NamedTensors& tensors) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : tensors) out[name] = t.detach().clone();
  return out;
}

std::vector<std::string> names_of(const io::NamedTensors& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) out.push_back(name);
  return out;
}

using tk_test::error_of;

}  // namespace

TEST_CASE("torch.save files of PyTorch 1.13 and 2.6 read exactly, views sharing their storage") {
  const auto ref = tk_test::load_reference("weights.json");
  for (const auto& v : kVersions) {
    INFO("PyTorch " << v);
    expect_exactly(io::read_weights(kFiles / ("pretrained_torch" + v + ".pt")), ref["pretrained"]);
    const auto views = io::read_weights(kFiles / ("views_torch" + v + ".pt"));
    expect_exactly(views, ref["views"]);
    const std::map<std::string, at::Tensor> t(views.begin(), views.end());
    CHECK(t.at("transposed").is_alias_of(t.at("base")));
    CHECK(t.at("slice").is_alias_of(t.at("base")));
    CHECK((t.at("transposed").strides() == c10::IntArrayRef{1, 4}));
  }
}

TEST_CASE("a safetensors file written by Python reads as the torch.save files do") {
  const auto ref = tk_test::load_reference("weights.json");
  expect_exactly(io::read_weights(kFiles / "pretrained.safetensors"), ref["pretrained"]);
}

TEST_CASE(
    "a training script's dict: nested containers join with dots, numbers and strings left out") {
  const auto ref = tk_test::load_reference("weights.json");
  for (const auto& v : kVersions) {
    INFO("PyTorch " << v);
    const auto file = kFiles / ("wrapped_torch" + v + ".pt");
    CHECK(names_of(io::read_weights(file)) == ref["wrapped_names"].get<std::vector<std::string>>());
    // Its model part loads by stripping "model."; the optimizer's tensors are unexpected.
    Net net(10);
    const auto report = io::load_weights(*net, file, {.rename = {{"model.", ""}}, .strict = false});
    CHECK(report.missing.empty());
    CHECK(report.mismatched.empty());
    CHECK(report.loaded.size() == ref["pretrained"].size());
    CHECK(report.unexpected.size() == 8);  // SGD's momentum, one per parameter
    CHECK(report.unexpected[0].rfind("optimizer.state.", 0) == 0);
    expect_exactly(io::module_tensors(*net), ref["pretrained"]);
  }
}

TEST_CASE(
    "a new head: a non-strict load reports it and loads the rest, a strict one changes nothing") {
  const auto ref = tk_test::load_reference("weights.json");
  const auto file = kFiles / "pretrained_torch26.pt";
  torch::manual_seed(1);
  Net net(3);
  const auto before = tk_test::snapshot(*net);
  const auto strict = error_of([&] { io::load_weights(*net, file); });
  CHECK(strict.find(file.string() + " does not match the model (loaded 9 of 11; shape differs: "
                                    "\"head.weight\" file [10, 16], model [3, 16]; \"head.bias\" "
                                    "file [10], model [3]); nothing was loaded") !=
        std::string::npos);
  const auto after = tk_test::snapshot(*net);
  for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i], after[i]));

  const auto report = io::load_weights(*net, file, {.strict = false});
  CHECK(report.summary() ==
        "loaded 9 of 11; shape differs: \"head.weight\" file [10, 16], model [3, 16]; "
        "\"head.bias\" file [10], model [3]");
  CHECK(report.missing.empty());
  CHECK(report.unexpected.empty());
  REQUIRE(report.mismatched.size() == 2);
  CHECK(report.mismatched[0].name == "head.weight");
  CHECK(report.mismatched[0].file == std::vector<int64_t>{10, 16});
  CHECK(report.mismatched[0].model == std::vector<int64_t>{3, 16});
  CHECK(torch::equal(net->head->weight, before[6]));  // the new head keeps its init
  for (const auto& [name, t] : io::module_tensors(*net)) {
    if (name.rfind("backbone.", 0) == 0) CHECK(torch::equal(t, described(ref["pretrained"][name])));
  }
  // The number of batches a buffer counts is an int64 that loads bitwise too.
  CHECK(net->backbone[1]->as<nn::BatchNorm1d>()->num_batches_tracked.item<int64_t>() == 123);
}

TEST_CASE("rename rules: the first matching prefix is replaced, two names made one are refused") {
  struct EncoderImpl : nn::Module {
    EncoderImpl() { encoder = register_module("encoder", nn::Linear(4, 16)); }
    nn::Linear encoder{nullptr};
  };
  auto enc = std::make_shared<EncoderImpl>();
  const auto report = io::load_weights(*enc, kFiles / "pretrained_torch113.pt",
                                       {.rename = {{"backbone.0.", "encoder."}}, .strict = false});
  CHECK(report.loaded == std::vector<std::string>{"encoder.weight", "encoder.bias"});
  CHECK(report.unexpected.size() == 9);
  const io::NamedTensors two{{"a.w", at::ones({2})}, {"b.w", at::ones({2})}};
  CHECK(error_of([&] {
          io::load_weights(*enc, two, {.rename = {{"a.", ""}, {"b.", ""}}, .strict = false});
        }) == "trainkit: the weights: two tensors are named \"w\" after LoadOptions::rename");
}

TEST_CASE("rename rules: a * stands for one name segment, so one rule renames every block") {
  // Hugging Face GPT-2 names into a model whose blocks are "h.N" with the MLP inlined.
  struct BlockImpl : nn::Module {
    BlockImpl() { c_fc = register_module("c_fc", nn::Linear(2, 3)); }
    nn::Linear c_fc{nullptr};
  };
  TORCH_MODULE(Block);
  struct GptImpl : nn::Module {
    GptImpl() {
      h = register_module("h", nn::ModuleList());
      for (int i = 0; i < 12; ++i) h->push_back(Block());
    }
    nn::ModuleList h{nullptr};
  };
  auto gpt = std::make_shared<GptImpl>();
  io::NamedTensors file;
  for (int i = 0; i < 12; ++i) {
    file.emplace_back("transformer.h." + std::to_string(i) + ".mlp.c_fc.weight",
                      at::full({3, 2}, double(i)));
    file.emplace_back("transformer.h." + std::to_string(i) + ".mlp.c_fc.bias",
                      at::full({3}, -double(i)));
  }
  const auto report = io::load_weights(*gpt, file, {.rename = {{"transformer.h.*.mlp.", "h.*."}}});
  CHECK(report.complete());
  CHECK(report.loaded.size() == 24);
  for (int i = 0; i < 12; ++i) {
    const auto& block = gpt->h[i]->as<BlockImpl>()->c_fc;
    CHECK(torch::equal(block->weight, at::full({3, 2}, double(i))));
    CHECK(torch::equal(block->bias, at::full({3}, -double(i))));
  }
  // A name the rule does not reach keeps its name: a strict load says so.
  file.emplace_back("transformer.wte.weight", at::ones({1}));
  CHECK(error_of([&] {
          io::load_weights(*gpt, file, {.rename = {{"transformer.h.*.mlp.", "h.*."}}});
        }).find("unexpected: \"transformer.wte.weight\"") != std::string::npos);
  // A * inside a segment, or more of them in the new name, is refused by name.
  CHECK(error_of([&] {
          io::load_weights(*gpt, file, {.rename = {{"h.1*.", "x."}}});
        }) ==
        "trainkit: LoadOptions::rename rule \"h.1*.\" -> \"x.\": a * stands for a whole name "
        "segment (\"h.*.mlp\"), not part of one");
  CHECK(error_of([&] {
          io::load_weights(*gpt, file, {.rename = {{"h.*.", "*.*."}}});
        }) ==
        "trainkit: LoadOptions::rename rule \"h.*.\" -> \"*.*.\": the new name uses more * "
        "than the old one matches");
}

TEST_CASE("a trainkit checkpoint's model part, and a run folder's newest, load as weights") {
  const auto dir = tk_test::temp_dir("trainkit_weights_ckpt");
  torch::manual_seed(2);
  Net net(3);
  using T = Trainer<optim::AdamW>;
  T trainer(net, T::Options{.optim = {.lr = 1e-2}});
  std::vector<data::Batch> data;
  for (int i = 0; i < 4; ++i) data.push_back({at::randn({8, 4}), at::randint(0, 3, {8})});
  struct Save {
    std::filesystem::path dir;
    void on_epoch_end(TrainState& s) {
      s.save_checkpoint(dir / ("step-" + std::to_string(s.step) + ".ckpt"));
    }
  } save{dir};
  trainer.fit(task::Classification{}, data, {.epochs = 2}, save);
  for (const auto& source : {dir / "step-8.ckpt", dir}) {
    Net fresh(3);
    const auto report = io::load_weights(*fresh, source);
    CHECK(report.complete());
    CHECK(tk_test::max_param_rel_error(*fresh, *net) == 0.0);
  }
  // The newest is step 8, not step 4.
  Net fresh(3);
  io::load_weights(*fresh, dir);
  CHECK(torch::equal(fresh->head->bias, net->head->bias));
  std::filesystem::remove_all(dir);
}

TEST_CASE("fine-tuning: the loaded backbone frozen while the new head trains, then unfrozen") {
  const auto ref = tk_test::load_reference("weights.json");
  at::set_num_threads(1);
  torch::manual_seed(4);
  Net net(3);
  io::load_weights(*net, kFiles / "pretrained_torch26.pt", {.strict = false});
  std::vector<data::Batch> data;
  for (int i = 0; i < 6; ++i) data.push_back({at::randn({8, 4}), at::randint(0, 3, {8})});
  const auto pretrained = by_name(io::module_tensors(*net));
  const auto head_init = net->head->weight.detach().clone();
  using T = Trainer<optim::AdamW>;
  T trainer(net,
            T::Options{.optim = {.lr = 1e-2},
                       .param_groups = {
                           {"backbone", params::name_matches("^backbone\\."), {.lr_scale = 0.1}}}});
  struct Watch {
    Net net;
    at::Tensor first_weight;
    std::vector<bool> backbone_unchanged;  // per epoch end
    void on_epoch_end(TrainState&) {
      backbone_unchanged.push_back(
          torch::equal(net->backbone[0]->as<nn::Linear>()->weight, first_weight));
    }
  } watch{net, pretrained.at("backbone.0.weight"), {}};
  callbacks::Freeze freeze(trainer.flat_params(), {.group = "backbone", .until_epoch = 2});
  const auto result = trainer.fit(task::Classification{}, data, {.epochs = 4}, freeze, watch);
  CHECK(watch.backbone_unchanged == std::vector<bool>{true, true, false, false});
  CHECK(!torch::equal(net->head->weight, head_init));
  // Frozen parameters stop training; the batch norm's buffers still follow
  // the data (train mode), as in PyTorch.
  CHECK(!torch::equal(net->backbone[1]->as<nn::BatchNorm1d>()->running_mean,
                      pretrained.at("backbone.1.running_mean")));
  CHECK(std::isfinite(result.metrics.at("train_loss")));
}

TEST_CASE("saved weights: .pt and .safetensors read back bitwise, other names refused") {
  const auto dir = tk_test::temp_dir("trainkit_weights_save");
  torch::manual_seed(6);
  Net net(3);
  for (const auto* name : {"w.pt", "w.pth", "w.safetensors"}) {
    io::save_weights(dir / name, *net);
    Net fresh(3);
    CHECK(io::load_weights(*fresh, dir / name).complete());
    for (const auto& [n, t] : io::module_tensors(*fresh))
      CHECK(torch::equal(t, by_name(io::module_tensors(*net)).at(n)));
  }
  CHECK(error_of([&] { io::save_weights(dir / "w.bin", *net); }) ==
        "trainkit: save_weights: path \"" + (dir / "w.bin").string() +
            "\" ends in \".bin\"; accepted: .safetensors, .pt, .pth");
  std::filesystem::remove_all(dir);
}

TEST_CASE("saved weights: Python's torch.load reads the .pt, and the model loads it strictly") {
  const auto python = tk_test::python_with_torch();
  if (python.empty()) {
    std::puts("trainkit-skip: no python3 with torch");
    return;
  }
  const auto dir = tk_test::temp_dir("trainkit_weights_python");
  torch::manual_seed(8);
  Net net(3);
  net->backbone[1]->as<nn::BatchNorm1d>()->num_batches_tracked.fill_(5);
  io::save_weights(dir / "model.pt", *net);
  nlohmann::json expected = nlohmann::json::object();
  for (const auto& [name, t] : io::module_tensors(*net)) {
    const bool real = t.is_floating_point();
    const auto flat = t.detach().reshape({-1}).to(real ? at::kDouble : at::kLong);
    expected[name] = {
        {"dtype", t.scalar_type() == at::kFloat ? "float32" : "int64"},
        {"shape", t.sizes().vec()},
        {"values", real ? nlohmann::json(std::vector<double>(
                              flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel()))
                        : nlohmann::json(std::vector<int64_t>(
                              flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel()))}};
  }
  std::ofstream(dir / "expected.json") << expected.dump();
  const auto cmd = python + " " + TRAINKIT_REFERENCE_DIR + "/check_saved_weights.py " +
                   (dir / "model.pt").string() + " " + (dir / "expected.json").string();
  CHECK_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
  std::filesystem::remove_all(dir);
}

TEST_CASE("files a reader cannot take: each an Error that names the file and says why") {
  const auto refused = [](const std::string& kind, const std::string& v) {
    const auto file = kFiles / ("refused_" + kind + "_torch" + v + ".pt");
    const auto msg = error_of([&] { io::read_weights(file); });
    CHECK(msg.rfind("trainkit: " + file.string() + ": not a readable torch.save file: ", 0) == 0);
    return msg;
  };
  for (const auto& v : kVersions) {
    INFO("PyTorch " << v);
    CHECK(refused("legacy", v).find("the format before PyTorch 1.6") != std::string::npos);
    CHECK(refused("global", v).find("holds a collections.Counter, which trainkit does not read") !=
          std::string::npos);
    CHECK(refused("torchscript", v).find("torch::jit::load") != std::string::npos);
    CHECK(refused("compressed", v).find("is compressed (method 8)") != std::string::npos);
  }
}

TEST_CASE(
    "every truncation and flipped byte of a torch.save file reads or fails with trainkit::Error") {
  const auto bytes = io::to_torch_save(
      {{"w", torch::arange(6.0f).view({2, 3})}, {"n", torch::tensor(int64_t(3))}});
  int cut_errors = 0;
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    try {
      io::from_torch_save(bytes.substr(0, cut), "cut");
    } catch (const Error&) {
      ++cut_errors;
    }
  }
  CHECK(cut_errors == int(bytes.size()));  // the directory is at the end: no cut reads
  int loaded = 0, rejected = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto corrupt = bytes;
    corrupt[i] = char(corrupt[i] ^ 0xFF);
    try {
      io::from_torch_save(corrupt, "flipped");
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(loaded + rejected == int(bytes.size()));
  CHECK(rejected > 0);
}

TEST_CASE("torch.save with pickle_protocol=1 reads as the default protocol does") {
  const auto ref = tk_test::load_reference("weights.json");
  for (const auto& v : kVersions) {
    INFO("PyTorch " << v);
    expect_exactly(io::read_weights(kFiles / ("protocol1_torch" + v + ".pt")), ref["views"]);
  }
}

TEST_CASE("containers without tensors that the pickle shares (settings, betas) are read once") {
  const auto ref = tk_test::load_reference("weights.json");
  std::vector<std::string> model_names;
  for (const auto& [name, d] : ref["pretrained"].items()) model_names.push_back("model." + name);
  for (const auto& v : kVersions) {
    INFO("PyTorch " << v);
    auto names = names_of(io::read_weights(kFiles / ("shared_torch" + v + ".pt")));
    std::sort(names.begin(), names.end());
    std::sort(model_names.begin(), model_names.end());
    CHECK(names == model_names);
  }
}

TEST_CASE("hostile torch.save files: a shared dict of tensors or huge names, refused at once") {
  // make_weights_reference.py's: 1 kB and 3 kB files that reach one tensor by
  // 2^24 paths (each name 24 kB long in the second), and a 128 kB one of 8000
  // names 30 kB long. Each was read for seconds into gigabytes before.
  for (const char* name : {"hostile_shared.pt", "hostile_long_keys.pt"}) {
    INFO(name);
    const auto msg = error_of([&] { io::read_weights(kFiles / name); });
    CHECK(msg.find("not a readable torch.save file: one container of tensors is both \"") !=
          std::string::npos);
    CHECK(msg.find("(the pickle shares it); a state dict never shares one") != std::string::npos);
    CHECK(msg.size() < 60000);  // two names, not millions
  }
  const auto file = kFiles / "hostile_long_names.pt";
  const auto msg = error_of([&] { io::read_weights(file); });
  const auto pickle_bytes = 128 * 1024;  // about; the budget is 16 per byte plus 1 MiB
  CHECK(msg.find("not a readable torch.save file: its names total more than ") !=
        std::string::npos);
  CHECK(msg.find(" bytes (16 per byte of its pickle, plus 1 MiB)") != std::string::npos);
  CHECK(std::filesystem::file_size(file) < uint64_t(pickle_bytes * 2));
  // A strict load_weights refuses before it lists anything.
  Net net(10);
  CHECK(error_of([&] { io::load_weights(*net, file); }) == msg);
}

TEST_CASE("a zip whose record shares another's bytes is refused") {
  // data/0's directory entry pointed at data.pkl's local header: its 24 bytes
  // would be read from the pickle's.
  auto bytes = io::to_torch_save({{"w", torch::arange(6.0f)}});
  const auto directory_entry = [&](const std::string& suffix) {
    for (size_t at = bytes.find("PK\x01\x02"); at != std::string::npos;
         at = bytes.find("PK\x01\x02", at + 4)) {
      uint16_t length = 0;
      std::memcpy(&length, bytes.data() + at + 28, 2);
      const auto name = bytes.substr(at + 46, length);
      if (name.size() >= suffix.size() && name.ends_with(suffix)) return at;
    }
    FAIL("no directory entry ending in " << suffix);
    return std::string::npos;
  };
  REQUIRE_NOTHROW(io::from_torch_save(bytes, "intact"));
  const auto pickle = directory_entry("/data.pkl"), storage = directory_entry("/data/0");
  std::memcpy(bytes.data() + storage + 42, bytes.data() + pickle + 42, 4);
  const auto msg = error_of([&] { io::from_torch_save(bytes, "forged"); });
  CHECK(msg.find("trainkit: forged: not a readable torch.save file: entry \"") == 0);
  CHECK(msg.find("\" overlap in the file") != std::string::npos);
}
