// Helpers for the executor tests: test-only ops with CPU kernels (defined in
// exec_test_ops.cc) — an identity that copies its input into a new buffer, an
// op whose kernel throws while a switch is on, one that records the order ops
// ran in, one that records whether a watched variable was already freed when
// it ran, a slow identity, one that waits to see a slow kernel in flight,
// and one that records the thread it ran on — plus small program and error
// helpers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/ir/builder.h"

namespace kiln_exec_test {

// out = a copy of x in a new buffer (any dtype).
struct IdentityOp : kiln::Op<IdentityOp, kiln::ReadOnly, kiln::ValueSemantics, kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "exec_test.identity";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x) { arg.add_operand(x); }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in, kiln::DictionaryAttribute) {
    return {in.at(0)};
  }
};

// Identity, but while throw_enabled() is set the kernel throws: a
// kiln::Error(OutOfRange) when `std_exception` is false, else a
// std::runtime_error.
struct ThrowOp : kiln::Op<ThrowOp, kiln::ReadOnly, kiln::ValueSemantics, kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "exec_test.throw";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((bool, std_exception));
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x, bool std_exception = false) {
    arg.add_operand(x);
    arg.attributes = kiln::to_named_attributes(Attributes{std_exception});
  }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in, kiln::DictionaryAttribute) {
    return {in.at(0)};
  }
};

// Identity that appends its `tag` to the run log (run_log()).
struct RecordOp : kiln::Op<RecordOp, kiln::ReadOnly, kiln::ValueSemantics, kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "exec_test.record";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, tag));
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x, std::int64_t tag) {
    arg.add_operand(x);
    arg.attributes = kiln::to_named_attributes(Attributes{tag});
  }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in, kiln::DictionaryAttribute) {
    return {in.at(0)};
  }
};

// Identity that records, under its `tag`, whether the watched variable
// (watch(tag, var)) held a tensor when it ran (probe_result(tag)).
struct ProbeOp : kiln::Op<ProbeOp, kiln::ReadOnly, kiln::ValueSemantics, kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "exec_test.probe";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, tag));
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x, std::int64_t tag) {
    arg.add_operand(x);
    arg.attributes = kiln::to_named_attributes(Attributes{tag});
  }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in, kiln::DictionaryAttribute) {
    return {in.at(0)};
  }
};

// Identity that sleeps `micros` first (a kernel long enough to overlap others).
struct SlowOp : kiln::Op<SlowOp, kiln::ReadOnly, kiln::ValueSemantics, kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "exec_test.slow";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, micros));
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x, std::int64_t micros) {
    arg.add_operand(x);
    arg.attributes = kiln::to_named_attributes(Attributes{micros});
  }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in, kiln::DictionaryAttribute) {
    return {in.at(0)};
  }
};

// Identity that first waits (up to 5 s) until a SlowOp kernel is running
// somewhere, and records whether it saw one (saw_slow_in_flight()): a host op
// that runs while a stream still executes a slow kernel sees it; one that ran
// only after the host waited for that kernel does not.
struct WaitSlowOp : kiln::Op<WaitSlowOp, kiln::ReadOnly, kiln::ValueSemantics, kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "exec_test.wait_slow";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x) { arg.add_operand(x); }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in, kiln::DictionaryAttribute) {
    return {in.at(0)};
  }
};

// Identity that records the id of the thread its kernel ran on under `tag`
// (thread_of(tag)).
struct ThreadOp : kiln::Op<ThreadOp, kiln::ReadOnly, kiln::ValueSemantics, kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "exec_test.thread";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, tag));
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x, std::int64_t tag) {
    arg.add_operand(x);
    arg.attributes = kiln::to_named_attributes(Attributes{tag});
  }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in, kiln::DictionaryAttribute) {
    return {in.at(0)};
  }
};

// Identity that records the step id its kernel saw (last_step_id(); 0 when
// the run had no StepContext).
struct StepIdOp : kiln::Op<StepIdOp, kiln::ReadOnly, kiln::ValueSemantics, kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "exec_test.step_id";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x) { arg.add_operand(x); }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in, kiln::DictionaryAttribute) {
    return {in.at(0)};
  }
};
std::int64_t last_step_id();

// Identity with an asynchronous kernel: it completes inline (before
// compute_async returns) when delay_us is 0, else from the deadline
// timer's thread delay_us later.
struct AsyncIdentityOp
    : kiln::Op<AsyncIdentityOp, kiln::ReadOnly, kiln::ValueSemantics, kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "exec_test.async_identity";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, delay_us));
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x, std::int64_t delay_us) {
    arg.add_operand(x);
    arg.attributes = kiln::to_named_attributes(Attributes{delay_us});
  }
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in, kiln::DictionaryAttribute) {
    return {in.at(0)};
  }
};

// SlowOp kernels running right now.
int slow_in_flight();
// WaitSlowOp's record: -1 not run since the last reset, 0 timed out, 1 saw one.
int saw_slow_in_flight();
void reset_saw_slow();
// ThreadOp's record: the thread `tag` ran on (a default id if it did not run).
std::thread::id thread_of(std::int64_t tag);
// ... and the kernel thread limit it ran under (kernel_threads_on_this_thread;
// -1 if it did not run).
int kernel_threads_of(std::int64_t tag);
void clear_threads();
// WaitSlowOp's switch (on by default; off: it is a plain identity).
std::atomic<bool>& wait_slow_enabled();
// ThrowOp's switch (on by default).
std::atomic<bool>& throw_enabled();
// Tags of the RecordOps that ran, in order (guarded by a mutex inside).
std::vector<std::int64_t> run_log();
void clear_run_log();
// Probe `tag` watches `var`; results: -1 not run, 0 var was empty, 1 held a tensor.
void watch(std::int64_t tag, const kiln::Variable* var);
int probe_result(std::int64_t tag);
void clear_probes();

// A float tensor of `dims` filled with `value`.
kiln::Tensor filled_f32(const std::vector<std::int64_t>& dims, float value);

using kiln_test::expect_error;  // test/test_util.h

// Executor options of `n` host threads.
inline kiln::ExecutionOptions threads(unsigned n) {
  kiln::ExecutionOptions o;
  o.num_threads = n;
  return o;
}

// A work queue for a core of `threads` threads (none for one).
inline std::shared_ptr<kiln::WorkQueue> queue_for(unsigned threads) {
  return threads > 1 ? std::make_shared<kiln::WorkQueue>(threads - 1) : nullptr;
}

// The instruction `core` made of its block's op #op_index.
inline std::uint32_t instr_of(const kiln::InterpreterCore& core, std::uint32_t op_index) {
  for (std::uint32_t i = 0; i < core.num_instructions(); ++i)
    if (core.instruction(i).op_index == op_index) return i;
  FAIL("no instruction for op #" << op_index);
  return ~0u;
}

// A diamond chain of 19 ops on x [4]: independent work for a pool.
inline kiln::Value diamond_chain(kiln::Program& p) {
  using namespace kiln;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value v = b.create<FullOp>(std::vector<std::int64_t>{4}, 1.0).result();
  for (int i = 0; i < 6; ++i) {
    Value l = b.create<IdentityOp>(v).result();
    Value r = b.create<MulOp>(v, x).result();
    v = b.create<AddOp>(l, r).result();
  }
  return b.create<Relu_Op>(v).result();
}

}  // namespace kiln_exec_test

