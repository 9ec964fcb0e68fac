// ONNX's sequence ops, for sequences whose length is known at import: a
// sequence is a list of kiln values held by the importer (no kiln op), so
// SequenceConstruct / SequenceEmpty / SequenceInsert / SequenceErase edit
// the list, SequenceAt picks an element, SequenceLength is a constant,
// SplitToSequence slices a tensor (kiln.split_by for split sizes computed
// at run time) and ConcatFromSequence concatenates (or stacks) the
// elements. Positions must be known at import.
#include <algorithm>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/shape_ops.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

// The position input i holds (known at import), negative counting from
// `n`, checked to lie in [0, n) (or [0, n] where `end_ok`).
std::size_t position(NodeContext& c, std::size_t i, std::size_t n, bool end_ok) {
  const std::vector<std::int64_t> v = c.constant_ints(i, c.node.op_type() + "'s position");
  if (v.size() != 1) c.unsupported("a position of " + std::to_string(v.size()) + " values");
  const auto len = static_cast<std::int64_t>(n);
  const std::int64_t p = v[0] < 0 ? v[0] + len : v[0];
  if (p < 0 || p > len || (p == len && !end_ok))
    c.unsupported("position " + std::to_string(v[0]) + " for a sequence of " + std::to_string(n) +
                  " elements");
  return static_cast<std::size_t>(p);
}

bool given(const NodeContext& c, std::size_t i) {
  return i < c.inputs.size() && (c.inputs[i] || c.sequences[i]);
}

std::vector<Value> as_sequence(NodeContext& c, std::vector<Value> elements) {
  c.sequence_outputs[0] = std::move(elements);
  return {Value()};
}

std::vector<Value> sequence_empty(NodeContext& c) { return as_sequence(c, {}); }

std::vector<Value> sequence_construct(NodeContext& c) {
  std::vector<Value> elements;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) elements.push_back(c.input(i));
  return as_sequence(c, std::move(elements));
}

std::vector<Value> sequence_at(NodeContext& c) {
  const std::vector<Value>& s = c.sequence(0);
  return {s[position(c, 1, s.size(), false)]};
}

std::vector<Value> sequence_insert(NodeContext& c) {
  std::vector<Value> s = c.sequence(0);
  const std::size_t at = given(c, 2) ? position(c, 2, s.size(), true) : s.size();
  s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c.input(1));
  return as_sequence(c, std::move(s));
}

std::vector<Value> sequence_erase(NodeContext& c) {
  std::vector<Value> s = c.sequence(0);
  if (s.empty()) c.unsupported("erasing from an empty sequence");
  const std::size_t at = given(c, 1) ? position(c, 1, s.size(), false) : s.size() - 1;
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(at));
  return as_sequence(c, std::move(s));
}

std::vector<Value> sequence_length(NodeContext& c) {
  const auto n = static_cast<std::int64_t>(c.sequence(0).size());
  Tensor t = Tensor::from_vector<std::int64_t>(Dims{}, {n});
  c.known_outputs = {t};
  return {constant_value(c.b, t)};
}

// Pieces along `axis`: of the sizes in `split` (known at import, one
// scalar: equal pieces and a smaller last one), of kiln.split_by's run-time
// sizes, or of 1 each without split (then keepdims = 0 drops the axis).
std::vector<Value> split_to_sequence(NodeContext& c) {
  Value x = c.input(0);
  const std::vector<std::int64_t> d = shaped_dims(x.type());
  const auto rank = static_cast<std::int64_t>(d.size());
  std::int64_t axis = c.int_attr("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank)
    c.unsupported("axis " + std::to_string(c.int_attr("axis", 0)) + " out of range");
  const bool has_split = given(c, 1);
  if (has_split && !c.constants[1]) {
    const std::vector<std::int64_t> sd = shaped_dims(c.input(1).type());
    if (sd.size() != 1 || sd[0] < 0)
      c.unsupported(
          "split computed at run time that is not a 1-D tensor of a length known at import");
    Operation* op = c.b.create<SplitByOp>(x, c.input(1), axis).operation();
    return as_sequence(c, op->results());
  }
  const std::int64_t dim = d[static_cast<std::size_t>(axis)];
  if (dim < 0) c.unsupported("SplitToSequence along a dim known only at run time");
  std::vector<std::int64_t> sizes;
  if (!has_split) {
    sizes.assign(static_cast<std::size_t>(dim), 1);
  } else {
    const std::vector<std::int64_t> v = c.constant_ints(1, "SplitToSequence's split");
    if (shaped_dims(c.input(1).type()).empty()) {  // one size: equal pieces
      if (v.at(0) < 1) c.unsupported("split " + std::to_string(v.at(0)));
      for (std::int64_t at = 0; at < dim; at += v[0]) sizes.push_back(std::min(v[0], dim - at));
    } else {
      sizes = v;
    }
  }
  const bool squeeze = !has_split && c.int_attr("keepdims", 1) == 0;
  std::vector<Value> pieces;
  std::int64_t at = 0;
  for (std::int64_t size : sizes) {
    if (size < 0 || at + size > dim)
      c.unsupported("split sizes that do not fit the dim " + std::to_string(dim));
    Value p = c.b.create<StridedSliceOp>(
                     x, std::vector<std::int64_t>{axis}, std::vector<std::int64_t>{at},
                     std::vector<std::int64_t>{at + size}, std::vector<std::int64_t>{1})
                  .result();
    pieces.push_back(squeeze ? c.b.create<SqueezeOp>(p, std::vector<std::int64_t>{axis}).result()
                             : p);
    at += size;
  }
  if (at != dim)
    c.unsupported("split sizes adding up to " + std::to_string(at) + ", not the dim " +
                  std::to_string(dim));
  return as_sequence(c, std::move(pieces));
}

// The elements joined along `axis`, or stacked along a new one (new_axis).
std::vector<Value> concat_from_sequence(NodeContext& c) {
  std::vector<Value> s = c.sequence(0);
  if (s.empty()) c.unsupported("ConcatFromSequence of an empty sequence");
  std::int64_t axis = c.int_attr("axis", 0);
  if (c.int_attr("new_axis", 0) != 0) {
    const auto rank = static_cast<std::int64_t>(shaped_dims(s[0].type()).size()) + 1;
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) c.unsupported("axis out of range");
    for (Value& v : s) v = c.b.create<UnsqueezeOp>(v, std::vector<std::int64_t>{axis}).result();
  }
  return {c.b.create<ConcatOp>(s, axis).result()};
}

}  // namespace

void add_sequence_ops(OpTable& t) {
  t["SequenceEmpty"] = {&sequence_empty, 11};
  t["SequenceConstruct"] = {&sequence_construct, 11};
  t["SequenceAt"] = {&sequence_at, 11};
  t["SequenceInsert"] = {&sequence_insert, 11};
  t["SequenceErase"] = {&sequence_erase, 11};
  t["SequenceLength"] = {&sequence_length, 11};
  t["SplitToSequence"] = {&split_to_sequence, 11};
  t["ConcatFromSequence"] = {&concat_from_sequence, 11};
}

}  // namespace kiln::onnx::detail
