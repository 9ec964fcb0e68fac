// Search ops: argmax / argmin along an axis (one family, declared once as a
// list of math structs), topk (values and their indices, with a gradient
// through the values), one_hot, and nonzero / unique / non_max_suppression,
// whose result lengths depend on the data (-1 until run time);
// tfidf_vectorizer, rows of tokens looked up as n-grams in a vocabulary.
// Pure (ReadOnly, ValueSemantics).
#pragma once

#include <cmath>

#include "kiln/dialect/grad_op.h"

namespace kiln {

// Whether `a` beats the best so far `b` (ties keep the first index; NaN
// beats any number, as in PyTorch).
struct ArgMaxMath {
  static constexpr std::string_view name = "kiln.argmax";
  template <typename T> static bool better(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(b)) return false;
      if (std::isnan(a)) return true;
    }
    return a > b;
  }
};
struct ArgMinMath {
  static constexpr std::string_view name = "kiln.argmin";
  template <typename T> static bool better(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(b)) return false;
      if (std::isnan(a)) return true;
    }
    return a < b;
  }
};

// The index (i64) of the best element along `axis` (first on ties); the
// axis is dropped, or kept as 1 with keepdim. f32, f64, i32, i64. No grad.
template <typename Math>
struct ArgReduceOp : Op<ArgReduceOp<Math>, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op<ArgReduceOp, ReadOnly, ValueSemantics, InferMetaInterface>::Op;
  using MathT = Math;
  static constexpr std::string_view name = Math::name;
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, axis), (bool, keepdim));
  static void build(Builder&, OperationArgument& arg, Value x, std::int64_t axis = -1,
                    bool keepdim = false) {
    arg.add_operand(x);
    arg.attributes = to_named_attributes(Attributes{axis, keepdim});
  }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

using ArgMaxOp = ArgReduceOp<ArgMaxMath>;
using ArgMinOp = ArgReduceOp<ArgMinMath>;

// (values, indices) = the k largest (or smallest) elements along `axis`
// (default -1) and their i64 indices; sorted: best first (ties: the lower
// index first; NaN counts as the largest); unsorted: in no set order.
// 0 <= k <= dim. f32, f64, i32, i64. Vjp through the values.
struct TopKOp : Op<TopKOp, ReadOnly, ValueSemantics, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.topk";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 2;
  KILN_ATTRIBUTES((std::int64_t, k), (std::int64_t, axis), (bool, largest), (bool, sorted));
  static void build(Builder& b, OperationArgument& arg, Value x, std::int64_t k,
                    std::int64_t axis = -1, bool largest = true, bool sorted = true);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // topk_grad(x, indices, dvalues) {k, axis, …}: zeros like x with dvalues
  // written at the indices along the axis.
  struct Grad : GradSpec<3, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
};

// ids (i32 / i64, any shape) -> f32 [ids.dims..., num_classes]: 1 at each
// id, 0 elsewhere. num_classes >= 1. An id outside [0, num_classes) is a
// kiln::Error (OutOfRange) naming the op and the id. No grad.
struct OneHotOp : Op<OneHotOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.one_hot";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, num_classes));
  static void build(Builder& b, OperationArgument& arg, Value ids, std::int64_t num_classes);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.nonzero(x) -> i64 [rank(x), count]: the indices of x's non-zero
// (true) elements, one column per element in row-major order (ONNX
// NonZero). f32, f64, i32, i64, bool. No grad.
struct NonzeroOp : Op<NonzeroOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.nonzero";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.unique(x) -> (y, indices, inverse, counts) (ONNX Unique): the
// distinct elements of x flattened (flatten) or its distinct slices along
// `axis`; sorted ascending (sorted) or in the order they first occur.
// indices (i64): where each first occurs in x; inverse (i64): for every
// element (slice) of x, its place in y; counts (i64): occurrences. f32,
// f64, i32, i64. No grad.
struct UniqueOp : Op<UniqueOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.unique";
  static constexpr int num_operands = 1, num_results = 4;
  KILN_ATTRIBUTES((bool, flatten), (std::int64_t, axis), (bool, sorted));
  static void build(Builder& b, OperationArgument& arg, Value x, bool flatten, std::int64_t axis,
                    bool sorted);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.non_max_suppression(boxes, scores, max_per_class, iou_threshold,
// score_threshold) -> i64 [selected, 3] (ONNX NonMaxSuppression): per batch
// and class, the boxes by falling score (ties: the lower index first) whose
// score is above score_threshold, each kept unless its IoU with a box kept
// before is above iou_threshold, at most max_per_class of them; a row
// (batch, class, box) per kept box. boxes [B, N, 4] as [y1, x1, y2, x2]
// corners (either order) or, with center_point_box, [x, y, w, h]; scores
// [B, C, N] (f32 or f64, boxes' dtype); the three scalars read at run time
// (max_per_class i32/i64, the thresholds the boxes' dtype). No grad.
struct NonMaxSuppressionOp : Op<NonMaxSuppressionOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.non_max_suppression";
  static constexpr int num_operands = 5, num_results = 1;
  KILN_ATTRIBUTES((bool, center_point_box));
  static void build(Builder& b, OperationArgument& arg, Value boxes, Value scores, Value max_per_class,
                    Value iou_threshold, Value score_threshold, bool center_point_box = false);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.tfidf_vectorizer(x, weights) -> y f32 (ONNX TfIdfVectorizer over
// integer tokens; scikit-learn's CountVectorizer / TfidfVectorizer with a
// fixed vocabulary): x i32 / i64 [C] or [B, C] (rows of tokens) -> [K] or
// [B, K]. The vocabulary: `pool` holds its 1-grams, then its 2-grams, ...,
// one token after another, the n-grams of n tokens starting at
// ngram_counts[n - 1]; the i-th n-gram of the pool counts into output
// column ngram_indexes[i]; K = max(ngram_indexes) + 1. Only n-grams of
// min_gram_length to max_gram_length tokens count, taken with a skip of 0
// to max_skip_count tokens between neighbours (one skip per n-gram;
// 1-grams count once, whatever the skip). mode "TF": the counts; "IDF":
// weights[k] (1 without weights) where column k's count is > 0, else 0;
// "TFIDF": weights[k] · count (the count without weights). weights: f32
// [W >= K] (ONNX gives one per n-gram; column k reads weights[k], as ONNX
// Runtime does), or [0] for none. A pool's n-gram listed twice counts into
// its last column. Columns, gram lengths and skips are below 2^30. No grad.
struct TfIdfVectorizerOp : Op<TfIdfVectorizerOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.tfidf_vectorizer";
  static constexpr int num_operands = 2, num_results = 1;
  KILN_ATTRIBUTES((std::string, mode), (std::int64_t, min_gram_length), (std::int64_t, max_gram_length),
                  (std::int64_t, max_skip_count), (std::vector<std::int64_t>, ngram_counts),
                  (std::vector<std::int64_t>, ngram_indexes), (std::vector<std::int64_t>, pool));
  static void build(Builder& b, OperationArgument& arg, Value x, Value weights, Attributes attrs);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // K, after checking the attributes (mode, gram lengths, skips, the pool
  // cut into whole n-grams, one index per n-gram); kiln::Error naming `op`.
  static std::int64_t output_size(std::string_view op, const Attributes& a);
};

}  // namespace kiln
