// ONNX's element-wise indexing: GatherElements → kiln.take_along_axis,
// ScatterElements (and its opset 9–10 name Scatter) → kiln.put_along_axis,
// GatherND → kiln.gather_nd, ScatterND → kiln.scatter_nd. Negative indices
// count from the end of their dim, as ONNX says; reduction none / add / mul
// (opset 16). Also the ops whose results are sized by the data: NonZero
// (kiln.nonzero), Compress (a gather of the condition's non-zero
// positions), Unique (kiln.unique), NonMaxSuppression
// (kiln.non_max_suppression); and ReverseSequence (take_along_axis of
// positions reversed below each sequence's length). TfIdfVectorizer of
// integer tokens is kiln.tfidf_vectorizer (n-grams looked up in its pool).
#include <limits>

#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

std::string reduction(const NodeContext& c) {
  const auto* r = c.attribute("reduction");
  const std::string s = r ? r->s() : "none";
  if (s != "none" && s != "add" && s != "mul") c.unsupported("reduction '" + s + "'");
  return s;
}

std::vector<Value> gather_elements(NodeContext& c) {
  return {c.b.create<TakeAlongAxisOp>(c.input(0), c.input(1), c.int_attr("axis", 0)).result()};
}

std::vector<Value> scatter_elements(NodeContext& c) {
  return {c.b.create<PutAlongAxisOp>(c.input(0), c.input(1), c.input(2), c.int_attr("axis", 0),
                                     reduction(c))
              .result()};
}

std::vector<Value> gather_nd(NodeContext& c) {
  return {c.b.create<GatherNdOp>(c.input(0), c.input(1), c.int_attr("batch_dims", 0)).result()};
}

std::vector<Value> scatter_nd(NodeContext& c) {
  return {c.b.create<ScatterNdOp>(c.input(0), c.input(1), c.input(2), reduction(c)).result()};
}

std::vector<Value> non_zero(NodeContext& c) { return {c.b.create<NonzeroOp>(c.input(0)).result()}; }

// x's slices along `axis` (x flattened without one) where the 1-D
// condition is true.
std::vector<Value> compress(NodeContext& c) {
  Value x = c.input(0), cond = c.input(1);
  if (shaped_dims(cond.type()).size() != 1) c.unsupported("a condition of rank other than 1");
  Value picked =
      c.b.create<ReshapeOp>(c.b.create<NonzeroOp>(cond).result(), std::vector<std::int64_t>{-1})
          .result();
  if (!c.has_attr("axis")) {
    x = c.b.create<ReshapeOp>(x, std::vector<std::int64_t>{-1}).result();
    return {c.b.create<GatherOp>(x, picked, 0).result()};
  }
  return {c.b.create<GatherOp>(x, picked, c.int_attr("axis", 0)).result()};
}

std::vector<Value> unique(NodeContext& c) {
  Operation* op = c.b.create<UniqueOp>(c.input(0), !c.has_attr("axis"), c.int_attr("axis", 0),
                                       c.int_attr("sorted", 1) != 0);
  std::vector<Value> out = op->results();
  out.resize(static_cast<std::size_t>(c.node.output_size()));
  return out;
}

