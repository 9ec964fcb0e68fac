// Constant folding by running each foldable op's own CPU kernel once, at
// compile time, on its constant operands (the kernel registry: one
// implementation of every op's math). The result becomes a builtin.constant
// holding the tensor; the producers left unused go with DCE.
#include "kiln/passes/constant_fold.h"

#include <cstring>
#include <vector>
#include <unordered_map>

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/tensor_attribute.h"
#include "kiln/ir/traits.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/passes/dce.h"
#include "kiln/passes/op_effects.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/variable.h"

namespace kiln {

namespace {

// Bytes of a shaped type with static dims; -1 when a dim is unknown or the
// type is not a tensor.
std::int64_t static_bytes(Type t) {
  if (!is_shaped(t)) return -1;
  std::int64_t n = 1;
  for (std::int64_t d : shaped_dims(t)) {
    if (d < 0) return -1;
    n *= d;
  }
  return n * static_cast<std::int64_t>(size_of(shaped_data_type(t)));
}

bool on_cpu(const Operation& op) {
  Attribute place = op.attribute("place");
  if (!place) return true;
  auto p = place.dyn_cast<PlaceAttribute>();
  return p && p.value().is_cpu();
}

// Whether a result tensor is what `op`'s result type `t` says: its dtype,
// its rank, and each dim the type knows (a -1 dim matches any size).
bool matches_type(const Tensor& r, Type t) {
  if (!r.is_initialized() || r.dtype() != shaped_data_type(t)) return false;
  const std::vector<std::int64_t> want = shaped_dims(t), got = r.dims().to_vector();
  if (want.size() != got.size()) return false;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (want[i] >= 0 && want[i] != got[i]) return false;
  return true;
}

// Runs `op`'s CPU kernel on `inputs`; the result tensors, or empty when
// there is no synchronous CPU kernel or it fails (the run will report it).
std::vector<Tensor> evaluate(Operation* op, const std::vector<Tensor>& inputs) {
  const KernelInfo* kernel =
      KernelRegistry::instance().find(op->info().id(), PlaceKind::Cpu, kernel_dtype(*op));
  if (!kernel || !kernel->fn) return {};
  std::vector<Variable> in_vars(inputs.size()), out_vars(op->num_results());
  std::vector<Variable*> in_ptrs, out_ptrs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    in_vars[i].set(inputs[i]);
    in_ptrs.push_back(&in_vars[i]);
  }
  for (auto& v : out_vars) out_ptrs.push_back(&v);
  try {
    std::shared_ptr<const void> attrs = kernel->decode_attrs ? kernel->decode_attrs(op) : nullptr;
    KernelContext ctx(op, in_ptrs.data(), static_cast<std::uint32_t>(in_ptrs.size()),
                      out_ptrs.data(), static_cast<std::uint32_t>(out_ptrs.size()), attrs.get(),
                      Place::cpu(), &cpu_allocator());
    kernel->fn(ctx);
  } catch (const Error&) {
    return {};
  }
  std::vector<Tensor> out;
  for (std::uint32_t i = 0; i < op->num_results(); ++i) {
    if (!out_vars[i].is<Tensor>()) return {};
    const Tensor& t = out_vars[i].get<Tensor>();
    if (!matches_type(t, op->result_type(i))) return {};
    out.push_back(t);
  }
  return out;
}

// An op whose results depend on its operands alone, computed once:
// no regions, reads its operands only (or views them), and neither random,
// nor a side effect, communication, an in-place update or a terminator.
bool pure(const Operation& op) {
  if (op.num_results() == 0 || op.num_regions() != 0) return false;
  if (!op.has_trait<ReadOnly>() && !op.has_trait<ViewLike>()) return false;
  return !(op.has_trait<Random>() || op.has_trait<SideEffect>() || op.has_trait<Communication>() ||
           op.has_trait<Inplace>() || op.has_trait<Terminator>());
}

bool foldable(const Operation& op, std::size_t max_bytes, const PassContext& ctx) {
  if (op.num_operands() == 0 || !pure(op)) return false;
  if (!on_cpu(op) || has_placement(op)) return false;
  for (std::uint32_t i = 0; i < op.num_results(); ++i) {
    const std::int64_t b = static_bytes(op.result_type(i));
    if (b < 0 || static_cast<std::size_t>(b) > max_bytes) return false;
    // A result some op updates in place is not a constant: its readers
    // after the update see another value (and the pass's alias analysis,
    // made before the fold, would not know the constant is written).
    if (alias_written_in_place(op.result(i), &ctx)) return false;
  }
  for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
    Value v = op.operand_source(i);
    if (!is_constant_value(v, &ctx)) return false;
    const std::int64_t b = static_bytes(v.type());
    if (b < 0 || static_cast<std::size_t>(b) > max_bytes) return false;
  }
  return true;
}

class ConstantFoldPass : public Pass {
 public:
  explicit ConstantFoldPass(ConstantFoldOptions options) : Pass("fold"), options_(options) {}

