// PassContext, Pass, the pass registry and the PassManager.
#include "kiln/passes/pass.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <unordered_map>

#include "kiln/ir/region.h"
#include "kiln/passes/op_effects.h"
#include "kiln/passes/pass_manager.h"

namespace kiln {

// ---- PassContext ----

struct PassContext::State {
  // value → the slots of live_out_ it fills (usually one)
  std::unordered_map<const detail::ValueImpl*, std::vector<std::size_t>> slots;
  std::function<void(Operation*)> erase_listener;
  std::shared_ptr<const AliasInfo> aliases;
};

PassContext::PassContext() : state_(std::make_unique<State>()) {}

PassContext::PassContext(const std::vector<Value>& live_out) : PassContext() {
  for (Value v : live_out) add_live_out(v);
}

PassContext::~PassContext() = default;

void PassContext::set_erase_listener(std::function<void(Operation*)> f) {
  state_->erase_listener = std::move(f);
}

void PassContext::set_program(Program* p) {
  program_ = p;
  state_->aliases.reset();
}

void PassContext::invalidate_analyses() { state_->aliases.reset(); }

bool PassContext::is_protected(Value v) const { return state_->slots.count(v.impl()) != 0; }

std::size_t PassContext::add_live_out(Value v) {
  if (!v) throw_error(ErrorKind::InvalidArgument, "a live-out value of a pass pipeline is null");
  const std::size_t k = live_out_.size();
  live_out_.push_back(v);
  state_->slots[v.impl()].push_back(k);
  return k;
}

void PassContext::replace_all_uses(Value from, Value to) {
  if (!to) throw_error(ErrorKind::InvalidArgument, "cannot replace a value with a null value");
  if (from == to) return;
  from.replace_all_uses_with(to);
  ++values_replaced;
  auto& slots = state_->slots;
  auto it = slots.find(from.impl());
  if (it == slots.end()) return;
  std::vector<std::size_t> moved = std::move(it->second);
  slots.erase(it);
  for (std::size_t k : moved) live_out_[k] = to;
  auto& dest = slots[to.impl()];
  dest.insert(dest.end(), moved.begin(), moved.end());
}

void PassContext::erase_op(Operation* op) {
  for (std::uint32_t i = 0; i < op->num_results(); ++i)
    if (is_protected(op->result(i)))
      throw_error(ErrorKind::Internal, "a pass erased op '", op->name(), "' whose result #", i,
                  " is live-out (fetched or kept); replace it first");
  if (state_->erase_listener) state_->erase_listener(op);
  op->erase();
  ++ops_erased;
}

const AliasInfo* PassContext::aliases() const {
  if (!program_) return nullptr;
  auto& aliases = state_->aliases;
  if (!aliases) aliases = std::make_shared<const AliasInfo>(*program_);
  return aliases.get();
}

// ---- Pass ----

std::vector<Block*> blocks_innermost_first(const Program& program) {
  std::vector<Block*> out;
  auto visit = [&](auto& self, Block& b) -> void {
    for (Operation* op : b)
      for (std::uint32_t r = 0; r < op->num_regions(); ++r)
        for (Block* inner : op->region(r)) self(self, *inner);
    out.push_back(&b);
  };
  visit(visit, program.block());
  return out;
}

void Pass::run(Program& program, PassContext& ctx) {
  for (Block* b : blocks_innermost_first(program)) run_on_block(*b, ctx);
}

void Pass::run_on_block(Block&, PassContext&) {}

// ---- PassRegistry ----

struct PassRegistry::Entries {
  struct Entry {
    PassFactory factory;
    std::string description;
  };
  std::unordered_map<std::string, Entry> map;
};

PassRegistry::PassRegistry() : entries_(std::make_unique<Entries>()) {}
PassRegistry::~PassRegistry() = default;

PassRegistrar::PassRegistrar(std::string name, PassFactory factory, std::string description) {
  PassRegistry::instance().add(std::move(name), std::move(factory), std::move(description));
}

PassRegistry& PassRegistry::instance() {
  static PassRegistry r;
  return r;
}

void PassRegistry::add(std::string name, PassFactory factory, std::string description) {
  if (name.empty() || name.find_first_of(", \t\n") != std::string::npos)
    throw_error(ErrorKind::InvalidArgument, "pass name '", name,
                "' is empty or holds ',' or spaces (pipelines separate names by ',')");
  if (!factory) throw_error(ErrorKind::InvalidArgument, "pass '", name, "' has no factory");
  if (entries_->map.count(name))
    throw_error(ErrorKind::AlreadyExists, "a pass named '", name, "' is already registered");
  entries_->map.emplace(std::move(name), Entries::Entry{std::move(factory), std::move(description)});
}

bool PassRegistry::contains(std::string_view name) const {
  return entries_->map.count(std::string(name)) != 0;
}

std::vector<std::string> PassRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [n, e] : entries_->map) out.push_back(n);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
std::string known_passes(const PassRegistry& r) {
  std::string s;
  for (const auto& n : r.names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}
}  // namespace

