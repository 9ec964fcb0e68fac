// Dead-code elimination: a reverse walk of each block erases every op whose
// results are unused and that has no effect; users go before their
// producers, so one walk per block suffices.
#include "kiln/passes/dce.h"

#include "kiln/passes/op_effects.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace kiln {

bool is_trivially_dead(const Operation& op, const PassContext& ctx) {
  for (std::uint32_t i = 0; i < op.num_results(); ++i) {
    OpResult r = op.result(i);
    if (!r.use_empty() || ctx.is_protected(r)) return false;
  }
  return !has_effect(op, &ctx);
}

std::size_t erase_dead_chains(std::vector<Operation*> work, PassContext& ctx) {
  std::unordered_set<Operation*> gone;  // an op may be pushed again by each user that goes
  while (!work.empty()) {
    Operation* o = work.back();
    work.pop_back();
    if (gone.count(o) || !is_trivially_dead(*o, ctx)) continue;
    std::vector<Operation*> producers;
    for (std::uint32_t i = 0; i < o->num_operands(); ++i)
      if (Operation* def = o->operand_source(i).defining_op();
          def && std::find(producers.begin(), producers.end(), def) == producers.end())
        producers.push_back(def);
    gone.insert(o);
    ctx.erase_op(o);
    for (Operation* def : producers) work.push_back(def);
  }
  return gone.size();
}

namespace {

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
    if (is_trivially_dead(*op, ctx)) {
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
