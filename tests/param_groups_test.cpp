// Parameter groups: which group takes which parameter; per-group
// hyperparameters on trainkit's kernels and on ATen's fused ones against
// torch.optim with two and three param_groups (tests/reference/
// groups_optim.json, made by make_groups_reference.py); a group steps
// exactly as an optimizer of its own options would; schedules per group; and
// the errors for groups that cannot work.
#include <trainkit/callbacks/freeze.hpp>
#include <trainkit/capture.hpp>
#include <trainkit/trainkit.hpp>

#include <cmath>
#include <regex>

#include "support.hpp"

using namespace trainkit;
namespace nn = torch::nn;

namespace {

/// The reference's four tensors as a module's parameters p0..p3.
struct FourImpl : nn::Module {
  explicit FourImpl(const nlohmann::json& ref) {
    for (const auto& t : tk_test::reference_tensors(ref)) {
      std::string name(1, 'p');
      name += std::to_string(params.size());
      params.push_back(register_parameter(name, t));
    }
  }
  std::vector<at::Tensor> params;
};
TORCH_MODULE(Four);

/// The reference's groups: tensors by index, torch.optim's keys.
std::vector<ParamGroup> groups_of(const nlohmann::json& c) {
  std::vector<ParamGroup> out;
  for (const auto& g : c["groups"]) {
    std::string pattern = "^p(";
    for (const auto& i : g["params"]) {
      if (pattern.back() != '(') pattern += '|';
      pattern += i.dump();
    }
    GroupOptions o;
    if (g.contains("lr")) o.lr = g["lr"].get<double>();
    if (g.contains("weight_decay")) o.weight_decay = g["weight_decay"].get<double>();
    if (g.contains("betas"))
      o.beta1 = g["betas"][0].get<double>(), o.beta2 = g["betas"][1].get<double>();
    if (g.contains("eps")) o.eps = g["eps"].get<double>();
    if (g.contains("amsgrad")) o.amsgrad = g["amsgrad"].get<bool>();
    if (g.contains("momentum")) o.momentum = g["momentum"].get<double>();
    if (g.contains("dampening")) o.dampening = g["dampening"].get<double>();
    if (g.contains("nesterov")) o.nesterov = g["nesterov"].get<bool>();
    out.push_back(
        {"group_" + std::to_string(out.size() + 1), params::name_matches(pattern + ")$"), o});
  }
  return out;
}

template <class Opt>
typename Opt::Options options_of(const nlohmann::json& k, std::optional<bool> fused) {
  typename Opt::Options o;
  o.lr = k["lr"].get<double>();
  if (k.contains("weight_decay")) o.weight_decay = k["weight_decay"].get<double>();
  if constexpr (std::is_same_v<Opt, optim::SGD>) {
    if (k.contains("momentum")) o.momentum = k["momentum"].get<double>();
  }
  o.fused = fused;
  return o;
}

/// Steps `opt` through the reference's gradients, every group's lr decayed
/// as the script decays it; the tensors' values (index order) at each checkpoint.
template <class Opt>
std::vector<at::Tensor> trajectory(const nlohmann::json& ref, Opt& opt, size_t param_groups,
                                   const std::vector<at::Tensor>& tensors) {
  std::vector<double> base;
  for (size_t g = 0; g < param_groups; ++g) base.push_back(opt.lr(g));
  const auto checkpoints = ref["checkpoints"].get<std::vector<int64_t>>();
  const double decay = ref["lr_decay"].get<double>();
  std::vector<at::Tensor> out;
  const auto grads = ref["grads"];
  for (int64_t step = 0; step < int64_t(grads.size()); ++step) {
    for (size_t g = 0; g < param_groups; ++g)
      opt.set_lr(g, base[g] * std::pow(decay, double(step)));
    const auto all = tk_test::to_tensor(grads[step].get<std::vector<double>>()).to(at::kFloat);
    int64_t offset = 0;
    for (const auto& t : tensors) {  // the tensors outside the flat buffers have no gradient
      torch::NoGradGuard no_grad;
      if (t.grad().defined()) t.mutable_grad().copy_(all.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
    opt.step();
    if (std::find(checkpoints.begin(), checkpoints.end(), step + 1) != checkpoints.end()) {
      std::vector<at::Tensor> flat;
      for (const auto& t : tensors) flat.push_back(t.detach().reshape(-1));
      out.push_back(at::cat(flat).clone());
    }
  }
  return out;
}

template <class Opt>
void check_case(const nlohmann::json& ref, const std::string& name) {
  const auto& c = ref["cases"][name];
  CAPTURE(name);
  {  // trainkit's kernels against torch.optim's default step
    Four model(ref);
    FlatParams flat(*model, groups_of(c));
    Opt opt(flat, options_of<Opt>(c["options"], false));
    const auto got = trajectory(ref, opt, flat.param_groups().size(), model->params);
    REQUIRE(got.size() == c["params"].size());
    for (size_t k = 0; k < got.size(); ++k) {
      const auto want = tk_test::to_tensor(c["params"][k].get<std::vector<double>>());
      CHECK(tk_test::max_rel_error(got[k], want) <= 1e-6);
    }
  }
#if TRAINKIT_HAS_FUSED_OPTIMIZERS
  {  // ATen's fused kernels, one flat buffer per group: bit for bit
    Four model(ref);
    FlatParams flat(*model, groups_of(c));
    Opt opt(flat, options_of<Opt>(c["options"], true));
    REQUIRE(opt.fused());
    const auto got = trajectory(ref, opt, flat.param_groups().size(), model->params);
    for (size_t k = 0; k < got.size(); ++k) {
      const auto want = tk_test::to_tensor(c["fused_params"][k].get<std::vector<double>>());
      CHECK(torch::equal(got[k], want.to(at::kFloat)));
    }
  }
#endif
  {  // each group steps exactly as an optimizer of the group's own options
    Four model(ref);
    FlatParams flat(*model, groups_of(c));
    Opt grouped(flat, options_of<Opt>(c["options"], false));
    std::vector<typename Opt::Options> resolved;  // before the schedule moves the rates
    for (size_t g = 0; g < flat.param_groups().size(); ++g) resolved.push_back(grouped.options(g));
    const auto together = trajectory(ref, grouped, flat.param_groups().size(), model->params);
    for (size_t g = 0; g < flat.param_groups().size(); ++g) {
      CAPTURE(g);
      Four alone(ref);
      std::vector<at::Tensor> mine;  // this group's tensors, for a flat buffer of its own
      for (const auto& fg : flat.groups()) {
        if (fg.param_group != g) continue;
        for (const auto& p : fg.params) {
          for (size_t i = 0; i < model->params.size(); ++i)
            if (model->params[i].is_same(p)) mine.push_back(alone->params[i]);
        }
      }
      FlatParams own(mine);
      Opt single(own, resolved[g]);
      const auto apart = trajectory(ref, single, 1, alone->params);
      const auto last = together.back(), solo = apart.back();
      int64_t offset = 0;
      for (size_t i = 0; i < model->params.size(); ++i) {
        const auto n = model->params[i].numel();
        const bool in_group = std::any_of(mine.begin(), mine.end(), [&](const at::Tensor& t) {
          return t.is_same(alone->params[i]);
        });
        if (in_group) CHECK(torch::equal(last.narrow(0, offset, n), solo.narrow(0, offset, n)));
        offset += n;
      }
    }
  }
}

/// The parameter group that holds `p`.
size_t group_of(const FlatParams& flat, const at::Tensor& p) {
  for (const auto& g : flat.groups())
    for (const auto& q : g.params)
      if (q.is_same(p)) return g.param_group;
  FAIL("the parameter is in no group");
  return 0;
}

struct TinyLmImpl : nn::Module {
  TinyLmImpl() {
    emb = register_module("emb", nn::Embedding(10, 4));
    fc1 = register_module("fc1", nn::Linear(4, 8));
    norm = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({8})));
    head = register_module("head", nn::Linear(8, 3));
  }
  at::Tensor forward(const at::Tensor& x) { return head(norm(torch::relu(fc1(emb(x))))).mean(1); }
  nn::Embedding emb{nullptr};
  nn::Linear fc1{nullptr};
  nn::LayerNorm norm{nullptr};
  nn::Linear head{nullptr};
};
TORCH_MODULE(TinyLm);

using tk_test::error_of;

/// `count` batches of TinyLm's tokens and labels, from the global generator.
std::vector<data::Batch> token_batches(int count) {
  std::vector<data::Batch> out;
  for (int i = 0; i < count; ++i)
    out.push_back({at::randint(0, 10, {4, 5}), at::randint(0, 3, {4})});
  return out;
}

/// A group option the schedule does not have is refused, naming it.
void check_schedule_refuses(const GroupOptions& group, const std::string& expected) {
  using W = Trainer<optim::SGD, sched::WarmupCosine>;
  const auto msg = error_of([&] {
    W w(TinyLm(), W::Options{.param_groups = {{"x", params::below_2d(), group}}});
  });
  CHECK_MESSAGE(msg.find(expected) != std::string::npos, msg);
}

}  // namespace

