#include "kiln/ir/operation.h"

#include <new>
#include <sstream>
#include <unordered_set>

#include "kiln/ir/block.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/inplace_pairs.h"
#include "kiln/ir/interfaces.h"
#include "kiln/ir/op.h"
#include "kiln/ir/program.h"
#include "kiln/ir/region.h"
#include "kiln/ir/tensor_attribute.h"
#include "kiln/ir/traits.h"

namespace kiln {

using detail::kMaxInlineResults;
using detail::OpInlineResultImpl;
using detail::OpOperandImpl;
using detail::OpOutOfLineResultImpl;

namespace {
std::size_t result_prefix_bytes(std::size_t n) {
  std::size_t n_inline = n < kMaxInlineResults ? n : kMaxInlineResults;
  std::size_t n_ool = n > kMaxInlineResults ? n - kMaxInlineResults : 0;
  return n_inline * sizeof(OpInlineResultImpl) + n_ool * sizeof(OpOutOfLineResultImpl);
}
static_assert(sizeof(OpInlineResultImpl) % alignof(Operation) == 0);
static_assert(sizeof(OpOutOfLineResultImpl) % alignof(Operation) == 0);
static_assert(sizeof(Operation) % alignof(OpOperandImpl) == 0);
static_assert(sizeof(OpOperandImpl) % alignof(Region) == 0);
}  // namespace

Operation::Operation(OpInfo info, DictionaryAttribute attrs, std::uint32_t num_results,
                     std::uint32_t num_operands, std::uint32_t num_regions)
    : info_(info),
      attributes_(attrs),
      num_results_(num_results),
      num_operands_(num_operands),
      num_regions_(num_regions) {}

void Operation::throw_index_out_of_range(const char* what, std::uint32_t i,
                                         std::uint32_t count) const {
  throw_error(ErrorKind::OutOfRange, "op '", name(), "': ", what, " #", i,
              " out of range (it has ", count, " ", what, count == 1 ? ")" : "s)");
}

std::size_t Operation::prefix_bytes() const { return result_prefix_bytes(num_results_); }

namespace {

// The held tensor attribute among `attrs`' values at `a`, or null.
const TensorAttributeStorage* held_tensor_at(const NamedAttribute& a) {
  auto t = a.second.dyn_cast<TensorAttribute>();
  return t && t.held() ? t.storage() : nullptr;
}

// Takes back hold_tensors' counts of the first `n` entries of `attrs`, for
// an op that was never made (an attribute no op carried keeps its bytes).
void undo_holds(DictionaryAttribute attrs, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j)
    if (const auto* h = held_tensor_at(attrs.value()[j])) h->undo_add_holder();
}

// Counts one more holder of each held tensor in `attrs`; throws, having
// changed nothing, when one was released. No allocation: every op's
// creation comes here.
void hold_tensors(DictionaryAttribute attrs, std::string_view op_name) {
  const auto& entries = attrs.value();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const TensorAttributeStorage* s = held_tensor_at(entries[i]);
    if (!s || s->add_holder()) continue;
    undo_holds(attrs, i);
    std::ostringstream os;
    TensorAttribute(s).print(os);
    throw_error(ErrorKind::PreconditionNotMet, "op '", op_name, "' cannot carry ", os.str(),
                ": its bytes were freed when the last op carrying it was destroyed");
  }
}

void drop_tensors(DictionaryAttribute attrs) {
  for (const NamedAttribute& a : attrs)
    if (const auto* s = held_tensor_at(a)) s->drop_holder();
}

}  // namespace