std::unique_ptr<Pass> PassRegistry::create(std::string_view name) const {
  auto it = entries_->map.find(std::string(name));
  if (it == entries_->map.end())
    throw_error(ErrorKind::NotFound, "unknown pass '", name, "'; known passes: ", known_passes(*this));
  auto p = it->second.factory();
  if (!p) throw_error(ErrorKind::Internal, "the factory of pass '", name, "' made no pass");
  return p;
}

const std::string& PassRegistry::description(std::string_view name) const {
  auto it = entries_->map.find(std::string(name));
  if (it == entries_->map.end())
    throw_error(ErrorKind::NotFound, "unknown pass '", name, "'; known passes: ", known_passes(*this));
  return it->second.description;
}

// ---- PassManager ----

std::vector<std::string> parse_pipeline(std::string_view pipeline) {
  std::vector<std::string> names;
  std::size_t pos = 0;
  while (true) {
    std::size_t comma = pipeline.find(',', pos);
    std::string_view item =
        pipeline.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const auto b = item.find_first_not_of(" \t\n");
    const auto e = item.find_last_not_of(" \t\n");
    item = b == std::string_view::npos ? std::string_view() : item.substr(b, e - b + 1);
    if (item.empty())
      throw_error(ErrorKind::InvalidArgument, "pass pipeline '", pipeline, "' has an empty entry (#",
                  names.size() + 1, "); expected names separated by ',', known passes: ",
                  known_passes(PassRegistry::instance()));
    if (!PassRegistry::instance().contains(item))
      throw_error(ErrorKind::NotFound, "pass pipeline '", pipeline, "': unknown pass '", item,
                  "'; known passes: ", known_passes(PassRegistry::instance()));
    names.emplace_back(item);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return names;
}

PassManager::PassManager(PassManagerOptions options) : options_(std::move(options)) {}
PassManager::~PassManager() = default;
PassManager::PassManager(PassManager&&) noexcept = default;
PassManager& PassManager::operator=(PassManager&&) noexcept = default;

PassManager& PassManager::add(std::unique_ptr<Pass> pass) {
  if (!pass) throw_error(ErrorKind::InvalidArgument, "cannot add a null pass to a PassManager");
  passes_.push_back(std::move(pass));
  return *this;
}

PassManager& PassManager::add_pipeline(std::string_view pipeline) {
  std::vector<std::unique_ptr<Pass>> made;
  for (const auto& n : parse_pipeline(pipeline)) made.push_back(PassRegistry::instance().create(n));
  for (auto& p : made) passes_.push_back(std::move(p));
  return *this;
}

PassManager PassManager::parse(std::string_view pipeline, PassManagerOptions options) {
  PassManager pm(std::move(options));
  pm.add_pipeline(pipeline);
  return pm;
}

std::vector<std::string> PassManager::pass_names() const {
  std::vector<std::string> out;
  for (const auto& p : passes_) out.push_back(p->name());
  return out;
}

bool PassManager::wants(const std::set<std::string, std::less<>>& names, const Pass& pass) const {
  return names.count("*") || names.count(pass.name());
}

void PassManager::print_ir(const Program& program, std::string_view when, const Pass& pass) const {
  std::ostream& os = options_.print_stream ? *options_.print_stream : std::cerr;
  os << "// -----// IR " << when << " '" << pass.name() << "' //----- //\n";
  program.print(os);
  os << '\n';
}

void PassManager::run(Program& program) {
  PassContext ctx;
  run(program, ctx);
}

void PassManager::run(Program& program, PassContext& ctx) {
  using Clock = std::chrono::steady_clock;
  if (options_.verify_each) {
    try {
      program.verify();
    } catch (const Error& e) {
      throw_error(ErrorKind::InvalidArgument, "the program is invalid before the pass pipeline: ",
                  e.message());
    }
  }
  if (timing_.entries.size() != passes_.size()) {
    timing_.entries.clear();
    for (const auto& p : passes_) timing_.entries.push_back({p->name()});
  }
  Program* previous = ctx.program();
  ctx.set_program(&program);
  for (std::size_t k = 0; k < passes_.size(); ++k) {
    Pass& pass = *passes_[k];
    if (wants(options_.print_ir_before, pass)) print_ir(program, "before", pass);
    const std::size_t erased0 = ctx.ops_erased, replaced0 = ctx.values_replaced;
    const auto t0 = options_.timing ? Clock::now() : Clock::time_point();
    ctx.invalidate_analyses();
    const std::uint64_t epoch = ir_epoch();
    try {
      pass.run(program, ctx);
    } catch (const Error& e) {
      ctx.set_program(previous);
      throw_error(e.kind(), "pass '", pass.name(), "' failed: ", e.message());
    }
    ctx.invalidate_analyses();  // the pass may have changed anything
    auto& entry = timing_.entries[k];
    if (options_.timing)
      entry.ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ++entry.runs;
    entry.ops_erased += ctx.ops_erased - erased0;
    entry.values_replaced += ctx.values_replaced - replaced0;
    // An unchanged IR epoch (kiln/ir/epoch.h: bumped by every change to any
    // IR) means the pass changed nothing: the program is as verified.
    if (options_.verify_each && ir_epoch() != epoch) {
      try {
        program.verify();
      } catch (const Error& e) {
        ctx.set_program(previous);
        throw_error(ErrorKind::Internal, "pass '", pass.name(), "' left the IR invalid: ",
                    e.message());
      }
    }
    if (wants(options_.print_ir_after, pass)) print_ir(program, "after", pass);
  }
  ctx.set_program(previous);
}

double PassTimingReport::total_ms() const {
  double t = 0;
  for (const auto& e : entries) t += e.ms;
  return t;
}

void PassTimingReport::print(std::ostream& os) const {
  const double total = total_ms();
  const auto flags = os.flags();
  os << "===-------------------------------------------===\n"
     << "  pass timing (wall), total " << std::fixed << std::setprecision(3) << total << " ms\n"
     << "===-------------------------------------------===\n";
  os << std::setw(12) << "ms" << std::setw(9) << "%" << std::setw(6) << "runs" << std::setw(9)
     << "erased" << std::setw(10) << "replaced" << "  pass\n";
  for (const auto& e : entries)
    os << std::setw(12) << std::setprecision(3) << e.ms << std::setw(8) << std::setprecision(1)
       << (total > 0 ? 100.0 * e.ms / total : 0.0) << "%" << std::setw(6) << e.runs << std::setw(9)
       << e.ops_erased << std::setw(10) << e.values_replaced << "  " << e.pass << '\n';
  os << std::setw(12) << std::setprecision(3) << total << std::setw(8) << "100.0" << "%"
     << std::setw(25) << "" << "  total\n";
  os.flags(flags);
}

std::string PassTimingReport::to_string() const {
  std::ostringstream os;
  print(os);
  return os.str();
}

}  // namespace kiln
