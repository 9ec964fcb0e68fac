// Must NOT compile (test `interface_missing_method_is_compile_error`): an
// op class with a data member. Op handles are a bare Operation*;
// everything an op holds lives in the Operation, so make_info's static_assert
// ("op classes carry no data members") rejects it at registration.
// With -DKILN_COMPILE_FAIL_FIXED the member is gone and the TU compiles.
#include "kiln/ir/builder.h"
#include "kiln/ir/op.h"

namespace {

struct StatefulOp : kiln::Op<StatefulOp, kiln::SideEffect> {
  using Op::Op;
  static constexpr std::string_view name = "test.stateful";
  static constexpr int num_operands = 1, num_results = 0;
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x) {
    arg.add_operand(x);
  }
#ifndef KILN_COMPILE_FAIL_FIXED
  int calls = 0;  // state on the handle: not allowed
#endif
};

}  // namespace

void register_stateful_op() { kiln::IrContext::instance()->register_op<StatefulOp>(); }
