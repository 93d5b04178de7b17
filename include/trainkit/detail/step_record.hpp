#pragma once
// What the loggers (TensorBoard, JsonLines, RunReport) write on a logging
// step, so that they all write the same names.
#include <string>
#include <utility>
#include <vector>

#include "trainkit/state.hpp"

namespace trainkit::detail {

using NamedValues = std::vector<std::pair<std::string, double>>;

/// The loss, the gradient norm and loss scale when there are such, then the
/// scalars that callbacks before the logger published. Reads the device.
inline NamedValues step_record(const TrainState& state) {
  NamedValues values{{"loss", state.loss()}};
  if (const auto norm = state.grad_norm()) values.emplace_back("grad_norm", *norm);
  if (const auto scale = state.loss_scale()) values.emplace_back("loss_scale", *scale);
  for (const auto& [name, value] : state.scalars) values.emplace_back(name, value);
  return values;
}

}  // namespace trainkit::detail