Operation* Operation::create(const std::vector<Value>& operands,
                             const std::vector<Type>& result_types, DictionaryAttribute attributes,
                             OpInfo info, std::uint32_t num_regions) {
  if (!info) throw_error(ErrorKind::InvalidArgument, "cannot create an op without an OpInfo");
  for (std::size_t i = 0; i < operands.size(); ++i)
    if (!operands[i])
      throw_error(ErrorKind::InvalidArgument, "op '", info.name(), "' operand #", i, " is null");
  for (std::size_t i = 0; i < result_types.size(); ++i)
    if (!result_types[i])
      throw_error(ErrorKind::InvalidArgument, "op '", info.name(), "' result #", i,
                  " has no type");
  if (!attributes) attributes = DictionaryAttribute::get();
  hold_tensors(attributes, info.name());

  const std::size_t n = result_types.size();
  const std::size_t prefix = result_prefix_bytes(n);
  const std::size_t bytes = prefix + sizeof(Operation) + operands.size() * sizeof(OpOperandImpl) +
                            num_regions * sizeof(Region);
  detail::bump_ir_epoch();
  char* mem;
  try {
    mem = static_cast<char*>(::operator new(bytes));
  } catch (...) {
    undo_holds(attributes, attributes.size());
    throw;
  }
  auto* op = new (mem + prefix)
      Operation(info, attributes, static_cast<std::uint32_t>(n),
                static_cast<std::uint32_t>(operands.size()), num_regions);
  auto* inline_base = reinterpret_cast<OpInlineResultImpl*>(op);
  for (std::size_t i = 0; i < n && i < kMaxInlineResults; ++i)
    new (inline_base - (i + 1)) OpInlineResultImpl(result_types[i], static_cast<unsigned>(i));
  auto* ool_base = reinterpret_cast<OpOutOfLineResultImpl*>(inline_base - kMaxInlineResults);
  for (std::size_t i = kMaxInlineResults; i < n; ++i) {
    auto j = static_cast<std::uint32_t>(i - kMaxInlineResults);
    new (ool_base - (j + 1)) OpOutOfLineResultImpl(result_types[i], j);
  }
  for (std::size_t i = 0; i < operands.size(); ++i)
    new (op->operand_storage() + i) OpOperandImpl(operands[i].impl(), op);
  for (std::uint32_t i = 0; i < num_regions; ++i) new (op->region_storage() + i) Region(op);
  return op;
}

void OperationArgument::add_operand(Value v) { operands.push_back(v); }

void OperationArgument::add_operands(const std::vector<Value>& vs) {
  operands.insert(operands.end(), vs.begin(), vs.end());
}

void OperationArgument::add_result(Type t) { result_types.push_back(t); }

void OperationArgument::add_attribute(std::string name, Attribute a) {
  attributes.emplace_back(std::move(name), a);
}

Operation* Operation::create(const OperationArgument& arg) {
  if (arg.info) {
    const auto* impl = arg.info.impl();
    if (!impl->takes_operands(arg.operands.size()))
      throw_error(ErrorKind::InvalidArgument, "op '", arg.info.name(), "' takes ",
                  impl->operand_count(), " operands, got ", arg.operands.size());
  }
  return create(arg.operands, arg.result_types, DictionaryAttribute::get(arg.attributes), arg.info,
                arg.num_regions ? arg.num_regions
                                : static_cast<std::uint32_t>(arg.info ? arg.info.impl()->num_regions
                                                                      : 0));
}

namespace {
// Every op nested in `op` (itself included).
void collect_subtree(Operation* op, std::unordered_set<const Operation*>& out) {
  out.insert(op);
  for (std::uint32_t r = 0; r < op->num_regions(); ++r)
    for (Block* b : op->region(r))
      for (Operation* inner : *b) collect_subtree(inner, out);
}

// Throws when a value defined in `ops` (results, or block arguments of the
// blocks inside them) is used by an op outside `ops`.
void check_no_outside_uses(const std::unordered_set<const Operation*>& ops, std::string_view what) {
  auto check = [&](Value v, const Operation* def, std::string_view desc) {
    for (OpOperand u : v.uses())
      if (!ops.count(u.owner()))
        throw_error(ErrorKind::PreconditionNotMet, "cannot erase ", what, ": ", desc, " of op '",
                    def ? def->name() : std::string("<block>"), "' is still used by op '",
                    u.owner()->name(), "'");
  };
  for (const Operation* op : ops) {
    for (std::uint32_t i = 0; i < op->num_results(); ++i)
      check(op->result(i), op, "result #" + std::to_string(i));
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* b : op->region(r))
        for (std::uint32_t a = 0; a < b->num_arguments(); ++a)
          check(b->argument(a), op, "a block argument");
  }
}
}  // namespace

