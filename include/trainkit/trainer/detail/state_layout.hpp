#pragma once
// The trainer's state as whole tensors by name, whatever the Parallel policy
// made of it: each parameter's place in its flat group (ParamSlot), the
// boxes of a parameter that a range of its group holds, and the optimizer's
// per-group state as per-parameter tensors ("<param>.<kind>", PyTorch's
// state[p][kind]). Checkpoints store this form, so a run saved under one
// strategy and number of ranks resumes under any other.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::detail {

/// A parameter's place in its flat group.
struct ParamSlot {
  std::string name;
  int64_t offset = 0;  ///< of its first element in the group
  int64_t numel = 0;
  std::vector<int64_t> shape;  ///< as the model sees it
  /// Its elements' order in the group: order[j] is the j-th dimension from
  /// the outermost (identity, or 0 2 3 1 for channels-last).
  std::vector<int64_t> order;
};
using GroupSlots = std::vector<std::vector<ParamSlot>>;

/// Per flat group of `flat`, its parameters' slots, named as in `module`.
TRAINKIT_INLINE GroupSlots param_slots(const torch::nn::Module& module, const FlatParams& flat);

/// The boxes of a contiguous tensor of `shape` that hold its elements
/// [begin, end) in order (as few as the range allows), each with the
/// element it starts at.
TRAINKIT_INLINE std::vector<std::pair<io::TensorBox, int64_t>> boxes_of_range(
    std::span<const int64_t> shape, int64_t begin, int64_t end);

/// The pieces of tensor `name` (shaped as `slot`'s parameter) that elements
/// [begin, end) of a flat group hold, taken from `source`: that group's
/// elements from `source_begin` on.
TRAINKIT_INLINE void add_pieces(std::vector<io::TensorPiece>& out, const std::string& name,
                                const ParamSlot& slot, const at::Tensor& source,
                                int64_t source_begin, int64_t begin, int64_t end);

/// The reverse: `target`'s elements (a flat group's from `target_begin`)
/// that lie in [begin, end) and in `slot`, read from tensor `name`.
TRAINKIT_INLINE void read_pieces(const io::ShardedTensors& tensors, const std::string& name,
                                 const ParamSlot& slot, at::Tensor& target, int64_t target_begin,
                                 int64_t begin, int64_t end);

/// Which optimizer state follows the flat groups: per-element tensors
/// ("exp_avg.<group>" -> group) and per-group values ("steps" for
/// "steps.<group>").
struct OptimizerLayout {
  ElementwiseState elementwise;
  std::vector<std::string> per_group_values;
};

/// `name` ("exp_avg.3") without its group's suffix ("exp_avg").
TRAINKIT_INLINE std::string state_kind(const std::string& name, size_t group);

/// A whole optimizer state (every group whole) as per-parameter tensors
/// "<param>.<kind>" and values "<param>.<value>", in model shapes; the other
/// values and tensors as they are, and "layout" = "per_parameter".
TRAINKIT_INLINE StateDict optimizer_state_by_parameter(const StateDict& whole,
                                                       const OptimizerLayout& layout,
                                                       const GroupSlots& slots);
/// The reverse, into this run's flat groups (each whole).
TRAINKIT_INLINE StateDict optimizer_state_by_group(const StateDict& by_parameter,
                                                   const OptimizerLayout& layout,
                                                   const GroupSlots& slots, const FlatParams& flat);
