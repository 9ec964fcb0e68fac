// Pass: one rewrite of a Program (seed 002 §3.3, the passes of the new IR),
// and the PassContext every pass of a pipeline shares — the live-out values
// the caller still needs (fetch targets, values kept from GC) followed
// through every replacement a pass makes. The PassRegistry names passes so
// that a pipeline is a string ("dce,cse,fold,simplify"); a user registers
// their own pass from their own file with KILN_REGISTER_PASS.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/block.h"
#include "kiln/ir/program.h"
#include "kiln/support/place.h"

namespace kiln {

class AliasInfo;

// What the passes of one pipeline run share. Live-out values are protected:
// DCE keeps them and their producers, and a pass that replaces one (CSE
// merging it, folding it to a constant) goes through replace_all_uses, which
// moves the protection — and the caller's slot — to the replacement.
class PassContext {
 public:
  PassContext();
  explicit PassContext(const std::vector<Value>& live_out);
  ~PassContext();
  PassContext(const PassContext&) = delete;
  PassContext& operator=(const PassContext&) = delete;

  // Adds a live-out value; returns its slot (an index into live_out()).
  std::size_t add_live_out(Value v);
  // The live-out values as they stand now, in the order given: after a
  // pass replaced slot k's value, live_out()[k] is the replacement.
  const std::vector<Value>& live_out() const { return live_out_; }
  bool is_protected(Value v) const;

  // Every use of `from` now uses `to`; a protected `from` hands its slots
  // to `to`. Passes replace values through this, never directly, so that
  // fetched values survive them. A null `to` is a kiln::Error.
  void replace_all_uses(Value from, Value to);
  // Erases `op` (see Operation::erase). kiln::Error (Internal) naming the
  // op when one of its results is live-out: a pass must replace a live-out
  // value before it removes its producer.
  void erase_op(Operation* op);

  // Called with each op erase_op is about to erase (a caller keeping its
  // own map of values into the program drops the op's results from it).
  void set_erase_listener(std::function<void(Operation*)> f);

  // The buffers of program() (kiln/passes/op_effects.h), computed on first
  // use and kept until invalidate_analyses(), which the PassManager calls
  // after each pass; null without a program.
  const AliasInfo* aliases() const;
  void invalidate_analyses();

  // The program the pipeline runs on (null outside a PassManager run).
  Program* program() const { return program_; }
  void set_program(Program* p);

  // Where the program will run (the executor sets its place). Passes that
  // add ops choose by it: fold makes builtin.constant ops, which have only
  // a CPU kernel, so it folds nothing for a device.
  Place target_place = Place::cpu();
  // Host threads the program's runs may use (the executor sets it; 1 outside
  // one). auto_lower_to_dataflow lowers loops only with more than one.
  unsigned num_threads = 1;

  // Counters a pass may bump (ops erased, merged, folded, rewritten), shown
  // in the PassManager's timing report.
  std::size_t ops_erased = 0;
  std::size_t values_replaced = 0;

 private:
  // The slots of each live-out value, the erase listener and the cached
  // analyses (pass.cc): kept out of this header, which every pass and
  // host file reads.
  struct State;
  std::vector<Value> live_out_;
  Program* program_ = nullptr;
  std::unique_ptr<State> state_;
};

class Pass {
 public:
  explicit Pass(std::string name) : name_(std::move(name)) {}
  virtual ~Pass() = default;
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

  const std::string& name() const { return name_; }

  // Runs the pass on the whole program. The default runs run_on_block on
  // every block — the program's and each region's, innermost first — so a
  // pass that looks at one block at a time (most do) works inside control
  // flow bodies too. A pass that needs the whole program overrides this.
  virtual void run(Program& program, PassContext& ctx);
  // One block; called by the default run().
  virtual void run_on_block(Block& block, PassContext& ctx);

 private:
  std::string name_;
};

// The blocks of `program`, every nested one first and the top block last
// (post-order): what the default Pass::run visits.
std::vector<Block*> blocks_innermost_first(const Program& program);

using PassFactory = std::function<std::unique_ptr<Pass>()>;

// name → factory, filled at static-initialisation time (like the op and
// kernel registries). kiln's own passes: dce, cse, fold, simplify.
class PassRegistry {
 public:
  static PassRegistry& instance();

  // kiln::Error (AlreadyExists) for a name already registered, and
  // (InvalidArgument) for a name that is empty or holds ',' or spaces.
  void add(std::string name, PassFactory factory, std::string description = {});
  bool contains(std::string_view name) const;
  // A new pass; kiln::Error (NotFound) naming `name` and listing the known ones.
  std::unique_ptr<Pass> create(std::string_view name) const;
  // Sorted.
  std::vector<std::string> names() const;
  const std::string& description(std::string_view name) const;

 private:
  PassRegistry();
  ~PassRegistry();
  struct Entries;  // name → (factory, description), in pass.cc
  std::unique_ptr<Entries> entries_;
};

struct PassRegistrar {
  PassRegistrar(std::string name, PassFactory factory, std::string description = {});
};

#define KILN_PASS_CAT2(a, b) a##b
#define KILN_PASS_CAT(a, b) KILN_PASS_CAT2(a, b)
// KILN_REGISTER_PASS("my-pass", [] { return std::make_unique<MyPass>(); }):
// the pass can then be named in a pipeline string. An optional third
// argument describes it.
#define KILN_REGISTER_PASS(name, ...)                                          \
  static const ::kiln::PassRegistrar KILN_PASS_CAT(kiln_pass_, __COUNTER__)( \
      name, __VA_ARGS__)

}  // namespace kiln
