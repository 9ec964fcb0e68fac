// Value and OpOperand as handles: the classes (one pointer each), without
// the definitions of the members that look through the pointer. A header
// that only holds, copies, compares or hashes values (an options struct
// with a list of values, a fetch target) includes this; what reads a value
// (its type, its uses) includes kiln/ir/value.h, which defines those
// members inline together with the ValueImpl classes they read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>

namespace kiln {

class Block;
class Operation;
class Type;
class Value;

namespace detail {
class ValueImpl;
class OpOperandImpl;
}  // namespace detail

// A use of a value: (owner op, operand index).
class OpOperand {
 public:
  OpOperand() = default;
  explicit OpOperand(detail::OpOperandImpl* impl) : impl_(impl) {}
  explicit operator bool() const { return impl_ != nullptr; }
  bool operator==(const OpOperand&) const = default;

  Value source() const;
  void set_source(Value v) const;
  Operation* owner() const;
  std::uint32_t index() const;  // position among owner's operands
  OpOperand next_use() const;
  detail::OpOperandImpl* impl() const { return impl_; }

 private:
  detail::OpOperandImpl* impl_ = nullptr;
};

class Value {
 public:
  Value() = default;
  Value(detail::ValueImpl* impl) : impl_(impl) {}  // NOLINT

  explicit operator bool() const { return impl_ != nullptr; }
  bool operator==(const Value&) const = default;

  Type type() const;
  void set_type(Type t) const;
  // The defining op; null for a block argument.
  Operation* defining_op() const;
  bool is_block_argument() const;

  // Uses, most recent first.
  class use_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = OpOperand;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = OpOperand;
    use_iterator() = default;
    explicit use_iterator(detail::OpOperandImpl* u) : u_(u) {}
    OpOperand operator*() const { return OpOperand(u_); }
    use_iterator& operator++();
    use_iterator operator++(int) {
      auto t = *this;
      ++*this;
      return t;
    }
    bool operator==(const use_iterator&) const = default;

   private:
    detail::OpOperandImpl* u_ = nullptr;
  };
  struct UseRange {
    use_iterator b, e;
    use_iterator begin() const { return b; }
    use_iterator end() const { return e; }
  };
  UseRange uses() const;
  OpOperand first_use() const;
  bool use_empty() const;
  bool has_one_use() const;
  std::size_t use_count() const;

  // Every use of this value now uses `v` instead. O(uses). A null `v` is a
  // kiln::Error(InvalidArgument) (it would leave dangling operands).
  void replace_all_uses_with(Value v) const;
  // Only the uses for which `pred` holds.
  void replace_uses_if(Value v, const std::function<bool(OpOperand)>& pred) const;

  detail::ValueImpl* impl() const { return impl_; }

 protected:
  detail::ValueImpl* impl_ = nullptr;
};

}  // namespace kiln

template <>
struct std::hash<kiln::Value> {
  std::size_t operator()(kiln::Value v) const noexcept {
    return std::hash<const void*>()(v.impl());
  }
};
