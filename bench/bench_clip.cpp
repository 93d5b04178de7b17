// clip::Norm on the flat gradient vs torch::nn::utils::clip_grad_norm_ on 200
// tensors of 1k elements: time, and the total norm's error against a float64 reference.
#include <torch/torch.h>
#include <trainkit/clip.hpp>

#include "bench_util.hpp"

using namespace trainkit;

int main() {
  torch::manual_seed(0);
  std::vector<at::Tensor> params, copies;
  for (int i = 0; i < 200; ++i) {
    params.push_back(torch::randn({1000}).requires_grad_(true));
    copies.push_back(params.back().detach().clone().requires_grad_(true));
  }
  FlatParams flat(params);
  for (size_t i = 0; i < params.size(); ++i) {
    auto g = torch::randn_like(params[i]) * (1.0 + double(i % 7));
    params[i].mutable_grad().copy_(g);
    copies[i].mutable_grad() = g.clone();
  }
  double reference = 0.0;  // float64 total norm
  for (const auto& p : params) reference += p.grad().to(at::kDouble).pow(2).sum().item<double>();
  reference = std::sqrt(reference);

  clip::Norm norm({.max_norm = 1e9});  // measure without changing the gradients
  norm.clip(flat);
  const double ours = norm.last_norm().item<double>();
  const double theirs = torch::nn::utils::clip_grad_norm_(copies, 1e9);
  const double t_ours = bench::seconds_per_call([&] { norm.clip(flat); }, 2000);
  const double t_theirs =
      bench::seconds_per_call([&] { torch::nn::utils::clip_grad_norm_(copies, 1e9); }, 200);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "\"tensors\": 200, \"numel\": %lld, \"trainkit_us\": %.1f, \"torch_us\": %.1f, "
                "\"speedup\": %.1f, \"trainkit_rel_error\": %.2e, \"torch_rel_error\": %.2e",
                (long long)flat.numel(), t_ours * 1e6, t_theirs * 1e6, t_theirs / t_ours,
                std::abs(ours - reference) / reference, std::abs(theirs - reference) / reference);
  bench::report("clip_norm_200_small", buf);

  // Why 4096-element chunks: float32 accuracy and time of the total norm of
  // one 16M-element gradient, by chunk size (1 chunk = one plain norm).
  auto big = torch::zeros({int64_t{16} << 20}).requires_grad_(true);
  FlatParams big_flat(std::vector<at::Tensor>{big});
  big_flat.groups()[0].grad.normal_().mul_(3.0);
  const double exact =
      std::sqrt(big_flat.groups()[0].grad.to(at::kDouble).pow(2).sum().item<double>());
  for (int64_t chunk : {int64_t{1024}, int64_t{4096}, int64_t{65536}, int64_t{16} << 20}) {
    const double norm = clip::total_grad_norm(big_flat, 2.0, chunk).item<double>();
    const double t =
        bench::seconds_per_call([&] { clip::total_grad_norm(big_flat, 2.0, chunk); }, 5);
    std::snprintf(
        buf, sizeof buf, "\"numel\": %lld, \"chunk\": %lld, \"rel_error\": %.2e, \"ms\": %.2f",
        (long long)big.numel(), (long long)chunk, std::abs(norm - exact) / exact, t * 1e3);
    bench::report("norm_chunk_size", buf);
  }
}