/// Whether a checkpoint's optimizer part is in the per-parameter form
/// (checkpoints before it name their tensors by flat group).
inline bool is_by_parameter(const StateDict& optim) {
  const auto it = optim.values.find("layout");
  return it != optim.values.end() && it->second.kind() == StateValue::Kind::kString &&
         it->second.as_string() == "per_parameter";
}

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE GroupSlots param_slots(const torch::nn::Module& module, const FlatParams& flat) {
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (const auto& p : module.named_parameters()) names[p.value().unsafeGetTensorImpl()] = p.key();
  GroupSlots out;
  for (const auto& g : flat.groups()) {
    auto& slots = out.emplace_back();
    for (size_t k = 0; k < g.params.size(); ++k) {
      const auto it = names.find(g.params[k].unsafeGetTensorImpl());
      if (it == names.end())
        throw Error("trainkit: a flat parameter is not among the model's named parameters");
      ParamSlot slot{it->second, g.offsets[k], 1, g.views[k].sizes, {}};
      for (const auto s : slot.shape) slot.numel *= s;
      const auto& strides = g.views[k].strides;
      for (int64_t d = 0; d < int64_t(slot.shape.size()); ++d) slot.order.push_back(d);
      std::stable_sort(slot.order.begin(), slot.order.end(),
                       [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
      slots.push_back(std::move(slot));
    }
  }
  return out;
}

TRAINKIT_INLINE std::vector<std::pair<io::TensorBox, int64_t>> boxes_of_range(
    std::span<const int64_t> shape, int64_t begin, int64_t end) {
  std::vector<std::pair<io::TensorBox, int64_t>> out;
  if (begin >= end) return out;
  if (shape.empty()) return {{io::TensorBox{}, 0}};  // a scalar
  int64_t inner = 1;
  for (size_t d = 1; d < shape.size(); ++d) inner *= shape[d];
  const auto rows = [&](int64_t first, int64_t count) {
    io::TensorBox box{std::vector<int64_t>(shape.size(), 0),
                      std::vector<int64_t>(shape.begin(), shape.end())};
    box.offsets[0] = first, box.sizes[0] = count;
    out.push_back({std::move(box), first * inner});
  };
  const auto part_of_row = [&](int64_t row, int64_t from, int64_t to) {
    for (auto& [sub, start] : boxes_of_range(shape.subspan(1), from, to)) {
      sub.offsets.insert(sub.offsets.begin(), row);
      sub.sizes.insert(sub.sizes.begin(), 1);
      out.push_back({std::move(sub), row * inner + start});
    }
  };
  if (inner == 0) return out;
  int64_t at = begin;
  if (at % inner != 0) {  // the end of a first row
    const int64_t row = at / inner, stop = std::min(end, (row + 1) * inner);
    part_of_row(row, at - row * inner, stop - row * inner);
    at = stop;
  }
  if (end / inner > at / inner && at < end) {  // whole rows
    rows(at / inner, end / inner - at / inner);
    at = (end / inner) * inner;
  }
  if (at < end) part_of_row(at / inner, 0, end - at);  // the start of a last row
  return out;
}

namespace layout_detail {
/// `slot`'s shape in its elements' order.
inline std::vector<int64_t> memory_shape(const ParamSlot& slot) {
  std::vector<int64_t> out;
  for (const auto d : slot.order) out.push_back(slot.shape[d]);
  return out;
}
/// A box in memory order as the model's box.
inline io::TensorBox model_box(const ParamSlot& slot, const io::TensorBox& memory) {
  io::TensorBox box{std::vector<int64_t>(slot.shape.size()),
                    std::vector<int64_t>(slot.shape.size())};
  for (size_t j = 0; j < slot.order.size(); ++j) {
    box.offsets[slot.order[j]] = memory.offsets[j];
    box.sizes[slot.order[j]] = memory.sizes[j];
  }
  return box;
}
/// Dimensions that take a tensor in memory order to the model's order.
inline std::vector<int64_t> to_model_order(const ParamSlot& slot) {
  std::vector<int64_t> inverse(slot.order.size());
  for (size_t j = 0; j < slot.order.size(); ++j) inverse[slot.order[j]] = int64_t(j);
  return inverse;
}
}  // namespace layout_detail

TRAINKIT_INLINE void add_pieces(std::vector<io::TensorPiece>& out, const std::string& name,
                                const ParamSlot& slot, const at::Tensor& source,
                                int64_t source_begin, int64_t begin, int64_t end) {
  const int64_t from = std::max(begin, slot.offset), to = std::min(end, slot.offset + slot.numel);
  if (from >= to) return;
  const auto memory = layout_detail::memory_shape(slot);
  for (const auto& [box, start] : boxes_of_range(memory, from - slot.offset, to - slot.offset)) {
    auto data = source.narrow(0, slot.offset + start - source_begin, box.numel())
                    .view(box.sizes)
                    .permute(layout_detail::to_model_order(slot))
                    .contiguous()
                    .cpu();
    out.push_back({name, slot.shape, layout_detail::model_box(slot, box), std::move(data)});
  }
}

TRAINKIT_INLINE void read_pieces(const io::ShardedTensors& tensors, const std::string& name,
                                 const ParamSlot& slot, at::Tensor& target, int64_t target_begin,
                                 int64_t begin, int64_t end) {
  const int64_t from = std::max(begin, slot.offset), to = std::min(end, slot.offset + slot.numel);
  if (from >= to) return;
  const auto memory = layout_detail::memory_shape(slot);
  for (const auto& [box, start] : boxes_of_range(memory, from - slot.offset, to - slot.offset)) {
    const auto piece = tensors.read(name, layout_detail::model_box(slot, box));
    target.narrow(0, slot.offset + start - target_begin, box.numel())
        .view(box.sizes)
        .copy_(piece.permute(slot.order));
  }
}

TRAINKIT_INLINE std::string state_kind(const std::string& name, size_t group) {
  const auto suffix = "." + std::to_string(group);
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return name.substr(0, name.size() - suffix.size());
  return name;
}

TRAINKIT_INLINE StateDict optimizer_state_by_parameter(const StateDict& whole,
                                                       const OptimizerLayout& layout,
                                                       const GroupSlots& slots) {
  StateDict out;
  out.values = whole.values;
  for (const auto& key : layout.per_group_values) {
    for (size_t g = 0; g < slots.size(); ++g) {
      const auto it = out.values.find(key + "." + std::to_string(g));
      if (it == out.values.end()) continue;
      for (const auto& slot : slots[g]) out.values[slot.name + "." + key] = it->second;
      out.values.erase(it);
    }
  }
  out.values["layout"] = std::string("per_parameter");
  for (const auto& [name, t] : whole.tensors) {
    const auto it = layout.elementwise.find(name);
    if (it == layout.elementwise.end()) {
      out.tensors[name] = t;  // not per element: kept as it is
      continue;
    }
    const auto kind = state_kind(name, it->second);
    const auto flat_t = t.reshape({-1});
    for (const auto& slot : slots.at(it->second)) {
      const auto memory = layout_detail::memory_shape(slot);
      out.tensors[slot.name + "." + kind] = flat_t.narrow(0, slot.offset, slot.numel)
                                                .view(memory)
                                                .permute(layout_detail::to_model_order(slot))
                                                .contiguous();
    }
  }
  return out;
}

TRAINKIT_INLINE StateDict optimizer_state_by_group(const StateDict& by_parameter,
                                                   const OptimizerLayout& layout,
                                                   const GroupSlots& slots,
                                                   const FlatParams& flat) {
  StateDict out;
  out.values = by_parameter.values;
  out.values.erase("layout");
  for (const auto& key : layout.per_group_values) {
    for (size_t g = 0; g < slots.size(); ++g) {
      for (const auto& slot : slots[g]) {
        const auto it = by_parameter.values.find(slot.name + "." + key);
        if (it != by_parameter.values.end()) out.values[key + "." + std::to_string(g)] = it->second;
      }
    }
    for (size_t g = 0; g < slots.size(); ++g)
      for (const auto& slot : slots[g]) out.values.erase(slot.name + "." + key);
  }
  std::set<std::string> per_parameter;
  for (const auto& [name, group] : layout.elementwise) {
    const auto kind = state_kind(name, group);
    const auto& g = flat.groups()[group];
    std::vector<std::string> missing;
    auto t = at::empty({g.numel()}, at::TensorOptions().dtype(g.data.scalar_type()));
    for (const auto& slot : slots.at(group)) {
      const auto key = slot.name + "." + kind;
      const auto it = by_parameter.tensors.find(key);
      if (it == by_parameter.tensors.end()) {
        missing.push_back(key);
        continue;
      }
      per_parameter.insert(key);
      if (it->second.sizes() != c10::IntArrayRef(slot.shape)) {
        throw Error("trainkit: the checkpoint's optimizer state \"" + key + "\" is " +
                    c10::str(it->second.sizes()) + ", the parameter " +
                    c10::str(c10::IntArrayRef(slot.shape)));
      }
      t.narrow(0, slot.offset, slot.numel)
          .view(layout_detail::memory_shape(slot))
          .copy_(it->second.permute(slot.order));
    }
    if (missing.size() == slots.at(group).size()) continue;  // never made (SGD's momentum)
    if (!missing.empty())
      throw Error("trainkit: the checkpoint's optimizer state has no \"" + missing.front() + "\"");
    out.tensors[name] = t;
  }
  for (const auto& [name, t] : by_parameter.tensors)
    if (!per_parameter.count(name)) out.tensors[name] = t;
  return out;
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
