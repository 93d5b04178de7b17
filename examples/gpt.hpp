#pragma once
// A small decoder-only transformer written the way nanoGPT writes it (token
// and position embeddings, pre-norm blocks of causal self-attention and an
// MLP, the head tied to the token embedding), with a padding mask in its
// forward; a character corpus drawn from a small grammar; the language
// modelling task. Shared by examples/gpt.cpp and tests/gpt_test.cpp.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <trainkit/data.hpp>
#include <trainkit/trainkit.hpp>

namespace examples {

struct GptConfig {
  int64_t vocab_size = 32;
  int64_t block_size = 64;  ///< the longest sequence
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
};

struct CausalSelfAttentionImpl : torch::nn::Module {
  explicit CausalSelfAttentionImpl(const GptConfig& c) : n_head(c.n_head) {
    c_attn = register_module("c_attn", torch::nn::Linear(c.n_embd, 3 * c.n_embd));
    c_proj = register_module("c_proj", torch::nn::Linear(c.n_embd, c.n_embd));
  }
  /// `allowed` (B, 1, T, T) bool: query t may attend to key s.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& allowed) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / n_head;
    const auto qkv = c_attn(x).split(C, 2);
    const auto heads = [&](const at::Tensor& t) {
      return t.view({B, T, n_head, D}).transpose(1, 2);
    };
    const auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
#if TORCH_VERSION_MAJOR >= 2
    // PyTorch's fused attention, as nanoGPT uses it: on a GPU the (B, heads,
    // T, T) scores stay on chip instead of passing through memory several
    // times in float32 (docs/benchmarks.md, the GPT at nanoGPT's size)
    const auto out = at::scaled_dot_product_attention(q, k, v, allowed);
#else
    auto att = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(D)));
    att = at::softmax(
        att.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity()), -1);
    const auto out = at::matmul(att, v);
#endif
    return c_proj(out.transpose(1, 2).contiguous().view({B, T, C}));
  }
  int64_t n_head;
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const GptConfig& c) {
    c_fc = register_module("c_fc", torch::nn::Linear(c.n_embd, 4 * c.n_embd));
    c_proj = register_module("c_proj", torch::nn::Linear(4 * c.n_embd, c.n_embd));
  }
  at::Tensor forward(const at::Tensor& x) { return c_proj(torch::gelu(c_fc(x))); }
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptConfig& c) {
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
    attn = register_module("attn", CausalSelfAttention(c));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
    mlp = register_module("mlp", Mlp(c));
  }
  at::Tensor forward(at::Tensor x, const at::Tensor& allowed) {
    x = x + attn(ln_1(x), allowed);
    return x + mlp(ln_2(x));
  }
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& c) : config(c) {
    if (c.n_embd % c.n_head != 0) {
      throw std::invalid_argument("GptConfig: n_embd must be a multiple of n_head");
    }
    wte = register_module("wte", torch::nn::Embedding(c.vocab_size, c.n_embd));
    wpe = register_module("wpe", torch::nn::Embedding(c.block_size, c.n_embd));
    h = register_module("h", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(Block(c));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  }
  /// tokens (B, T) int64, mask (B, T) bool (true at real tokens, right-padded)
  /// -> logits (B, T, vocab_size).
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& mask) {
    const int64_t T = tokens.size(1);
    if (T > config.block_size) {
      throw std::invalid_argument("Gpt: " + std::to_string(T) + " tokens, block_size is " +
                                  std::to_string(config.block_size));
    }
    auto x = wte(tokens) + wpe(at::arange(T, tokens.options()));
    // causal, and no padded key (a padded query still sees the real tokens before it)
    const auto causal = at::ones({T, T}, mask.options().dtype(at::kBool)).tril();
    const auto allowed = causal.view({1, 1, T, T}).logical_and(mask.view({-1, 1, 1, T}));
    // each block a unit of full sharding (parallel::FullShard); the identity elsewhere
    for (const auto& block : *h) {
      x = trainkit::parallel::unit(block,
                                   [&] { return block->as<BlockImpl>()->forward(x, allowed); });
    }
    // the head shares the token embedding's weights (one parameter, as nanoGPT ties them)
    return torch::nn::functional::linear(ln_f(x), wte->weight);
  }
  GptConfig config;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Gpt);

