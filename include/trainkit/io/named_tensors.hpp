#pragma once
// Tensors by name, in order: what safetensors files and checkpoints hold,
// and how they load into a module's parameters and buffers by name.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"

namespace trainkit::io {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// A module's parameters and buffers by their dotted names ("fc1.weight").
TRAINKIT_INLINE NamedTensors module_tensors(torch::nn::Module& module);

/// How weights load into a module (load_weights).
struct LoadOptions {
  /// Renames the file's tensors before they are matched: the first rule whose
  /// `from` begins a name replaces that part with `to`. {"backbone.", ""}
  /// strips a prefix, {"", "encoder."} adds one; names no rule matches keep
  /// theirs. A `*` in `from` stands for one whole name segment (a block's
  /// index, say), and the n-th `*` in `to` is what the n-th matched:
  /// {"transformer.h.*.mlp.", "h.*."} renames every block's MLP at once.
  std::vector<std::pair<std::string, std::string>> rename{};
  /// true (PyTorch's default): every name and shape must match, or nothing
  /// is loaded and the Error lists what did not. false: what matches loads,
  /// and the report says what did not (a new head, say).
  bool strict = true;
};

/// A tensor in both the file and the model, with different shapes: not loaded.
struct ShapeMismatch {
  std::string name;
  std::vector<int64_t> file, model;
};

/// What load_weights did, by the model's names (the file's after renaming).
struct LoadReport {
  std::vector<std::string> loaded;      ///< given the file's values (cast to the model's dtype)
  std::vector<std::string> missing;     ///< the model's, not in the file: left as they were
  std::vector<std::string> unexpected;  ///< the file's, not in the model: not used
  std::vector<ShapeMismatch> mismatched;
  bool complete() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  /// "loaded 4 of 6; missing: "head.bias"; shape differs: "head.weight" file [10, 16], model [3,
  /// 16]"
  std::string summary() const;
};

/// Copies `tensors` into `module`'s parameters and buffers by name, as
/// `options` say; `source` names the file in errors.
TRAINKIT_INLINE LoadReport load_weights(torch::nn::Module& module, const NamedTensors& tensors,
                                        const LoadOptions& options = {},
                                        const std::string& source = "the weights");

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE NamedTensors module_tensors(torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

TRAINKIT_INLINE std::string LoadReport::summary() const {
  const auto quoted = [](const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
    return out;
  };
  const auto shape = [](const std::vector<int64_t>& s) { return c10::IntArrayRef(s); };
  std::ostringstream out;
  out << "loaded " << loaded.size() << " of " << loaded.size() + missing.size() + mismatched.size();
  if (!missing.empty()) out << "; missing: " << quoted(missing);
  if (!unexpected.empty()) out << "; unexpected: " << quoted(unexpected);
  if (!mismatched.empty()) out << "; shape differs:";
  for (const auto& m : mismatched)
    out << " \"" << m.name << "\" file " << shape(m.file) << ", model " << shape(m.model) << ";";
  auto text = out.str();
  if (text.back() == ';') text.pop_back();
  return text;
}

namespace detail {
/// `name` renamed by the rule (from, to) when `from` begins it (see
/// LoadOptions::rename), else nothing.
TRAINKIT_INLINE std::optional<std::string> rename_by(const std::string& from, const std::string& to,
                                                     const std::string& name) {
  std::vector<std::string> captured;
  size_t at = 0;  // in name
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != '*') {
      if (at >= name.size() || name[at] != from[i]) return std::nullopt;
      ++at;
      continue;
    }
    const auto end = std::min(name.find('.', at), name.size());
    if (end == at) return std::nullopt;  // a segment is never empty
    captured.push_back(name.substr(at, end - at));
    at = end;
  }
  std::string out;
  size_t used = 0;
  for (const char c : to) {
    if (c == '*') {
      out += captured[used++];  // check_rename_rule: enough of them
    } else {
      out += c;
    }
  }
  return out + name.substr(at);
}

/// A rule's `*` must be a whole segment, and `to` may not use more of them than `from` has.
TRAINKIT_INLINE void check_rename_rule(const std::string& from, const std::string& to) {
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] == '*' &&
        ((i > 0 && from[i - 1] != '.') || (i + 1 < from.size() && from[i + 1] != '.'))) {
      throw Error("trainkit: LoadOptions::rename rule \"" + from + "\" -> \"" + to +
                  "\": a * stands for a whole name segment (\"h.*.mlp\"), not part of one");
    }
  }
  if (std::count(to.begin(), to.end(), '*') > std::count(from.begin(), from.end(), '*')) {
    throw Error("trainkit: LoadOptions::rename rule \"" + from + "\" -> \"" + to +
                "\": the new name uses more * than the old one matches");
  }
}
}  // namespace detail

TRAINKIT_INLINE LoadReport load_weights(torch::nn::Module& module, const NamedTensors& tensors,
                                        const LoadOptions& options, const std::string& source) {
  for (const auto& [from, to] : options.rename) detail::check_rename_rule(from, to);
  std::map<std::string, at::Tensor> file;
  for (const auto& [name, t] : tensors) {
    auto renamed = name;
    for (const auto& [from, to] : options.rename) {
      if (auto r = detail::rename_by(from, to, name)) {
        renamed = std::move(*r);
        break;
      }
    }
    if (!file.emplace(renamed, t).second) {
      throw Error("trainkit: " + source + ": two tensors are named \"" + renamed +
                  "\" after LoadOptions::rename");
    }
  }
  LoadReport report;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // model's, file's
  for (const auto& [name, target] : module_tensors(module)) {
    const auto found = file.find(name);
    if (found == file.end()) {
      report.missing.push_back(name);
    } else if (found->second.sizes() != target.sizes()) {
      report.mismatched.push_back({name, found->second.sizes().vec(), target.sizes().vec()});
    } else {
      report.loaded.push_back(name);
      copies.emplace_back(target, found->second);
    }
    if (found != file.end()) file.erase(found);
  }
  for (const auto& [name, t] : file) report.unexpected.push_back(name);
  if (options.strict && !report.complete()) {
    throw Error("trainkit: " + source + " does not match the model (" + report.summary() +
                "); nothing was loaded. LoadOptions{.strict = false} loads what matches, "
                "LoadOptions::rename maps names");
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, value] : copies) target.copy_(value);
  return report;
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::io
