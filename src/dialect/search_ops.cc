// The search ops of kiln/dialect/search_ops.h: InferMeta, Vjp, gradient op
// and registration.
#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/search_ops.h"

#include <algorithm>
#include <utility>


namespace kiln {

KILN_REGISTER_OP(ArgMaxOp, ArgMinOp, TopKOp, GradOf<TopKOp>, OneHotOp, NonzeroOp, UniqueOp,
                 NonMaxSuppressionOp, TfIdfVectorizerOp);

namespace {
void require_searchable(std::string_view op, DataType dt) {
  if (dt != DataType::Float32 && dt != DataType::Float64 && dt != DataType::Int32 &&
      dt != DataType::Int64)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' takes f32, f64, i32 or i64, got ",
                to_string(dt));
}
}  // namespace

// ---- argmax / argmin ----

template <typename Math>
std::vector<Type> ArgReduceOp<Math>::infer_meta(const std::vector<Type>& in,
                                                DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  require_searchable(name, shaped_data_type(x));
  std::vector<std::int64_t> out = shaped_dims(x);
  if (out.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs an input of rank >= 1");
  std::int64_t axis = meta::normalize_axis(name, a.axis, static_cast<std::int64_t>(out.size()));
  if (out[axis] == 0)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' cannot search an empty dim ", axis,
                " of ", meta::dims_string(out));
  if (a.keepdim) out[axis] = 1;
  else out.erase(out.begin() + axis);
  return {meta::result_like(in, DataType::Int64, std::move(out))};
}

template struct ArgReduceOp<ArgMaxMath>;
template struct ArgReduceOp<ArgMinMath>;

// ---- topk ----

void TopKOp::build(Builder&, OperationArgument& arg, Value x, std::int64_t k, std::int64_t axis,
                   bool largest, bool sorted) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{k, axis, largest, sorted});
}

std::vector<Type> TopKOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  DataType dt = shaped_data_type(x);
  require_searchable(name, dt);
  std::vector<std::int64_t> out = shaped_dims(x);
  if (out.empty())
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs an input of rank >= 1");
  std::int64_t axis = meta::normalize_axis(name, a.axis, static_cast<std::int64_t>(out.size()));
  if (a.k < 0 || (out[axis] >= 0 && a.k > out[axis]))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' k = ", a.k, " must be in [0, ",
                out[axis], "] (dim ", axis, " of ", meta::dims_string(out), ")");
  out[axis] = a.k;
  return {meta::result_like(in, dt, out), meta::result_like(in, DataType::Int64, out)};
}

// Grad w.r.t. x through the values; the indices carry none.
std::vector<Value> TopKOp::vjp(Builder& b, Operation* op, const std::vector<Value>& g) {
  vjp::check_out_grads(op, g);
  if (!g[0] || !vjp::differentiable(op->operand_source(0))) return {Value()};
  return {b.create<GradOf<TopKOp>>(op, op->operand_source(0), op->result(1), g[0]).result()};
}

void TopKOp::Grad::check(std::string_view name, const std::vector<Type>& in,
                         DictionaryAttribute attrs) {
  Type x = meta::tensor_operand(name, in, 0), idx = meta::tensor_operand(name, in, 1),
       dv = meta::tensor_operand(name, in, 2);
  meta::require_same_dtype(name, shaped_data_type(x), shaped_data_type(dv), 0, 2);
  if (shaped_data_type(idx) != DataType::Int64)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' indices must be i64, got ",
                to_string(shaped_data_type(idx)));
  auto fwd = TopKOp::infer_meta({x}, attrs);
  for (std::size_t i : {std::size_t{1}, std::size_t{2}})
    if (!meta::compatible_dims(shaped_dims(fwd[0]), shaped_dims(in[i])))
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' operand #", i, " ",
                  meta::dims_string(shaped_dims(in[i])), " must have the topk shape ",
                  meta::dims_string(shaped_dims(fwd[0])));
}

// ---- one_hot ----

