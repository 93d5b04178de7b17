// Models with any forward, batches of any structure: the visiting rules of
// data/batch_traits.hpp, the customization point, ModelRef's conversion to
// the model's own type, and a two-input model trained through the Trainer
// from a struct, a tuple, a string-keyed map and a customized class alike.
#include <trainkit/capture.hpp>
#include <trainkit/trainkit.hpp>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "support.hpp"

using namespace trainkit;

namespace {

/// Tokens and a padding mask in, class logits out: a masked mean of embeddings.
struct PoolerImpl : torch::nn::Module {
  PoolerImpl() {
    embed = register_module("embed", torch::nn::Embedding(20, 16));
    head = register_module("head", torch::nn::Linear(16, 3));
  }
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& mask) {
    const auto m = mask.unsqueeze(-1).to(at::kFloat);
    return head((embed(tokens) * m).sum(1) / m.sum(1).clamp_min(1));
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Pooler);

Pooler seeded_pooler() {
  torch::manual_seed(3);
  return Pooler();
}

struct PairBatch {
  at::Tensor tokens, mask, label;
};
using TupleBatch = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using DictBatch = std::map<std::string, at::Tensor>;
/// Not an aggregate: it says how to visit it through BatchTraits.
class WrappedBatch {
 public:
  explicit WrappedBatch(PairBatch b) : b_(std::move(b)) {}
  const PairBatch& get() const { return b_; }
  PairBatch& get() { return b_; }

 private:
  PairBatch b_;
};

std::vector<PairBatch> pair_batches(int64_t count, uint64_t seed = 5) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<PairBatch> out;
  for (int64_t i = 0; i < count; ++i) {
    const auto tokens = at::randint(0, 20, {8, 6}, gen);
    const auto lengths = at::randint(1, 7, {8, 1}, gen);
    const auto mask = at::arange(6).unsqueeze(0).lt(lengths);
    out.push_back({tokens, mask, tokens.select(1, 0).remainder(3)});  // learnable
  }
  return out;
}

namespace F = torch::nn::functional;
at::Tensor pair_loss(Pooler& model, const at::Tensor& tokens, const at::Tensor& mask,
                     const at::Tensor& label) {
  return F::cross_entropy(model(tokens, mask), label);
}
struct PairTask {
  StepOutput step(Pooler& model, const PairBatch& b) const {
    return {pair_loss(model, b.tokens, b.mask, b.label)};  // batch_size: counted from the batch
  }
};
struct TupleTask {
  StepOutput step(Pooler& model, const TupleBatch& b) const {
    const auto& [tokens, mask, label] = b;
    return {pair_loss(model, tokens, mask, label)};
  }
};
struct DictTask {  // takes the module class, not the holder
  StepOutput step(PoolerImpl& model, const DictBatch& b) const {
    return {F::cross_entropy(model.forward(b.at("tokens"), b.at("mask")), b.at("label"))};
  }
};
struct WrappedTask {
  StepOutput step(Pooler& model, const WrappedBatch& b) const {
    return {pair_loss(model, b.get().tokens, b.get().mask, b.get().label), b.get().label.size(0)};
  }
};

template <class Out, class Convert>
std::vector<Out> convert(const std::vector<PairBatch>& in, Convert f) {
  std::vector<Out> out;
  for (const auto& b : in) out.push_back(f(b));
  return out;
}

using PairTrainer =
    Trainer<optim::AdamW, sched::OneCycle, precision::Fp32, accumulate::Every<2>, clip::Norm>;
PairTrainer::Options pair_options() {
  return {.optim = {.lr = 1e-2}, .sched = {.max_lr = 2e-2}, .clip = {.max_norm = 1.0}};
}

void expect_bitwise_equal(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
}

}  // namespace

template <>
struct trainkit::BatchTraits<WrappedBatch> {
  template <class F>
  static void for_each_tensor(WrappedBatch& b, F&& f) {
    f(b.get().tokens);
    f(b.get().mask);
    f(b.get().label);
  }
};

