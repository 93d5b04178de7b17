#pragma once
// The part of Python's pickle that torch.save writes for a state dict: dicts
// (OrderedDict included), lists, tuples, numbers, strings, and tensors rebuilt
// from storages by torch._utils._rebuild_tensor_v2; and, where the caller
// allows them, instances of named classes (PyTorch's distributed checkpoint
// metadata), kept as their arguments and state. It is a stack machine
// that runs no code: the only callables are that allowlist, everything else
// is an Error. The input is hostile: each read is bounds-checked, a tensor's
// view is checked against its storage before ATen sees it, and all values
// live in one arena, so a file whose dict holds itself neither recurses
// without end nor leaks.
#include <torch/types.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainkit/detail/sizes.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/detail/pickle.hpp"

namespace trainkit::io::detail {

class Unpickler {
 public:
  /// Returns the storage `key` of `dtype` holding `numel` elements.
  using LoadStorage =
      std::function<at::Tensor(const std::string& key, at::ScalarType dtype, uint64_t numel)>;

  /// Errors are `context` (which names the file) followed by the problem;
  /// `classes` are allowed besides a state dict's.
  Unpickler(std::string_view pickle, LoadStorage load, std::string context,
            PickleClasses classes = {})
      : in_(pickle),
        load_(std::move(load)),
        context_(std::move(context)),
        classes_(std::move(classes)) {}

