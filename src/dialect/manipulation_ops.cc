// The shape-manipulation ops of kiln/dialect/manipulation_ops.h: InferMeta,
// Vjp and registration.
#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/manipulation_ops.h"

#include <algorithm>
#include <utility>

#include "kiln/dialect/tensor_ops.h"

namespace kiln {

KILN_REGISTER_OP(ExpandOp, StackOp, FlattenOp, SqueezeOp, UnsqueezeOp, PadOp, CumsumOp);


namespace {
constexpr std::size_t kMaxRank = 9;

void check_rank(std::string_view op, std::size_t rank) {
  if (rank > kMaxRank)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' result rank ", rank,
                " exceeds the maximum rank ", kMaxRank);
}

// The out_grad of a one-result op whose operand #0 is differentiable; null
// when there is nothing to do.
Value flowing_grad(Operation* op, const std::vector<Value>& out_grads) {
  vjp::check_out_grads(op, out_grads);
  if (!out_grads[0] || !vjp::differentiable(op->operand_source(0))) return {};
  return out_grads[0];
}

// The grad viewed with operand #0's run-time shape (the views' Vjp).
std::vector<Value> view_back(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  return {b.create<ReshapeAsOp>(d, op->operand_source(0)).result()};
}
}  // namespace

// ---- expand ----

void ExpandOp::build(Builder&, OperationArgument& arg, Value x, const std::vector<std::int64_t>& shape) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{shape});
}

std::vector<Type> ExpandOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  check_rank(name, a.shape.size());
  if (a.shape.size() < xs.size())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' shape ", meta::dims_string(a.shape),
                " has fewer dims than the input ", meta::dims_string(xs));
  const std::size_t lead = a.shape.size() - xs.size();
  std::vector<std::int64_t> out(a.shape.size());
  for (std::size_t i = 0; i < a.shape.size(); ++i) {
    std::int64_t s = a.shape[i];
    if (s < -1)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' shape ", meta::dims_string(a.shape),
                  " dims must be >= -1");
    if (i < lead) {
      if (s == -1)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' shape ", meta::dims_string(a.shape),
                    " has -1 at new leading dim ", i, " (-1 keeps an input dim)");
      out[i] = s;
      continue;
    }
    std::int64_t xd = xs[i - lead];
    if (s == -1) {
      out[i] = xd;
    } else {
      if (xd >= 0 && xd != 1 && xd != s)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot expand ", meta::dims_string(xs),
                    " to ", meta::dims_string(a.shape), ": input dim ", i - lead, " is ", xd,
                    " (expected 1 or ", s, ")");
      out[i] = s;
    }
  }
  return {meta::result_like(in, shaped_data_type(x), std::move(out))};
}

std::vector<Value> ExpandOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  return {vjp::reduce_to(b, d, op->operand_source(0))};
}

// ---- stack ----

void StackOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& xs, std::int64_t axis) {
  arg.add_operands(xs);
  arg.attributes = to_named_attributes(Attributes{axis});
}

std::vector<Type> StackOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  if (in.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one operand");
  Type first = meta::tensor_operand(name, in, 0);
  DataType dt = shaped_data_type(first);
  std::vector<std::int64_t> dims = shaped_dims(first);
  for (std::size_t i = 1; i < in.size(); ++i) {
    Type t = meta::tensor_operand(name, in, i);
    if (shaped_data_type(t) != dt)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' operands must have one dtype: #0 is ",
                  to_string(dt), ", #", i, " is ", to_string(shaped_data_type(t)));
    const auto& ds = shaped_dims(t);
    if (ds.size() != dims.size() || !meta::compatible_dims(ds, dims))
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' operands must have one shape: #0 is ",
                  meta::dims_string(shaped_dims(first)), ", #", i, " is ", meta::dims_string(ds));
    for (std::size_t k = 0; k < ds.size(); ++k)
      if (dims[k] < 0) dims[k] = ds[k];
  }
  auto out_rank = static_cast<std::int64_t>(dims.size()) + 1;
  check_rank(name, static_cast<std::size_t>(out_rank));
  std::int64_t axis = meta::normalize_axis(name, a.axis, out_rank);
  dims.insert(dims.begin() + axis, static_cast<std::int64_t>(in.size()));
  return {meta::result_like(in, dt, std::move(dims))};
}