TEST_CASE("parameter groups match torch.optim with two and three param_groups") {
  at::set_num_threads(1);
  const auto ref = tk_test::load_reference("groups_optim.json");
  check_case<optim::AdamW>(ref, "adamw_2_groups");
  check_case<optim::Adam>(ref, "adam_3_groups");
  check_case<optim::SGD>(ref, "sgd_3_groups");
}

TEST_CASE("parameter groups: the first group that selects a parameter takes it") {
  TinyLm lm;
  SUBCASE("no_weight_decay: biases, norms and (asked for) embeddings") {
    FlatParams flat(*lm, {params::no_weight_decay(/*embeddings=*/true)});
    CHECK(flat.param_groups().size() == 2);
    CHECK(flat.param_groups()[1].name == "no_weight_decay");
    CHECK(flat.param_groups()[1].options.weight_decay == 0.0);
    for (const auto& p : {lm->fc1->weight, lm->head->weight}) CHECK(group_of(flat, p) == 0);
    for (const auto& p :
         {lm->emb->weight, lm->fc1->bias, lm->norm->weight, lm->norm->bias, lm->head->bias})
      CHECK(group_of(flat, p) == 1);
    optim::AdamW opt(flat, {.weight_decay = 0.1});
    CHECK(opt.options(0).weight_decay == 0.1);
    CHECK(opt.options(1).weight_decay == 0.0);
  }
  SUBCASE("without embeddings, the table keeps its decay") {
    FlatParams flat(*lm, {params::no_weight_decay()});
    CHECK(group_of(flat, lm->emb->weight) == 0);
  }
  SUBCASE("by module type (holder or class) and by name; earlier groups first") {
    FlatParams flat(*lm, {{"linear", params::in_module<nn::Linear>(), {.lr_scale = 0.5}},
                          {"small", params::below_2d(), {.lr = 1e-4}},
                          {"norm", params::in_module<nn::LayerNormImpl>(), {}, /*optional=*/true},
                          {"emb", params::name_matches(R"(^emb\.)"), {}}});
    for (const auto& p : {lm->fc1->weight, lm->fc1->bias, lm->head->weight, lm->head->bias})
      CHECK(group_of(flat, p) == 1);
    CHECK(group_of(flat, lm->norm->weight) == 2);
    CHECK(group_of(flat, lm->emb->weight) == 4);
    optim::SGD opt(flat, {.lr = 0.2});
    CHECK(opt.lr(1) == 0.2 * 0.5);
    CHECK(opt.lr(2) == 1e-4);
    CHECK(opt.lr(4) == 0.2);
    opt.set_lr(0.1);  // a sweep moves every group, keeping the ratios
    CHECK(opt.lr(1) == doctest::Approx(0.05));
    CHECK(opt.lr(2) == doctest::Approx(5e-5));
  }
  SUBCASE("frozen parameters are in no group and have no optimizer state") {
    lm->emb->weight.requires_grad_(false);
    FlatParams flat(*lm, {params::no_weight_decay(true)});
    int64_t n = 0;
    for (const auto& g : flat.groups()) n += g.numel();
    CHECK(n == flat.numel());
    CHECK(flat.numel() == 4 * 8 + 8 + 8 + 8 + 8 * 3 + 3);
    optim::AdamW opt(flat, {});
    int64_t state = 0;
    for (const auto& m : opt.exp_avg()) state += m.numel();
    CHECK(state == flat.numel());
  }
  SUBCASE("layer-wise learning-rate decay") {
    struct BlocksImpl : nn::Module {
      BlocksImpl() {
        register_module("embed", nn::Linear(2, 4));
        blocks = register_module("blocks", nn::ModuleList(nn::Linear(4, 4), nn::Linear(4, 4)));
        register_module("head", nn::Linear(4, 2));
      }
      nn::ModuleList blocks{nullptr};
    };
    auto net = std::make_shared<BlocksImpl>();
    FlatParams flat(*net, params::layer_decay({.decay = 0.5, .layers = 2}));
    optim::AdamW opt(flat, {.lr = 1.0, .weight_decay = 0.1});
    const auto lr_of = [&](const std::string& name) {
      return opt.lr(group_of(flat, net->named_parameters()[name]));
    };
    const auto wd_of = [&](const std::string& name) {
      return opt.options(group_of(flat, net->named_parameters()[name])).weight_decay;
    };
    CHECK(lr_of("embed.weight") == 0.125);
    CHECK(lr_of("blocks.0.weight") == 0.25);
    CHECK(lr_of("blocks.1.bias") == 0.5);
    CHECK(lr_of("head.weight") == 1.0);
    CHECK(wd_of("blocks.1.weight") == 0.1);
    CHECK(wd_of("blocks.1.bias") == 0.0);
  }
}

