// fuse_softmax_cross_entropy (kiln/passes/fuse_softmax_cross_entropy.h):
// the forms the ONNX importer and users write become one
// kiln.cross_entropy (no softmax made); near misses (another axis, an
// intermediate read or fetched elsewhere) stay; the losses agree within
// the documented tolerance.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/ir/parser.h"
#include "kiln/passes/fuse_softmax_cross_entropy.h"
#include "passes_test_util.h"

using namespace kiln;
using kiln_passes_test::count_ops;
using kiln_passes_test::with_passes;

namespace {

constexpr std::int64_t kN = 7, kC = 5;

enum class Form { LogSoftmax, LogOfSoftmax };

// The loss per row as src/onnx/ops_loss.cc imports it: log-probabilities
// along `axis`, the target's entry taken along the last axis, squeezed,
// negated; with `ignore_index`, ONNX's where/equal form and its weights.
struct LossProgram {
  Program p;
  Builder b{p};
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{kN, kC}).result();
  Value t = b.create<DataOp>("t", std::vector<std::int64_t>{kN}, DataType::Int64).result();
  Value sm, lp, loss, mean;

  LossProgram(Form form, std::int64_t axis = 1, const std::int64_t* ignore_index = nullptr) {
    if (form == Form::LogSoftmax) {
      lp = b.create<LogSoftmaxOp>(x, axis).result();
    } else {
      sm = b.create<SoftmaxOp>(x, axis).result();
      lp = b.create<LogOp>(sm).result();
    }
    Value target = t, ignored;
    if (ignore_index) {
      ignored = b.create<EqualOp>(t, full(static_cast<double>(*ignore_index), DataType::Int64)).result();
      target = b.create<WhereOp>(ignored, full(0, DataType::Int64), t).result();
    }
    Value idx = b.create<UnsqueezeOp>(target, std::vector<std::int64_t>{1}).result();
    Value picked = b.create<TakeAlongAxisOp>(lp, idx, std::int64_t{1}).result();
    loss = b.create<NegOp>(b.create<SqueezeOp>(picked, std::vector<std::int64_t>{1}).result()).result();
    if (ignore_index) {
      Value w = b.create<WhereOp>(ignored, full(0, DataType::Float32), full(1, DataType::Float32)).result();
      loss = b.create<MulOp>(loss, w).result();
      mean = b.create<DivOp>(b.create<SumOp>(loss).result(), b.create<SumOp>(w).result()).result();
    } else {
      mean = b.create<MeanOp>(loss).result();
    }
  }
  Value full(double v, DataType dt) {
    return b.create<FullOp>(std::vector<std::int64_t>{}, v, dt).result();
  }
};

FeedMap feeds(std::vector<std::int64_t> labels) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> xs(kN * kC);
  for (float& v : xs) v = normal(rng);
  return {{"x", Tensor::from_vector<float>({kN, kC}, xs)},
          {"t", Tensor::from_vector<std::int64_t>({kN}, std::move(labels))}};
}

// The per-row loss and the reduced loss with no passes and with
// `passes`: equal within 1e-5 relative, 1e-6 absolute.
void require_close_losses(LossProgram& lp, const FeedMap& feed, const char* passes) {
  Executor a(Place::cpu(), with_passes("")), b(Place::cpu(), with_passes(passes));
  const auto ra = a.run(lp.p, feed, {lp.loss, lp.mean});
  const auto rb = b.run(lp.p, feed, {lp.loss, lp.mean});
  for (std::size_t k = 0; k < 2; ++k) {
    const auto va = ra[k].to_vector<float>(), vb = rb[k].to_vector<float>();
    REQUIRE(va.size() == vb.size());
    for (std::size_t i = 0; i < va.size(); ++i) {
      INFO("output " << k << " element " << i << ": " << va[i] << " vs " << vb[i]);
      CHECK(std::isfinite(va[i]));
      CHECK(std::abs(va[i] - vb[i]) <= 1e-6 + 1e-5 * std::abs(va[i]));
    }
  }
}

}  // namespace

