#pragma once
// What every multi-process test worker uses: its rank, checks that fail
// the process with a message, Gloo options on the launcher's port, and a
// comparison of two models' parameters.
#include <torch/torch.h>

#include <trainkit/parallel/ddp.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

namespace worker {

inline int rank_env() {
  return std::stoi(std::getenv("RANK"));
}
inline int world_env() {
  return std::stoi(std::getenv("WORLD_SIZE"));
}

inline void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

/// Gloo on CPUs (also beside a GPU) at MASTER_PORT + `port_offset`: a
/// scenario that runs several process groups one after another gives each its own.
inline trainkit::parallel::DDP::Options ddp_options(
    int port_offset, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  trainkit::parallel::DDP::Options o;
  o.device = torch::Device(torch::kCPU);
  o.timeout = timeout;
  o.rendezvous.master_port = std::stoi(std::getenv("MASTER_PORT")) + port_offset;
  return o;
}

/// The largest difference between same-named parameters, relative to `b`'s largest magnitude.
inline double max_rel_diff(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto d = (pa[i] - pb[i]).abs().max().item<double>() /
                   pb[i].abs().max().clamp_min(1e-30).item<double>();
    worst = std::max(worst, d);
  }
  return worst;
}

/// main(): runs the scenario argv[1] names; its failure is the process's,
/// with the message on stderr.
inline int run(int argc, char** argv,
               const std::map<std::string, std::function<void()>>& scenarios) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    const auto it = scenarios.find(scenario);
    if (it == scenarios.end()) throw std::runtime_error("unknown scenario \"" + scenario + "\"");
    it->second();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK"), e.what());
    return 1;
  }
  std::printf("rank %d: %s (ok)\n", rank_env(), scenario.c_str());
  return 0;
}

}  // namespace worker
