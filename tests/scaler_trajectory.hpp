#pragma once
// The GradScaler trajectory check shared by the CPU test (scaler_test.cpp)
// and the CUDA one (cuda_test.cpp, PyTorch's `_amp_*` kernels): the scale and
// growth tracker over a planted pattern of inf/NaN steps follow PyTorch's
// update rule (tests/reference/scaler.json).
#include <trainkit/params.hpp>
#include <trainkit/precision/grad_scaler.hpp>

#include <cmath>

#include "support.hpp"

namespace tk_test {

inline void check_scaler_trajectory(torch::Device device) {
  const auto ref = load_reference("scaler.json");
  trainkit::precision::GradScaler scaler({.init_scale = ref["init_scale"].get<double>(),
                                          .growth_factor = ref["growth_factor"].get<double>(),
                                          .backoff_factor = ref["backoff_factor"].get<double>(),
                                          .growth_interval = ref["growth_interval"].get<int64_t>()},
                                         device);
  auto w = torch::zeros({6}, device).requires_grad_(true);
  trainkit::FlatParams flat(std::vector<at::Tensor>{w});
  const auto pattern = ref["found_inf"].get<std::vector<int>>();
  const auto scales = ref["scale"].get<std::vector<double>>();
  const auto trackers = ref["growth_tracker"].get<std::vector<int64_t>>();
  for (size_t i = 0; i < pattern.size(); ++i) {
    CAPTURE(i);
    w.mutable_grad().fill_(scaler.scale_value());
    if (pattern[i]) w.mutable_grad()[i % 6] = (i % 2) ? NAN : INFINITY;
    scaler.unscale(flat);
    CHECK(scaler.found_inf() == bool(pattern[i]));
    if (!pattern[i]) CHECK(w.grad().eq(1.0).all().item<bool>());
    scaler.update();
    CHECK(scaler.scale_value() == scales[i]);
    CHECK(scaler.growth_tracker() == trackers[i]);
  }
}

}  // namespace tk_test
