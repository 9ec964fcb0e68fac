// Reference tests of the search kernels against hand-computed values:
// argmax / argmin (any axis, keepdim, first index on ties, NaN wins, int
// dtypes), topk (largest / smallest, sorted, ties by index, NaN as the
// largest, inner axes), topk_grad (the grad written at the indices) and
// one_hot (i32 / i64 ids, out-of-range ids), nonzero, unique,
// non_max_suppression and tfidf_vectorizer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::check_close;
using kiln_test::run_op;
using kiln_test::f32;

namespace {
using V = std::vector<std::int64_t>;
}  // namespace

TEST_CASE("argmax and argmin give the first best index along an axis", "[kernel][search]") {
  Tensor x = f32({2, 3}, {1, 5, 5, 7, 0, 0});
  CHECK(run_op<ArgMaxOp>({x}, std::int64_t{1}, false).out().to_vector<std::int64_t>() == V{1, 0});
  CHECK(run_op<ArgMinOp>({x}, std::int64_t{-1}, false).out().to_vector<std::int64_t>() == V{0, 1});
  auto k = run_op<ArgMaxOp>({x}, std::int64_t{0}, true);
  CHECK(k.out().dims().to_vector() == V{1, 3});
  CHECK(k.out().to_vector<std::int64_t>() == V{1, 0, 0});
  CHECK(run_op<ArgMinOp>({x}, std::int64_t{0}, false).out().to_vector<std::int64_t>() == V{0, 1, 1});
  auto i = run_op<ArgMaxOp>({Tensor::from_vector<std::int32_t>({4}, {3, 9, 9, -1})}, std::int64_t{0},
                            false);
  CHECK(i.out().dims().to_vector() == V{});
  CHECK(i.out().to_vector<std::int64_t>() == V{1});
}

TEST_CASE("argmax and argmin pick a NaN like PyTorch", "[kernel][search]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = f32({2, 3}, {1, nan, nan, nan, -5, 2});
  CHECK(run_op<ArgMaxOp>({x}, std::int64_t{1}, false).out().to_vector<std::int64_t>() == V{1, 0});
  CHECK(run_op<ArgMinOp>({x}, std::int64_t{1}, false).out().to_vector<std::int64_t>() == V{1, 0});
  CHECK(run_op<ArgMaxOp>({x}, std::int64_t{0}, false).out().to_vector<std::int64_t>() == V{1, 0, 0});
}

TEST_CASE("topk returns the k best values and their indices, best first",
          "[kernel][search]") {
  Tensor x = f32({2, 4}, {3, 1, 4, 1, 5, 9, 2, 6});
  auto t = run_op<TopKOp>({x}, std::int64_t{2});
  CHECK(t.out(0).dims().to_vector() == V{2, 2});
  check_close<float>(t.out(0), {4, 3, 9, 6});
  CHECK(t.out(1).to_vector<std::int64_t>() == V{2, 0, 1, 3});
  auto s = run_op<TopKOp>({x}, std::int64_t{3}, std::int64_t{-1}, false, true);
  check_close<float>(s.out(0), {1, 1, 3, 2, 5, 6});
  CHECK(s.out(1).to_vector<std::int64_t>() == V{1, 3, 0, 2, 0, 3});
  auto c = run_op<TopKOp>({x}, std::int64_t{1}, std::int64_t{0});
  check_close<float>(c.out(0), {5, 9, 4, 6});
  CHECK(c.out(1).to_vector<std::int64_t>() == V{1, 1, 0, 1});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto n = run_op<TopKOp>({f32({3}, {1, nan, 2})}, std::int64_t{2});
  auto nv = n.out(0).to_vector<float>();
  CHECK(std::isnan(nv[0]));
  CHECK(nv[1] == 2.0f);
  CHECK(n.out(1).to_vector<std::int64_t>() == V{1, 2});
  auto i = run_op<TopKOp>({Tensor::from_vector<std::int64_t>({3}, {5, 7, 6})}, std::int64_t{2});
  CHECK(i.out(0).to_vector<std::int64_t>() == V{7, 6});
}