  /// Runs the pickle to its STOP; the value lives as long as the unpickler.
  const PyValue& run() {
    while (true) {
      const auto op = Op(byte());
      switch (op) {
        case Op::Proto:
          byte();
          break;
        case Op::Frame:  // a length hint
          bytes(8);
          break;
        case Op::Mark:
          marks_.push_back(stack_.size());
          break;
        case Op::EmptyDict:
          push(make(PyValue::Kind::Dict));
          break;
        case Op::EmptyList:
          push(make(PyValue::Kind::List));
          break;
        case Op::EmptyTuple:
          push(make(PyValue::Kind::Tuple));
          break;
        case Op::None:
          push(make(PyValue::Kind::None));
          break;
        case Op::NewTrue:
          push(integer(1, PyValue::Kind::Bool));
          break;
        case Op::NewFalse:
          push(integer(0, PyValue::Kind::Bool));
          break;
        case Op::Int:
          push(text_int());
          break;
        case Op::Long:
          push(integer(text_integer(line(), "LONG", /*long_suffix=*/true)));
          break;
        case Op::BinInt1:
          push(integer(little<uint8_t>()));
          break;
        case Op::BinInt2:
          push(integer(little<uint16_t>()));
          break;
        case Op::BinInt:
          push(integer(little<int32_t>()));
          break;
        case Op::Long1:
          push(integer(long1()));
          break;
        case Op::BinFloat:
          push(real());
          break;
        case Op::BinUnicode:
        case Op::BinBytes:
          push(string(little<uint32_t>()));
          break;
        case Op::ShortBinUnicode:
        case Op::ShortBinBytes:
          push(string(little<uint8_t>()));
          break;
        case Op::BinUnicode8:
          push(string(little<uint64_t>()));
          break;
        case Op::Global: {
          auto module = line();
          push(global(module, line()));
          break;
        }
        case Op::StackGlobal: {
          auto *name = pop(), *module = pop();
          if (module->kind != PyValue::Kind::String || name->kind != PyValue::Kind::String)
            fail("STACK_GLOBAL without two strings");
          push(global(module->text, name->text));
          break;
        }
        case Op::Tuple:
          push(tuple(pop_mark()));
          break;
        case Op::List:
          push(list(pop_mark()));
          break;
        case Op::Tuple1:
          push(tuple(pop_n(1)));
          break;
        case Op::Tuple2:
          push(tuple(pop_n(2)));
          break;
        case Op::Tuple3:
          push(tuple(pop_n(3)));
          break;
        case Op::Dict: {
          auto items = pop_mark();
          auto* d = make(PyValue::Kind::Dict);
          set_items(d, items);
          push(d);
          break;
        }
        case Op::Append: {
          auto* v = pop();
          append(top(), {v});
          break;
        }
        case Op::Appends: {
          auto items = pop_mark();
          append(top(), items);
          break;
        }
        case Op::SetItem: {
          auto items = pop_n(2);
          set_items(top(), items);
          break;
        }
        case Op::SetItems: {
          auto items = pop_mark();
          set_items(top(), items);
          break;
        }
        case Op::BinPut:
          memo_[little<uint8_t>()] = top();
          break;
        case Op::LongBinPut:
          memo_[little<uint32_t>()] = top();
          break;
        case Op::Memoize:
          memo_[memo_.size()] = top();
          break;
        case Op::BinGet:
          push(memo(little<uint8_t>()));
          break;
        case Op::LongBinGet:
          push(memo(little<uint32_t>()));
          break;
        case Op::Pop:
          pop();
          break;
        case Op::PopMark:
          pop_mark();
          break;
        case Op::BinPersId:
          push(persistent(pop()));
          break;
        case Op::Reduce: {
          auto* args = pop();
          auto* callable = pop();
          push(reduce(callable, args));
          break;
        }
        case Op::NewObj: {  // cls.__new__(cls, *args)
          auto* args = pop();
          auto* cls = pop();
          if (cls->kind != PyValue::Kind::Callable || cls->callable != PyValue::Callable::Class ||
              args->kind != PyValue::Kind::Tuple)
            fail("NEWOBJ without an allowed class and a tuple");
          push(object(cls, args));
          break;
        }
        case Op::Build: {  // an Object's state; an OrderedDict's attributes, not kept
          auto* state = pop();
          auto* target = top();
          if (target->kind == PyValue::Kind::Object) {
            if (target->state) fail("BUILD twice on one " + target->text);
            target->state = state;
          } else if (target->kind != PyValue::Kind::Dict) {
            fail("BUILD on something other than a dict or an allowed class");
          }
          break;
        }
        case Op::Stop:
          if (stack_.size() != 1) fail("STOP with " + std::to_string(stack_.size()) + " values");
          return *stack_.back();
        default:
          fail("pickle opcode 0x" + hex(uint8_t(op)) + " at byte " + std::to_string(at_ - 1) +
               " is not one torch.save writes for a state dict (pickle protocols 1 to 5)");
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error(context_ + what); }
  static std::string hex(uint8_t b) {
    const char* digits = "0123456789abcdef";
    return {digits[b >> 4], digits[b & 15]};
  }

  std::string_view bytes(uint64_t n) {
    if (n > in_.size() - at_) fail("runs past its end (truncated?)");
    const auto out = in_.substr(at_, n);
    at_ += n;
    return out;
  }
  uint8_t byte() { return uint8_t(bytes(1)[0]); }
  template <class T>
  T little() {
    T v;
    std::memcpy(&v, bytes(sizeof(T)).data(), sizeof(T));
    return v;
  }
  int64_t long1() {  // n bytes of two's complement, little-endian
    const auto n = byte();
    if (n > 8) fail("an integer of " + std::to_string(n) + " bytes (more than 64 bits)");
    const auto b = bytes(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(uint8_t(b[i])) << (8 * i);
    if (n > 0 && n < 8 && (uint8_t(b[n - 1]) & 0x80)) v |= ~uint64_t(0) << (8 * n);
    return int64_t(v);
  }
  // INT and LONG, protocols 0 and 1: a decimal line ("I01" and "I00" are
  // True and False; LONG ends in 'L').
  int64_t text_integer(std::string text, const char* op, bool long_suffix) {
    if (long_suffix && !text.empty() && text.back() == 'L') text.pop_back();
    const size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+');
    const bool decimal = text.size() > sign && text.size() - sign <= 19 &&
                         text.find_first_not_of("0123456789", sign) == std::string::npos;
    errno = 0;
    const long long v = decimal ? std::strtoll(text.c_str(), nullptr, 10) : 0;
    if (!decimal || errno == ERANGE)
      fail(std::string(op) + " \"" + text.substr(0, 40) + "\" is not an integer of 64 bits");
    return v;
  }
  PyValue* text_int() {
    const auto text = line();
    if (text == "01" || text == "00") return integer(text == "01", PyValue::Kind::Bool);
    return integer(text_integer(text, "INT", false));
  }
  std::string line() {
    const auto end = in_.find('\n', at_);
    if (end == std::string_view::npos) fail("a GLOBAL, INT or LONG without its newline");
    std::string out(in_.substr(at_, end - at_));
    at_ = end + 1;
    return out;
  }

  PyValue* make(PyValue::Kind kind) {
    arena_.push_back(std::make_unique<PyValue>());
    arena_.back()->kind = kind;
    return arena_.back().get();
  }
  PyValue* integer(int64_t v, PyValue::Kind kind = PyValue::Kind::Int) {
    auto* p = make(kind);
    p->integer = v;
    return p;
  }
  PyValue* real() {  // BINFLOAT: big-endian
    auto raw = little<uint64_t>();
    if constexpr (std::endian::native == std::endian::little) raw = __builtin_bswap64(raw);
    auto* p = make(PyValue::Kind::Float);
    std::memcpy(&p->real, &raw, 8);
    return p;
  }
  PyValue* string(uint64_t n) {
    auto* p = make(PyValue::Kind::String);
    p->text = std::string(bytes(n));
    return p;
  }
  PyValue* sequence(PyValue::Kind kind, std::vector<PyValue*> items) {
    auto* p = make(kind);
    p->items = std::move(items);
    return p;
  }
  PyValue* tuple(std::vector<PyValue*> items) {
    return sequence(PyValue::Kind::Tuple, std::move(items));
  }
  PyValue* list(std::vector<PyValue*> items) {
    return sequence(PyValue::Kind::List, std::move(items));
  }

  void push(PyValue* v) { stack_.push_back(v); }
  PyValue* top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("an empty stack");
    return stack_.back();
  }
  PyValue* pop() {
    auto* v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<PyValue*> pop_n(size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail("too few values on the stack");
    std::vector<PyValue*> out(stack_.end() - int64_t(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return out;
  }
  std::vector<PyValue*> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    std::vector<PyValue*> out(stack_.begin() + int64_t(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return out;
  }
  PyValue* memo(uint64_t key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo " + std::to_string(key) + " read before it is written");
    return it->second;
  }
  void append(PyValue* to, const std::vector<PyValue*>& items) {
    if (to->kind != PyValue::Kind::List) fail("APPEND to something other than a list");
    to->items.insert(to->items.end(), items.begin(), items.end());
  }
  void set_items(PyValue* to, const std::vector<PyValue*>& items) {
    if (to->kind != PyValue::Kind::Dict) fail("SETITEM on something other than a dict");
    if (items.size() % 2) fail("SETITEMS with an odd number of values");
    for (size_t i = 0; i < items.size(); i += 2) to->dict.emplace_back(items[i], items[i + 1]);
  }

  PyValue* global(const std::string& module, const std::string& name) {
    auto* p = make(PyValue::Kind::Callable);
    p->text = module + "." + name;
    if (p->text == "collections.OrderedDict") {
      p->callable = PyValue::Callable::OrderedDict;
    } else if (p->text == "torch._utils._rebuild_tensor_v2") {
      p->callable = PyValue::Callable::RebuildTensor;
    } else if (p->text == "torch._utils._rebuild_parameter") {
      p->callable = PyValue::Callable::RebuildParameter;
    } else if (p->text == "torch.jit._pickle.restore_type_tag") {  // LibTorch's pickle_save
      p->callable = PyValue::Callable::TypeTag;
    } else if (const auto storage = std::find_if(
                   storage_types().begin(), storage_types().end(),
                   [&](const auto& type) { return module == "torch" && type.first == name; });
               storage != storage_types().end()) {
      p->callable = PyValue::Callable::StorageType;
      p->dtype = storage->second;
    } else if (std::find(classes_.names.begin(), classes_.names.end(), p->text) !=
               classes_.names.end()) {
      p->callable = PyValue::Callable::Class;
    } else if (const auto dtype = std::find_if(
                   python_dtypes().begin(), python_dtypes().end(),
                   [&](const auto& type) { return module == "torch" && type.first == name; });
               classes_.dtypes && dtype != python_dtypes().end()) {
      p->kind = PyValue::Kind::Dtype;
      p->dtype = dtype->second;
    } else {
      fail("holds a " + p->text +
           ", which trainkit does not read: it reads state dicts (dicts, lists, numbers, "
           "strings and dense CPU or CUDA tensors of the usual dtypes)");
    }
    return p;
  }

  // ('storage', torch.<Type>Storage, key, location, numel): the storage's
  // record, whatever device it was saved from (read onto the CPU).
  PyValue* persistent(PyValue* id) {
    const auto& t = id->items;
    if (id->kind != PyValue::Kind::Tuple || t.size() != 5 || t[0]->kind != PyValue::Kind::String ||
        t[0]->text != "storage" || t[1]->kind != PyValue::Kind::Callable ||
        t[1]->callable != PyValue::Callable::StorageType || t[2]->kind != PyValue::Kind::String ||
        t[4]->kind != PyValue::Kind::Int || t[4]->integer < 0) {
      fail("a persistent id that is not ('storage', type, key, location, numel)");
    }
    const auto found = storages_.find(t[2]->text);
    auto* p = make(PyValue::Kind::Storage);
    if (found != storages_.end()) {
      if (found->second.scalar_type() != t[1]->dtype)
        fail("storage \"" + t[2]->text + "\" read with two dtypes");
      p->tensor = found->second;  // views of one storage share it, as in Python
    } else {
      p->tensor = load_(t[2]->text, t[1]->dtype, uint64_t(t[4]->integer));
      storages_.emplace(t[2]->text, p->tensor);
    }
    return p;
  }

  static bool is_int(const PyValue* v) { return v->kind == PyValue::Kind::Int; }

  PyValue* reduce(PyValue* callable, PyValue* args) {
    if (callable->kind != PyValue::Kind::Callable || args->kind != PyValue::Kind::Tuple)
      fail("REDUCE without a callable and a tuple");
    const auto& a = args->items;
    switch (callable->callable) {
      case PyValue::Callable::OrderedDict:
        if (!a.empty()) fail("OrderedDict called with arguments");
        return make(PyValue::Kind::Dict);
      case PyValue::Callable::RebuildParameter:
        if (a.empty() || a[0]->kind != PyValue::Kind::Tensor)
          fail("_rebuild_parameter without a tensor");
        return a[0];
      case PyValue::Callable::RebuildTensor:
        return rebuild_tensor(a);
      case PyValue::Callable::TypeTag:  // (value, "Dict[str, Tensor]"): the value
        if (a.size() != 2) fail("restore_type_tag without (value, type)");
        return a[0];
      case PyValue::Callable::Class:
        return object(callable, args);
      case PyValue::Callable::StorageType:
        break;
    }
    fail("calls " + callable->text);
  }

  PyValue* object(const PyValue* cls, const PyValue* args) {
    auto* p = make(PyValue::Kind::Object);
    p->text = cls->text;
    p->items = args->items;
    return p;
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
  PyValue* rebuild_tensor(const std::vector<PyValue*>& a) {
    if (a.size() < 4 || a[0]->kind != PyValue::Kind::Storage || !is_int(a[1]) ||
        a[2]->kind != PyValue::Kind::Tuple || a[3]->kind != PyValue::Kind::Tuple ||
        a[2]->items.size() != a[3]->items.size()) {
      fail("_rebuild_tensor_v2 without (storage, offset, size, stride)");
    }
    const auto& storage = a[0]->tensor;
    std::vector<int64_t> size, stride;
    for (size_t i = 0; i < a[2]->items.size(); ++i) {
      const auto* n = a[2]->items[i];
      const auto* s = a[3]->items[i];
      if (!is_int(n) || !is_int(s) || n->integer < 0 || s->integer < 0)
        fail("a tensor's size or stride is not a count");
      size.push_back(n->integer), stride.push_back(s->integer);
    }
    // The view must lie within the storage: offset + sum((size-1) * stride) < numel.
    const uint64_t offset = uint64_t(a[1]->integer), numel = uint64_t(storage.numel());
    bool bad = a[1]->integer < 0 ||
               !trainkit::detail::checked_numel(std::vector<uint64_t>(size.begin(), size.end()));
    uint64_t last = offset, elements = 1;
    for (size_t i = 0; i < size.size() && !bad; ++i) {
      uint64_t step = 0;
      if (size[i] == 0) {
        elements = 0;
      } else if (c10::mul_overflows(uint64_t(size[i] - 1), uint64_t(stride[i]), &step) ||
                 c10::add_overflows(last, step, &last) ||
                 c10::mul_overflows(elements, uint64_t(size[i]), &elements)) {
        bad = true;  // overflowed
      }
    }
    if (bad || offset > numel || (elements > 0 && last >= numel)) {
      fail("a tensor's view (offset " + std::to_string(a[1]->integer) +
           ") runs past its storage of " + std::to_string(numel) + " elements");
    }
    auto* p = make(PyValue::Kind::Tensor);
    p->tensor = elements == 0 ? at::empty(size, storage.options())
                              : storage.as_strided(size, stride, int64_t(offset));
    return p;
  }

  std::string_view in_;
  uint64_t at_ = 0;
  LoadStorage load_;
  std::string context_;
  PickleClasses classes_;
  std::vector<std::unique_ptr<PyValue>> arena_;
  std::vector<PyValue*> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PyValue*> memo_;
  std::map<std::string, at::Tensor> storages_;
};

}  // namespace trainkit::io::detail