// y[t, b] = x[lens[b] - 1 - t, b] for t < lens[b], x[t, b] after (time and
// batch axes as the attributes say): the source position along the time
// axis computed for every element, then kiln.take_along_axis.
std::vector<Value> reverse_sequence(NodeContext& c) {
  Value x = c.input(0);
  const std::vector<std::int64_t> d = shaped_dims(x.type());
  const auto rank = static_cast<std::int64_t>(d.size());
  const std::int64_t time = c.int_attr("time_axis", 0), batch = c.int_attr("batch_axis", 1);
  if (rank < 2 || (time != 0 && time != 1) || (batch != 0 && batch != 1) || time == batch)
    c.unsupported("time_axis " + std::to_string(time) + " and batch_axis " + std::to_string(batch) +
                  " for an input of rank " + std::to_string(rank));
  for (auto e : d)
    if (e < 0) c.unsupported("ReverseSequence of an input with a dim known only at run time");
  std::vector<std::int64_t> along_time(static_cast<std::size_t>(rank), 1), along_batch = along_time,
                                                                           t;
  along_time[static_cast<std::size_t>(time)] = d[static_cast<std::size_t>(time)];
  along_batch[static_cast<std::size_t>(batch)] = -1;
  for (std::int64_t i = 0; i < d[static_cast<std::size_t>(time)]; ++i) t.push_back(i);
  Value pos = constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims(along_time), t));
  Value lens = c.input(1);
  if (shaped_data_type(lens.type()) != DataType::Int64)
    lens = c.b.create<CastOp>(lens, DataType::Int64).result();
  lens = c.b.create<ReshapeOp>(lens, along_batch).result();
  auto full = [&](const std::vector<std::int64_t>& dims, double v) {
    return c.b.create<FullOp>(dims, v, DataType::Int64).result();
  };
  Value reversed = c.b.create<SubOp>(c.b.create<SubOp>(lens, full({}, 1)).result(), pos).result();
  Value src =
      c.b.create<WhereOp>(c.b.create<LessThanOp>(pos, lens).result(), reversed, pos).result();
  src = c.b.create<AddOp>(src, full(d, 0)).result();  // every element's own index
  return {c.b.create<TakeAlongAxisOp>(x, src, time).result()};
}

// Omitted inputs: no boxes per class, IoU threshold 0, no score threshold.
std::vector<Value> non_max_suppression(NodeContext& c) {
  Value boxes = c.input(0);
  const DataType dt = shaped_data_type(boxes.type());
  auto given_or = [&](std::size_t i, double fallback, DataType want) {
    Value v = i < c.inputs.size() && c.inputs[i]
                  ? c.inputs[i]
                  : c.b.create<FullOp>(std::vector<std::int64_t>{}, fallback, want).result();
    return shaped_data_type(v.type()) == want ? v : c.b.create<CastOp>(v, want).result();
  };
  return {c.b.create<NonMaxSuppressionOp>(boxes, c.input(1), given_or(2, 0.0, DataType::Int64),
                                          given_or(3, 0.0, dt),
                                          given_or(4, -std::numeric_limits<double>::infinity(), dt),
                                          c.int_attr("center_point_box", 0) != 0)
              .result()};
}

// TfIdfVectorizer over integer tokens (pool_int64s): kiln.tfidf_vectorizer,
// its weights a constant operand ([0] when the node has none). String
// tokens (pool_strings) are not imported: kiln has no string tensors.
std::vector<Value> tfidf_vectorizer(NodeContext& c) {
  if (c.has_attr("pool_strings")) c.unsupported("pool_strings (string tokens; kiln has no string tensors)");
  TfIdfVectorizerOp::Attributes a;
  const auto* mode = c.attribute("mode");
  a.mode = mode ? mode->s() : "";
  a.min_gram_length = c.int_attr("min_gram_length", 0);
  a.max_gram_length = c.int_attr("max_gram_length", 0);
  a.max_skip_count = c.int_attr("max_skip_count", 0);
  a.ngram_counts = c.ints_attr("ngram_counts");
  a.ngram_indexes = c.ints_attr("ngram_indexes");
  a.pool = c.ints_attr("pool_int64s");
  std::vector<float> w;
  if (const auto* weights = c.attribute("weights")) w.assign(weights->floats().begin(), weights->floats().end());
  const auto count = static_cast<std::int64_t>(w.size());
  Value weights = constant_value(c.b, Tensor::from_vector<float>(Dims{count}, w));
  return {c.b.create<TfIdfVectorizerOp>(c.input(0), weights, std::move(a)).result()};
}

}  // namespace

void add_indexing_ops(OpTable& t) {
  t["TfIdfVectorizer"] = {&tfidf_vectorizer, 9};
  t["NonMaxSuppression"] = {&non_max_suppression, 10};
  t["NonZero"] = {&non_zero, 9};
  t["Compress"] = {&compress, 9};
  t["Unique"] = {&unique, 11};
  t["ReverseSequence"] = {&reverse_sequence, 10};
  t["GatherElements"] = {&gather_elements, 11};
  t["ScatterElements"] = {&scatter_elements, 11};
  t["Scatter"] = {&scatter_elements, 9, 10};
  t["GatherND"] = {&gather_nd, 11};
  t["ScatterND"] = {&scatter_nd, 11};
}

}  // namespace kiln::onnx::detail
