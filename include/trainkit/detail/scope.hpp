#pragma once
// The empty scope returned by policies that have nothing to enter.
namespace trainkit::detail {
struct NoScope {
  NoScope() = default;
  NoScope(const NoScope&) = delete;
  NoScope& operator=(const NoScope&) = delete;
};
}  // namespace trainkit::detail
