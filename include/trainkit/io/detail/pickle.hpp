#pragma once
// The vocabulary of the pickles torch.save writes, shared by the reader
// (unpickler.hpp) and the writer (torch_save.hpp): the values a state dict
// is made of, the storage classes that name a dtype, and the opcodes read.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainkit::io::detail {

struct PyValue {
  enum class Kind { None, Bool, Int, Float, String, Tuple, List, Dict, Callable, Storage, Tensor };
  enum class Callable { OrderedDict, RebuildTensor, RebuildParameter, TypeTag, StorageType };
  Kind kind = Kind::None;
  int64_t integer = 0;                              // Bool, Int
  double real = 0;                                  // Float
  std::string text;                                 // String; a Callable's "module.name"
  Callable callable = Callable::OrderedDict;        // Callable
  at::ScalarType dtype = at::kFloat;                // Callable StorageType
  std::vector<PyValue*> items;                      // Tuple, List
  std::vector<std::pair<PyValue*, PyValue*>> dict;  // Dict, in insertion order
  at::Tensor tensor;                                // Storage (1-D), Tensor
};

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
  // protocol 4
  ShortBinUnicode = 0x8c,
  BinUnicode8 = 0x8d,
  StackGlobal = 0x93,
  Memoize = 0x94,
  Frame = 0x95,
};

}  // namespace trainkit::io::detail
