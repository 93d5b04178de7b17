#pragma once
// The vocabulary of the pickles torch.save writes, shared by the reader
// (unpickler.hpp) and the writers (torch_save.hpp, dcp_metadata.hpp): the
// values a state dict is made of, the storage classes and dtype names, the
// opcodes read, and the protocol-2 writer.
#include <torch/types.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainkit::io::detail {

struct PyValue {
  enum class Kind {
    None,
    Bool,
    Int,
    Float,
    String,
    Tuple,
    List,
    Dict,
    Callable,
    Storage,
    Tensor,
    Dtype,   // torch.float32, ...
    Object,  // an instance of an allowed class (Unpickler's `classes`)
  };
  enum class Callable { OrderedDict, RebuildTensor, RebuildParameter, TypeTag, StorageType, Class };
  Kind kind = Kind::None;
  int64_t integer = 0;                        // Bool, Int
  double real = 0;                            // Float
  std::string text;                           // String; a Callable's or Object's "module.name"
  Callable callable = Callable::OrderedDict;  // Callable
  at::ScalarType dtype = at::kFloat;          // Callable StorageType, Dtype
  std::vector<PyValue*> items;                // Tuple, List; an Object's constructor arguments
  std::vector<std::pair<PyValue*, PyValue*>> dict;  // Dict, in insertion order
  at::Tensor tensor;                                // Storage (1-D), Tensor
  const PyValue* state = nullptr;                   // Object: what BUILD gave it
};

/// Classes a pickle may name besides a state dict's, by "module.name": an
/// instance becomes an Object holding its constructor's arguments and its
/// BUILD state; nothing of it runs (io/dcp_metadata.hpp's).
struct PickleClasses {
  std::vector<std::string> names;
  bool dtypes = false;  ///< torch.float32 and the like, as values
};

/// torch.<name>: the dtypes by the names Python pickles them with.
inline const std::vector<std::pair<std::string, at::ScalarType>>& python_dtypes() {
  static const std::vector<std::pair<std::string, at::ScalarType>> types = {
      {"float64", at::kDouble},    {"float32", at::kFloat}, {"float16", at::kHalf},
      {"bfloat16", at::kBFloat16}, {"int64", at::kLong},    {"int32", at::kInt},
      {"int16", at::kShort},       {"int8", at::kChar},     {"uint8", at::kByte},
      {"bool", at::kBool}};
  return types;
}

/// torch.<Type>Storage: the legacy storage classes torch.save names a
/// storage's dtype by (read here, written by to_torch_save).
inline const std::vector<std::pair<std::string, at::ScalarType>>& storage_types() {
  static const std::vector<std::pair<std::string, at::ScalarType>> types = {
      {"DoubleStorage", at::kDouble},     {"FloatStorage", at::kFloat}, {"HalfStorage", at::kHalf},
      {"BFloat16Storage", at::kBFloat16}, {"LongStorage", at::kLong},   {"IntStorage", at::kInt},
      {"ShortStorage", at::kShort},       {"CharStorage", at::kChar},   {"ByteStorage", at::kByte},
      {"BoolStorage", at::kBool}};
  return types;
}

/// The opcodes read, by the names Python's pickletools gives them.
enum class Op : uint8_t {
  Mark = '(',
  Stop = '.',
  Pop = '0',
  PopMark = '1',
  Int = 'I',
  Long = 'L',
  BinInt = 'J',
  BinInt1 = 'K',
  BinInt2 = 'M',
  None = 'N',
  BinPersId = 'Q',
  Reduce = 'R',
  BinUnicode = 'X',
  EmptyList = ']',
  Append = 'a',
  Build = 'b',
  Global = 'c',
  Dict = 'd',
  Appends = 'e',
  BinGet = 'h',
  LongBinGet = 'j',
  List = 'l',
  BinPut = 'q',
  LongBinPut = 'r',
  SetItem = 's',
  Tuple = 't',
  SetItems = 'u',
  EmptyDict = '}',
  EmptyTuple = ')',
  BinFloat = 'G',
  BinBytes = 'B',
  ShortBinBytes = 'C',
  // protocol 2
  Proto = 0x80,
  Tuple1 = 0x85,
  Tuple2 = 0x86,
  Tuple3 = 0x87,
  NewTrue = 0x88,
  NewFalse = 0x89,
  Long1 = 0x8a,
  NewObj = 0x81,
  // protocol 4
  ShortBinUnicode = 0x8c,
  BinUnicode8 = 0x8d,
  StackGlobal = 0x93,
  Memoize = 0x94,
  Frame = 0x95,
};

/// Appends protocol-2 opcodes; finish() frames them (PROTO 2 ... STOP).
class PickleWriter {
 public:
  /// Opcodes without arguments, in order.
  PickleWriter& op(std::initializer_list<Op> ops) {
    for (const Op o : ops) out_ += static_cast<char>(o);
    return *this;
  }
  /// GLOBAL: the class or function `module`.`name`.
  PickleWriter& global(std::string_view module, std::string_view name) {
    op({Op::Global});
    out_ += module;
    out_ += '\n';
    out_ += name;
    out_ += '\n';
    return *this;
  }
  /// BINUNICODE
  PickleWriter& text(std::string_view s) {
    const auto n = uint32_t(s.size());
    op({Op::BinUnicode});
    out_.append(reinterpret_cast<const char*>(&n), 4);
    out_ += s;
    return *this;
  }
  /// LONG1 of 8 bytes
  PickleWriter& integer(int64_t v) {
    op({Op::Long1});
    out_ += '\x08';
    out_.append(reinterpret_cast<const char*>(&v), 8);
    return *this;
  }
  /// An instance of `module`.`name` made as cls.__new__(cls), then the dict
  /// of its fields (key, value, ...) until end_object() BUILDs it.
  PickleWriter& begin_object(std::string_view module, std::string_view name) {
    return global(module, name).op({Op::EmptyTuple, Op::NewObj, Op::EmptyDict, Op::Mark});
  }
  PickleWriter& end_object() { return op({Op::SetItems, Op::Build}); }
  /// torch.Size(values)
  PickleWriter& torch_size(const std::vector<int64_t>& values) {
    return global("torch", "Size").tuple(values).op({Op::Tuple1, Op::Reduce});
  }
  /// collections.OrderedDict(), empty.
  PickleWriter& ordered_dict() {
    return global("collections", "OrderedDict").op({Op::EmptyTuple, Op::Reduce});
  }
  /// A tuple of integers.
  template <typename Integers>
  PickleWriter& tuple(const Integers& values) {
    op({Op::Mark});
    for (const auto v : values) integer(v);
    return op({Op::Tuple});
  }
  std::string finish() const {
    return std::string{static_cast<char>(Op::Proto), '\x02'} + out_ + static_cast<char>(Op::Stop);
  }

 private:
  std::string out_;
};

}  // namespace trainkit::io::detail
