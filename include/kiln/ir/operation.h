// Operation: a node of the graph (seed 002 §2.1.3). One allocation holds, in
// order, the out-of-line results (7th and later, reversed), the inline
// results (first six, reversed), the Operation itself, its operands and its
// regions. Attributes are one uniqued DictionaryAttribute; the OpInfo says
// what kind of op it is. An op holds the bytes of the held tensor attributes
// it carries (kiln/ir/tensor_attribute.h) from its creation, or the setter
// that gives them to it, until its destruction or the setter that takes them
// away; giving it one whose bytes were freed is a kiln::Error.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/builtin_attributes.h"
#include "kiln/ir/ir_mapping.h"
#include "kiln/ir/op_info.h"
#include "kiln/ir/value.h"

namespace kiln {

class Block;
class Region;

// Everything needed to create an op; what an op's build() fills in.
struct OperationArgument {
  explicit OperationArgument(OpInfo info) : info(info) {}

  OpInfo info;
  std::vector<Value> operands;
  std::vector<Type> result_types;
  std::vector<NamedAttribute> attributes;
  std::uint32_t num_regions = 0;

  // Out of line (operation.cc): every op's build() calls them, and their
  // vector growth is instantiated once there rather than in each includer.
  void add_operand(Value v);
  void add_operands(const std::vector<Value>& vs);
  void add_result(Type t);
  void add_attribute(std::string name, Attribute a);
};

class Operation {
 public:
  // Creates a detached op (not in any block). Null operands are an error.
  static Operation* create(const std::vector<Value>& operands,
                           const std::vector<Type>& result_types, DictionaryAttribute attributes,
                           OpInfo info, std::uint32_t num_regions = 0);
  static Operation* create(const OperationArgument& arg);

  // Removes the op from its block (if any) and frees it, with its regions.
  // Throws kiln::Error(PreconditionNotMet) — and changes nothing — when a
  // result of the op (or of an op nested in it) is still used outside it.
  void erase();
  // Same as erase(); the name Paddle and MLIR use.
  void destroy() { erase(); }

  // ---- kind ----
  OpInfo info() const { return info_; }
  const std::string& name() const { return info_.name(); }
  Dialect* dialect() const { return info_.dialect(); }
  template <typename Trait> bool has_trait() const { return info_.has_trait<Trait>(); }
  template <typename I> bool has_interface() const { return info_.has_interface<I>(); }
  // For an interface I: the interface handle (null if the op lacks it).
  // For an op class: the op handle (null if the op is another kind).
  template <typename T> T dyn_cast();
  template <typename OpT> bool isa() const;

  // ---- results and operands ----
  std::uint32_t num_results() const { return num_results_; }
  std::uint32_t num_operands() const { return num_operands_; }
  std::uint32_t num_regions() const { return num_regions_; }
  // Indexed accessors throw kiln::Error(OutOfRange) naming the op, the index
  // and the count when the index is out of range.
  OpResult result(std::uint32_t i) const;
  std::vector<Value> results() const;
  Type result_type(std::uint32_t i) const { return result(i).type(); }
  OpOperand operand(std::uint32_t i) const;
  Value operand_source(std::uint32_t i) const { return operand(i).source(); }
  std::vector<Value> operands() const;
  std::vector<Type> operand_types() const;
  void set_operand(std::uint32_t i, Value v);
  Region& region(std::uint32_t i) const;

  // ---- attributes ----
  DictionaryAttribute attributes() const { return attributes_; }
  Attribute attribute(std::string_view name) const { return attributes_.find(name); }
  // Typed: throws kiln::Error naming the op and attribute when it is missing
  // or of another kind.
  template <typename A> A attribute(std::string_view name) const;
  void set_attribute(std::string_view name, Attribute value);
  void erase_attribute(std::string_view name);
  void set_attributes(DictionaryAttribute attrs);

  // ---- position ----
  Block* parent_block() const { return parent_; }
  Region* parent_region() const;
  Operation* parent_op() const;
  Operation* next_in_block() const { return next_; }
  Operation* prev_in_block() const { return prev_; }
  // Moves this op (from wherever it is) right before `other`, or to the end
  // of `block`.
  void move_before(Operation* other);
  void move_to_end(Block* block);

  // A copy of this op, operands looked up in `map` (unmapped ones kept),
  // regions cloned recursively; every new value is recorded in `map`.
  Operation* clone(IrMapping& map) const;
  Operation* clone() const;

  // Unlinks every operand (and those of nested ops) from its value.
  void drop_all_references();

