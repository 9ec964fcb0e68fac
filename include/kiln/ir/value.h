// Value, OpResult, BlockArgument, OpOperand: the edges of the graph and their
// use-def chains (seed 002 §2.1.2). A value has exactly one definition (an
// op's result or a block's argument) and an intrusive list of its uses. As
// in the seed, the low 3 bits of a value's first-use pointer tell its kind:
// 0–5 = one of an op's first six (inline) results, 6 = a result stored out
// of line (which keeps its own index), 7 = a block argument.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>

#include "kiln/ir/epoch.h"
#include "kiln/ir/type.h"

namespace kiln {

class Block;
class Operation;
class Value;
class OpOperand;

namespace detail {

class OpOperandImpl;

inline constexpr unsigned kMaxInlineResults = 6;
inline constexpr unsigned kOutOfLineTag = 6;
inline constexpr unsigned kBlockArgumentTag = 7;

class ValueImpl {
 public:
  Type type() const { return type_; }
  void set_type(Type t) {
    type_ = t;
    bump_ir_epoch();
  }
  unsigned tag() const { return static_cast<unsigned>(first_use_ & 7u); }
  OpOperandImpl* first_use() const {
    return reinterpret_cast<OpOperandImpl*>(first_use_ & ~std::uintptr_t(7));
  }
  bool use_empty() const { return first_use() == nullptr; }
  // The slot holding the first use; its low 3 bits are the tag.
  std::uintptr_t* first_use_slot() { return &first_use_; }

 protected:
  ValueImpl(Type type, unsigned tag) : type_(type), first_use_(tag) {}

  Type type_;
  std::uintptr_t first_use_;
};

class OpResultImpl : public ValueImpl {
 public:
  Operation* owner() const;
  std::uint32_t index() const;

 protected:
  using ValueImpl::ValueImpl;
};

// Results 0–5, stored just before their Operation in reverse order.
class OpInlineResultImpl : public OpResultImpl {
 public:
  OpInlineResultImpl(Type type, unsigned index) : OpResultImpl(type, index) {}
};

// Results 6 and above, stored before the inline ones; they keep their index.
class OpOutOfLineResultImpl : public OpResultImpl {
 public:
  OpOutOfLineResultImpl(Type type, std::uint32_t out_of_line_index)
      : OpResultImpl(type, kOutOfLineTag), out_of_line_index_(out_of_line_index) {}
  std::uint32_t out_of_line_index() const { return out_of_line_index_; }

 private:
  std::uint32_t out_of_line_index_;
};

class BlockArgumentImpl : public ValueImpl {
 public:
  BlockArgumentImpl(Type type, Block* owner, std::uint32_t index)
      : ValueImpl(type, kBlockArgumentTag), owner_(owner), index_(index) {}
  Block* owner() const { return owner_; }
  std::uint32_t index() const { return index_; }
  void set_index(std::uint32_t i) { index_ = i; }

 private:
  Block* owner_;
  std::uint32_t index_;
};

// One use of a value by an op. Links are slots (uintptr_t) so that unlinking
// the head of a list keeps the tag bits of the value's first-use slot.
class OpOperandImpl {
 public:
  OpOperandImpl(ValueImpl* source, Operation* owner) : owner_(owner) {
    if (source) link(source);
  }
  ~OpOperandImpl() { unlink(); }
  OpOperandImpl(const OpOperandImpl&) = delete;
  OpOperandImpl& operator=(const OpOperandImpl&) = delete;

  ValueImpl* source() const { return source_; }
  Operation* owner() const { return owner_; }
  OpOperandImpl* next_use() const { return reinterpret_cast<OpOperandImpl*>(next_use_); }
  void set_source(ValueImpl* v) {
    unlink();
    if (v) link(v);
  }
  void unlink();

 private:
  void link(ValueImpl* v);

