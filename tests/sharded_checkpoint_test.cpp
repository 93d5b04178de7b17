// The sharded checkpoint's pieces: the boxes a range of a flat group holds
// (any shape, channels-last order), written as DCP's torch.save chunks and
// read back box by box; and a folder that is damaged, partial or foreign is
// refused naming the file, before anything changes. Multi-rank saving and
// resharding: tests/ddp/sharding_worker.cpp (reshard_*); SIGKILL during a
// sharded save: io_test.cpp.
#include <trainkit/io.hpp>
#include <trainkit/io/convert.hpp>
#include <trainkit/trainer/detail/state_layout.hpp>
#include <trainkit/trainkit.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "support.hpp"

using namespace trainkit;

namespace {

/// A slot for a tensor of `shape` at offset 0, its elements in `order`.
trainkit::detail::ParamSlot slot_of(std::vector<int64_t> shape, std::vector<int64_t> order) {
  trainkit::detail::ParamSlot slot{"w", 0, 1, shape, order};
  for (const auto s : shape) slot.numel *= s;
  return slot;
}

/// Pieces as one rank would write them, readable by the checkpoint reader.
class Pieces final : public io::ShardedTensors {
 public:
  explicit Pieces(std::vector<io::TensorPiece> pieces) : pieces_(std::move(pieces)) {
    for (const auto& p : pieces_) info_[p.name] = {p.data.scalar_type(), p.shape};
  }
  const std::map<std::string, Info>& tensors() const override { return info_; }
  at::Tensor read(const std::string& name, const io::TensorBox& box) const override {
    auto out = at::full(box.sizes, -1.0);
    for (const auto& p : pieces_) {
      if (p.name != name || p.box.offsets != box.offsets || p.box.sizes != box.sizes) continue;
      out.copy_(p.data);
    }
    return out;
  }

 private:
  std::vector<io::TensorPiece> pieces_;
  std::map<std::string, Info> info_;
};

}  // namespace

TEST_CASE("the boxes of a range hold its elements in order, whole rows where they can") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int64_t> shape;
    const int dims = 1 + int(rng() % 4);
    int64_t numel = 1;
    for (int d = 0; d < dims; ++d) shape.push_back(1 + int64_t(rng() % 5)), numel *= shape.back();
    const int64_t a = int64_t(rng() % uint64_t(numel + 1)),
                  b = a + int64_t(rng() % uint64_t(numel - a + 1));
    CAPTURE(c10::IntArrayRef(shape));
    CAPTURE(a);
    CAPTURE(b);
    const auto boxes = trainkit::detail::boxes_of_range(shape, a, b);
    const auto strides = c10::contiguous_strides(shape);
    int64_t at = a;
    for (const auto& [box, start] : boxes) {
      int64_t first = 0;
      for (int d = 0; d < dims; ++d) first += box.offsets[d] * strides[d];
      CHECK(first == start);
      CHECK(start == at);  // in order, no gap, no overlap
      at += box.numel();
    }
    CHECK(at == b);
    // at most two part-rows per dimension but the first, plus the whole rows
    CHECK(boxes.size() <= size_t(2 * (dims - 1) + 1));
  }
}

TEST_CASE("pieces of a channels-last parameter's range read back in its memory order") {
  const auto slot = slot_of({3, 4, 2, 5}, {0, 2, 3, 1});  // N C H W stored N H W C
  const auto logical = at::arange(120, at::kFloat).reshape({3, 4, 2, 5});
  // the group's elements as channels-last stores them
  const auto memory = logical.permute({0, 2, 3, 1}).contiguous().reshape({-1});
  for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 120}, {7, 83}, {13, 14}, {40, 80}, {119, 120}}) {
    CAPTURE(begin);
    CAPTURE(end);
    std::vector<io::TensorPiece> pieces;
    trainkit::detail::add_pieces(pieces, "w", slot, memory.narrow(0, begin, end - begin), begin,
                                 begin, end);
    int64_t held = 0;
    for (const auto& p : pieces) {
      held += p.box.numel();
      // each piece is the parameter's own box, in the model's order
      auto expected = logical;
      for (size_t d = 0; d < 4; ++d)
        expected = expected.narrow(int64_t(d), p.box.offsets[d], p.box.sizes[d]);
      CHECK(torch::equal(p.data, expected));
    }
    CHECK(held == end - begin);
    auto back = at::zeros({end - begin});
    trainkit::detail::read_pieces(Pieces(pieces), "w", slot, back, begin, begin, end);
    CHECK(torch::equal(back, memory.narrow(0, begin, end - begin)));
  }
}

