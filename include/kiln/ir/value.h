// Value, OpResult, BlockArgument, OpOperand: the edges of the graph and their
// use-def chains (seed 002 §2.1.2). A value has exactly one definition (an
// op's result or a block's argument) and an intrusive list of its uses. As
// in the seed, the low 3 bits of a value's first-use pointer tell its kind:
// 0–5 = one of an op's first six (inline) results, 6 = a result stored out
// of line (which keeps its own index), 7 = a block argument. The handle
// classes Value and OpOperand are declared in kiln/ir/value_handle.h (for
// headers that only hold values); this header defines their members.
#pragma once

#include <cstdint>
#include <functional>

#include "kiln/ir/epoch.h"
#include "kiln/ir/type.h"
#include "kiln/ir/value_handle.h"

namespace kiln {

namespace detail {

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
inline Operation* OpOperand::owner() const { return impl_->owner(); }
inline OpOperand OpOperand::next_use() const { return OpOperand(impl_->next_use()); }

inline Type Value::type() const { return impl_->type(); }
inline void Value::set_type(Type t) const { impl_->set_type(t); }
inline bool Value::is_block_argument() const { return impl_->tag() == detail::kBlockArgumentTag; }

inline Value::use_iterator& Value::use_iterator::operator++() {
  u_ = u_->next_use();
  return *this;
}

inline Value::UseRange Value::uses() const {
  return {use_iterator(impl_->first_use()), use_iterator()};
}
inline OpOperand Value::first_use() const { return OpOperand(impl_->first_use()); }
inline bool Value::use_empty() const { return impl_->use_empty(); }

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