  ValueImpl* source_ = nullptr;
  std::uintptr_t next_use_ = 0;       // OpOperandImpl*; low bits always 0
  std::uintptr_t* back_ = nullptr;    // the slot that points to this operand
  Operation* owner_;
};

inline void OpOperandImpl::link(ValueImpl* v) {
  bump_ir_epoch();
  source_ = v;
  std::uintptr_t* head = v->first_use_slot();
  next_use_ = *head & ~std::uintptr_t(7);
  back_ = head;
  if (auto* next = next_use()) next->back_ = &next_use_;
  *head = (*head & 7u) | reinterpret_cast<std::uintptr_t>(this);
}

inline void OpOperandImpl::unlink() {
  if (!source_) return;
  bump_ir_epoch();
  *back_ = (*back_ & 7u) | next_use_;
  if (auto* next = next_use()) next->back_ = back_;
  source_ = nullptr;
  next_use_ = 0;
  back_ = nullptr;
}

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
  Operation* owner() const { return impl_->owner(); }
  std::uint32_t index() const;  // position among owner's operands
  OpOperand next_use() const { return OpOperand(impl_->next_use()); }
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

  Type type() const { return impl_->type(); }
  void set_type(Type t) const { impl_->set_type(t); }
  // The defining op; null for a block argument.
  Operation* defining_op() const;
  bool is_block_argument() const { return impl_->tag() == detail::kBlockArgumentTag; }

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
    use_iterator& operator++() {
      u_ = u_->next_use();
      return *this;
    }
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
  UseRange uses() const { return {use_iterator(impl_->first_use()), use_iterator()}; }
  OpOperand first_use() const { return OpOperand(impl_->first_use()); }
  bool use_empty() const { return impl_->use_empty(); }
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

class OpResult : public Value {
 public:
  OpResult() = default;
  explicit OpResult(detail::OpResultImpl* impl) : Value(impl) {}
  static bool classof(Value v) { return v && !v.is_block_argument(); }
  Operation* owner() const { return impl()->owner(); }
  std::uint32_t index() const { return impl()->index(); }
  detail::OpResultImpl* impl() const { return static_cast<detail::OpResultImpl*>(impl_); }
};

class BlockArgument : public Value {
 public:
  BlockArgument() = default;
  explicit BlockArgument(detail::BlockArgumentImpl* impl) : Value(impl) {}
  static bool classof(Value v) { return v && v.is_block_argument(); }
  Block* owner() const { return impl()->owner(); }
  std::uint32_t index() const { return impl()->index(); }
  detail::BlockArgumentImpl* impl() const { return static_cast<detail::BlockArgumentImpl*>(impl_); }
};

// isa / cast between value handles: kiln::isa<OpResult>(v), cast<BlockArgument>(v).
template <typename To> bool isa(Value v) { return To::classof(v); }
template <typename To> To cast(Value v) {
  return To(static_cast<decltype(std::declval<To>().impl())>(v.impl()));
}
template <typename To> To dyn_cast(Value v) { return isa<To>(v) ? cast<To>(v) : To(); }

// ---- inline definitions ----

inline Value OpOperand::source() const { return Value(impl_->source()); }
inline void OpOperand::set_source(Value v) const { impl_->set_source(v.impl()); }

inline bool Value::has_one_use() const {
  auto* u = impl_->first_use();
  return u && !u->next_use();
}

inline std::size_t Value::use_count() const {
  std::size_t n = 0;
  for (auto* u = impl_->first_use(); u; u = u->next_use()) ++n;
  return n;
}

inline void Value::replace_all_uses_with(Value v) const {
  if (!v) throw_error(ErrorKind::InvalidArgument, "cannot replace uses of a value with a null value");
  if (v == *this) return;
  while (auto* u = impl_->first_use()) u->set_source(v.impl());
}

inline void Value::replace_uses_if(Value v, const std::function<bool(OpOperand)>& pred) const {
  if (!v) throw_error(ErrorKind::InvalidArgument, "cannot replace uses of a value with a null value");
  if (v == *this) return;
  for (auto* u = impl_->first_use(); u;) {
    auto* next = u->next_use();
    if (pred(OpOperand(u))) u->set_source(v.impl());
    u = next;
  }
}

}  // namespace kiln

template <>
struct std::hash<kiln::Value> {
  std::size_t operator()(kiln::Value v) const noexcept {
    return std::hash<const void*>()(v.impl());
  }
};