void Operation::erase() {
  if (num_regions_ == 0) {
    for (std::uint32_t i = 0; i < num_results_; ++i) {
      OpResult r = result(i);
      if (!r.use_empty())
        throw_error(ErrorKind::PreconditionNotMet, "cannot erase op '", name(), "': result #", i,
                    " is still used by op '", r.first_use().owner()->name(), "'");
    }
  } else {
    std::unordered_set<const Operation*> subtree;
    collect_subtree(this, subtree);
    check_no_outside_uses(subtree, "op '" + name() + "'");
  }
  if (parent_) parent_->unlink(this);
  drop_all_references();
  destroy_unchecked();
}

void Operation::destroy_unchecked() {
  detail::bump_ir_epoch();
  for (std::uint32_t i = 0; i < num_regions_; ++i) region_storage()[i].~Region();
  for (std::uint32_t i = 0; i < num_operands_; ++i) operand_storage()[i].~OpOperandImpl();
  // Defensive: uses that survive (only when a whole block is torn down while
  // something outside still points in) are unlinked, never left dangling.
  for (std::uint32_t i = 0; i < num_results_; ++i) {
    auto* r = result(i).impl();
    while (auto* u = r->first_use()) u->unlink();
  }
  drop_tensors(attributes_);
  char* base = reinterpret_cast<char*>(this) - prefix_bytes();
  this->~Operation();
  ::operator delete(base);
}

void Operation::drop_all_references() {
  for (std::uint32_t i = 0; i < num_operands_; ++i) operand_storage()[i].unlink();
  for (std::uint32_t r = 0; r < num_regions_; ++r)
    for (Block* b : region(r))
      for (Operation* op : *b) op->drop_all_references();
}

std::vector<Value> Operation::results() const {
  std::vector<Value> out;
  out.reserve(num_results_);
  for (std::uint32_t i = 0; i < num_results_; ++i) out.push_back(result(i));
  return out;
}

std::vector<Value> Operation::operands() const {
  std::vector<Value> out;
  out.reserve(num_operands_);
  for (std::uint32_t i = 0; i < num_operands_; ++i) out.push_back(operand_source(i));
  return out;
}

std::vector<Type> Operation::operand_types() const {
  std::vector<Type> out;
  out.reserve(num_operands_);
  for (std::uint32_t i = 0; i < num_operands_; ++i) {
    Value v = operand_source(i);
    out.push_back(v ? v.type() : Type());
  }
  return out;
}

void Operation::set_operand(std::uint32_t i, Value v) {
  if (i >= num_operands_) throw_index_out_of_range("operand", i, num_operands_);
  if (!v) throw_error(ErrorKind::InvalidArgument, "op '", name(), "' operand #", i, " set to null");
  operand_storage()[i].set_source(v.impl());
}

void Operation::set_attribute(std::string_view name, Attribute value) {
  if (!value)
    throw_error(ErrorKind::InvalidArgument, "op '", this->name(), "' attribute '", name,
                "' set to null");
  set_attributes(attributes_.with(name, value));
}

void Operation::erase_attribute(std::string_view name) { set_attributes(attributes_.without(name)); }

void Operation::set_attributes(DictionaryAttribute attrs) {
  if (!attrs) attrs = DictionaryAttribute::get();
  hold_tensors(attrs, name());
  drop_tensors(attributes_);
  attributes_ = attrs;
  detail::bump_ir_epoch();
}

Region* Operation::parent_region() const { return parent_ ? parent_->parent_region() : nullptr; }

Operation* Operation::parent_op() const { return parent_ ? parent_->parent_op() : nullptr; }

void Operation::move_before(Operation* other) {
  if (other == this) return;
  if (!other->parent_)
    throw_error(ErrorKind::InvalidArgument, "cannot move op '", name(), "' before op '",
                other->name(), "', which is in no block");
  if (other->parent_->is_nested_in(this))
    throw_error(ErrorKind::InvalidArgument, "cannot move op '", name(), "' before op '",
                other->name(), "', which is inside it");
  if (parent_) parent_->unlink(this);
  other->parent_->insert(other, this);
}

