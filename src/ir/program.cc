#include "kiln/ir/program.h"

#include <sstream>
#include <unordered_set>

#include "kiln/ir/printer.h"
#include "kiln/ir/region.h"

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

// Verifies ops and that every operand is defined before its use, in the same
// block or an enclosing one.
void verify_block(const Block& b, std::unordered_set<const detail::ValueImpl*>& visible) {
  std::vector<const detail::ValueImpl*> added;
  for (std::uint32_t a = 0; a < b.num_arguments(); ++a) {
    visible.insert(b.argument(a).impl());
    added.push_back(b.argument(a).impl());
  }
  for (Operation* op : b) {
    op->verify();
    for (std::uint32_t i = 0; i < op->num_operands(); ++i)
      if (!visible.count(op->operand_source(i).impl()))
        throw_error(ErrorKind::InvalidArgument, "op '", op->name(), "' operand #", i,
                    " uses a value that is not defined before it");
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (Block* inner : op->region(r)) verify_block(*inner, visible);
    for (std::uint32_t i = 0; i < op->num_results(); ++i) {
      visible.insert(op->result(i).impl());
      added.push_back(op->result(i).impl());
    }
  }
  for (auto* v : added) visible.erase(v);
}
}  // namespace

std::size_t Program::num_ops() const { return count_ops(*block_); }

void Program::verify() const {
  std::unordered_set<const detail::ValueImpl*> visible;
  verify_block(*block_, visible);
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