TEST_CASE("batches: tensors visited in a fixed order, other values carried") {
  struct Tokens {
    at::Tensor tokens, mask;
    std::vector<int64_t> lengths;
    std::string name;
  };
  struct Nested {
    Tokens text;
    std::pair<at::Tensor, int> image;
    std::unordered_map<std::string, at::Tensor> extra;
    std::optional<at::Tensor> none;
  };
  static_assert(TrainingBatch<data::Batch> && TrainingBatch<PairBatch> &&
                TrainingBatch<TupleBatch> && TrainingBatch<DictBatch> &&
                TrainingBatch<WrappedBatch> && TrainingBatch<Nested>);
  static_assert(!TrainingBatch<std::vector<int>> && !TrainingBatch<std::tuple<int, std::string>>);
  static_assert(data::carries_values<Tokens> && !data::carries_values<PairBatch>);
  Nested n{{at::zeros({4, 5}), at::ones({4, 5}), {5, 3, 2, 1}, "x"},
           {at::full({4, 3}, 2.0), 7},
           {{"z", at::full({4}, 4.0)}, {"a", at::full({4}, 3.0)}},
           std::nullopt};
  // depth-first in declaration order; an unordered map by sorted key
  std::vector<double> firsts;
  for (const auto& t : data::tensors_of(n)) firsts.push_back(t.flatten()[0].item<double>());
  CHECK(firsts == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(data::batch_size(n) == 4);
  const auto doubled = data::map_tensors(n, [](const at::Tensor& t) { return t * 2; });
  CHECK(doubled.text.lengths == n.text.lengths);  // carried
  CHECK(doubled.image.second == 7);
  CHECK(doubled.extra.at("a").equal(at::full({4}, 6.0)));
  CHECK(n.extra.at("a").equal(at::full({4}, 3.0)));  // the original untouched
  const WrappedBatch w(pair_batches(1)[0]);
  CHECK(data::tensors_of(w).size() == 3);
  CHECK(data::batch_size(w) == 8);
  CHECK_THROWS_WITH_AS(data::batch_size(std::tuple<at::Tensor>(at::scalar_tensor(1.0))),
                       doctest::Contains("no tensor with a dimension 0"), Error);
}

TEST_CASE("a two-input model trains alike from a struct, a tuple, a map and a customized batch") {
  at::set_num_threads(1);
  const auto batches = pair_batches(12);
  const auto val = pair_batches(3, 9);
  const FitOptions fit{.epochs = 2};

  PairTrainer by_struct(seeded_pooler(), pair_options());
  FitOptions with_val = fit;
  with_val.val_data = val;
  const auto first = by_struct.fit(PairTask{}, batches, with_val);
  CHECK(first.steps == 12);
  CHECK(first.metrics.at("val_loss") < std::log(3.0));  // it learned

  PairTrainer by_tuple(seeded_pooler(), pair_options());
  by_tuple.fit(TupleTask{},
               convert<TupleBatch>(batches,
                                   [](const PairBatch& b) {
                                     return TupleBatch{b.tokens, b.mask, b.label};
                                   }),
               fit);
  expect_bitwise_equal(by_tuple.model(), by_struct.model());

  PairTrainer by_dict(seeded_pooler(), pair_options());
  const auto to_dict = [](const PairBatch& b) {
    return DictBatch{{"tokens", b.tokens}, {"mask", b.mask}, {"label", b.label}};
  };
  const auto dict_val = convert<DictBatch>(val, to_dict);
  FitOptions dict_fit = fit;
  dict_fit.val_data = dict_val;
  const auto dict = by_dict.fit(DictTask{}, convert<DictBatch>(batches, to_dict), dict_fit);
  expect_bitwise_equal(by_dict.model(), by_struct.model());
  CHECK(dict.metrics.at("val_loss") == first.metrics.at("val_loss"));
  CHECK(by_dict.evaluate(DictTask{}, dict_val).at("loss") == first.metrics.at("val_loss"));

  PairTrainer by_wrapped(seeded_pooler(), pair_options());
  by_wrapped.fit(WrappedTask{},
                 convert<WrappedBatch>(batches, [](const PairBatch& b) { return WrappedBatch(b); }),
                 fit);
  expect_bitwise_equal(by_wrapped.model(), by_struct.model());

  SUBCASE("validation data of another batch type is refused, naming both") {
    PairTrainer t(seeded_pooler(), pair_options());
    FitOptions mixed = fit;
    mixed.val_data = dict_val;
    CHECK_THROWS_WITH_AS(t.fit(PairTask{}, batches, mixed),
                         doctest::Contains("validation data holds batches of type std::map"),
                         Error);
  }
}

TEST_CASE("ModelRef: the model as its own type, checked, one-tensor calls only where they fit") {
  const auto pooler = seeded_pooler();
  ModelRef ref(pooler);
  CHECK(&static_cast<Pooler&>(ref) == &ref.as<Pooler>());
  CHECK(ref.as<PoolerImpl>().head.get() == pooler->head.get());
  CHECK(&ref.as<torch::nn::Module>() == pooler.get());
  CHECK_THROWS_WITH_AS(ref.as<tk_test::Mlp>(),
                       doctest::Contains("the task takes the model as tk_test::Mlp, but the "
                                         "Trainer was given a (anonymous namespace)::Pooler"),
                       Error);
  CHECK_THROWS_WITH_AS(ref(at::zeros({2, 6}, at::kLong)),
                       doctest::Contains("this model's forward does not take one tensor"), Error);
  // a model given as a shared_ptr converts to its class, not to a holder
  ModelRef from_ptr(pooler.ptr());
  CHECK(&from_ptr.as<PoolerImpl>() == pooler.get());
  CHECK_THROWS_AS(from_ptr.as<Pooler>(), Error);
}

TEST_CASE("capture with any batch: a struct batch replays like eager, carried values stay eager") {
  at::set_num_threads(1);
  const auto batches = pair_batches(16);
  using Graph = Trainer<optim::AdamW, sched::OneCycle, precision::Fp32, accumulate::Every<2>,
                        clip::Norm, parallel::Single, capture::CudaGraph>;
  auto graph_options = [] {
    Graph::Options o{.optim = {.lr = 1e-2,
                               .fused = TRAINKIT_HAS_FUSED_OPTIMIZERS ? std::optional<bool>(true)
                                                                      : std::nullopt},
                     .sched = {.max_lr = 2e-2, .cycle_momentum = false},
                     .clip = {.max_norm = 1.0}};
    o.capture.emulate = true;
    return o;
  };
  SUBCASE("a struct of tensors") {
    if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) return;  // no capturable step before LibTorch 2.4
    auto eager_options = pair_options();
    eager_options.optim.fused = true;
    eager_options.sched.cycle_momentum = false;
    PairTrainer eager(seeded_pooler(), eager_options);
    Graph graph(seeded_pooler(), graph_options());
    eager.fit(PairTask{}, batches);
    graph.fit(PairTask{}, batches);
    CHECK(graph.graph_recorded());
    CHECK(graph.graph_replays() == 4);  // 8 windows: 3 warm-up, the probe, 4 replays
    CHECK(tk_test::max_param_rel_error(eager.model(), graph.model()) < 1e-6);
  }
  SUBCASE("a batch that carries lengths") {
    struct WithLengths {
      at::Tensor tokens, mask, label;
      std::vector<int64_t> lengths;
    };
    struct LengthsTask {
      StepOutput step(Pooler& model, const WithLengths& b) const {
        return {pair_loss(model, b.tokens, b.mask, b.label)};
      }
    };
    Graph graph(seeded_pooler(), graph_options());
    graph.fit(LengthsTask{}, convert<WithLengths>(batches, [](const PairBatch& b) {
                return WithLengths{b.tokens, b.mask, b.label, {}};
              }));
    CHECK_FALSE(graph.graph_recorded());
    CHECK(graph.graph_fallback_reason().find("carries values other than tensors") !=
          std::string::npos);
  }
}