void Operation::move_to_end(Block* block) {
  if (block->is_nested_in(this))
    throw_error(ErrorKind::InvalidArgument, "cannot move op '", name(),
                "' to the end of a block inside it");
  if (parent_) parent_->unlink(this);
  block->push_back(this);
}

Operation* Operation::clone() const {
  IrMapping m;
  return clone(m);
}

Operation* Operation::clone(IrMapping& map) const {
  std::vector<Value> ops;
  ops.reserve(num_operands_);
  for (std::uint32_t i = 0; i < num_operands_; ++i) ops.push_back(map.lookup_or_self(operand_source(i)));
  std::vector<Type> types;
  types.reserve(num_results_);
  for (std::uint32_t i = 0; i < num_results_; ++i) types.push_back(result(i).type());
  Operation* c = create(ops, types, attributes_, info_, num_regions_);
  for (std::uint32_t i = 0; i < num_results_; ++i) map.map(result(i), c->result(i));
  map.map(const_cast<Operation*>(this), c);
  for (std::uint32_t r = 0; r < num_regions_; ++r) region(r).clone_into(c->region(r), map);
  return c;
}

void Operation::verify() const {
  const auto* impl = info_.impl();
  auto* self = const_cast<Operation*>(this);
  if (!impl->takes_operands(num_operands_))
    throw_error(ErrorKind::InvalidArgument, "op '", name(), "' takes ", impl->operand_count(),
                " operands, got ", num_operands_);
  if (impl->num_results >= 0 && num_results_ != std::uint32_t(impl->num_results))
    throw_error(ErrorKind::InvalidArgument, "op '", name(), "' has ", impl->num_results,
                " results, got ", num_results_);
  if (num_regions_ != std::uint32_t(impl->num_regions))
    throw_error(ErrorKind::InvalidArgument, "op '", name(), "' has ", impl->num_regions,
                " regions, got ", num_regions_);
  for (std::uint32_t i = 0; i < num_operands_; ++i)
    if (!operand_source(i))
      throw_error(ErrorKind::InvalidArgument, "op '", name(), "' operand #", i,
                  " refers to no value (dangling)");
  if (impl->verify) impl->verify(self);
  for (auto* tv : impl->trait_verifiers) tv(self);
  // Result types must be what the op's InferMeta gives for its operands.
  if (auto im = self->dyn_cast<InferMetaInterface>()) {
    std::vector<Type> inferred = im.infer_meta();
    if (inferred.size() != num_results_)
      throw_error(ErrorKind::InvalidArgument, "op '", name(), "' has ", num_results_,
                  " results but its InferMeta gives ", inferred.size());
    for (std::uint32_t i = 0; i < num_results_; ++i)
      if (inferred[i] != result_type(i))
        throw_error(ErrorKind::InvalidArgument, "op '", name(), "' result #", i, " has type ",
                    result_type(i).to_string(), " but its operands give ",
                    inferred[i].to_string());
  }
}

std::string Operation::to_string() const {
  std::ostringstream os;
  print(os);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Operation& op) {
  op.print(os);
  return os;
}

// ---- traits ----

namespace {
void check_alias_map(Operation* op, std::span<const AliasPair> m,
                     std::string_view trait, bool same_type) {
  for (auto [out, in] : m) {
    if (out >= op->num_results() || in >= op->num_operands())
      throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "' ", trait, " pair (", out,
                  ", ", in, ") is out of range");
    Type rt = op->result_type(out);
    Value src = op->operand_source(in);
    if (!src) continue;
    if (same_type ? rt != src.type()
                  : (is_shaped(rt) && is_shaped(src.type()) &&
                     shaped_data_type(rt) != shaped_data_type(src.type())))
      throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "' ", trait, " output #", out,
                  " (", rt.to_string(), ") must ", same_type ? "have the type" : "have the dtype",
                  " of input #", in, " (", src.type().to_string(), ")");
  }
}
}  // namespace

void Inplace::verify_trait(Operation* op) {
  const InplacePairs pairs = inplace_pairs(*op);
  check_alias_map(op, std::span<const AliasPair>(pairs.begin(), pairs.size()), "inplace", true);
}

void ViewLike::verify_trait(Operation* op) {
  check_alias_map(op, op->info().impl()->view_map, "view", false);
}

}  // namespace kiln