// The grad split into one slice per operand along the stacked axis, each
// viewed with its operand's shape.
std::vector<Value> StackOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  std::vector<Value> grads(op->num_operands());
  if (!g[0]) return grads;
  const auto n = static_cast<std::int64_t>(op->num_operands());
  auto split = b.create<SplitOp>(g[0], n, StackOp(op).attrs().axis);
  for (std::uint32_t i = 0; i < op->num_operands(); ++i)
    if (vjp::differentiable(op->operand_source(i)))
      grads[i] = b.create<ReshapeAsOp>(split.operation()->result(i), op->operand_source(i)).result();
  return grads;
}

// ---- flatten ----

void FlattenOp::build(Builder&, OperationArgument& arg, Value x, std::int64_t start_axis,
                      std::int64_t stop_axis) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{start_axis, stop_axis});
}

std::vector<Type> FlattenOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  if (xs.empty()) {
    if (a.start_axis != 0 && a.start_axis != -1)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' start_axis ", a.start_axis,
                  " is out of range for a rank-0 input (expected 0 or -1)");
    if (a.stop_axis != 0 && a.stop_axis != -1)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' stop_axis ", a.stop_axis,
                  " is out of range for a rank-0 input (expected 0 or -1)");
    return {meta::result_like(in, shaped_data_type(x), {1})};
  }
  auto rank = static_cast<std::int64_t>(xs.size());
  std::int64_t s = meta::normalize_axis(name, a.start_axis, rank, "start_axis");
  std::int64_t e = meta::normalize_axis(name, a.stop_axis, rank, "stop_axis");
  if (s > e)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' start_axis ", a.start_axis,
                " must not come after stop_axis ", a.stop_axis, " (rank ", rank, ")");
  std::vector<std::int64_t> out(xs.begin(), xs.begin() + s);
  std::int64_t m = 1;
  for (std::int64_t k = s; k <= e; ++k) {
    if (xs[k] < 0 || m < 0) m = -1;
    else if (__builtin_mul_overflow(m, xs[k], &m))
      throw_error(ErrorKind::OutOfRange, "op '", name, "' merged dim overflows int64");
  }
  // A zero among the merged dims makes the product known even beside a -1.
  for (std::int64_t k = s; k <= e; ++k)
    if (xs[k] == 0) m = 0;
  out.push_back(m);
  out.insert(out.end(), xs.begin() + e + 1, xs.end());
  return {meta::result_like(in, shaped_data_type(x), std::move(out))};
}

std::vector<Value> FlattenOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return view_back(b, op, g);
}

// ---- squeeze ----

void SqueezeOp::build(Builder&, OperationArgument& arg, Value x, const std::vector<std::int64_t>& axes) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{axes});
}

std::vector<Type> SqueezeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  auto rank = static_cast<std::int64_t>(xs.size());
  std::vector<bool> drop(xs.size(), false);
  if (a.axes.empty()) {
    for (std::size_t k = 0; k < xs.size(); ++k) drop[k] = xs[k] == 1;
  } else {
    std::vector<bool> seen(xs.size(), false);
    for (auto ax : a.axes) {
      std::int64_t k = meta::normalize_axis(name, ax, rank);
      if (seen[k])
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' axes ", meta::dims_string(a.axes),
                    " name dim ", k, " twice");
      seen[k] = true;
      if (xs[k] < 0)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' axis ", ax, " names dim ", k,
                    " of ", meta::dims_string(xs), ", unknown at build time (expected a known dim)");
      drop[k] = xs[k] == 1;
    }
  }
  std::vector<std::int64_t> out;
  for (std::size_t k = 0; k < xs.size(); ++k)
    if (!drop[k]) out.push_back(xs[k]);
  return {meta::result_like(in, shaped_data_type(x), std::move(out))};
}