TEST_CASE("parameter groups that cannot work are refused, naming the group and the option") {
  TinyLm lm;
  auto has = [](const std::string& msg, const std::string& part) {
    CHECK_MESSAGE(msg.find(part) != std::string::npos, msg);
  };
  const auto msg_nothing = error_of([&] {
    FlatParams flat(*lm, {{"typo", params::name_matches("^nope\\."), {}}});
  });
  has(msg_nothing, "option `param_groups[0] (\"typo\")` = \"no trainable parameter\" is invalid");
  has(msg_nothing, "no earlier group took (or optional = true)");
  has(error_of([&] { params::name_matches("(unclosed"); }), "option `params::name_matches`");
  FlatParams momentum_flat(*lm, {{"b", params::below_2d(), {.momentum = 0.9}}});
  const auto msg_momentum = error_of([&] { optim::AdamW opt(momentum_flat, {}); });
  has(msg_momentum, "option `param_groups[0].momentum` = 0.9 is invalid");
  has(msg_momentum, "optim::AdamW has no momentum");
  FlatParams beta_flat(*lm, {{"b", params::below_2d(), {.beta1 = 0.5}}});
  has(error_of([&] { optim::SGD opt(beta_flat, {}); }), "optim::SGD has no beta1");
  FlatParams both(*lm, {{"b", params::below_2d(), {.lr = 1.0, .lr_scale = 2.0}}});
  has(error_of([&] { optim::SGD opt(both, {}); }), "option `param_groups[0].lr_scale` = 2");
  FlatParams negative(*lm, {{"b", params::below_2d(), {.weight_decay = -1.0}}});
  has(error_of([&] { optim::AdamW opt(negative, {}); }),
      "option `param_groups[0].weight_decay` = -1 is invalid");
  FlatParams nesterov(*lm, {{"b", params::below_2d(), {.nesterov = true}}});
  has(error_of([&] { optim::SGD opt(nesterov, {.momentum = 0.0}); }),
      "option `param_groups[0].nesterov` = true is invalid");
  using Wrapped = Trainer<optim::Wrap<torch::optim::SGD>>;
  has(error_of([] {
        Wrapped trainer(TinyLm(),
                        Wrapped::Options{.optim = {.torch = torch::optim::SGDOptions(0.1)},
                                         .param_groups = {params::no_weight_decay()}});
      }),
      "option `param_groups` = 1 is invalid");
}

