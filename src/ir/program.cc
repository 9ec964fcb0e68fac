#include "kiln/ir/program.h"

#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "kiln/ir/printer.h"
#include "kiln/ir/region.h"
#include "kiln/ir/traits.h"

namespace kiln {

Program::Program() : block_(std::make_unique<Block>()) {}
Program::~Program() = default;
// A move changes what lives at both addresses: caches keyed by a program's
// address and the epoch (Executor) must see a change.
Program::Program(Program&& o) noexcept : block_(std::move(o.block_)), params_(std::move(o.params_)) {
  detail::bump_ir_epoch();
}
Program& Program::operator=(Program&& o) noexcept {
  block_ = std::move(o.block_);
  params_ = std::move(o.params_);
  detail::bump_ir_epoch();
  return *this;
}

void Program::set_parameter(const std::string& name, Parameter p) {
  if (name.empty()) throw_error(ErrorKind::InvalidArgument, "a parameter needs a name");
  if (!p.type)
    throw_error(ErrorKind::InvalidArgument, "parameter '", name, "' needs a type");
  params_[name] = p;
  detail::bump_ir_epoch();
}

const Parameter* Program::get_parameter(std::string_view name) const {
  auto it = params_.find(name);
  return it == params_.end() ? nullptr : &it->second;
}

const Parameter& Program::parameter(std::string_view name) const {
  if (const Parameter* p = get_parameter(name)) return *p;
  throw_error(ErrorKind::NotFound, "program has no parameter '", name, "'");
}

bool Program::erase_parameter(std::string_view name) {
  auto it = params_.find(name);
  if (it == params_.end()) return false;
  params_.erase(it);
  detail::bump_ir_epoch();
  return true;
}

Program Program::clone() const {
  Program p;
  p.params_ = params_;
  IrMapping map;
  for (Operation* op : *block_) p.block_->push_back(op->clone(map));
  return p;
}

namespace {
std::size_t count_ops(const Block& b) {
  std::size_t n = 0;
  for (Operation* op : b) {
    ++n;
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) n += count_ops(*inner);
  }
  return n;
}

// What verify_block knows while it walks: the values visible at the op it
// checks, the values defined in regions already walked (with the op owning
// the region), and the region ops it is inside (innermost last).
struct VerifyScope {
  std::unordered_set<const detail::ValueImpl*> visible;
  std::unordered_map<const detail::ValueImpl*, Operation*>* inner;  // shared by nested scopes
  std::vector<Operation*> isolated;  // enclosing IsolatedFromAbove ops
  // Visible values of the blocks outside the innermost isolated op.
  std::unordered_set<const detail::ValueImpl*> outside;
};

[[noreturn]] void bad_operand(Operation* op, std::uint32_t i, const VerifyScope& sc) {
  const detail::ValueImpl* v = op->operand_source(i).impl();
  if (auto it = sc.inner->find(v); it != sc.inner->end())
    throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "' operand #", i,
                " uses a value defined inside a region of op '", it->second->name(),
                "'; values leave a region only through its kiln.yield");
  if (!sc.isolated.empty() && sc.outside.count(v))
    throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "' operand #", i,
                " uses a value defined outside the region of op '", sc.isolated.back()->name(),
                "'; a region reads outer values only as operands of its op (block arguments)");
  throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "' operand #", i,
              " uses a value that is not defined before it");
}

// Verifies ops and that every operand is defined before its use, in the same
// block or an enclosing one (not across an IsolatedFromAbove op); a
// Terminator ends a region's block.
void verify_block(const Block& b, VerifyScope& sc, bool top) {
  std::vector<const detail::ValueImpl*> added;
  for (std::uint32_t a = 0; a < b.num_arguments(); ++a) {
    sc.visible.insert(b.argument(a).impl());
    added.push_back(b.argument(a).impl());
  }
  for (Operation* op : b) {
    op->verify();
    if (op->has_trait<Terminator>()) {
      if (top)
        throw_error(ErrorKind::InvalidArgument, "op '", op->name(),
                    "' ends a region's block; it cannot be in a program's top block");
      if (op != b.back())
        throw_error(ErrorKind::InvalidArgument, "op '", op->name(),
                    "' must be the last op of its block");
    }
    for (std::uint32_t i = 0; i < op->num_operands(); ++i)
      if (!sc.visible.count(op->operand_source(i).impl())) bad_operand(op, i, sc);
    if (op->num_regions() > 0) {
      const bool isolated = op->has_trait<IsolatedFromAbove>();
      if (isolated) {
        // Inside: only the region's own values. Keep what was visible to
        // name the mistake of using it.
        VerifyScope in;
        in.inner = sc.inner;  // the one map
        in.isolated = sc.isolated;
        in.isolated.push_back(op);
        in.outside = sc.visible;
        for (std::uint32_t r = 0; r < op->num_regions(); ++r)
          for (Block* inner : op->region(r)) verify_block(*inner, in, false);
      } else {
        for (std::uint32_t r = 0; r < op->num_regions(); ++r)
          for (Block* inner : op->region(r)) verify_block(*inner, sc, false);
      }
      // Values defined inside op's regions (now out of scope), for messages.
      for (std::uint32_t r = 0; r < op->num_regions(); ++r)
        for (Block* inner : op->region(r)) {
          for (std::uint32_t a = 0; a < inner->num_arguments(); ++a)
            sc.inner->emplace(inner->argument(a).impl(), op);
          for (Operation* o : *inner)
            for (std::uint32_t k = 0; k < o->num_results(); ++k)
              sc.inner->emplace(o->result(k).impl(), op);
        }
    }
    for (std::uint32_t i = 0; i < op->num_results(); ++i) {
      sc.visible.insert(op->result(i).impl());
      added.push_back(op->result(i).impl());
    }
  }
  for (auto* v : added) sc.visible.erase(v);
}
}  // namespace

std::size_t Program::num_ops() const { return count_ops(*block_); }

void Program::verify() const {
  std::unordered_map<const detail::ValueImpl*, Operation*> inner;
  VerifyScope sc;
  sc.inner = &inner;
  verify_block(*block_, sc, true);
}

void Program::print(std::ostream& os) const {
  IrPrinter p(os);
  p.print(*this);
}

std::string Program::to_string() const {
  std::ostringstream os;
  print(os);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Program& p) {
  p.print(os);
  return os;
}

}  // namespace kiln