std::vector<Value> SqueezeOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return view_back(b, op, g);
}

// ---- unsqueeze ----

void UnsqueezeOp::build(Builder&, OperationArgument& arg, Value x, const std::vector<std::int64_t>& axes) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{axes});
}

std::vector<Type> UnsqueezeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  const auto& xs = shaped_dims(x);
  if (a.axes.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs at least one axis");
  const std::size_t out_rank = xs.size() + a.axes.size();
  check_rank(name, out_rank);
  std::vector<bool> ones(out_rank, false);
  for (auto ax : a.axes) {
    std::int64_t k = meta::normalize_axis(name, ax, static_cast<std::int64_t>(out_rank));
    if (ones[k])
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' axes ", meta::dims_string(a.axes),
                  " name result dim ", k, " twice");
    ones[k] = true;
  }
  std::vector<std::int64_t> out(out_rank);
  std::size_t j = 0;
  for (std::size_t k = 0; k < out_rank; ++k) out[k] = ones[k] ? 1 : xs[j++];
  return {meta::result_like(in, shaped_data_type(x), std::move(out))};
}

std::vector<Value> UnsqueezeOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  return view_back(b, op, g);
}

// ---- pad ----

void PadOp::build(Builder&, OperationArgument& arg, Value x, const std::vector<std::int64_t>& pads,
                  double value) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{pads, value});
}

std::vector<Type> PadOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  DataType dt = shaped_data_type(x);
  if (dt != DataType::Float32 && dt != DataType::Float64 && dt != DataType::Int32 &&
      dt != DataType::Int64)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' takes f32, f64, i32 or i64, got ",
                to_string(dt));
  std::vector<std::int64_t> out = shaped_dims(x);
  if (a.pads.size() % 2 != 0 || a.pads.size() > 2 * out.size())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' pads ", meta::dims_string(a.pads),
                " must hold an even number of entries, at most 2 per dim of the input ",
                meta::dims_string(out));
  for (std::size_t p = 0; p < a.pads.size() / 2; ++p) {
    std::size_t k = out.size() - 1 - p;
    if (out[k] < 0) continue;
    std::int64_t d = out[k];
    if (__builtin_add_overflow(d, a.pads[2 * p], &d) ||
        __builtin_add_overflow(d, a.pads[2 * p + 1], &d))
      throw_error(ErrorKind::OutOfRange, "op '", name, "' pads ", meta::dims_string(a.pads),
                  " overflow int64");
    if (d < 0)
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' pads ", meta::dims_string(a.pads),
                  " crop dim ", k, " of ", meta::dims_string(out), " below size 0");
    out[k] = d;
  }
  return {meta::result_like(in, dt, std::move(out))};
}

std::vector<Value> PadOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  auto pads = PadOp(op).attrs().pads;
  for (auto& p : pads) p = -p;
  return {b.create<PadOp>(d, pads, 0.0).result()};
}

// ---- cumsum ----

void CumsumOp::build(Builder&, OperationArgument& arg, Value x, std::int64_t axis, bool exclusive,
                     bool reverse) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{axis, exclusive, reverse});
}

std::vector<Type> CumsumOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  DataType dt = shaped_data_type(x);
  if (dt != DataType::Float32 && dt != DataType::Float64 && dt != DataType::Int32 &&
      dt != DataType::Int64)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' takes f32, f64, i32 or i64, got ",
                to_string(dt));
  const auto& xs = shaped_dims(x);
  if (xs.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs an input of rank >= 1");
  meta::normalize_axis(name, a.axis, static_cast<std::int64_t>(xs.size()));
  return {meta::result_like(in, dt, xs)};
}

std::vector<Value> CumsumOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  Value d = flowing_grad(op, g);
  if (!d) return {Value()};
  auto a = CumsumOp(op).attrs();
  return {b.create<CumsumOp>(d, a.axis, a.exclusive, !a.reverse).result()};
}

}  // namespace kiln