void OneHotOp::build(Builder&, OperationArgument& arg, Value ids, std::int64_t num_classes) {
  arg.add_operand(ids);
  arg.attributes = to_named_attributes(Attributes{num_classes});
}

std::vector<Type> OneHotOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type ids = meta::tensor_operand(name, in, 0);
  if (!meta::is_index_dtype(shaped_data_type(ids)))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' ids must be i32 or i64, got ",
                to_string(shaped_data_type(ids)));
  if (a.num_classes < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' num_classes must be >= 1, got ",
                a.num_classes);
  std::vector<std::int64_t> out = shaped_dims(ids);
  out.push_back(a.num_classes);
  if (out.size() > 9)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' result rank ", out.size(),
                " exceeds the maximum rank 9");
  return {meta::result_like(in, DataType::Float32, std::move(out))};
}

// ---- nonzero / unique ----

void NonzeroOp::build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }

std::vector<Type> NonzeroOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute) {
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  const DataType dt = shaped_data_type(x);
  if (dt != DataType::Bool) require_searchable(name, dt);
  const auto rank = static_cast<std::int64_t>(shaped_dims(x).size());
  return {meta::result_like(in, DataType::Int64, {rank, -1})};
}

void UniqueOp::build(Builder&, OperationArgument& arg, Value x, bool flatten, std::int64_t axis,
                     bool sorted) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{flatten, axis, sorted});
}

std::vector<Type> UniqueOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  auto a = from_attributes<Attributes>(attrs, name);
  meta::require_count(name, in, 1);
  Type x = meta::tensor_operand(name, in, 0);
  const DataType dt = shaped_data_type(x);
  require_searchable(name, dt);
  std::vector<std::int64_t> y{-1};
  if (!a.flatten) {
    y = shaped_dims(x);
    if (y.empty())
      throw_error(ErrorKind::InvalidArgument, "op '", name,
                  "' needs an input of rank >= 1 along an axis");
    y[static_cast<std::size_t>(
        meta::normalize_axis(name, a.axis, static_cast<std::int64_t>(y.size())))] = -1;
  }
  Type ids = meta::result_like(in, DataType::Int64, {-1});
  return {meta::result_like(in, dt, std::move(y)), ids, ids, ids};
}

// ---- non_max_suppression ----

void NonMaxSuppressionOp::build(Builder&, OperationArgument& arg, Value boxes, Value scores,
                                Value max_per_class, Value iou_threshold, Value score_threshold,
                                bool center_point_box) {
  arg.add_operands({boxes, scores, max_per_class, iou_threshold, score_threshold});
  arg.attributes = to_named_attributes(Attributes{center_point_box});
}

std::vector<Type> NonMaxSuppressionOp::infer_meta(const std::vector<Type>& in,
                                                  DictionaryAttribute) {
  meta::require_count(name, in, 5);
  Type boxes = meta::float_operand(name, in, 0), scores = meta::tensor_operand(name, in, 1);
  const DataType dt = shaped_data_type(boxes);
  meta::require_same_dtype(name, dt, shaped_data_type(scores), 0, 1);
  const auto& bd = shaped_dims(boxes);
  const auto& sd = shaped_dims(scores);
  if (bd.size() != 3 || (bd[2] >= 0 && bd[2] != 4))
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' boxes must be [batches, boxes, 4], got ", meta::dims_string(bd));
  if (sd.size() != 3)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' scores must be [batches, classes, boxes], got ", meta::dims_string(sd));
  if (!meta::compatible_dims({bd[0], bd[1]}, {sd[0], sd[2]}))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' boxes ", meta::dims_string(bd),
                " and scores ", meta::dims_string(sd), " disagree on the batches or the boxes");
  if (!meta::is_index_dtype(shaped_data_type(meta::tensor_operand(name, in, 2))))
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' max_per_class (operand #2) must be i32 or i64");
  for (std::size_t i = 3; i <= 4; ++i)
    meta::require_same_dtype(name, dt, shaped_data_type(meta::tensor_operand(name, in, i)), 0, i);
  return {meta::result_like(in, DataType::Int64, {-1, 3})};
}