TEST_CASE("each parameter group follows the schedule from its own base learning rate") {
  at::set_num_threads(1);
  torch::manual_seed(3);
  const auto data = token_batches(12);
  const auto follow = [&]<class S>(std::type_identity<S>, const typename S::Options& so) {
    using T = Trainer<optim::AdamW, S>;
    T trainer(TinyLm(), typename T::Options{
                            .optim = {.lr = 1e-2},
                            .sched = so,
                            .param_groups = {{"slow", params::below_2d(), {.lr_scale = 0.1}},
                                             {"emb", params::name_matches("^emb"), {.lr = 3e-3}}}});
    struct Record {
      T* t;
      std::vector<std::array<double, 4>> lrs;  // TrainState::lr, then groups 0..2
      void on_before_step(TrainState& s) {
        lrs.push_back({s.lr, t->optimizer().lr(0), t->optimizer().lr(1), t->optimizer().lr(2)});
      }
    } record{&trainer, {}};
    trainer.fit(task::Classification{}, data, {.epochs = 2}, record);
    REQUIRE(record.lrs.size() == 24);
    const double bases[] = {1e-2, 0.1 * 1e-2, 3e-3};  // lr_scale times the optimizer's lr
    for (size_t g = 0; g < 3; ++g) {
      S alone(so);
      alone.start({bases[g], 24});
      for (size_t step = 0; step < record.lrs.size(); ++step) {
        CAPTURE(g);
        CAPTURE(step);
        CHECK(record.lrs[step][g + 1] == alone.lr_at(int64_t(step)));
      }
    }
    for (const auto& l : record.lrs) CHECK(l[0] == l[1]);
  };
  follow(std::type_identity<sched::WarmupCosine>{}, {.warmup_steps = 5, .eta_min = 1e-5});
  // max_lr 0: each group's own lr is its maximum (torch's per-group max_lr)
  follow(std::type_identity<sched::OneCycle>{}, {.cycle_momentum = false});

  {  // OneCycle's max_lr per group, as PyTorch's max_lr list
    using T = Trainer<optim::AdamW, sched::OneCycle>;
    const sched::OneCycle::Options so{.max_lr = 2e-2, .cycle_momentum = false};
    T trainer(TinyLm(), T::Options{.optim = {.lr = 1e-2},
                                   .sched = so,
                                   .param_groups = {
                                       {"slow", params::below_2d(), {.max_lr = 2e-3}},
                                       {"emb", params::name_matches("^emb"), {.max_lr = 5e-3}}}});
    struct Record {
      T* t;
      std::vector<std::array<double, 3>> lrs;
      void on_before_step(TrainState&) {
        lrs.push_back({t->optimizer().lr(0), t->optimizer().lr(1), t->optimizer().lr(2)});
      }
    } record{&trainer, {}};
    trainer.fit(task::Classification{}, data, {.epochs = 2}, record);
    REQUIRE(record.lrs.size() == 24);
    const double peaks[] = {2e-2, 2e-3, 5e-3};
    for (size_t g = 0; g < 3; ++g) {
      auto with_peak = so;
      with_peak.max_lr = peaks[g];
      sched::OneCycle alone(with_peak);
      alone.start({1e-2, 24});
      for (size_t step = 0; step < 24; ++step)
        CHECK(record.lrs[step][g] == alone.lr_at(int64_t(step)));
    }
    // a group's own lr that sched.max_lr would silently replace is refused
    const auto msg = error_of([&] {
      T t(TinyLm(), T::Options{.sched = so,
                               .param_groups = {{"slow", params::below_2d(), {.lr_scale = 0.1}}}});
    });
    CHECK_MESSAGE(msg.find("option `sched.max_lr` = 0.02 is invalid; accepted: 0 (each group peaks "
                           "at its own lr), or a max_lr for param_groups[0]") != std::string::npos,
                  msg);
    check_schedule_refuses({.max_lr = 0.1},
                           "option `param_groups[0].max_lr` = 0.1 is invalid; "
                           "accepted: unset: this schedule has no max_lr");
  }
}

