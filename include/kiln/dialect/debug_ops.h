// Debugging ops: kiln.print, which passes its operand through unchanged (its
// result is a view of it, so it costs nothing but the printing) and, each
// time it runs, writes `<message> step <n>: <values>` to the print stream
// (std::cout unless set_print_stream says otherwise). SideEffect keeps it in
// program order; its gradient passes through.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

#include "kiln/dialect/grad_op.h"

namespace kiln {

// %y = kiln.print(%x) {message, summarize}: y is x (a view of its buffer).
// n counts the runs of this op (from 1) by the plan that runs it: every
// iteration of a loop body counts; an executor's cached plan keeps counting
// run after run, a new plan starts again at 1. summarize = -1 prints every
// value (Tensor::to_string, which elides past 1000 elements); summarize = k
// >= 0 prints the type and the first k values in row-major order, with
// "..." when there are more.
struct PrintOp
    : Op<PrintOp, SideEffect, ViewLike, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.print";
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  KILN_ATTRIBUTES((std::string, message), (std::int64_t, summarize));
  static void build(Builder&, OperationArgument& arg, Value x, std::string message = "",
                    std::int64_t summarize = -1);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
};

// Where kiln.print writes (std::cout by default; null restores it). Returns
// the previous stream. Thread-safe; prints of one line never interleave.
std::ostream* set_print_stream(std::ostream* os);

namespace detail {
// Writes `<message> step <step>: <text>\n` as one line (the kernels call
// this; each counts its own instruction's runs).
void write_print_line(std::int64_t step, const std::string& message, const std::string& text);
}  // namespace detail

}  // namespace kiln
