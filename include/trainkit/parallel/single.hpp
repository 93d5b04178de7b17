#pragma once
// parallel::Single: one process, one device (CUDA when available, else CPU,
// unless `device` says otherwise). Nothing to synchronise.
#include <torch/cuda.h>
#include <torch/nn/module.h>

#include <optional>

#include "trainkit/detail/scope.hpp"
#include "trainkit/params.hpp"

namespace trainkit::parallel {

class Single {
 public:
  struct Options {
    std::optional<torch::Device> device{};
  };
  Single() : Single(Options{}) {}
  explicit Single(const Options& o)
      : device_(o.device.value_or(torch::cuda::is_available() ? torch::Device(torch::kCUDA)
                                                              : torch::Device(torch::kCPU))) {}

  torch::Device device() const { return device_; }
  void prepare(torch::nn::Module& model) { model.to(device_); }
  detail::NoScope defer_sync() const { return {}; }
  void finish_sync(FlatParams&) {}
  int rank() const { return 0; }
  int world_size() const { return 1; }
  bool is_main() const { return true; }

 private:
  torch::Device device_;
};

}  // namespace trainkit::parallel
