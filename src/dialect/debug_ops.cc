// The ops of kiln/dialect/debug_ops.h, and the print stream and per-op step
// counters kiln.print's kernels write through.
#include "kiln/dialect/debug_ops.h"

#include <iostream>
#include <mutex>

namespace kiln {

KILN_REGISTER_OP(PrintOp);

void PrintOp::build(Builder&, OperationArgument& arg, Value x, std::string message,
                    std::int64_t summarize) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{std::move(message), summarize});
}

std::vector<Type> PrintOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  if (a.summarize < -1)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' summarize must be -1 (print all) or >= 0, got ", a.summarize);
  meta::require_count(name, in, 1);
  return {meta::tensor_operand(name, in, 0)};
}

std::vector<Value> PrintOp::vjp(Builder&, Operation* op, const std::vector<Value>& g) {
  Value d = vjp::single_grad(op, g);
  if (!d || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {d};
}

namespace {
struct PrintState {
  std::mutex mu;
  std::ostream* os = nullptr;  // null: std::cout
};
PrintState& print_state() {
  static PrintState s;
  return s;
}
}  // namespace

std::ostream* set_print_stream(std::ostream* os) {
  PrintState& s = print_state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::ostream* old = s.os ? s.os : &std::cout;
  s.os = os;
  return old;
}

namespace detail {
void write_print_line(std::int64_t step, const std::string& message, const std::string& text) {
  PrintState& s = print_state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::ostream& os = s.os ? *s.os : std::cout;
  os << message << " step " << step << ": " << text << '\n';
  os.flush();
}
}  // namespace detail

}  // namespace kiln