  // Checks counts, declared attributes, traits and the op's own verify();
  // throws kiln::Error naming the op.
  void verify() const;
  void print(std::ostream& os) const;
  std::string to_string() const;

 private:
  friend class Block;
  Operation(OpInfo info, DictionaryAttribute attrs, std::uint32_t num_results,
            std::uint32_t num_operands, std::uint32_t num_regions);
  ~Operation() = default;
  // The throw behind the checked accessors; out of line so that they inline
  // to one compare and branch. `what` is "result", "operand" or "region".
  [[noreturn, gnu::cold]] void throw_index_out_of_range(const char* what, std::uint32_t i,
                                                        std::uint32_t count) const;
  // Frees memory; the caller has unlinked uses and removed the op from its block.
  void destroy_unchecked();
  detail::OpOperandImpl* operand_storage() const;
  Region* region_storage() const;
  std::size_t prefix_bytes() const;

  OpInfo info_;
  DictionaryAttribute attributes_;
  std::uint32_t num_results_;
  std::uint32_t num_operands_;
  std::uint32_t num_regions_;
  Block* parent_ = nullptr;
  Operation* prev_ = nullptr;
  Operation* next_ = nullptr;
};

std::ostream& operator<<(std::ostream& os, const Operation& op);

// ---- inline definitions ----

inline OpResult Operation::result(std::uint32_t i) const {
  if (i >= num_results_) [[unlikely]]
    throw_index_out_of_range("result", i, num_results_);
  const char* self = reinterpret_cast<const char*>(this);
  if (i < detail::kMaxInlineResults) {
    auto* r = reinterpret_cast<const detail::OpInlineResultImpl*>(self) - (i + 1);
    return OpResult(const_cast<detail::OpInlineResultImpl*>(r));
  }
  auto* inline_begin =
      reinterpret_cast<const detail::OpInlineResultImpl*>(self) - detail::kMaxInlineResults;
  auto* r = reinterpret_cast<const detail::OpOutOfLineResultImpl*>(inline_begin) -
            (i - detail::kMaxInlineResults + 1);
  return OpResult(const_cast<detail::OpOutOfLineResultImpl*>(r));
}

inline detail::OpOperandImpl* Operation::operand_storage() const {
  return reinterpret_cast<detail::OpOperandImpl*>(const_cast<Operation*>(this) + 1);
}

inline OpOperand Operation::operand(std::uint32_t i) const {
  if (i >= num_operands_) [[unlikely]]
    throw_index_out_of_range("operand", i, num_operands_);
  return OpOperand(operand_storage() + i);
}

inline Region* Operation::region_storage() const {
  return reinterpret_cast<Region*>(operand_storage() + num_operands_);
}

template <typename A>
A Operation::attribute(std::string_view name) const {
  Attribute a = attributes_.find(name);
  if (!a)
    throw_error(ErrorKind::NotFound, "op '", this->name(), "' has no attribute '", name, "'");
  if (!a.isa<A>())
    throw_error(ErrorKind::InvalidArgument, "op '", this->name(), "' attribute '", name,
                "' should be ", A::name, ", got ", a.kind_name());
  return a.cast<A>();
}

namespace detail {
inline Operation* OpResultImpl::owner() const {
  unsigned t = tag();
  if (t < kMaxInlineResults)
    return reinterpret_cast<Operation*>(
        const_cast<OpInlineResultImpl*>(static_cast<const OpInlineResultImpl*>(this) + t + 1));
  auto* ool = static_cast<const OpOutOfLineResultImpl*>(this);
  auto* inline_begin = reinterpret_cast<const OpInlineResultImpl*>(
      ool + ool->out_of_line_index() + 1);
  return reinterpret_cast<Operation*>(
      const_cast<OpInlineResultImpl*>(inline_begin + kMaxInlineResults));
}

inline std::uint32_t OpResultImpl::index() const {
  unsigned t = tag();
  if (t < kMaxInlineResults) return t;
  return kMaxInlineResults + static_cast<const OpOutOfLineResultImpl*>(this)->out_of_line_index();
}
}  // namespace detail

inline Operation* Value::defining_op() const {
  if (!impl_ || is_block_argument()) return nullptr;
  return static_cast<detail::OpResultImpl*>(impl_)->owner();
}

inline std::uint32_t OpOperand::index() const {
  return static_cast<std::uint32_t>(impl_ - reinterpret_cast<detail::OpOperandImpl*>(
                                                impl_->owner() + 1));
}

}  // namespace kiln
