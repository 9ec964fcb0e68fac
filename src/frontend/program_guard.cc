// ProgramGuard, unique names, stop_gradient, data() and parameters: the
// program-building state of the frontend (include/kiln/frontend/*.h).
#include <map>
#include <utility>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/data.h"
#include "kiln/frontend/parameter.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/frontend/stop_gradient.h"
#include "kiln/frontend/unique_name.h"

namespace kiln {

// ---- ProgramGuard ----

namespace {

struct GuardEntry {
  Program* main;
  Program* startup;  // null: none
  std::vector<Block*> blocks;  // BlockGuards, innermost last
};

std::vector<GuardEntry>& guard_stack() {
  thread_local std::vector<GuardEntry> stack;
  return stack;
}

}  // namespace

ProgramGuard::ProgramGuard(Program& main, Program& startup) {
  guard_stack().push_back({&main, &startup, {}});
}

ProgramGuard::ProgramGuard(Program& main) {
  auto& s = guard_stack();
  s.push_back({&main, s.empty() ? nullptr : s.back().startup, {}});
}

ProgramGuard::~ProgramGuard() { guard_stack().pop_back(); }

bool has_program_guard() { return !guard_stack().empty(); }

Program& current_main_program() {
  auto& s = guard_stack();
  if (s.empty())
    throw_error(ErrorKind::PreconditionNotMet,
                "no ProgramGuard is active: build programs inside "
                "`kiln::ProgramGuard guard(main_program, startup_program);`");
  return *s.back().main;
}

Program& current_startup_program() {
  auto& s = guard_stack();
  if (s.empty())
    throw_error(ErrorKind::PreconditionNotMet,
                "no ProgramGuard is active: build programs inside "
                "`kiln::ProgramGuard guard(main_program, startup_program);`");
  if (!s.back().startup)
    throw_error(ErrorKind::PreconditionNotMet,
                "the active ProgramGuard has no startup program: parameters need "
                "`kiln::ProgramGuard guard(main_program, startup_program);`");
  return *s.back().startup;
}

BlockGuard::BlockGuard(Block& block) {
  auto& s = guard_stack();
  if (s.empty())
    throw_error(ErrorKind::PreconditionNotMet,
                "no ProgramGuard is active: a BlockGuard builds inside "
                "`kiln::ProgramGuard guard(main_program, startup_program);`");
  if (block.parent_region())
    throw_error(ErrorKind::InvalidArgument,
                "BlockGuard: the block is already in a region (expected a detached block)");
  s.back().blocks.push_back(&block);
}

BlockGuard::~BlockGuard() { guard_stack().back().blocks.pop_back(); }

Block& current_block() {
  Program& main = current_main_program();
  const auto& blocks = guard_stack().back().blocks;
  return blocks.empty() ? main.block() : *blocks.back();
}

bool in_current_program(Value v) {
  if (!v) return false;
  const Block* b =
      v.defining_op() ? v.defining_op()->parent_block() : cast<BlockArgument>(v).owner();
  while (b && b->parent_op()) b = b->parent_op()->parent_block();
  if (!b) return false;
  if (b == &current_main_program().block()) return true;
  for (const Block* open : guard_stack().back().blocks)
    if (b == open) return true;
  return false;
}

Builder main_builder() { return Builder(current_block()); }
Builder startup_builder() { return Builder(current_startup_program()); }

// ---- unique names ----

namespace {

std::vector<UniqueNameCounters>& name_scopes() {
  thread_local std::vector<UniqueNameCounters> scopes(1);
  return scopes;
}

}  // namespace

std::string unique_name(std::string_view prefix) {
  auto& counters = name_scopes().back();
  auto it = counters.find(prefix);
  if (it == counters.end()) it = counters.emplace(std::string(prefix), 0).first;
  return std::string(prefix) + "_" + std::to_string(it->second++);
}

UniqueNameCounters unique_name_counters() { return name_scopes().back(); }

void restore_unique_name_counters(UniqueNameCounters counters) {
  name_scopes().back() = std::move(counters);
}

UniqueNameGuard::UniqueNameGuard() { name_scopes().emplace_back(); }
UniqueNameGuard::~UniqueNameGuard() { name_scopes().pop_back(); }

// ---- stop_gradient ----

void set_stop_gradient(Value v, bool stop) {
  if (!v) throw_error(ErrorKind::InvalidArgument, "set_stop_gradient: the value is null");
  Operation* op = v.defining_op();
  if (!op)
    throw_error(ErrorKind::InvalidArgument,
                "set_stop_gradient: a block argument has no defining op to carry the flag");
  const std::uint32_t n = op->num_results();
  std::vector<Attribute> flags(n, BoolAttribute::get(false));
  if (auto old = op->attribute(kStopGradientAttr).dyn_cast<ArrayAttribute>();
      old && old.size() == n)
    flags = old.value();
  flags[cast<OpResult>(v).index()] = BoolAttribute::get(stop);
  op->set_attribute(kStopGradientAttr, ArrayAttribute::get(std::move(flags)));
}

bool stop_gradient(Value v) {
  if (!v) return false;
  Operation* op = v.defining_op();
  if (!op) return false;
  auto flags = op->attribute(kStopGradientAttr).dyn_cast<ArrayAttribute>();
  const std::uint32_t i = cast<OpResult>(v).index();
  if (!flags || i >= flags.size()) return false;
  auto b = flags[i].dyn_cast<BoolAttribute>();
  return b && b.value();
}

// ---- data ----

Value data(const std::string& name, const std::vector<std::int64_t>& shape, DataType dtype,
           Place place) {
  if (name.empty()) throw_error(ErrorKind::InvalidArgument, "data: the name is empty");
  for (auto d : shape)
    if (d < -1)
      throw_error(ErrorKind::InvalidArgument, "data '", name, "': dim ", d,
                  " in shape ", meta::dims_string(shape), " (expected >= 0, or -1 for unknown)");
  Program& main = current_main_program();
  for (Operation* op : main.block())
    if (auto d = op->dyn_cast<DataOp>(); d && d.attrs().name == name)
      throw_error(ErrorKind::AlreadyExists, "data '", name,
                  "': the main program already has a data op of that name");
  Builder b(main);
  Value v = b.create<DataOp>(name, shape, dtype, place).result();
  set_stop_gradient(v, true);
  return v;
}

// ---- parameters ----

Value create_parameter(const std::string& name, const std::vector<std::int64_t>& shape,
                       DataType dtype, const init::Initializer& initializer, bool trainable) {
  if (name.empty()) throw_error(ErrorKind::InvalidArgument, "create_parameter: the name is empty");
  for (auto d : shape)
    if (d < 0)
      throw_error(ErrorKind::InvalidArgument, "create_parameter '", name, "': dim ", d,
                  " in shape ", meta::dims_string(shape), " (a parameter's dims must be >= 0)");
  Program& main = current_main_program();
  Program& startup = current_startup_program();
  if (main.has_parameter(name))
    throw_error(ErrorKind::AlreadyExists, "create_parameter '", name,
                "': the main program already has a parameter of that name");
  const Type type = TensorType::get(dtype, shape);
  {
    Builder sb(startup);
    Operation* mark = startup.block().back();
    try {
      Value init = initializer.emit(sb, shape, dtype);
      if (!init || init.type() != type)
        throw_error(ErrorKind::InvalidArgument, "create_parameter '", name, "': initializer ",
                    initializer.describe(), " made ",
                    init ? init.type().to_string() : std::string("no value"), ", expected ",
                    type.to_string());
      sb.create<SetParameterOp>(init, name);
    } catch (...) {
      // Leave the startup program as it was.
      while (startup.block().back() != mark) startup.block().erase(startup.block().back());
      throw;
    }
  }
  startup.set_parameter(name, Parameter{type, true});
  main.set_parameter(name, Parameter{type, true});
  Builder mb(main);
  Value v = mb.create<ParameterOp>(name, type).result();
  set_stop_gradient(v, !trainable);
  return v;
}

Value parameter_value(const std::string& name, Type type, bool trainable) {
  Program& main = current_main_program();
  for (Operation* op : main.block())
    if (auto p = op->dyn_cast<ParameterOp>(); p && p.attrs().parameter_name == name)
      return op->result(0);
  if (!type) {
    const Parameter* known = main.get_parameter(name);
    if (!known)
      throw_error(ErrorKind::NotFound, "parameter '", name,
                  "' is not in the current main program (create it with create_parameter)");
    type = known->type;
  }
  if (!main.has_parameter(name)) main.set_parameter(name, Parameter{type, true});
  Builder mb(main);
  Value v = mb.create<ParameterOp>(name, type).result();
  set_stop_gradient(v, !trainable);
  return v;
}

std::vector<Value> all_parameters(const Program& program) {
  std::vector<Value> out;
  std::map<std::string, bool, std::less<>> seen;
  for (Operation* op : program.block())
    if (auto p = op->dyn_cast<ParameterOp>())
      if (seen.emplace(p.attrs().parameter_name, true).second) out.push_back(op->result(0));
  return out;
}

std::vector<Value> trainable_parameters(const Program& program) {
  std::vector<Value> out;
  for (Value v : all_parameters(program))
    if (!stop_gradient(v)) out.push_back(v);
  return out;
}

std::string parameter_name(Value v) {
  if (!v) return {};
  Operation* op = v.defining_op();
  if (!op) return {};
  if (auto p = op->dyn_cast<ParameterOp>()) return p.attrs().parameter_name;
  return {};
}

}  // namespace kiln
