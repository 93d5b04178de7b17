#pragma once
// Never prunes: every trial runs to its end.
#include <optional>
#include <string>

#include "trainkit/tune/record.hpp"

namespace trainkit::tune::pruner {

struct None {
  std::optional<std::string> prune(const StudyView&, FrozenTrial&) const { return std::nullopt; }
};

}  // namespace trainkit::tune::pruner
