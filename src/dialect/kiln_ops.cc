#include <algorithm>

#include "kiln/dialect/kiln_dialect.h"

namespace kiln {

KilnDialect::KilnDialect() : Dialect("kiln", TypeId::get<KilnDialect>()) {}

void register_kiln_dialect(IrContext* ctx) {
  auto* d = ctx->get_or_register_dialect<KilnDialect>();
  d->register_ops<DataOp, FetchOp, AddOp, MatmulOp, ReluOp, Relu_Op, FullOp, ReshapeOp,
                  UniformRandomOp>();
}

namespace {
// The operand as a tensor/vtensor type, or a kiln::Error naming the op.
Type expect_tensor(std::string_view op, const std::vector<Type>& in, std::size_t i) {
  if (i >= in.size() || !in[i] || !is_shaped(in[i]))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand #", i, " must be a tensor, got ",
                i < in.size() && in[i] ? in[i].to_string() : std::string("nothing"));
  return in[i];
}

// tensor unless every shaped operand is a vtensor.
Type make_like(const std::vector<Type>& in, DataType dt, std::vector<std::int64_t> dims) {
  bool all_v = !in.empty() && std::all_of(in.begin(), in.end(),
                                          [](Type t) { return t.isa<VTensorType>(); });
  if (all_v) return VTensorType::get(dt, std::move(dims));
  return TensorType::get(dt, std::move(dims));
}

void check_shape_attr(std::string_view op, const std::vector<std::int64_t>& shape) {
  for (auto d : shape)
    if (d < -1)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' shape dims must be >= -1, got ", d);
}
}  // namespace

// ---- io ----

void DataOp::build(Builder&, OperationArgument& arg, const std::string& name,
                   const std::vector<std::int64_t>& shape, DataType dtype, Place place) {
  if (name.empty()) throw_error(ErrorKind::InvalidArgument, "op 'kiln.data' needs a name");
  arg.attributes = to_named_attributes(Attributes{name, shape, dtype, place});
}

std::vector<Type> DataOp::infer_meta(const std::vector<Type>&, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  check_shape_attr(name, a.shape);
  return {TensorType::get(a.dtype, a.shape)};
}

void FetchOp::build(Builder&, OperationArgument& arg, Value v, const std::string& name,
                    std::int32_t col) {
  arg.add_operand(v);
  arg.attributes = to_named_attributes(Attributes{name, col});
}

// ---- math ----

std::vector<std::int64_t> broadcast_shapes(std::string_view op, const std::vector<std::int64_t>& a,
                                           const std::vector<std::int64_t>& b) {
  std::size_t n = std::max(a.size(), b.size());
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db) out[i] = da;
    else if (da == 1) out[i] = db;
    else if (db == 1) out[i] = da;
    else if (da == -1) out[i] = db;
    else if (db == -1) out[i] = da;
    else {
      auto str = [](const std::vector<std::int64_t>& s) {
        std::string r = "[";
        for (std::size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + std::to_string(s[k]);
        return r + "]";
      };
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot broadcast shapes ", str(a),
                  " and ", str(b));
    }
  }
  return out;
}

void AddOp::build(Builder&, OperationArgument& arg, Value x, Value y) {
  arg.add_operand(x);
  arg.add_operand(y);
}

std::vector<Type> AddOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  Type x = expect_tensor(name, in, 0), y = expect_tensor(name, in, 1);
  DataType dx = shaped_data_type(x), dy = shaped_data_type(y);
  if (dx != dy)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' operands must have one dtype, got ",
                to_string(dx), " and ", to_string(dy));
  return {make_like(in, dx, broadcast_shapes(name, shaped_dims(x), shaped_dims(y)))};
}

void MatmulOp::build(Builder&, OperationArgument& arg, Value x, Value y, bool tx, bool ty) {
  arg.add_operand(x);
  arg.add_operand(y);
  arg.attributes = to_named_attributes(Attributes{tx, ty});
}

