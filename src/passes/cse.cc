// Common-subexpression elimination: a scoped hash table of the ops seen so
// far. A block's scope opens a child of its enclosing block's scope, or a
// fresh one when the region's op is IsolatedFromAbove (its body sees no
// outer value, so no outer op can dominate one of its ops by value).
#include "kiln/passes/cse.h"

#include <unordered_set>

#include "kiln/ir/region.h"
#include "kiln/ir/traits.h"
#include "kiln/passes/op_effects.h"

namespace kiln {

namespace {

inline std::size_t mix(std::size_t h, const void* p) {
  // boost::hash_combine's mixing over the pointer bits.
  return h ^ (std::hash<const void*>()(p) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

struct OpKeyHash {
  std::size_t operator()(const Operation* op) const {
    std::size_t h = std::hash<const void*>()(op->info().impl());
    h = mix(h, op->attributes().storage());
    for (std::uint32_t i = 0; i < op->num_operands(); ++i)
      h = mix(h, op->operand_source(i).impl());
    for (std::uint32_t i = 0; i < op->num_results(); ++i) h = mix(h, op->result_type(i).storage());
    return h;
  }
};

struct OpKeyEqual {
  bool operator()(const Operation* a, const Operation* b) const {
    if (a == b) return true;
    if (a->info() != b->info() || a->attributes() != b->attributes() ||
        a->num_operands() != b->num_operands() || a->num_results() != b->num_results())
      return false;
    for (std::uint32_t i = 0; i < a->num_operands(); ++i)
      if (a->operand_source(i) != b->operand_source(i)) return false;
    for (std::uint32_t i = 0; i < a->num_results(); ++i)
      if (a->result_type(i) != b->result_type(i)) return false;
    return true;
  }
};

using OpTable = std::unordered_set<Operation*, OpKeyHash, OpKeyEqual>;

bool can_merge(const Operation& op, const PassContext& ctx) {
  if (op.num_regions() != 0 || op.num_results() == 0 || has_placement(op)) return false;
  if (!op.has_trait<ReadOnly>() && !op.has_trait<ViewLike>()) return false;
  if (op.has_trait<Random>() || op.has_trait<SideEffect>() || op.has_trait<Communication>() ||
      op.has_trait<Inplace>() || op.has_trait<Terminator>())
    return false;
  for (std::uint32_t i = 0; i < op.num_results(); ++i)
    if (is_buffer(op.result(i), &ctx)) return false;
  // An operand updated in place may hold another value at the twin's
  // position than at this op's (kiln's in-place updates change the variable).
  for (std::uint32_t i = 0; i < op.num_operands(); ++i)
    if (alias_written_in_place(op.operand_source(i), &ctx)) return false;
  return true;
}

class CsePass : public Pass {
 public:
  CsePass() : Pass("cse") {}

  void run(Program& program, PassContext& ctx) override {
    std::vector<OpTable*> scopes;
    run_block(program.block(), scopes, ctx);
  }

 private:
  // `scopes`: the enclosing blocks' tables, outermost first.
  void run_block(Block& block, std::vector<OpTable*>& scopes, PassContext& ctx) {
    OpTable mine;
    mine.reserve(block.size());
    scopes.push_back(&mine);
    for (Operation* op = block.front(); op;) {
      Operation* next = op->next_in_block();
      for (std::uint32_t r = 0; r < op->num_regions(); ++r) {
        const bool isolated = op->has_trait<IsolatedFromAbove>();
        for (Block* inner : op->region(r)) {
          if (isolated) {
            std::vector<OpTable*> fresh;
            run_block(*inner, fresh, ctx);
          } else {
            run_block(*inner, scopes, ctx);
          }
        }
      }
      if (can_merge(*op, ctx)) {
        Operation* twin = nullptr;
        for (auto it = scopes.rbegin(); it != scopes.rend() && !twin; ++it)
          if (auto found = (*it)->find(op); found != (*it)->end()) twin = *found;
        if (twin) {
          for (std::uint32_t i = 0; i < op->num_results(); ++i)
            ctx.replace_all_uses(op->result(i), twin->result(i));
          ctx.erase_op(op);
        } else {
          mine.insert(op);
        }
      }
      op = next;
    }
    scopes.pop_back();
  }
};

}  // namespace

std::unique_ptr<Pass> create_cse_pass() { return std::make_unique<CsePass>(); }

KILN_REGISTER_PASS("cse", [] { return create_cse_pass(); },
                   "merges ops equal to an earlier op that dominates them");

}  // namespace kiln
