// cond, while_loop and switch_case of kiln/frontend/control_flow.h.
#include "kiln/frontend/control_flow.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>

#include "kiln/dialect/control_flow_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/capture.h"
#include "kiln/frontend/math.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/frontend/unique_name.h"
#include "kiln/support/error.h"

namespace kiln {

namespace {

std::string type_string(Type t) { return t ? t.to_string() : std::string("no type"); }

// What the programs held when a control-flow function began: restore()
// erases the ops added since to the current block and to the main and
// startup programs' top blocks, and the parameters and unique names given
// since.
class Checkpoint {
 public:
  Checkpoint()
      : main_(current_main_program()),
        current_(current_block()),
        names_(unique_name_counters()) {
    if (auto* s = startup_or_null()) startup_ = s;
    mark(main_.block());
    if (&current_ != &main_.block()) mark(current_);
    if (startup_) mark(startup_->block());
    for (const auto& [name, p] : main_.parameters()) main_params_.insert(name);
    if (startup_)
      for (const auto& [name, p] : startup_->parameters()) startup_params_.insert(name);
  }

  void restore() const {
    // The current block's ops come after (and may use) the top block's.
    for (const auto& [block, last] : marks_)
      if (block == &current_) truncate(*block, last);
    for (const auto& [block, last] : marks_)
      if (block != &current_) truncate(*block, last);
    erase_new_parameters(main_, main_params_);
    if (startup_) erase_new_parameters(*startup_, startup_params_);
    restore_unique_name_counters(names_);
  }

 private:
  static Program* startup_or_null() {
    try {
      return &current_startup_program();
    } catch (const Error&) {
      return nullptr;
    }
  }
  void mark(Block& b) { marks_.emplace_back(&b, b.back()); }
  static void truncate(Block& b, Operation* last) {
    while (!b.empty() && b.back() != last) b.erase(b.back());
  }
  static void erase_new_parameters(Program& p, const std::set<std::string>& before) {
    std::vector<std::string> added;
    for (const auto& [name, param] : p.parameters())
      if (!before.count(name)) added.push_back(name);
    for (const auto& name : added) p.erase_parameter(name);
  }

