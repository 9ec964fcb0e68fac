// The bytes a training step's ops move, from the program's types alone:
// each op's operands read and results written (an in-place op's buffer
// counted both ways), views, parameters and feeds moving none, after the
// passes an executor on `target` runs. Beside a device's step stats
// (kiln/exec/step_stats.h: time per op kind) it gives the bandwidth each
// kind reaches; without a device, where a step's memory traffic goes. A
// GEMM's figure is its operands and result only (what it must move at
// least), not its tiles' re-reads.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/execution_options.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/program.h"
#include "kiln/passes/pass_manager.h"

namespace bench {

struct OpTraffic {
  int ops = 0;
  double bytes = 0;
};

inline double value_bytes(kiln::Value v) {
  const kiln::Type t = v.type();
  if (!kiln::is_shaped(t)) return 0;
  double n = 1;
  for (std::int64_t d : kiln::shaped_dims(t)) n *= d < 0 ? 0 : static_cast<double>(d);
  return n * static_cast<double>(kiln::size_of(kiln::shaped_data_type(t)));
}

// Per op kind ("kiln.add", ...), over a clone of `program` whose live-out
// is `loss`, after kiln::kDefaultPasses for `target`.
inline std::map<std::string, OpTraffic> step_traffic(const kiln::Program& program, kiln::Value loss,
                                                     kiln::Place target) {
  kiln::Program p = program.clone();
  kiln::PassContext ctx;
  ctx.target_place = target;
  // The clone's loss: the same position among the same op's results.
  kiln::Operation* def = loss.defining_op();
  std::size_t at = 0;
  for (kiln::Operation* op : program.block()) {
    if (op == def) break;
    ++at;
  }
  auto it = p.block().begin();
  std::advance(it, static_cast<std::ptrdiff_t>(at));
  for (std::uint32_t r = 0; r < def->num_results(); ++r)
    if (def->result(r) == loss) ctx.add_live_out((*it)->result(r));
  kiln::PassManager::parse(kiln::kDefaultPasses).run(p, ctx);
  std::map<std::string, OpTraffic> by_kind;
  for (kiln::Operation* op : p.block()) {
    if (op->has_trait<kiln::ViewLike>() || op->isa<kiln::ParameterOp>() || op->isa<kiln::DataOp>()) continue;
    OpTraffic& t = by_kind[std::string(op->name())];
    ++t.ops;
    for (kiln::Value v : op->operands()) t.bytes += value_bytes(v);
    for (kiln::Value v : op->results()) t.bytes += value_bytes(v);
  }
  return by_kind;
}

inline double total_bytes(const std::map<std::string, OpTraffic>& by_kind) {
  double sum = 0;
  for (const auto& [kind, t] : by_kind) sum += t.bytes;
  return sum;
}

}  // namespace bench