TEST_CASE("topk unsorted returns the same set of elements", "[kernel][search]") {
  Tensor x = f32({6}, {3, 8, 1, 7, 2, 9});
  auto t = run_op<TopKOp>({x}, std::int64_t{3}, std::int64_t{0}, true, false);
  auto idx = t.out(1).to_vector<std::int64_t>();
  std::sort(idx.begin(), idx.end());
  CHECK(idx == V{1, 3, 5});
}

TEST_CASE("topk_grad writes the grad at the indices and zeros elsewhere", "[kernel][search]") {
  Tensor x = f32({2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor idx = Tensor::from_vector<std::int64_t>({2, 2}, {2, 0, 1, 2});
  Tensor dv = f32({2, 2}, {10, 20, 30, 40});
  auto g = run_op<GradOf<TopKOp>>({x, idx, dv}, std::int64_t{2}, std::int64_t{-1}, true, true);
  check_close<float>(g.out(), {20, 0, 10, 0, 30, 40});
}

TEST_CASE("one_hot sets one class per id", "[kernel][search]") {
  auto o = run_op<OneHotOp>({Tensor::from_vector<std::int64_t>({3}, {2, 0, 1})}, std::int64_t{3});
  CHECK(o.out().dims().to_vector() == V{3, 3});
  check_close<float>(o.out(), {0, 0, 1, 1, 0, 0, 0, 1, 0});
  auto i = run_op<OneHotOp>({Tensor::from_vector<std::int32_t>({2, 1}, {1, 3})}, std::int64_t{4});
  CHECK(i.out().dims().to_vector() == V{2, 1, 4});
  check_close<float>(i.out(), {0, 1, 0, 0, 0, 0, 0, 1});
}

TEST_CASE("one_hot rejects an id outside the classes at run time, naming the op and id",
          "[kernel][search]") {
  KILN_CHECK_ERROR(run_op<OneHotOp>({Tensor::from_vector<std::int64_t>({2}, {1, 5})}, std::int64_t{3}),
                   OutOfRange, {"kiln.one_hot", "id 5"});
  KILN_CHECK_ERROR(run_op<OneHotOp>({Tensor::from_vector<std::int32_t>({1}, {-1})}, std::int64_t{3}),
                   OutOfRange, {"kiln.one_hot", "id -1"});
}

TEST_CASE("nonzero lists the coordinates of the non-zero elements, one column each",
          "[kernel][search]") {
  auto r = run_op<NonzeroOp>({f32({2, 3}, {0, 1, 0, 2, 0, 3})});
  CHECK(r.out().dims().to_vector() == V{2, 3});
  CHECK(r.out().to_vector<std::int64_t>() == V{0, 1, 1, 1, 0, 2});
  auto b = run_op<NonzeroOp>({Tensor::from_vector<bool>({3}, {false, false, false})});
  CHECK(b.out().dims().to_vector() == V{1, 0});
}

TEST_CASE(
    "unique gives the distinct elements or slices, their first places, the inverse and counts",
    "[kernel][search]") {
  auto x = f32({6}, {2, 1, 1, 3, 4, 3});
  auto s = run_op<UniqueOp>({x}, true, std::int64_t{0}, true);
  check_close<float>(s.out(0), {1, 2, 3, 4});
  CHECK(s.out(1).to_vector<std::int64_t>() == V{1, 0, 3, 4});
  CHECK(s.out(2).to_vector<std::int64_t>() == V{1, 0, 0, 2, 3, 2});
  CHECK(s.out(3).to_vector<std::int64_t>() == V{2, 1, 2, 1});
  auto u = run_op<UniqueOp>({x}, true, std::int64_t{0}, false);
  check_close<float>(u.out(0), {2, 1, 3, 4});
  CHECK(u.out(2).to_vector<std::int64_t>() == V{0, 1, 1, 2, 3, 2});
  // rows of a matrix (axis 0) and columns (axis -1)
  auto m = f32({3, 2}, {1, 0, 1, 0, 0, 5});
  auto rows = run_op<UniqueOp>({m}, false, std::int64_t{0}, true);
  CHECK(rows.out(0).dims().to_vector() == V{2, 2});
  check_close<float>(rows.out(0), {0, 5, 1, 0});
  CHECK(rows.out(2).to_vector<std::int64_t>() == V{1, 1, 0});
  auto cols = run_op<UniqueOp>({m}, false, std::int64_t{-1}, true);
  CHECK(cols.out(0).dims().to_vector() == V{3, 2});
  CHECK(cols.out(3).to_vector<std::int64_t>() == V{1, 1});
}

TEST_CASE("unique counts NaNs as one value, sorted after the numbers", "[kernel][search]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto s = run_op<UniqueOp>({f32({5}, {nan, 2, nan, -1, 2})}, true, std::int64_t{0}, true);
  auto y = s.out(0).to_vector<float>();
  REQUIRE(y.size() == 3);
  CHECK(y[0] == -1.0f);
  CHECK(y[1] == 2.0f);
  CHECK(std::isnan(y[2]));
  CHECK(s.out(3).to_vector<std::int64_t>() == V{1, 2, 2});
  CHECK(s.out(2).to_vector<std::int64_t>() == V{2, 1, 2, 0, 1});
}

TEST_CASE("nonzero and unique reject unsupported dtypes and axes", "[kernel][search]") {
  Program p;
  using kiln_test::build_op;
  KILN_CHECK_ERROR((build_op<UniqueOp>(p, {{DataType::Bool, {3}}}, true, std::int64_t{0}, true)),
                   InvalidArgument, {"kiln.unique", "bool"});
  KILN_CHECK_ERROR(
      (build_op<UniqueOp>(p, {{DataType::Float32, {3, 2}}}, false, std::int64_t{2}, true)),
      InvalidArgument, {"kiln.unique", "axis"});
  KILN_CHECK_ERROR((build_op<NonzeroOp>(p, {{DataType::Int8, {3}}})), InvalidArgument,
                   {"kiln.nonzero", "i8"});
}

TEST_CASE(
    "non_max_suppression keeps boxes by falling score, dropping those that overlap a kept one",
    "[kernel][search]") {
  // Box 1 overlaps box 0 (IoU 0.9 / 1.1); box 2 is far away.
  auto boxes = f32({1, 3, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 10, 1, 11});
  auto scores = f32({1, 1, 3}, {0.9f, 0.8f, 0.7f});
  auto i64 = [](std::int64_t v) { return Tensor::from_vector<std::int64_t>(Dims{}, {v}); };
  auto f = [](float v) { return Tensor::from_vector<float>(Dims{}, {v}); };
  auto all = run_op<NonMaxSuppressionOp>({boxes, scores, i64(10), f(0.5f), f(0.0f)}, false);
  CHECK(all.out().dims().to_vector() == V{2, 3});
  CHECK(all.out().to_vector<std::int64_t>() == V{0, 0, 0, 0, 0, 2});
  // a looser IoU threshold keeps the overlapping box too, in score order
  CHECK(run_op<NonMaxSuppressionOp>({boxes, scores, i64(10), f(0.9f), f(0.0f)}, false)
            .out()
            .to_vector<std::int64_t>() == V{0, 0, 0, 0, 0, 1, 0, 0, 2});
  CHECK(run_op<NonMaxSuppressionOp>({boxes, scores, i64(1), f(0.5f), f(0.0f)}, false)
            .out()
            .to_vector<std::int64_t>() == V{0, 0, 0});
  CHECK(run_op<NonMaxSuppressionOp>({boxes, scores, i64(10), f(0.5f), f(0.75f)}, false)
            .out()
            .to_vector<std::int64_t>() == V{0, 0, 0});
  CHECK(run_op<NonMaxSuppressionOp>({boxes, scores, i64(0), f(0.5f), f(0.0f)}, false)
            .out()
            .dims()
            .to_vector() == V{0, 3});
  // the same boxes as [x_center, y_center, width, height]
  auto centers = f32({1, 3, 4}, {0.5f, 0.5f, 1, 1, 0.6f, 0.5f, 1, 1, 10.5f, 0.5f, 1, 1});
  CHECK(run_op<NonMaxSuppressionOp>({centers, scores, i64(10), f(0.5f), f(0.0f)}, true)
            .out()
            .to_vector<std::int64_t>() == V{0, 0, 0, 0, 0, 2});
}

TEST_CASE("non_max_suppression rejects boxes not of 4 coordinates and mismatched scores",
          "[kernel][search]") {
  Program p;
  using kiln_test::build_op;
  const kiln_test::TypeSpec i64{DataType::Int64, {}}, f{DataType::Float32, {}};
  KILN_CHECK_ERROR(
      (build_op<NonMaxSuppressionOp>(
          p, {{DataType::Float32, {1, 3, 3}}, {DataType::Float32, {1, 1, 3}}, i64, f, f})),
      InvalidArgument, {"kiln.non_max_suppression", "boxes", "[1, 3, 3]"});
  KILN_CHECK_ERROR(
      (build_op<NonMaxSuppressionOp>(
          p, {{DataType::Float32, {1, 3, 4}}, {DataType::Float32, {1, 1, 5}}, i64, f, f})),
      InvalidArgument, {"kiln.non_max_suppression", "disagree"});
  KILN_CHECK_ERROR(
      (build_op<NonMaxSuppressionOp>(
          p, {{DataType::Float32, {1, 3, 4}}, {DataType::Float32, {1, 1, 3}}, f, f, f})),
      InvalidArgument, {"kiln.non_max_suppression", "max_per_class"});
}

namespace {

// A vocabulary of the 1-grams 1, 2, 3 and the 2-grams (1, 2), (2, 3), in
// columns 0 to 4 unless `columns` says otherwise.
TfIdfVectorizerOp::Attributes small_vocabulary(std::string mode, std::int64_t min_gram, std::int64_t skip,
                                               V columns = {0, 1, 2, 3, 4}) {
  return {std::move(mode), min_gram, 2, skip, V{0, 3}, std::move(columns), V{1, 2, 3, 1, 2, 2, 3}};
}

Tensor no_weights() { return Tensor::from_vector<float>({0}, {}); }

std::vector<float> tfidf(const Tensor& tokens, const TfIdfVectorizerOp::Attributes& a, const Tensor& weights) {
  return run_op<TfIdfVectorizerOp>({tokens, weights}, a).out().to_vector<float>();
}

}  // namespace

TEST_CASE("tfidf_vectorizer counts a row's n-grams found in its vocabulary, skipping tokens up to the limit",
          "[kernel][search]") {
  const Tensor repeats = Tensor::from_vector<std::int64_t>({5}, {1, 2, 3, 2, 3});
  CHECK(tfidf(repeats, small_vocabulary("TF", 1, 0), no_weights()) == std::vector<float>{1, 2, 2, 1, 2});
  // (1, 2) only with one token skipped; 1-grams count once whatever the skip.
  const Tensor gap = Tensor::from_vector<std::int32_t>({4}, {1, 5, 2, 3});
  CHECK(tfidf(gap, small_vocabulary("TF", 1, 0), no_weights()) == std::vector<float>{1, 1, 1, 0, 1});
  CHECK(tfidf(gap, small_vocabulary("TF", 1, 1), no_weights()) == std::vector<float>{1, 1, 1, 1, 1});
  CHECK(tfidf(gap, small_vocabulary("TF", 2, 3), no_weights()) == std::vector<float>{0, 0, 0, 1, 1});
  // Columns as ngram_indexes places them; rows of a batch apart.
  const Tensor batch = Tensor::from_vector<std::int64_t>({2, 4}, {1, 5, 2, 3, 3, 3, 3, 9});
  auto r = run_op<TfIdfVectorizerOp>({batch, no_weights()}, small_vocabulary("TF", 1, 1, V{4, 3, 2, 1, 0}));
  CHECK(r.out().dims().to_vector() == V{2, 5});
  CHECK(r.out().to_vector<float>() == std::vector<float>{1, 1, 1, 1, 1, 0, 0, 3, 0, 0});
}

TEST_CASE("tfidf_vectorizer's IDF mode marks the columns present, TFIDF weighs the counts", "[kernel][search]") {
  const Tensor repeats = Tensor::from_vector<std::int64_t>({5}, {1, 2, 3, 2, 3});
  const Tensor w = Tensor::from_vector<float>({5}, {0.5f, 1, 2, 4, 8});
  const Tensor gap = Tensor::from_vector<std::int64_t>({4}, {1, 5, 2, 3});
  CHECK(tfidf(gap, small_vocabulary("IDF", 1, 0), w) == std::vector<float>{0.5f, 1, 2, 0, 8});
  CHECK(tfidf(gap, small_vocabulary("IDF", 1, 0), no_weights()) == std::vector<float>{1, 1, 1, 0, 1});
  CHECK(tfidf(repeats, small_vocabulary("TFIDF", 1, 0), w) == std::vector<float>{0.5f, 2, 4, 4, 16});
  CHECK(tfidf(repeats, small_vocabulary("TFIDF", 1, 0), no_weights()) == std::vector<float>{1, 2, 2, 1, 2});
  // Weights belong to columns, not to the pool's order; longer weights than
  // columns (ONNX's one per n-gram) read the first K.
  const Tensor w6 = Tensor::from_vector<float>({6}, {0.5f, 1, 2, 4, 8, 99});
  CHECK(tfidf(repeats, small_vocabulary("TFIDF", 1, 0, V{4, 3, 2, 1, 0}), w6) ==
        std::vector<float>{1, 1, 4, 8, 8});
  // No tokens: a row of zeros.
  CHECK(tfidf(Tensor::from_vector<std::int64_t>({0}, {}), small_vocabulary("TF", 1, 0), no_weights()) ==
        std::vector<float>(5, 0.0f));
}

TEST_CASE("tfidf_vectorizer names a bad mode, a pool not cut into whole n-grams, indices that do not match it "
          "and weights of another length",
          "[kernel][search]") {
  const Tensor x = Tensor::from_vector<std::int64_t>({3}, {1, 2, 3});
  auto a = small_vocabulary("BM25", 1, 0);
  KILN_CHECK_ERROR(tfidf(x, a, no_weights()), InvalidArgument, {"kiln.tfidf_vectorizer", "mode", "'BM25'"});
  a = small_vocabulary("TF", 1, 0);
  a.ngram_counts = {0, 2};  // 2-grams from 2: five tokens
  KILN_CHECK_ERROR(tfidf(x, a, no_weights()), InvalidArgument, {"kiln.tfidf_vectorizer", "ngram_counts", "whole n-grams"});
  a = small_vocabulary("TF", 1, 0, V{0, 1, 2, 3});
  KILN_CHECK_ERROR(tfidf(x, a, no_weights()), InvalidArgument, {"kiln.tfidf_vectorizer", "4 entries", "5 n-grams"});
  a = small_vocabulary("TF", 3, 0);
  a.max_gram_length = 2;
  KILN_CHECK_ERROR(tfidf(x, a, no_weights()), InvalidArgument, {"kiln.tfidf_vectorizer", "min_gram_length"});
  KILN_CHECK_ERROR(tfidf(x, small_vocabulary("TF", 1, -1), no_weights()), InvalidArgument,
                   {"kiln.tfidf_vectorizer", "max_skip_count"});
  KILN_CHECK_ERROR(tfidf(x, small_vocabulary("TF", 1, std::int64_t{1} << 62), no_weights()), InvalidArgument,
                   {"kiln.tfidf_vectorizer", "max_skip_count"});
  KILN_CHECK_ERROR(tfidf(x, small_vocabulary("TF", 1, 0, V{0, 1, 2, 3, std::numeric_limits<std::int64_t>::max()}),
                         no_weights()),
                   InvalidArgument, {"kiln.tfidf_vectorizer", "ngram_indexes holds", "2^30"});
  KILN_CHECK_ERROR(tfidf(x, small_vocabulary("TFIDF", 1, 0), Tensor::from_vector<float>({2}, {1, 2})),
                   InvalidArgument, {"kiln.tfidf_vectorizer", "weights", "[5]"});
  KILN_CHECK_ERROR(tfidf(Tensor::from_vector<float>({3}, {1, 2, 3}), small_vocabulary("TF", 1, 0), no_weights()),
                   InvalidArgument, {"kiln.tfidf_vectorizer", "i32 or i64 tokens"});
}