  Program& main_;
  Block& current_;
  Program* startup_ = nullptr;
  std::vector<std::pair<Block*, Operation*>> marks_;
  std::set<std::string> main_params_, startup_params_;
  UniqueNameCounters names_;
};

// Runs `build`; on a throw, restores the programs to what they held before
// and rethrows. `build` owns its detached blocks, so they are freed (their
// uses of outer values dropped) before the restore.
template <typename F>
auto transactional(F&& build) {
  Checkpoint cp;
  try {
    return build();
  } catch (...) {
    cp.restore();
    throw;
  }
}

void check_input(std::string_view fn, const std::string& what, Value v) {
  if (!v) throw_error(ErrorKind::InvalidArgument, fn, ": ", what, " is a null value");
  if (!in_current_program(v))
    throw_error(ErrorKind::InvalidArgument, fn, ": ", what,
                " is not a value the current block can use (made under another ProgramGuard, "
                "or inside a finished control-flow body?)");
}

void check_condition(std::string_view fn, const std::string& what, Value v) {
  check_input(fn, what, v);
  if (!is_condition_type(v.type()))
    throw_error(ErrorKind::InvalidArgument, fn, ": ", what,
                " must be a bool tensor of one element, got ", type_string(v.type()));
}

// The values a body function returned: non-null and usable in its block.
void check_outputs(std::string_view fn, std::string_view body, const std::vector<Value>& outs) {
  for (std::size_t i = 0; i < outs.size(); ++i)
    check_input(fn, std::string(body) + "'s value #" + std::to_string(i), outs[i]);
}

void check_fn(std::string_view fn, std::string_view name, bool present) {
  if (!present) throw_error(ErrorKind::InvalidArgument, fn, ": ", name, " is empty");
}

}  // namespace

// ---- cond ----

std::vector<Value> cond(Value pred, const BranchFn& true_fn, const BranchFn& false_fn) {
  check_condition("cond", "pred", pred);
  check_fn("cond", "true_fn", static_cast<bool>(true_fn));
  return transactional([&] {
    auto then_block = std::make_unique<Block>();
    auto else_block = std::make_unique<Block>();
    std::vector<Value> t, f;
    {
      BlockGuard g(*then_block);
      t = true_fn();
      check_outputs("cond", "true_fn", t);
      Builder(*then_block).create<YieldOp>(t);
    }
    if (false_fn) {
      BlockGuard g(*else_block);
      f = false_fn();
      check_outputs("cond", "false_fn", f);
    } else if (!t.empty()) {
      throw_error(ErrorKind::InvalidArgument, "cond: false_fn may be omitted only when true_fn "
                  "returns no values; true_fn returned ", t.size());
    }
    Builder(*else_block).create<YieldOp>(f);
    if (t.size() != f.size())
      throw_error(ErrorKind::InvalidArgument, "cond: true_fn returned ", t.size(),
                  " values, false_fn ", f.size(), " (the branches must return as many)");
    std::vector<Type> result_types;
    for (std::size_t i = 0; i < t.size(); ++i) {
      Type j = join_types(t[i].type(), f[i].type());
      if (!j)
        throw_error(ErrorKind::InvalidArgument, "cond: value #", i, " is ",
                    type_string(t[i].type()), " from true_fn but ", type_string(f[i].type()),
                    " from false_fn (dtype and rank must match)");
      result_types.push_back(j);
    }
    std::vector<Value> captures =
        capture_external_values({then_block.get(), else_block.get()}, "cond",
                                {"true_fn's body", "false_fn's body"});
    IfOp op = main_builder().create<IfOp>(pred, captures, result_types);
    op.then_region().push_back(then_block.release());
    op.else_region().push_back(else_block.release());
    op.operation()->verify();
    return op.operation()->results();
  });
}

Value cond(Value pred, const std::function<Value()>& true_fn,
           const std::function<Value()>& false_fn) {
  check_fn("cond", "true_fn", static_cast<bool>(true_fn));
  check_fn("cond", "false_fn", static_cast<bool>(false_fn));
  return cond(
      pred, [&] { return std::vector<Value>{true_fn()}; },
      [&] { return std::vector<Value>{false_fn()}; })[0];
}

// ---- while_loop ----

std::vector<Value> while_loop(
    const std::function<Value(const std::vector<Value>&)>& cond_fn,
    const std::function<std::vector<Value>(const std::vector<Value>&)>& body_fn,
    const std::vector<Value>& loop_vars, std::int64_t max_iterations) {
  check_fn("while_loop", "cond_fn", static_cast<bool>(cond_fn));
  check_fn("while_loop", "body_fn", static_cast<bool>(body_fn));
  if (loop_vars.empty())
    throw_error(ErrorKind::InvalidArgument, "while_loop: loop_vars is empty");
  for (std::size_t j = 0; j < loop_vars.size(); ++j)
    check_input("while_loop", "loop var #" + std::to_string(j), loop_vars[j]);
  if (max_iterations < -1)
    throw_error(ErrorKind::InvalidArgument, "while_loop: max_iterations is ", max_iterations,
                ", expected -1 (unbounded) or a count >= 0");
  return transactional([&] {
    Value c0 = cond_fn(loop_vars);
    check_condition("while_loop", "cond_fn(loop_vars)", c0);
    std::vector<Type> types;
    for (Value v : loop_vars) types.push_back(v.type());
    // A body that changes a loop variable's dims is built again with -1
    // there (the join of what goes in and what comes out); one rebuild
    // settles it, as joining is idempotent.
    for (int attempt = 0;; ++attempt) {
      Checkpoint before_body;
      auto body = std::make_unique<Block>();
      std::vector<Value> args;
      for (Type t : types) args.push_back(body->add_argument(t));
      bool changed = false;
      {
        BlockGuard g(*body);
        std::vector<Value> next = body_fn(args);
        if (next.size() != args.size())
          throw_error(ErrorKind::InvalidArgument, "while_loop: body_fn returned ", next.size(),
                      " values for ", args.size(), " loop vars");
        check_outputs("while_loop", "body_fn", next);
        for (std::size_t j = 0; j < next.size(); ++j) {
          if (type_fits(next[j].type(), types[j])) continue;
          Type joined = join_types(types[j], next[j].type());
          if (!joined)
            throw_error(ErrorKind::InvalidArgument, "while_loop: loop var #", j, " is ",
                        type_string(types[j]), " but body_fn gives ",
                        type_string(next[j].type()),
                        " for it (its dtype and rank must stay the same)");
          types[j] = joined;
          changed = true;
        }
        if (!changed) {
          Value c1 = cond_fn(next);
          check_condition("while_loop", "cond_fn(body_fn's values)", c1);
          std::vector<Value> yielded{c1};
          yielded.insert(yielded.end(), next.begin(), next.end());
          Builder(*body).create<YieldOp>(yielded);
        }
      }
      if (changed) {
        if (attempt > 0)
          throw_error(ErrorKind::InvalidArgument,
                      "while_loop: body_fn gives other types on a second build (its values' "
                      "types must depend only on the loop vars' types)");
        body.reset();
        before_body.restore();
        continue;
      }
      std::vector<Value> captures = capture_external_values({body.get()}, "while_loop");
      WhileOp op =
          main_builder().create<WhileOp>(c0, loop_vars, captures, max_iterations, types);
      op.body_region().push_back(body.release());
      op.operation()->verify();
      return op.operation()->results();
    }
  });
}

// ---- switch_case ----

std::vector<Value> switch_case(Value branch_index,
                               const std::vector<std::pair<std::int64_t, BranchFn>>& branches,
                               const BranchFn& default_fn) {
  check_input("switch_case", "branch_index", branch_index);
  Type it = branch_index.type();
  bool ok = is_shaped(it) && (shaped_data_type(it) == DataType::Int32 ||
                              shaped_data_type(it) == DataType::Int64);
  if (ok)
    for (std::int64_t d : shaped_dims(it)) ok = ok && (d == 1 || d == -1);
  if (!ok)
    throw_error(ErrorKind::InvalidArgument,
                "switch_case: branch_index must be an int32 or int64 tensor of one element, got ",
                type_string(it));
  if (branches.empty())
    throw_error(ErrorKind::InvalidArgument, "switch_case: branches is empty");
  std::vector<std::pair<std::int64_t, const BranchFn*>> sorted;
  for (const auto& [key, fn] : branches) {
    check_fn("switch_case", "the function of key " + std::to_string(key),
             static_cast<bool>(fn));
    sorted.emplace_back(key, &fn);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].first == sorted[i - 1].first)
      throw_error(ErrorKind::InvalidArgument, "switch_case: key ", sorted[i].first,
                  " is given twice");
  const BranchFn* fallback = &default_fn;
  if (!default_fn) {
    fallback = sorted.back().second;
    sorted.pop_back();
  }
  return transactional([&] {
    std::vector<Value> preds;
    for (const auto& [key, fn] : sorted)
      preds.push_back(equal(branch_index, static_cast<double>(key)));
    // cond(preds[i], fn_i, else: the chain from i + 1), ending in the default.
    std::function<std::vector<Value>(std::size_t)> chain = [&](std::size_t i) {
      if (i == sorted.size()) return (*fallback)();
      return cond(preds[i], *sorted[i].second, [&, i] { return chain(i + 1); });
    };
    return chain(0);
  });
}

}  // namespace kiln