// ---- tfidf_vectorizer ----

namespace {
// Columns, gram lengths and skips stay below this (their loops and counts
// in 64 bits).
constexpr std::int64_t kMaxTfIdfCount = std::int64_t{1} << 30;
}  // namespace

void TfIdfVectorizerOp::build(Builder&, OperationArgument& arg, Value x, Value weights, Attributes attrs) {
  arg.add_operands({x, weights});
  arg.attributes = to_named_attributes(attrs);
}

std::int64_t TfIdfVectorizerOp::output_size(std::string_view op, const Attributes& a) {
  auto bad = [&](auto&&... what) { throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what...); };
  if (a.mode != "TF" && a.mode != "IDF" && a.mode != "TFIDF") bad("mode must be TF, IDF or TFIDF, got '", a.mode, "'");
  if (a.min_gram_length < 1 || a.max_gram_length < a.min_gram_length)
    bad("gram lengths must satisfy 1 <= min_gram_length <= max_gram_length, got ", a.min_gram_length, " and ",
        a.max_gram_length);
  if (a.max_gram_length > kMaxTfIdfCount) bad("max_gram_length ", a.max_gram_length, " is beyond 2^30");
  if (a.max_skip_count < 0 || a.max_skip_count > kMaxTfIdfCount)
    bad("max_skip_count must be in [0, 2^30], got ", a.max_skip_count);
  const auto pool = static_cast<std::int64_t>(a.pool.size());
  std::int64_t grams = 0;
  for (std::size_t i = 0; i < a.ngram_counts.size(); ++i) {
    const std::int64_t start = a.ngram_counts[i], end = i + 1 < a.ngram_counts.size() ? a.ngram_counts[i + 1] : pool;
    const auto n = static_cast<std::int64_t>(i + 1);
    if ((i == 0 && start != 0) || start < 0 || end < start || end > pool || (end - start) % n != 0)
      bad("ngram_counts ", meta::dims_string(a.ngram_counts), " must start at 0 and cut the pool of ", pool,
          " tokens into whole n-grams (", n, "-grams from ", start, ")");
    grams += (end - start) / n;
  }
  if (a.ngram_counts.empty() && pool > 0) bad("ngram_counts is empty for a pool of ", pool, " tokens");
  if (static_cast<std::int64_t>(a.ngram_indexes.size()) != grams)
    bad("ngram_indexes has ", a.ngram_indexes.size(), " entries for the pool's ", grams, " n-grams");
  std::int64_t k = 0;
  for (std::int64_t i : a.ngram_indexes) {
    if (i < 0 || i >= kMaxTfIdfCount) bad("ngram_indexes holds ", i, ", expected columns in [0, 2^30)");
    k = std::max(k, i + 1);
  }
  if (k == 0) bad("has an empty vocabulary (no ngram_indexes)");
  return k;
}

std::vector<Type> TfIdfVectorizerOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 2);
  const std::int64_t k = output_size(name, from_attributes<Attributes>(attrs, name));
  Type x = meta::tensor_operand(name, in, 0), w = meta::tensor_operand(name, in, 1);
  const auto& xd = shaped_dims(x);
  if (!meta::is_index_dtype(shaped_data_type(x)) || xd.size() > 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' x must be i32 or i64 tokens [C] or [B, C], got ",
                to_string(shaped_data_type(x)), " ", meta::dims_string(xd));
  const auto& wd = shaped_dims(w);
  if (shaped_data_type(w) != DataType::Float32 || wd.size() != 1 || (wd[0] >= 0 && wd[0] != 0 && wd[0] < k))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' weights must be f32 [", k, "] or longer (one per column) or [0], got ",
                to_string(shaped_data_type(w)), " ", meta::dims_string(wd));
  std::vector<std::int64_t> y{k};
  if (xd.size() == 2) y.insert(y.begin(), xd[0]);
  return {meta::result_like(in, DataType::Float32, std::move(y))};
}

}  // namespace kiln