TEST_CASE("ReduceLROnPlateau reduces every group, each to its own min_lr") {
  at::set_num_threads(1);
  torch::manual_seed(3);
  const auto data = token_batches(4);
  using T = Trainer<optim::SGD, sched::ReduceLROnPlateau>;
  using Plateau = sched::ReduceLROnPlateau;
  // never better after the first epoch (an absolute threshold no loss beats):
  // a reduction at the end of every later epoch, as PyTorch's per-group min_lrs
  T trainer(TinyLm(),
            T::Options{.optim = {.lr = 0.2},
                       .sched = {.metric = "train_loss",
                                 .factor = 0.5,
                                 .patience = 0,
                                 .threshold = 1e9,
                                 .threshold_mode = Plateau::Threshold::Abs},
                       .param_groups = {{"floor", params::below_2d(), {.min_lr = 0.05}}}});
  trainer.fit(task::Classification{}, data, {.epochs = 6});
  CHECK(trainer.optimizer().lr(0) == 0.2 * std::pow(0.5, 5));
  CHECK(trainer.optimizer().lr(1) == 0.05);
  check_schedule_refuses({.min_lr = 0.1},
                         "option `param_groups[0].min_lr` = 0.1 is invalid; "
                         "accepted: unset: this schedule has no min_lr");
}

