#pragma once
// How trainkit sees into a batch of any structure: its tensors, visited in a
// fixed order (to move them to the device, pin them, stack samples, copy
// them into a captured step's static buffers), and how many samples it holds.
//
// Built-in rules, applied recursively: a tensor is visited; std::tuple,
// std::pair and std::array by element; std::vector and std::optional by
// element; a string-keyed std::map by key order (std::unordered_map too,
// in sorted key order, so two equal maps visit alike); an aggregate struct
// (no constructors, no bases: `struct B { at::Tensor tokens, mask; };`) by
// field, up to 16 fields. What holds no tensor (lengths, ids, names) is
// carried along untouched. A type these rules cannot see into says how
// through the customization point trainkit::BatchTraits (concepts.hpp).
#include <torch/types.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"

namespace trainkit {

/// The customization point: specialise it for a batch type the built-in
/// rules cannot see into (one with constructors, private members or bases).
///   template <> struct trainkit::BatchTraits<MyBatch> {
///     template <class F> static void for_each_tensor(MyBatch& b, F&& f) { f(b.x()); f(b.y()); }
///     static int64_t size(const MyBatch& b);  // optional: else dim 0 of the first tensor
///   };
/// `f` takes `at::Tensor&` and may replace the tensor (a copy on the device).
template <class B>
struct BatchTraits {};

namespace detail::batch {

template <class T>
concept Customized = requires(T& b, void (*f)(at::Tensor&)) {
  BatchTraits<T>::for_each_tensor(b, f);
};
template <class T>
concept TupleLike = requires {
  std::tuple_size<T>::value;
};
template <class T>
concept Map = requires(const T& m) {
  typename T::key_type;
  typename T::mapped_type;
  m.begin()->second;
};
template <class T>
concept OrderedMap = Map<T> && requires {
  typename T::key_compare;
};
template <class T>
concept Sequence = !Map<T> && requires(T & v) {
  typename T::value_type;
  v.begin();
  v.end();
  v.size();
};
template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

/// Converts to any field type: counts an aggregate's fields by brace-init.
struct AnyField {
  template <class U>
  operator U() const;  // NOLINT(google-explicit-constructor): declared only, never called
};
template <class T, std::size_t... I>
constexpr bool brace_initializable(std::index_sequence<I...>) {
  return requires {
    T{(static_cast<void>(I), AnyField{})...};
  };
}
template <class T, std::size_t N = 0>
constexpr std::size_t field_count() {
  if constexpr (N > 16 || !brace_initializable<T>(std::make_index_sequence<N + 1>{})) {
    return N;
  } else {
    return field_count<T, N + 1>();
  }
}
template <class T>
concept Aggregate = std::is_class_v<T> && std::is_aggregate_v<T> && !TupleLike<T> && !Sequence<T> &&
                    !Map<T> && field_count<T>() >= 1 && field_count<T>() <= 16;

// clang-format off
#define TRAINKIT_FIELDS_1 a
#define TRAINKIT_FIELDS_2 TRAINKIT_FIELDS_1, b
#define TRAINKIT_FIELDS_3 TRAINKIT_FIELDS_2, c
#define TRAINKIT_FIELDS_4 TRAINKIT_FIELDS_3, d
#define TRAINKIT_FIELDS_5 TRAINKIT_FIELDS_4, e
#define TRAINKIT_FIELDS_6 TRAINKIT_FIELDS_5, f
#define TRAINKIT_FIELDS_7 TRAINKIT_FIELDS_6, g
#define TRAINKIT_FIELDS_8 TRAINKIT_FIELDS_7, h
#define TRAINKIT_FIELDS_9 TRAINKIT_FIELDS_8, i
#define TRAINKIT_FIELDS_10 TRAINKIT_FIELDS_9, j
#define TRAINKIT_FIELDS_11 TRAINKIT_FIELDS_10, k
#define TRAINKIT_FIELDS_12 TRAINKIT_FIELDS_11, l
#define TRAINKIT_FIELDS_13 TRAINKIT_FIELDS_12, m
#define TRAINKIT_FIELDS_14 TRAINKIT_FIELDS_13, n
#define TRAINKIT_FIELDS_15 TRAINKIT_FIELDS_14, o
#define TRAINKIT_FIELDS_16 TRAINKIT_FIELDS_15, p
#define TRAINKIT_TIE(N) \
  if constexpr (field_count<T>() == N) { auto& [TRAINKIT_FIELDS_##N] = x; return std::tie(TRAINKIT_FIELDS_##N); } else
/// An aggregate's fields as a tuple of references.
template <Aggregate T>
constexpr auto tie_fields(T& x) {
  TRAINKIT_TIE(1) TRAINKIT_TIE(2) TRAINKIT_TIE(3) TRAINKIT_TIE(4) TRAINKIT_TIE(5) TRAINKIT_TIE(6)
  TRAINKIT_TIE(7) TRAINKIT_TIE(8) TRAINKIT_TIE(9) TRAINKIT_TIE(10) TRAINKIT_TIE(11)
  TRAINKIT_TIE(12) TRAINKIT_TIE(13) TRAINKIT_TIE(14) TRAINKIT_TIE(15) TRAINKIT_TIE(16) {}
}
// clang-format on
#undef TRAINKIT_TIE
#undef TRAINKIT_FIELDS_1
#undef TRAINKIT_FIELDS_2
#undef TRAINKIT_FIELDS_3
#undef TRAINKIT_FIELDS_4
#undef TRAINKIT_FIELDS_5
#undef TRAINKIT_FIELDS_6
#undef TRAINKIT_FIELDS_7
#undef TRAINKIT_FIELDS_8
#undef TRAINKIT_FIELDS_9
#undef TRAINKIT_FIELDS_10
#undef TRAINKIT_FIELDS_11
#undef TRAINKIT_FIELDS_12
#undef TRAINKIT_FIELDS_13
#undef TRAINKIT_FIELDS_14
#undef TRAINKIT_FIELDS_15
#undef TRAINKIT_FIELDS_16

/// What a visit finds in T: tensors (Visits::tensors), values it carries
/// along untouched (Visits::carried). Computed from the types alone.
struct Visits {
  bool tensors = false;
  bool carried = false;
};
template <class T>
constexpr Visits visits();
template <class Tuple, std::size_t... I>
constexpr Visits visits_of_elements(std::index_sequence<I...>) {
  Visits v;
  ((v.tensors = v.tensors || visits<std::remove_cvref_t<std::tuple_element_t<I, Tuple>>>().tensors,
    v.carried = v.carried || visits<std::remove_cvref_t<std::tuple_element_t<I, Tuple>>>().carried),
   ...);
  return v;
}
template <class T>
constexpr Visits visits() {
  if constexpr (std::is_same_v<T, at::Tensor>) {
    return {true, false};
  } else if constexpr (Customized<T>) {
    return {true, false};  // what a customization carries is its own business
  } else if constexpr (TupleLike<T>) {
    return visits_of_elements<T>(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (Map<T>) {
    return visits<typename T::mapped_type>();
  } else if constexpr (Sequence<T> && !std::is_same_v<T, std::string>) {
    const auto v = visits<typename T::value_type>();
    return v.tensors ? v : Visits{false, true};
  } else if constexpr (IsOptional<T>::value) {
    return visits<typename T::value_type>();
  } else if constexpr (Aggregate<T>) {
    using Fields = decltype(tie_fields(std::declval<T&>()));
    return visits_of_elements<Fields>(std::make_index_sequence<std::tuple_size_v<Fields>>{});
  } else {
    return {false, true};
  }
}

template <class T, class F>
void for_each_tensor(T& x, F& f) {
  if constexpr (std::is_same_v<T, at::Tensor>) {
    f(x);
  } else if constexpr (!visits<T>().tensors) {
    // carried along
  } else if constexpr (Customized<T>) {
    BatchTraits<T>::for_each_tensor(x, f);
  } else if constexpr (TupleLike<T>) {
    std::apply([&](auto&... e) { (batch::for_each_tensor(e, f), ...); }, x);
  } else if constexpr (OrderedMap<T>) {
    for (auto& entry : x) batch::for_each_tensor(entry.second, f);
  } else if constexpr (Map<T>) {  // unordered: by sorted key, so equal maps visit alike
    std::vector<typename T::value_type*> entries;
    for (auto& entry : x) entries.push_back(&entry);
    std::sort(entries.begin(), entries.end(),
              [](const auto* a, const auto* b) { return a->first < b->first; });
    for (auto* entry : entries) batch::for_each_tensor(entry->second, f);
  } else if constexpr (Sequence<T>) {
    for (auto& e : x) batch::for_each_tensor(e, f);
  } else if constexpr (IsOptional<T>::value) {
    if (x) batch::for_each_tensor(*x, f);
  } else {
    std::apply([&](auto&... e) { (batch::for_each_tensor(e, f), ...); }, tie_fields(x));
  }
}

}  // namespace detail::batch

/// The batch type of a range of batches.
template <class Range>
using batch_of_t = std::remove_cvref_t<decltype(*std::begin(std::declval<Range&>()))>;

namespace data {

/// Whether trainkit can see tensors in B (the public concept: TrainingBatch).
template <class B>
inline constexpr bool has_tensors = trainkit::detail::batch::visits<B>().tensors;
/// Whether B holds values besides tensors (lengths, ids): they are carried
/// along, but a captured step would replay with the recorded ones.
template <class B>
inline constexpr bool carries_values = trainkit::detail::batch::visits<B>().carried;

/// Calls `f(at::Tensor&)` on each of the batch's tensors, in a fixed order.
template <class B, class F>
void for_each_tensor(B& batch, F&& f) {
  static_assert(has_tensors<std::remove_const_t<B>>,
                "trainkit: no tensor found in this batch type; see trainkit::BatchTraits");
  if constexpr (std::is_const_v<B>) {
    auto visit = [&f](at::Tensor& t) { f(std::as_const(t)); };
    trainkit::detail::batch::for_each_tensor(const_cast<std::remove_const_t<B>&>(batch), visit);
  } else {
    trainkit::detail::batch::for_each_tensor(batch, f);
  }
}

/// The batch with each tensor replaced by `f(tensor)`; other values copied.
template <class B, class F>
B map_tensors(const B& batch, F&& f) {
  B out = batch;
  for_each_tensor(out, [&f](at::Tensor& t) { t = f(std::as_const(t)); });
  return out;
}

/// The batch's tensors, in visiting order.
template <class B>
std::vector<at::Tensor> tensors_of(const B& batch) {
  std::vector<at::Tensor> out;
  for_each_tensor(batch, [&out](const at::Tensor& t) { out.push_back(t); });
  return out;
}

/// The batch on `device`: copies are non-blocking (they overlap when the
/// batch is in pinned memory); with `channels_last`, 4-d tensors (images)
/// take that memory format.
template <class B>
B to_device(const B& batch, const torch::Device& device, bool channels_last = false) {
  return map_tensors(batch, [&](const at::Tensor& t) {
    auto x = t.device() == device ? t : t.to(device, /*non_blocking=*/true);
    return channels_last && x.dim() == 4 ? x.contiguous(at::MemoryFormat::ChannelsLast) : x;
  });
}

/// Samples in the batch: BatchTraits<B>::size, else a `size()` member, else
/// dim 0 of its first tensor.
template <class B>
int64_t batch_size(const B& batch) {
  if constexpr (requires { BatchTraits<B>::size(batch); }) {
    return static_cast<int64_t>(BatchTraits<B>::size(batch));
  } else if constexpr (trainkit::detail::batch::Aggregate<B> && requires {
                         { batch.size() } -> std::integral;
                       }) {
    return static_cast<int64_t>(batch.size());
  } else {
    std::optional<int64_t> n;
    for_each_tensor(batch, [&n](const at::Tensor& t) {
      if (!n && t.defined() && t.dim() > 0) n = t.size(0);
    });
    if (!n) {
      throw Error(
          "trainkit: a batch has no tensor with a dimension 0 to count its samples by; give "
          "trainkit::BatchTraits<YourBatch> a size()");
    }
    return *n;
  }
}

}  // namespace data
}  // namespace trainkit
