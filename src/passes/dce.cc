// Dead-code elimination: a reverse walk of each block erases every op whose
// results are unused and that has no effect; users go before their
// producers, so one walk per block suffices.
#include "kiln/passes/dce.h"

#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

bool is_dead(const Operation& op, const PassContext& ctx) {
  for (std::uint32_t i = 0; i < op.num_results(); ++i) {
    OpResult r = op.result(i);
    if (!r.use_empty() || ctx.is_protected(r)) return false;
  }
  return !has_effect(op, &ctx);
}

class DcePass : public Pass {
 public:
  DcePass() : Pass("dce") {}
  void run_on_block(Block& block, PassContext& ctx) override { eliminate_dead_ops(block, ctx); }
};

}  // namespace

std::size_t eliminate_dead_ops(Block& block, PassContext& ctx) {
  std::size_t erased = 0;
  for (Operation* op = block.back(); op;) {
    Operation* prev = op->prev_in_block();
    if (is_dead(*op, ctx)) {
      ctx.erase_op(op);
      ++erased;
    }
    op = prev;
  }
  return erased;
}

std::unique_ptr<Pass> create_dce_pass() { return std::make_unique<DcePass>(); }

KILN_REGISTER_PASS("dce", [] { return create_dce_pass(); },
                   "erases ops whose results are unused and that have no effect");

}  // namespace kiln