TEST_CASE("log_softmax, take_along_axis, squeeze and neg become one cross_entropy",
          "[passes][fuse_softmax_ce]") {
  for (Form form : {Form::LogSoftmax, Form::LogOfSoftmax}) {
    INFO((form == Form::LogSoftmax ? "log_softmax" : "log(softmax)"));
    LossProgram lp(form);
    Program q = lp.p.clone();
    CHECK(fuse_softmax_cross_entropy(q) == 1);
    q.verify();
    CHECK(count_ops(q, "kiln.cross_entropy") == 1);
    CHECK(count_ops(q, "kiln.softmax_with_cross_entropy") == 0);
    for (std::string_view gone : {"kiln.log_softmax", "kiln.softmax", "kiln.log", "kiln.take_along_axis",
                                  "kiln.neg", "kiln.unsqueeze"})
      CHECK(count_ops(q, gone) == 0);
    // The text form of the result parses back.
    CHECK(parse_program(q.to_string()).to_string() == q.to_string());
    require_close_losses(lp, feeds({0, 4, 2, 3, 1, 1, 0}), "fuse_softmax_ce");
    // The default pipeline's "fuse" runs it (before the elementwise fusion).
    require_close_losses(lp, feeds({0, 4, 2, 3, 1, 1, 0}), kDefaultPasses);
  }
}

TEST_CASE("ONNX's ignore_index form becomes cross_entropy with that ignore_index",
          "[passes][fuse_softmax_ce]") {
  for (std::int64_t ii : {std::int64_t{-1}, std::int64_t{2}}) {
    INFO("ignore_index " << ii);
    LossProgram lp(Form::LogSoftmax, 1, &ii);
    Program q = lp.p.clone();
    REQUIRE(fuse_softmax_cross_entropy(q) == 1);
    q.verify();
    REQUIRE(count_ops(q, "kiln.cross_entropy") == 1);
    for (Operation* op : q.block())
      if (op->name() == "kiln.cross_entropy")
        CHECK(op->dyn_cast<CrossEntropyOp>().attrs().ignore_index == ii);
    CHECK(count_ops(q, "kiln.mul") == 0);
    CHECK(count_ops(q, "kiln.where") == 1);  // the weights, still summed for the mean
    require_close_losses(lp, feeds({0, ii, 2, 3, ii, 1, 4}), "fuse_softmax_ce");
  }
}

TEST_CASE("near misses stay as written: another axis, an intermediate read or fetched elsewhere",
          "[passes][fuse_softmax_ce]") {
  SECTION("log_softmax along the batch axis") {
    LossProgram lp(Form::LogSoftmax, 0);
    CHECK(fuse_softmax_cross_entropy(lp.p) == 0);
  }
  SECTION("the log-probabilities read by another op") {
    LossProgram lp(Form::LogSoftmax);
    lp.b.create<ExpOp>(lp.lp);
    CHECK(fuse_softmax_cross_entropy(lp.p) == 0);
  }
  SECTION("the softmax fetched") {
    LossProgram lp(Form::LogOfSoftmax);
    CHECK(fuse_softmax_cross_entropy(lp.p, {lp.sm.impl()}) == 0);
    lp.b.create<FetchOp>(lp.sm, "sm");
    CHECK(fuse_softmax_cross_entropy(lp.p) == 0);
    CHECK(count_ops(lp.p, "kiln.softmax") == 1);
  }
  SECTION("the log-probabilities kept by the caller (an executor's fetch)") {
    LossProgram lp(Form::LogSoftmax);
    Executor exe(Place::cpu(), with_passes("fuse_softmax_ce"));
    const auto r = exe.run(lp.p, feeds({0, 1, 2, 3, 4, 0, 1}), {lp.lp, lp.loss});
    CHECK(r.size() == 2);
    CHECK(fuse_softmax_cross_entropy(lp.p, {lp.lp.impl()}) == 0);
  }
  SECTION("a weight that is not where(ignored, 0, 1)") {
    LossProgram lp(Form::LogSoftmax);
    Value w = lp.b.create<DataOp>("w", std::vector<std::int64_t>{kN}).result();
    lp.b.create<MulOp>(lp.loss, w);
    // The plain chain still fuses: the weight multiplies the fused loss.
    CHECK(fuse_softmax_cross_entropy(lp.p) == 1);
    CHECK(count_ops(lp.p, "kiln.mul") == 1);
  }
}
