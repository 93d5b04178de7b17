#pragma once
// A callback that records each step's loss and gradient norm (-1 where the
// step computed none): what the parity tests compare with PyTorch's loop.
#include <trainkit/state.hpp>

#include <vector>

namespace tk_test {

struct StepRecord {
  std::vector<double>* losses;
  std::vector<double>* norms = nullptr;  ///< not recorded when null
  void on_step_end(trainkit::TrainState& s) {
    losses->push_back(s.loss());
    if (norms) norms->push_back(s.grad_norm().value_or(-1.0));
  }
};

}  // namespace tk_test
