// fold_batch_norm.h: the folded tensors, and the rewrite of an inference
// program's conv2d + batch_norm pairs.
#include "kiln/frontend/fold_batch_norm.h"

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/ir/builder.h"

namespace kiln {

namespace {

template <typename T>
FoldedConv folded(const Tensor& w, const Tensor* bias, const Tensor* const (&bn)[4], double eps) {
  const std::int64_t o = w.dims()[0], per = o ? w.numel() / o : 0;
  FoldedConv f{Tensor::empty(w.dims(), w.dtype()), Tensor::empty(Dims{o}, w.dtype())};
  const T* pw = w.data<T>();
  const T *scale = bn[0]->data<T>(), *beta = bn[1]->data<T>(), *mean = bn[2]->data<T>(), *var = bn[3]->data<T>();
  T* fw = f.weight.data<T>();
  T* fb = f.bias.data<T>();
  for (std::int64_t k = 0; k < o; ++k) {
    const double g = double(scale[k]) / std::sqrt(double(var[k]) + eps);
    for (std::int64_t i = 0; i < per; ++i) fw[k * per + i] = static_cast<T>(double(pw[k * per + i]) * g);
    const double b = bias ? double(bias->data<T>()[k]) : 0.0;
    fb[k] = static_cast<T>((b - double(mean[k])) * g + double(beta[k]));
  }
  return f;
}

// The tensor of parameter value v in `params`: null unless v is a
// builtin.parameter whose tensor is on the CPU in `dt`, shaped `dims` (any
// dims when empty).
const Tensor* parameter_tensor(Value v, const Scope& params, DataType dt, const Dims* dims) {
  Operation* def = v.defining_op();
  if (!def || !def->isa<ParameterOp>()) return nullptr;
  const Variable* var = params.find_var(ParameterOp(def).parameter_name());
  if (!var || !var->is<Tensor>()) return nullptr;
  const Tensor& t = var->get<Tensor>();
  if (t.place().kind != PlaceKind::Cpu || t.dtype() != dt || (dims && t.dims() != *dims)) return nullptr;
  return &t;
}

// What a batch norm reads: conv2d(x, w), or conv2d(x, w) + reshape(bias,
// [O, 1, 1] or [1, O, 1, 1]) (the frontend's Conv2D with a bias), each
// value read only by the next op; the ops to erase, last first.
struct ConvBefore {
  Operation* conv = nullptr;
  Value bias;  // null: none
  std::vector<Operation*> ops;
};
std::optional<ConvBefore> conv_before(Value x) {
  ConvBefore c;
  Operation* def = x.defining_op();
  if (!def || !x.has_one_use()) return std::nullopt;
  if (def->isa<AddOp>()) {
    Value y = def->operand_source(0), r = def->operand_source(1);
    Operation* reshape = r.defining_op();
    if (!reshape || !reshape->isa<ReshapeOp>() || !r.has_one_use() || !y.has_one_use()) return std::nullopt;
    const auto& rd = shaped_dims(r.type());
    const std::int64_t o = rd.size() >= 3 ? rd[rd.size() - 3] : -1;
    if (!(rd.size() == 3 || (rd.size() == 4 && rd[0] == 1)) || rd[rd.size() - 1] != 1 || rd[rd.size() - 2] != 1 ||
        shaped_dims(reshape->operand_source(0).type()) != std::vector<std::int64_t>{o})
      return std::nullopt;
    c.ops = {def, reshape};
    c.bias = reshape->operand_source(0);
    def = y.defining_op();
  }
  if (!def || !def->isa<Conv2dOp>() || Conv2dOp(def).attrs().data_format == "NHWC") return std::nullopt;
  c.conv = def;
  c.ops.push_back(def);
  return c;
}

// Folds `bn` into the conv2d before it when the pattern holds (see the
// header); true when done. The names of the parameters it stops reading go
// to `replaced`.
bool fold_one(Program& p, Operation* bn, const Scope& params, Scope& folded_scope,
              std::set<std::string>& replaced) {
  auto norm = bn->dyn_cast<BatchNormOp>();
  if (!norm || !norm.attrs().is_test) return false;
  for (std::uint32_t r = 1; r < bn->num_results(); ++r)
    if (!bn->result(r).use_empty()) return false;
  const std::optional<ConvBefore> c = conv_before(bn->operand_source(0));
  if (!c) return false;
  const Tensor* w = nullptr;
  for (DataType dt : {DataType::Float32, DataType::Float64})
    if (!w) w = parameter_tensor(c->conv->operand_source(1), params, dt, nullptr);
  if (!w || w->dims().rank() != 4) return false;
  const Dims channels{w->dims()[0]};
  const Tensor* bias = c->bias ? parameter_tensor(c->bias, params, w->dtype(), &channels) : nullptr;
  const Tensor* stats[4];
  for (int k = 0; k < 4; ++k)
    if (!(stats[k] = parameter_tensor(bn->operand_source(k + 1), params, w->dtype(), &channels))) return false;
  const std::string base = ParameterOp(bn->operand_source(1).defining_op()).parameter_name();
  const std::string wname = base + ".folded_weight", bname = base + ".folded_bias";
  if ((c->bias && !bias) || p.has_parameter(wname) || p.has_parameter(bname)) return false;
  FoldedConv f = fold_batch_norm(*w, bias, *stats[0], *stats[1], *stats[2], *stats[3], norm.attrs().epsilon);
  const Type wt = TensorType::get(w->dtype(), w->dims().to_vector()), bt = TensorType::get(w->dtype(), {channels[0]});
  p.set_parameter(wname, Parameter{wt, false});
  p.set_parameter(bname, Parameter{bt, false});
  folded_scope.var(wname).set(std::move(f.weight));
  folded_scope.var(bname).set(std::move(f.bias));
  Builder b(p);
  b.set_insertion_point(c->conv);
  const auto& a = Conv2dOp(c->conv).attrs();
  Value y = b.create<Conv2dOp>(c->conv->operand_source(0), b.create<ParameterOp>(wname, wt).result(), a.strides,
                               a.paddings, a.dilations, a.groups)
                .result();
  Value shift = b.create<ReshapeOp>(b.create<ParameterOp>(bname, bt).result(),
                                    std::vector<std::int64_t>{1, channels[0], 1, 1})
                    .result();
  bn->result(0).replace_all_uses_with(b.create<AddOp>(y, shift).result());
  for (std::uint32_t k = 1; k < 5; ++k)
    replaced.insert(ParameterOp(bn->operand_source(k).defining_op()).parameter_name());
  for (Value v : {c->conv->operand_source(1), c->bias})
    if (v) replaced.insert(ParameterOp(v.defining_op()).parameter_name());
  bn->erase();
  for (Operation* op : c->ops) op->erase();
  return true;
}

// Drops the builtin.parameter ops of `names` nothing reads, and their
// table entries when no top-level op names them any more (kept whenever an
// op with regions might).
void drop_unused_parameters(Program& p, const std::set<std::string>& names) {
  std::vector<Operation*> dead;
  std::set<std::string> named;
  bool regions = false;
  for (Operation* op : p.block()) {
    regions = regions || op->num_regions() > 0;
    if (auto q = op->dyn_cast<ParameterOp>()) {
      if (names.count(q.parameter_name()) && op->result(0).use_empty()) dead.push_back(op);
      else named.insert(q.parameter_name());
    }
    if (auto s = op->dyn_cast<SetParameterOp>()) named.insert(s.parameter_name());
  }
  for (Operation* op : dead) op->erase();
  if (regions) return;
  for (const std::string& name : names)
    if (!named.count(name)) p.erase_parameter(name);
}

}  // namespace

FoldedConv fold_batch_norm(const Tensor& w, const Tensor* bias, const Tensor& scale, const Tensor& beta,
                           const Tensor& mean, const Tensor& var, double epsilon) {
  const Tensor* const bn[4] = {&scale, &beta, &mean, &var};
  return w.dtype() == DataType::Float64 ? folded<double>(w, bias, bn, epsilon) : folded<float>(w, bias, bn, epsilon);
}

int fold_batch_norms(Program& p, const Scope& params, Scope& folded_scope) {
  std::vector<Operation*> norms;
  for (Operation* op : p.block())
    if (op->isa<BatchNormOp>()) norms.push_back(op);
  int n = 0;
  std::set<std::string> replaced;
  for (Operation* bn : norms) n += fold_one(p, bn, params, folded_scope, replaced);
  drop_unused_parameters(p, replaced);
  return n;
}

}  // namespace kiln
