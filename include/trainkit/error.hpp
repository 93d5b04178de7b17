#pragma once
// The one exception type trainkit throws, and the helpers that build its
// messages: every option error names the option, the value and what is accepted.
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace trainkit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <class V>
[[noreturn]] void throw_option_error(std::string_view option, const V& value,
                                     std::string_view accepted) {
  std::ostringstream msg;
  msg << "trainkit: option `" << option << "` = ";
  if constexpr (std::is_same_v<V, bool>) {
    msg << (value ? "true" : "false");
  } else if constexpr (std::is_convertible_v<const V&, std::string_view>) {
    msg << '"' << std::string_view(value) << '"';
  } else {
    msg << value;
  }
  msg << " is invalid; accepted: " << accepted;
  throw Error(msg.str());
}

/// Throws trainkit::Error naming `option`, `value` and `accepted` unless `ok`.
template <class V>
void require_option(bool ok, std::string_view option, const V& value, std::string_view accepted) {
  if (!ok) throw_option_error(option, value, accepted);
}

/// A path option must name a file (not empty, not ending in a separator).
inline void require_file_path(std::string_view option, const std::filesystem::path& path,
                              std::string_view example) {
  require_option(!path.empty() && path.has_filename(), option, path.string(),
                 std::string("a file path such as \"") + std::string(example) + "\"");
}

}  // namespace detail
}  // namespace trainkit
