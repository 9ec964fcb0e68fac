// Control flow as paddle.static.nn builds it: cond, while_loop and
// switch_case. Each calls the user's functions to build the bodies into
// detached blocks (BlockGuard: main_builder() fills them while a function
// runs), captures the outer values the bodies read (capture.h), then
// creates the kiln.if / kiln.while op at the end of the current block, moves
// the bodies in and verifies the op (kiln/dialect/control_flow_ops.h).
//
// data() and parameters made while a body is built (a layer created inside
// body_fn) go to the main program's top block ahead of the op, and become
// captures. On any error nothing built stays in the programs: the ops,
// parameters and startup initializers made since the call are removed.
// Errors are kiln::Error(InvalidArgument) naming the function.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kiln/ir/value.h"

namespace kiln {

using BranchFn = std::function<std::vector<Value>()>;

// The results of true_fn when pred (a bool tensor of one element) holds at
// run time, else those of false_fn. Both return as many values, of one
// dtype and rank each; a result's dims are the branches' where they agree,
// -1 where they differ. false_fn may be empty only when true_fn returns no
// values (the else branch then does nothing).
std::vector<Value> cond(Value pred, const BranchFn& true_fn, const BranchFn& false_fn = {});
// One result per branch.
Value cond(Value pred, const std::function<Value()>& true_fn,
           const std::function<Value()>& false_fn);

// paddle.static.nn.while_loop: while cond_fn(vars) holds, vars =
// body_fn(vars); returns the final vars. cond_fn builds the condition (a
// bool tensor of one element) twice: on loop_vars before the loop, and on
// the next values at the end of the body. body_fn gets the loop variables
// as values typed like loop_vars and returns their next values, as many,
// each of the loop variable's dtype and rank; where it changes a dim, the
// loop variable (and the result) has -1 there. max_iterations: -1 =
// unbounded, else running more iterations is a run-time error.
std::vector<Value> while_loop(
    const std::function<Value(const std::vector<Value>&)>& cond_fn,
    const std::function<std::vector<Value>(const std::vector<Value>&)>& body_fn,
    const std::vector<Value>& loop_vars, std::int64_t max_iterations = -1);

// paddle.static.nn.switch_case: the results of the branch whose key equals
// branch_index (an int32 / int64 tensor of one element), else of default_fn.
// Without default_fn the branch of the largest key is the default (Paddle's
// rule). Keys must differ. Built as a chain of conds on equal(branch_index,
// key), in ascending key order.
std::vector<Value> switch_case(Value branch_index,
                               const std::vector<std::pair<std::int64_t, BranchFn>>& branches,
                               const BranchFn& default_fn = {});

}  // namespace kiln