TEST_CASE("a damaged, partial or foreign sharded checkpoint is refused, naming the file") {
  const auto dir = tk_test::temp_dir("trainkit_sharded_bad");
  data::TensorBatches train({torch::randn({16, 8}), torch::randint(0, 3, {16})}, {.batch_size = 4});
  const auto ckpt = dir / "step-2.ckpt";
  {
    struct Save {
      std::filesystem::path file;
      void on_fit_end(TrainState& s) { s.save_checkpoint(file); }
    };
    Trainer<optim::AdamW> trainer(tk_test::seeded_mlp(),
                                  {.checkpoint = {.form = CheckpointOptions::Form::Sharded}});
    trainer.fit(task::Classification{}, train, {.epochs = 1, .max_steps = 2}, Save{ckpt});
  }
  REQUIRE(io::checkpoint_folder::is_sharded_checkpoint(ckpt));
  Trainer<optim::AdamW> fresh(tk_test::seeded_mlp(3));
  const auto before = fresh.model().parameters()[0].clone();
  const auto resume_error = [&](const std::filesystem::path& from) {
    try {
      fresh.fit(task::Classification{}, train, {.epochs = 1, .resume_from = from});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  SUBCASE("a flipped byte in a rank's file") {
    const auto file = ckpt / "__0_0.distcp";
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
    f.close();
    const auto error = resume_error(ckpt);
    CHECK(error.find("__0_0.distcp") != std::string::npos);
    CHECK(error.find("checksum mismatch") != std::string::npos);
  }
  SUBCASE("a rank's file cut short") {
    std::filesystem::resize_file(ckpt / "__0_0.distcp", 100);
    CHECK(resume_error(ckpt).find("truncated") != std::string::npos);
  }
  SUBCASE("another model") {
    Trainer<optim::AdamW> wider(tk_test::seeded_mlp(3, 8, 17));
    try {
      wider.fit(task::Classification{}, train, {.epochs = 1, .resume_from = ckpt});
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("is Float[16, 8], expected Float[17, 8]") !=
            std::string::npos);
    }
  }
  SUBCASE("a folder whose save did not finish (no index) is not a checkpoint") {
    std::filesystem::remove(ckpt / io::checkpoint_folder::kShardedIndex);
    std::filesystem::remove(ckpt / io::checkpoint_folder::kPytorchIndex);
    CHECK(resume_error(ckpt).find("not a sharded checkpoint") != std::string::npos);
    // nor is it a candidate in its run folder
    CHECK(io::checkpoint_folder::newest_candidates(dir).empty());
  }
  SUBCASE("removed (ModelCheckpoint's pruning): out of the *.ckpt names before its files go") {
    // A kill while its files went left a step-*.ckpt folder without an
    // index (test_io's sharded kill test met it); now the folder is renamed
    // first, and a leftover of such a removal goes with the next one.
    const auto leftover = io::checkpoint_folder::removal_folder(ckpt);
    std::filesystem::create_directories(leftover / "half");
    CHECK(leftover.extension() != ".ckpt");
    io::checkpoint_folder::remove_checkpoint(ckpt);
    CHECK(!std::filesystem::exists(ckpt));
    CHECK(!std::filesystem::exists(leftover));
    std::ofstream(dir / "step-9.ckpt") << "a file";
    io::checkpoint_folder::remove_checkpoint(dir / "step-9.ckpt");
    CHECK(!std::filesystem::exists(dir / "step-9.ckpt"));
  }
  SUBCASE("an index that is not one") {
    std::ofstream(ckpt / io::checkpoint_folder::kShardedIndex) << "{\"tensors\": 3}";
    CHECK(resume_error(ckpt).find("not a sharded checkpoint's index") != std::string::npos);
  }
  SUBCASE("an index whose boxes or shapes no reader can hold") {
    const auto index_file = ckpt / io::checkpoint_folder::kShardedIndex;
    auto index = nlohmann::json::parse(std::ifstream(index_file));
    auto& tensors = index["tensors"];
    const auto weight = std::find_if(tensors.begin(), tensors.end(),
                                     [](const auto& t) { return t["shape"].size() == 2; });
    REQUIRE(weight != tensors.end());
    auto& chunk = (*weight)["chunks"][0];
    std::string expected;
    SUBCASE("a box whose end is past the largest integer") {
      chunk["offsets"][0] = std::numeric_limits<int64_t>::max() - 1;
      expected = "lies outside it";
    }
    SUBCASE("a shape of more bytes than the chunks hold (nothing allocated)") {
      (*weight)["shape"][0] = int64_t(1) << 40;
      chunk["sizes"][0] = int64_t(1) << 40;
      expected = "is larger than the";
    }
    std::ofstream(index_file) << index.dump();
    const auto error = resume_error(ckpt);
    CHECK_MESSAGE(error.find(expected) != std::string::npos, error);
    CHECK(error.find(io::checkpoint_folder::kShardedIndex) != std::string::npos);
  }
  CHECK(torch::equal(fresh.model().parameters()[0], before));  // nothing changed
  std::filesystem::remove_all(dir);
}

TEST_CASE("files written tensor by tensor are the bytes written at once") {
  const auto dir = tk_test::temp_dir("trainkit_streamed");
  const io::NamedTensors tensors{{"a.weight", torch::randn({3, 4})},
                                 {"a.bias", torch::randn({1, 1, 4}).expand({2, 1, 4})},
                                 {"steps", torch::tensor(7, at::kLong)},
                                 {"empty", torch::zeros({0, 5}, at::kHalf)}};
  std::vector<io::TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  {
    io::SafetensorsWriter out(dir / "a.safetensors", specs, {{"format", "pt"}});
    for (const auto& [name, t] : tensors) out.write(t);
    out.commit();
    io::TorchSaveWriter pt(dir / "a.pt", specs);
    for (const auto& [name, t] : tensors) pt.write(t);
    pt.commit();
  }
  CHECK(io::read_file(dir / "a.safetensors") == io::to_safetensors(tensors, {{"format", "pt"}}));
  CHECK(io::read_file(dir / "a.pt") == io::to_torch_save(tensors));
  // a tensor other than announced, or too few: an Error, and no file
  io::SafetensorsWriter bad(dir / "b.safetensors", specs);
  CHECK_THROWS_WITH_AS(bad.write(torch::randn({4, 3})),
                       doctest::Contains("\"a.weight\" is Float[4, 3], the header announced "
                                         "Float[3, 4]"),
                       Error);
  io::TorchSaveWriter short_pt(dir / "b.pt", specs);
  short_pt.write(tensors[0].second);
  CHECK_THROWS_WITH_AS(short_pt.commit(), doctest::Contains("1 of the 4 tensors"), Error);
  CHECK_FALSE(std::filesystem::exists(dir / "b.pt"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a sharded checkpoint converts to one weights file and weights to a sharded folder") {
  const auto dir = tk_test::temp_dir("trainkit_convert");
  data::TensorBatches train({torch::randn({16, 8}), torch::randint(0, 3, {16})}, {.batch_size = 4});
  struct Save {
    std::filesystem::path file;
    void on_fit_end(TrainState& s) { s.save_checkpoint(file); }
  };
  Trainer<optim::AdamW> trainer(tk_test::seeded_mlp(),
                                {.checkpoint = {.form = CheckpointOptions::Form::Sharded}});
  trainer.fit(task::Classification{}, train, {.epochs = 1}, Save{dir / "run.ckpt"});
  const auto model = io::module_tensors(trainer.model());
  const auto same_as_model = [&](const io::NamedTensors& got) {
    REQUIRE(got.size() == model.size());
    for (const auto& [name, t] : model) {
      const auto it =
          std::find_if(got.begin(), got.end(), [&](auto& g) { return g.first == name; });
      REQUIRE(it != got.end());
      CHECK(torch::equal(it->second, t));
    }
  };
  for (const auto* file : {"w.safetensors", "w.pt"}) {
    CAPTURE(file);
    io::checkpoint_to_weights(dir / "run.ckpt", dir / file);
    same_as_model(io::read_weights(dir / file));
  }
  same_as_model(io::read_weights(dir / "run.ckpt"));  // load_weights reads a sharded folder
  for (const int ranks : {1, 3, 20}) {                // 20: more ranks than some tensors have rows
    CAPTURE(ranks);
    io::weights_to_sharded(dir / "w.pt", dir / "w.ckpt", ranks);
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir / "w.ckpt"))
      files += e.path().extension() == ".distcp";
    CHECK(files == ranks);
    same_as_model(io::read_weights(dir / "w.ckpt"));
  }
  CHECK_THROWS_WITH_AS(io::checkpoint_to_weights(dir / "run.ckpt", dir / "w.bin"),
                       doctest::Contains("accepted: .safetensors, .pt, .pth"), Error);
  std::filesystem::remove_all(dir);
}