/// nanoGPT's initialisation: N(0, 0.02) weights and embeddings, zero biases,
/// the residual projections at 0.02 / sqrt(2 n_layer).
inline void init_like_nanogpt(Gpt& model) {
  torch::NoGradGuard no_grad;
  const double proj_std = 0.02 / std::sqrt(2.0 * double(model->config.n_layer));
  for (auto& item : model->named_parameters()) {
    const auto& name = item.key();
    auto& p = item.value();
    const bool norm = name.find("ln_") != std::string::npos;
    if (norm) continue;  // LayerNorm: ones and zeros already
    if (name.ends_with(".bias")) {
      p.zero_();
    } else {
      p.normal_(0.0, name.ends_with("c_proj.weight") ? proj_std : 0.02);
    }
  }
}

/// One sequence: tokens[t] predicts targets[t] = the next character.
struct TokenSample {
  at::Tensor tokens, targets;  // (L) int64 each
};

/// A batch: PadSequences' output (tokens padded with 0, targets with -100,
/// the mask and the lengths).
using TokenBatch = trainkit::data::Padded<TokenSample>;

/// The language modelling task: cross-entropy over the real tokens.
struct LanguageModelling {
  trainkit::StepOutput step(Gpt& model, const TokenBatch& b) const {
    namespace F = torch::nn::functional;
    const auto logits = model(b.batch.tokens, b.mask);
    const auto loss = F::cross_entropy(logits.flatten(0, 1), b.batch.targets.flatten(),
                                       F::CrossEntropyFuncOptions().ignore_index(-100));
    return {loss, b.mask.size(0)};
  }
};

/// Sentences drawn from a small grammar ("the red fox sees a small bird."),
/// as characters: a corpus with structure a small model learns in minutes.
class SentenceCorpus {
 public:
  static constexpr const char* kAlphabet = " .abcdefghijklmnopqrstuvwxyz";

  SentenceCorpus(int64_t sentences, uint64_t seed, int64_t max_chars) {
    static const std::vector<std::string> det{"the", "a", "every", "no"},
        adj{"red", "small", "quick", "old", "green", "lazy", "bright"},
        noun{"fox", "dog", "bird", "cat", "fish", "horse", "child", "robot"},
        verb{"sees", "likes", "follows", "finds", "hears", "chases"};
    std::mt19937_64 rng(seed);
    auto pick = [&](const std::vector<std::string>& words) {
      return words[std::uniform_int_distribution<size_t>(0, words.size() - 1)(rng)];
    };
    while (static_cast<int64_t>(text_.size()) < sentences) {
      std::string s = pick(det) + " ";
      if (rng() % 2) s += pick(adj) + " ";
      s += pick(noun) + " " + pick(verb) + " " + pick(det) + " ";
      if (rng() % 2) s += pick(adj) + " ";
      s += pick(noun) + ".";
      if (static_cast<int64_t>(s.size()) <= max_chars + 1) text_.push_back(s);
    }
  }
  static int64_t vocab_size() { return static_cast<int64_t>(std::string(kAlphabet).size()); }
  static int64_t encode(char c) { return static_cast<int64_t>(std::string(kAlphabet).find(c)); }
  static char decode(int64_t i) { return kAlphabet[i]; }

  int64_t size() const { return static_cast<int64_t>(text_.size()); }
  const std::string& text(int64_t i) const { return text_[i]; }
  /// The dataset's sample: the sentence's characters, each predicting the next.
  TokenSample get(int64_t i) const {
    const auto& s = text_[i];
    std::vector<int64_t> ids;
    for (char c : s) ids.push_back(encode(c));
    const auto all = torch::tensor(ids, torch::kLong);
    const auto n = all.size(0) - 1;
    return {all.narrow(0, 0, n), all.narrow(0, 1, n)};
  }

 private:
  std::vector<std::string> text_;
};

/// Greedy continuation of `prompt`, one character at a time.
inline std::string complete(Gpt& model, const std::string& prompt, int64_t chars,
                            const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::string out = prompt;
  for (int64_t i = 0; i < chars && static_cast<int64_t>(out.size()) < model->config.block_size;
       ++i) {
    std::vector<int64_t> ids;
    for (char c : out) ids.push_back(SentenceCorpus::encode(c));
    const auto tokens = torch::tensor(ids, torch::kLong).unsqueeze(0).to(device);
    const auto logits = model(tokens, at::ones_like(tokens, tokens.options().dtype(at::kBool)));
    const char next = SentenceCorpus::decode(logits[0][-1].argmax().item<int64_t>());
    out += next;
    if (next == '.') break;
  }
  model->train();
  return out;
}

}  // namespace examples
