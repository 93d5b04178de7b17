// End-to-end parity with PyTorch on a transformer: examples/gpt.hpp's GPT
// trained by the Trainer as nanoGPT trains it, against PyTorch's own loop
// (tests/reference/make_gpt_reference.py, which says what it does).
#include <trainkit/trainkit.hpp>

#include <string>
#include <vector>

#include "../examples/gpt.hpp"
#include "gpt_batches.hpp"
#include "step_record.hpp"
#include "support.hpp"

using namespace trainkit;

namespace {

using gpt_batches::kBlock;
using gpt_batches::kVocab;
using gpt_batches::micro_batch;

/// make_gpt_reference.py's init(): the same formula, in the same order.
void formula_init(examples::Gpt& model) {
  torch::NoGradGuard no_grad;
  int64_t k = 0;
  for (auto& item : model->named_parameters()) {
    const auto& name = item.key();
    auto& p = item.value();
    auto v = at::sin(at::arange(p.numel(), at::kDouble) * 0.37 + 0.11 * double(++k)) * 0.02;
    if (name.find("ln_") != std::string::npos && name.ends_with(".weight")) v = v + 1.0;
    p.copy_(v.to(at::kFloat).view_as(p));
  }
}

}  // namespace

TEST_CASE(
    "a GPT trained as nanoGPT trains (no-decay groups, warm-up and cosine, Every<2>, clip 1.0) "
    "follows PyTorch's loop for 20 steps") {
  const auto ref = tk_test::load_reference("gpt.json");
  at::set_num_threads(1);
  examples::Gpt model(examples::GptConfig{
      .vocab_size = kVocab, .block_size = kBlock, .n_layer = 2, .n_head = 4, .n_embd = 32});
  formula_init(model);
  const auto named = model->named_parameters();
  REQUIRE(named.size() == ref["params"].size());
  for (size_t i = 0; i < named.size(); ++i) {
    REQUIRE(named[i].key() == ref["params"][i]["name"].get<std::string>());
  }
  std::vector<examples::TokenBatch> batches;
  for (int64_t m = 0; m < 40; ++m) batches.push_back(micro_batch(m));

  Trainer<optim::AdamW, sched::WarmupCosine, precision::Fp32, accumulate::Every<2>, clip::Norm>
      trainer(model, {.optim = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1},
                      .sched = {.warmup_steps = 5, .start_factor = 0.1, .eta_min = 3e-4},
                      .clip = {.max_norm = 1.0},
                      .param_groups = {params::no_weight_decay()}});
  std::vector<double> losses, norms;
  const auto result = trainer.fit(examples::LanguageModelling{}, batches, {.epochs = 1},
                                  tk_test::StepRecord{&losses, &norms});
  REQUIRE(result.steps == 20);
  const auto& steps = ref["steps"];
  REQUIRE(losses.size() == steps.size());
  double worst_loss = 0, worst_norm = 0, worst_param = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    const double loss = steps[s]["loss"], norm = steps[s]["grad_norm"];
    worst_loss = std::max(worst_loss, std::abs(losses[s] - loss) / std::abs(loss));
    worst_norm = std::max(worst_norm, std::abs(norms[s] - norm) / std::abs(norm));
  }
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& r = ref["params"][i];
    const auto values = tk_test::to_tensor(r["values"].get<std::vector<double>>());
    const auto indices = at::tensor(r["indices"].get<std::vector<int64_t>>(), at::kLong);
    const auto ours = named[i].value().detach().reshape({-1}).index_select(0, indices);
    worst_param = std::max(worst_param, tk_test::max_rel_error(ours, values));
  }
  MESSAGE("relative error: losses " << worst_loss << ", gradient norms " << worst_norm
                                    << ", parameters " << worst_param << " (PyTorch "
                                    << ref["torch"].get<std::string>() << ")");
  CHECK(worst_loss <= 1e-5);
  CHECK(worst_norm <= 1e-5);
  CHECK(worst_param <= 1e-5);
  CHECK(losses.back() < 0.9 * losses.front());  // it learned
}