TEST_CASE("callbacks::Freeze: a frozen group keeps its values and state, then trains") {
  at::set_num_threads(1);
  torch::manual_seed(3);
  const auto data = token_batches(6);
  const std::vector<ParamGroup> groups{{"embedding", params::name_matches("^emb\\."), {}}};
  using T = Trainer<optim::AdamW>;
  torch::manual_seed(5);
  TinyLm lm;
  const auto start = lm->emb->weight.detach().clone();
  T trainer(lm, T::Options{.optim = {.lr = 1e-2}, .param_groups = groups});
  struct Watch {
    TinyLm lm;
    at::Tensor start;
    std::vector<bool> unchanged;  // per epoch end
    void on_epoch_end(TrainState&) { unchanged.push_back(torch::equal(lm->emb->weight, start)); }
  } watch{lm, start, {}};
  callbacks::Freeze freeze(trainer.flat_params(), {.group = "embedding", .until_epoch = 2});
  trainer.fit(task::Classification{}, data, {.epochs = 3}, freeze, watch);
  CHECK(watch.unchanged == std::vector<bool>{true, true, false});
  CHECK(lm->emb->weight.requires_grad());  // unfrozen at the end
  // Adam's step count for the frozen buffer advanced only in the last epoch
  const size_t emb_buffer = [&] {
    for (size_t i = 0; i < trainer.flat_params().groups().size(); ++i)
      if (trainer.flat_params().groups()[i].param_group == 1) return i;
    return size_t(0);
  }();
  CHECK(trainer.optimizer().steps_taken() == 18);
  CHECK(trainer.optimizer().steps_of(emb_buffer) == 6);

  SUBCASE("the other groups train exactly as with the group never trainable") {
    torch::manual_seed(5);
    TinyLm frozen_lm;
    frozen_lm->emb->weight.requires_grad_(false);
    T plain(frozen_lm, T::Options{.optim = {.lr = 1e-2}});
    torch::manual_seed(5);
    TinyLm lm2;
    T grouped(lm2, T::Options{.optim = {.lr = 1e-2}, .param_groups = groups});
    callbacks::Freeze always(grouped.flat_params(), {.group = "embedding", .until_epoch = 9});
    plain.fit(task::Classification{}, data, {.epochs = 2});
    grouped.fit(task::Classification{}, data, {.epochs = 2}, always);
    CHECK(torch::equal(lm2->emb->weight, frozen_lm->emb->weight));
    CHECK(torch::equal(lm2->fc1->weight, frozen_lm->fc1->weight));
    CHECK(torch::equal(lm2->head->bias, frozen_lm->head->bias));
  }
  SUBCASE("captured steps: recorded again when the group is unfrozen, equal to eager steps") {
    if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) return;  // no capturable step before LibTorch 2.4
    using G = TrainerWith<capture::CudaGraph>;
    G::Options go{.optim = {.lr = 1e-2, .fused = true}, .param_groups = groups};
    go.capture.emulate = true;
    torch::manual_seed(5);
    TinyLm eager_lm;
    T eager(eager_lm, T::Options{.optim = {.lr = 1e-2, .fused = true}, .param_groups = groups});
    torch::manual_seed(5);
    TinyLm graph_lm;
    G graph(graph_lm, go);
    callbacks::Freeze eager_freeze(eager.flat_params(), {.group = "embedding", .until_epoch = 2});
    callbacks::Freeze graph_freeze(graph.flat_params(), {.group = "embedding", .until_epoch = 2});
    eager.fit(task::Classification{}, data, {.epochs = 3}, eager_freeze);
    graph.fit(task::Classification{}, data, {.epochs = 3}, graph_freeze);
    // epoch 0: 3 warm-up steps, the probe, 2 replays; epoch 1: 6 replays;
    // epoch 2 (unfrozen): recorded again after 3 warm-up steps and a probe
    CHECK(graph.graph_replays() == 10);
    CHECK(!torch::equal(graph_lm->emb->weight, start));  // it trained once unfrozen
    CHECK(tk_test::max_param_rel_error(eager.model(), graph.model()) < 1e-6);
  }
  CHECK(error_of([&] { callbacks::Freeze f(trainer.flat_params(), {.group = "backbone"}); })
            .find("option `parameter group` = \"backbone\" is invalid; accepted: a group's name "
                  "(default, embedding)") != std::string::npos);
}