std::vector<Type> MatmulOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = expect_tensor(name, in, 0), y = expect_tensor(name, in, 1);
  DataType dx = shaped_data_type(x), dy = shaped_data_type(y);
  if (dx != dy)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' operands must have one dtype, got ",
                to_string(dx), " and ", to_string(dy));
  auto xs = shaped_dims(x), ys = shaped_dims(y);
  if (xs.size() < 2 || ys.size() < 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' operands must have rank >= 2, got ",
                xs.size(), " and ", ys.size());
  std::int64_t m = xs[xs.size() - 2], kx = xs.back();
  if (a.transpose_x) std::swap(m, kx);
  std::int64_t ky = ys[ys.size() - 2], n = ys.back();
  if (a.transpose_y) std::swap(ky, n);
  if (kx >= 0 && ky >= 0 && kx != ky)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' contraction dims differ: ", kx,
                " vs ", ky);
  std::vector<std::int64_t> bx(xs.begin(), xs.end() - 2), by(ys.begin(), ys.end() - 2);
  auto dims = broadcast_shapes(name, bx, by);
  dims.push_back(m);
  dims.push_back(n);
  return {make_like(in, dx, std::move(dims))};
}

void ReluOp::build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
std::vector<Type> ReluOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  return {expect_tensor(name, in, 0)};
}

void Relu_Op::build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
std::vector<Type> Relu_Op::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  Type t = expect_tensor(name, in, 0);
  if (t.isa<VTensorType>())
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' writes its operand in place, so it cannot take a vtensor (value semantics)");
  return {t};
}

// ---- tensor ----

void FullOp::build(Builder&, OperationArgument& arg, const std::vector<std::int64_t>& shape,
                   double value, DataType dtype, Place place) {
  arg.attributes = to_named_attributes(Attributes{shape, value, dtype, place});
}

std::vector<Type> FullOp::infer_meta(const std::vector<Type>&, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  check_shape_attr(name, a.shape);
  return {TensorType::get(a.dtype, a.shape)};
}

void ReshapeOp::build(Builder&, OperationArgument& arg, Value x, const std::vector<std::int64_t>& shape) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{shape});
}

std::vector<Type> ReshapeOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  Type x = expect_tensor(name, in, 0);
  const auto& xs = shaped_dims(x);
  std::vector<std::int64_t> out = a.shape;
  int infer_at = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0) {
      if (i >= xs.size())
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' shape[", i,
                    "] = 0 copies an input dim, but the input has rank ", xs.size());
      out[i] = xs[i];
    }
    if (a.shape[i] == -1) {
      if (infer_at >= 0)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' shape may hold one -1, got two");
      infer_at = static_cast<int>(i);
    } else if (out[i] < -1) {
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' shape dims must be >= -1, got ",
                  out[i]);
    } else if (out[i] >= 0 && __builtin_mul_overflow(known, out[i], &known)) {
      throw_error(ErrorKind::OutOfRange, "op '", name, "' shape's element count overflows int64");
    }
  }
  std::int64_t total = 1;
  for (auto d : xs) {
    if (d < 0 || total < 0) total = -1;
    else if (__builtin_mul_overflow(total, d, &total))
      throw_error(ErrorKind::OutOfRange, "op '", name, "' input's element count overflows int64");
  }
  bool all_known = std::none_of(out.begin(), out.end(), [&](std::int64_t d) { return d < 0; });
  if (infer_at >= 0 && total >= 0 && known > 0) {
    bool others_known = true;
    for (std::size_t i = 0; i < out.size(); ++i)
      if (int(i) != infer_at && out[i] < 0) others_known = false;
    if (others_known) {
      if (total % known != 0)
        throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot reshape ", total,
                    " elements into a shape whose known dims multiply to ", known);
      out[infer_at] = total / known;
    }
  } else if (infer_at < 0 && all_known && total >= 0 && known != total) {
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot reshape ", total,
                " elements into ", known);
  }
  return {make_like(in, shaped_data_type(x), std::move(out))};
}

void UniformRandomOp::build(Builder&, OperationArgument& arg, const std::vector<std::int64_t>& shape,
                            double min, double max, std::int64_t seed, DataType dtype, Place place) {
  arg.attributes = to_named_attributes(Attributes{shape, min, max, seed, dtype, place});
}

std::vector<Type> UniformRandomOp::infer_meta(const std::vector<Type>&, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  check_shape_attr(name, a.shape);
  if (!is_floating(a.dtype))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs a floating dtype, got ",
                to_string(a.dtype));
  if (!(a.min <= a.max))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs min <= max, got [", a.min, ", ",
                a.max, "]");
  return {TensorType::get(a.dtype, a.shape)};
}

void UniformRandomOp::verify() const {
  auto a = attrs();
  if (!(a.min <= a.max))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs min <= max, got [", a.min, ", ",
                a.max, "]");
}

}  // namespace kiln