  void run_on_block(Block& block, PassContext& ctx) override {
    // builtin.constant has a CPU kernel only: on a device, folded constants
    // would run on the host and be copied over each run.
    if (ctx.target_place.kind != PlaceKind::Cpu && ctx.target_place.kind != PlaceKind::HostStream)
      return;
    std::unordered_map<const detail::ValueImpl*, Tensor> known;  // constants evaluated so far
    auto value_of = [&](Value v) -> const Tensor* {
      if (auto it = known.find(v.impl()); it != known.end()) return &it->second;
      Operation* def = v.defining_op();
      if (auto c = def->dyn_cast<ConstantOp>()) {
        return &known.emplace(v.impl(), tensor_from_attribute(c.value().cast<TensorAttribute>())).first->second;
      }
      std::vector<Tensor> r = evaluate(def, {});  // kiln.full
      if (r.size() != 1) return nullptr;
      return &known.emplace(v.impl(), std::move(r[0])).first->second;
    };
    std::vector<Operation*> producers;  // of folded ops: dead once nothing else reads them
    for (Operation* op = block.front(); op;) {
      Operation* next = op->next_in_block();
      if (foldable(*op, options_.max_bytes, ctx)) fold(op, value_of, producers, ctx);
      op = next;
    }
    // After the walk: `known` is keyed by the addresses of values, which
    // erased ops would free for new constants to reuse.
    known.clear();
    erase_dead_chains(std::move(producers), ctx);
  }

 private:
  template <typename ValueOf>
  void fold(Operation* op, ValueOf& value_of, std::vector<Operation*>& producers, PassContext& ctx) {
    std::vector<Tensor> inputs;
    for (std::uint32_t i = 0; i < op->num_operands(); ++i) {
      const Tensor* t = value_of(op->operand_source(i));
      if (!t) return;
      inputs.push_back(*t);
    }
    std::vector<Tensor> results = evaluate(op, inputs);
    if (results.size() != op->num_results()) return;
    Builder b(*op->parent_block());
    b.set_insertion_point(op);
    for (std::uint32_t i = 0; i < op->num_results(); ++i) {
      auto c = b.create<ConstantOp>(attribute_from_tensor(results[i]), op->result_type(i));
      ctx.replace_all_uses(op->result(i), c.result());
    }
    for (std::uint32_t i = 0; i < op->num_operands(); ++i)
      if (Operation* def = op->operand_source(i).defining_op()) producers.push_back(def);
    ctx.erase_op(op);
  }

  ConstantFoldOptions options_;
};

template <typename T>
std::optional<double> splat_of(std::string_view bytes) {
  const std::size_t n = bytes.size() / sizeof(T);
  if (n == 0) return std::nullopt;
  T first;
  std::memcpy(&first, bytes.data(), sizeof(T));
  for (std::size_t i = 1; i < n; ++i) {
    T x;
    std::memcpy(&x, bytes.data() + i * sizeof(T), sizeof(T));
    if (!(x == first)) return std::nullopt;
  }
  return static_cast<double>(first);
}

}  // namespace

Tensor tensor_from_attribute(TensorAttribute a) {
  Tensor t = Tensor::empty(Dims(a.dims()), a.dtype());
  if (t.bytes()) std::memcpy(t.raw_data(), a.bytes().data(), t.bytes());
  return t;
}

TensorAttribute attribute_from_tensor(const Tensor& t) {
  const auto* p = static_cast<const char*>(t.bytes() ? t.raw_data() : nullptr);
  return TensorAttribute::get_or_hold(t.dtype(), t.dims().to_vector(), std::string(p, t.bytes()));
}

std::vector<Tensor> evaluate_on_cpu(Operation* op, const std::vector<Tensor>& operands) {
  if (!op || !pure(*op) || operands.size() != op->num_operands()) return {};
  return evaluate(op, operands);
}

bool is_constant_value(Value v, const PassContext* ctx) {
  Operation* def = v.defining_op();
  if (!def || alias_written_in_place(v, ctx)) return false;
  if (auto c = def->dyn_cast<ConstantOp>()) return static_cast<bool>(c.value().dyn_cast<TensorAttribute>());
  if (def->isa<FullOp>()) return on_cpu(*def) && static_bytes(v.type()) >= 0;
  return false;
}

std::optional<double> constant_splat_value(Value v, const PassContext* ctx) {
  Operation* def = v.defining_op();
  if (!def || alias_written_in_place(v, ctx)) return std::nullopt;
  if (auto f = def->dyn_cast<FullOp>()) {
    const double x = f.attrs().value;
    // What the kernel stores: the value in the op's dtype.
    switch (f.attrs().dtype) {
      case DataType::Float32: return static_cast<double>(static_cast<float>(x));
      case DataType::Float64: return x;
      default: return x == static_cast<double>(static_cast<std::int64_t>(x)) ? std::optional(x) : std::nullopt;
    }
  }
  auto c = def->dyn_cast<ConstantOp>();
  if (!c) return std::nullopt;
  auto t = c.value().dyn_cast<TensorAttribute>();
  if (!t) return std::nullopt;
  switch (t.dtype()) {
    case DataType::Float32: return splat_of<float>(t.bytes());
    case DataType::Float64: return splat_of<double>(t.bytes());
    case DataType::Int32: return splat_of<std::int32_t>(t.bytes());
    case DataType::Int64: return splat_of<std::int64_t>(t.bytes());
    case DataType::Int8: return splat_of<std::int8_t>(t.bytes());
    case DataType::UInt8: return splat_of<std::uint8_t>(t.bytes());
    default: return std::nullopt;
  }
}

std::unique_ptr<Pass> create_constant_fold_pass(ConstantFoldOptions options) {
  return std::make_unique<ConstantFoldPass>(options);
}

KILN_REGISTER_PASS("fold", [] { return create_constant_fold_pass(); },
                   "evaluates ops whose operands are all constants with their CPU kernels");

}  // namespace kiln
