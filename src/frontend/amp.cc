#include "kiln/frontend/amp.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kiln/dialect/unary_ops.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/interfaces.h"
#include "kiln/ir/ir_context.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/support/error.h"

namespace kiln::amp {
namespace {

bool of_dtype(Value v, DataType dt) { return v && is_shaped(v.type()) && shaped_data_type(v.type()) == dt; }

// The allow list's op ids, each checked to be an op with a CPU kernel for `dtype`.
std::unordered_set<TypeId> allowed_ops(const Options& o) {
  const std::vector<std::string>& names = o.allow.empty() ? default_allow_list() : o.allow;
  std::unordered_set<TypeId> ids;
  for (const std::string& name : names) {
    const OpInfo info = IrContext::instance()->find_op(name);
    if (!info)
      throw_error(ErrorKind::InvalidArgument, "amp: allow-list op '", name, "' is not a registered op");
    if (!KernelRegistry::instance().find(info.id(), PlaceKind::Cpu, o.dtype))
      throw_error(ErrorKind::InvalidArgument, "amp: allow-list op '", name, "' has no CPU kernel for ",
                  to_string(o.dtype));
    ids.insert(info.id());
  }
  return ids;
}

void check(const Block& block, const Options& o) {
  if (o.level != Level::O0 && o.level != Level::O1 && o.level != Level::O2)
    throw_error(ErrorKind::InvalidArgument, "amp: unknown level ", int(o.level));
  if (o.level == Level::O2)
    throw_error(ErrorKind::Unimplemented, "amp: level O2 (low-precision parameters with f32 master weights) "
                "is not implemented; O1 is");
  if (o.dtype != DataType::BFloat16 && o.dtype != DataType::Float16)
    throw_error(ErrorKind::InvalidArgument, "amp: the low dtype must be bf16 or f16, got ", to_string(o.dtype));
  for (const Operation* op : block)
    if (op_role(op) != OpRole::Forward)
      throw_error(ErrorKind::InvalidArgument, "amp: the program already has ", to_string(op_role(op)),
                  " ops (op '", op->name(), "'): rewrite it before append_backward or minimize");
}

// Whether every floating operand of `op` is f32 or already `low` (an op
// reading f64 or the other 16-bit float keeps its dtypes), and one is f32.
bool lowerable(const Operation& op, DataType low) {
  bool any_f32 = false;
  for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
    const Value v = op.operand(i).source();
    if (!v || !is_shaped(v.type()) || !is_floating(shaped_data_type(v.type()))) continue;
    if (of_dtype(v, DataType::Float32)) any_f32 = true;
    else if (!of_dtype(v, low)) return false;
  }
  return any_f32;
}

// One cast per (value, dtype), made before the first op that needs it.
class Casts {
 public:
  explicit Casts(Block& block) : block_(block) {}
  Value get(Value v, DataType dt, Operation* before) {
    Value& c = made_[{v.impl(), dt}];
    if (!c) {
      Builder b(block_);
      b.set_insertion_point(before);
      c = b.create<CastOp>(v, dt).result();
      ++count;
    }
    return c;
  }
  std::size_t count = 0;

 private:
  struct Key {
    const detail::ValueImpl* v;
    DataType dt;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.v) * 31 + static_cast<std::size_t>(k.dt);
    }
  };
  Block& block_;
  std::unordered_map<Key, Value, KeyHash> made_;
};

}  // namespace

const std::vector<std::string>& default_allow_list() {
  static const std::vector<std::string> list{"kiln.matmul"};
  return list;
}

RewriteResult rewrite(Block& block, const Options& options) {
  check(block, options);
  RewriteResult result;
  if (options.level == Level::O0) return result;
  const std::unordered_set<TypeId> allowed = allowed_ops(options);
  const DataType low = options.dtype;
  std::unordered_set<const detail::ValueImpl*> lowered;  // results this rewrite made low
  Casts casts(block);
  std::vector<Operation*> ops(block.begin(), block.end());  // the casts added are not visited
  for (Operation* op : ops) {
    if (allowed.count(op->info().id()) && lowerable(*op, low)) {
      for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
        Value v = op->operand(i).source();
        if (of_dtype(v, DataType::Float32)) op->set_operand(i, casts.get(v, low, op));
      }
      const std::vector<Type> types = op->dyn_cast<InferMetaInterface>().infer_meta();
      for (std::uint32_t r = 0; r < op->num_results(); ++r) {
        op->result(r).set_type(types.at(r));
        if (of_dtype(op->result(r), low)) lowered.insert(op->result(r).impl());
      }
      ++result.lowered_ops;
      continue;
    }
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      Value v = op->operand(i).source();
      if (lowered.count(v.impl())) op->set_operand(i, casts.get(v, DataType::Float32, op));
    }
  }
  result.casts = casts.count;
  return result;
}

std::vector<std::pair<Value, Value>> Decorated::minimize(Value loss) {
  if (!loss || !loss.defining_op())
    throw_error(ErrorKind::InvalidArgument, "amp: minimize needs a loss defined by an op");
  rewrite(*loss.defining_op()->parent_block(), options_);
  return optimizer_.minimize(loss);
}

}  // namespace kiln::amp
