// Must NOT compile (test `interface_missing_method_is_compile_error`): an
// op declares InferMetaInterface but defines no infer_meta. Registering
// it instantiates InferMetaInterface::Model<BadOp>, whose static_assert says
// "must define static std::vector<Type> infer_meta(...)".
// With -DKILN_COMPILE_FAIL_FIXED the method is there and the TU compiles — the
// script checks that too, so the failure is the missing method and nothing else.
#include "kiln/ir/builder.h"
#include "kiln/ir/interfaces.h"
#include "kiln/ir/op.h"

namespace {

struct NoInferMetaOp : kiln::Op<NoInferMetaOp, kiln::ReadOnly, kiln::InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "test.no_infer_meta";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(kiln::Builder&, kiln::OperationArgument& arg, kiln::Value x) {
    arg.add_operand(x);
  }
#ifdef KILN_COMPILE_FAIL_FIXED
  static std::vector<kiln::Type> infer_meta(const std::vector<kiln::Type>& in,
                                            kiln::DictionaryAttribute) {
    return {in.at(0)};
  }
#endif
};

}  // namespace

void register_no_infer_meta_op() { kiln::IrContext::instance()->register_op<NoInferMetaOp>(); }
