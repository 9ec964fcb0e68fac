// Vjp of the reductions, the softmax family, the shape / indexing ops and
// dropout, each checked against central finite differences in f64
// (grad_check.h): keepdim, negative and empty axes, -1 dims known only at
// run time, int labels / ids / indices with null grads, null out_grads.
#include <algorithm>

#include "dialect/grad_check.h"
#include "kiln/exec/executor.h"
#include "kiln/io/json.h"

using namespace kiln;
using namespace kiln_vjp_test;

namespace {
using Axes = std::vector<std::int64_t>;
}  // namespace

// ---- reductions ----

TEST_CASE("sum's vjp matches finite differences over any axes, keepdim or not",
          "[dialect][vjp]") {
  for (const Axes& axes : {Axes{}, Axes{0}, Axes{1}, Axes{-1}, Axes{0, 2}, Axes{-3, -2}})
    for (bool keep : {false, true}) {
      INFO("axes " << meta::dims_string(axes) << " keepdim " << keep);
      check_vjp({random_f64({2, 3, 4})}, make_op<SumOp>(axes, keep));
    }
  GradCheckOptions o;  // the reduced dim unknown at build time
  o.unknown_batch = true;
  check_vjp({random_f64({3, 4})}, make_op<SumOp>(Axes{0}, false), o);
  check_vjp({random_f64({3, 4})}, make_op<SumOp>(Axes{}, false), o);
}

TEST_CASE("mean's vjp matches finite differences over any axes, keepdim or not",
          "[dialect][vjp]") {
  for (const Axes& axes : {Axes{}, Axes{0}, Axes{-1}, Axes{0, 2}})
    for (bool keep : {false, true}) {
      INFO("axes " << meta::dims_string(axes) << " keepdim " << keep);
      check_vjp({random_f64({2, 3, 4})}, make_op<MeanOp>(axes, keep));
    }
  GradCheckOptions o;  // the count divided by is only known at run time
  o.unknown_batch = true;
  check_vjp({random_f64({5, 2})}, make_op<MeanOp>(Axes{}, false), o);
  check_vjp({random_f64({5, 2})}, make_op<MeanOp>(Axes{0}, true), o);
}

TEST_CASE("prod's vjp matches finite differences over any axes, keepdim or not",
          "[dialect][vjp]") {
  for (const Axes& axes : {Axes{}, Axes{1}, Axes{-1}, Axes{0, 2}})
    for (bool keep : {false, true}) {
      INFO("axes " << meta::dims_string(axes) << " keepdim " << keep);
      check_vjp({random_away_from_zero({2, 3, 4}, 0.5, 1.5)}, make_op<ProdOp>(axes, keep));
    }
}

TEST_CASE("max's vjp routes the grad to the maxima", "[dialect][vjp]") {
  // Distinct values: no ties, so max is differentiable there.
  for (const Axes& axes : {Axes{}, Axes{1}, Axes{-1}, Axes{0, 2}})
    for (bool keep : {false, true}) {
      INFO("axes " << meta::dims_string(axes) << " keepdim " << keep);
      check_vjp({random_f64({2, 3, 4})}, make_op<MaxOp>(axes, keep));
    }
}

TEST_CASE("max's vjp splits the grad evenly among tied maxima", "[dialect][vjp]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3}, DataType::Float64).result();
  auto w = b.create<DataOp>("w", std::vector<std::int64_t>{2}, DataType::Float64).result();
  auto m = b.create<MaxOp>(x, Axes{1}, false);
  auto g = call_vjp(b, m.operation(), {w});
  Executor exe;
  auto out = exe.run(p,
                     {{"x", Tensor::from_vector<double>({2, 3}, {1, 5, 5, 2, 7, 3})},
                      {"w", Tensor::from_vector<double>({2}, {4, 6})}},
                     {g[0]});
  CHECK(out[0].to_vector<double>() == std::vector<double>{0, 2, 2, 0, 6, 0});
}

// ---- softmax family ----

TEST_CASE("softmax's vjp matches finite differences along any axis", "[dialect][vjp]") {
  for (std::int64_t axis : {-1, 0, 1, 2}) {
    INFO("axis " << axis);
    check_vjp({random_f64({2, 3, 4}, -2, 2)}, make_op<SoftmaxOp>(axis));
  }
}

TEST_CASE("log_softmax's vjp matches finite differences along any axis", "[dialect][vjp]") {
  for (std::int64_t axis : {-1, 0, 1}) {
    INFO("axis " << axis);
    check_vjp({random_f64({3, 4}, -2, 2)}, make_op<LogSoftmaxOp>(axis));
  }
}

TEST_CASE("softmax_with_cross_entropy's vjp w.r.t. the logits matches finite differences",
          "[dialect][vjp]") {
  auto logits = random_f64({4, 5}, -2, 2);
  SECTION("labels [N, 1], the loss's grad only") {
    GradCheckOptions o;
    o.result_grads = {false, true};
    auto r = check_vjp({logits, i64({4, 1}, {0, 3, 4, 1})},
                       make_op<SoftmaxWithCrossEntropyOp>(), o);
    CHECK(r.compared == 20);
  }
  SECTION("labels [N], both results' grads") {
    check_vjp({logits, i64({4}, {2, 2, 0, 4})}, make_op<SoftmaxWithCrossEntropyOp>());
  }
  SECTION("the softmax result's grad only") {
    GradCheckOptions o;
    o.result_grads = {true, false};
    check_vjp({logits, i64({4}, {2, 2, 0, 4})}, make_op<SoftmaxWithCrossEntropyOp>(), o);
  }
  SECTION("ignore_index rows get a zero grad") {
    GradCheckOptions o;
    o.result_grads = {false, true};
    auto r = check_vjp({logits, i64({4, 1}, {1, -100, 3, -100})},
                       make_op<SoftmaxWithCrossEntropyOp>(std::int64_t{-100}), o);
    auto g = r.grads[0].to_vector<double>();
    for (int j = 0; j < 5; ++j) {
      CHECK(g[5 + j] == 0.0);
      CHECK(g[15 + j] == 0.0);
    }
  }
  SECTION("a batch dim known only at run time") {
    GradCheckOptions o;
    o.declared = {{-1, 5}, {-1, 1}};
    check_vjp({logits, i64({4, 1}, {0, 1, 2, 3})}, make_op<SoftmaxWithCrossEntropyOp>(), o);
  }
  SECTION("logits of rank 3") {
    check_vjp({random_f64({2, 2, 3}, -2, 2), i64({2, 2, 1}, {0, 2, 1, 1})},
              make_op<SoftmaxWithCrossEntropyOp>());
  }
}

TEST_CASE("cross_entropy's vjp w.r.t. the logits matches finite differences, through the loss and the lse",
          "[dialect][vjp]") {
  auto logits = random_f64({4, 5}, -2, 2);
  SECTION("labels [N, 1], the loss's grad only") {
    GradCheckOptions o;
    o.result_grads = {true, false};
    auto r = check_vjp({logits, i64({4, 1}, {0, 3, 4, 1})}, make_op<CrossEntropyOp>(), o);
    CHECK(r.compared == 20);
  }
  SECTION("labels [N], both results' grads") {
    check_vjp({logits, i64({4}, {2, 2, 0, 4})}, make_op<CrossEntropyOp>());
  }
  SECTION("the lse's grad only") {
    GradCheckOptions o;
    o.result_grads = {false, true};
    check_vjp({logits, i64({4}, {2, 2, 0, 4})}, make_op<CrossEntropyOp>(), o);
  }
  SECTION("ignore_index rows get a zero grad from the loss") {
    GradCheckOptions o;
    o.result_grads = {true, false};
    auto r = check_vjp({logits, i64({4, 1}, {1, -100, 3, -100})},
                       make_op<CrossEntropyOp>(std::int64_t{-100}), o);
    auto g = r.grads[0].to_vector<double>();
    for (int j = 0; j < 5; ++j) {
      CHECK(g[5 + j] == 0.0);
      CHECK(g[15 + j] == 0.0);
    }
  }
  SECTION("a batch dim known only at run time, logits of rank 3") {
    GradCheckOptions o;
    o.declared = {{-1, 2, 3}, {-1, 2, 1}};
    check_vjp({random_f64({2, 2, 3}, -2, 2), i64({2, 2, 1}, {0, 2, 1, 1})},
              make_op<CrossEntropyOp>(), o);
  }
}

// ---- shape ops ----

TEST_CASE("reshape's vjp views the grad with x's shape, even with unknown dims",
          "[dialect][vjp]") {
  check_vjp({random_f64({2, 3, 4})}, make_op<ReshapeOp>(Axes{6, -1}));
  GradCheckOptions o;
  o.declared = {{-1, -1, 4}};  // two unknown dims: no static shape for the grad
  check_vjp({random_f64({2, 3, 4})}, make_op<ReshapeOp>(Axes{-1, 2}), o);
}

TEST_CASE("transpose's vjp transposes back with the inverse permutation", "[dialect][vjp]") {
  check_vjp({random_f64({2, 3, 4})}, make_op<TransposeOp>(Axes{2, 0, 1}));
  check_vjp({random_f64({2, 3, 4})}, make_op<TransposeOp>(Axes{-1, -3, -2}));
}

TEST_CASE("concat's vjp cuts the grad into the operands' shapes", "[dialect][vjp]") {
  check_vjp({random_f64({2, 3}, -1, 1, 1), random_f64({2, 1}, -1, 1, 2), random_f64({2, 4}, -1, 1, 3)},
            make_op<ConcatOp>(std::int64_t{-1}));
  GradCheckOptions o;  // sizes along the axis known only at run time
  o.unknown_batch = true;
  check_vjp({random_f64({2, 3}, -1, 1, 4), random_f64({3, 3}, -1, 1, 5)},
            make_op<ConcatOp>(std::int64_t{0}), o);
}

TEST_CASE("split's vjp joins the grads, zeros for results without one", "[dialect][vjp]") {
  check_vjp({random_f64({6, 2})}, make_op<SplitOp>(std::int64_t{3}, std::int64_t{0}));
  GradCheckOptions o;
  o.result_grads = {true, false, true};
  check_vjp({random_f64({2, 6})}, make_op<SplitOp>(Axes{1, 2, 3}, std::int64_t{-1}), o);
  o.unknown_batch = true;  // the zeros' shape is known only at run time
  check_vjp({random_f64({3, 6})}, make_op<SplitOp>(Axes{1, 2, 3}, std::int64_t{1}), o);
}

TEST_CASE("slice's vjp writes the grad back into the sliced window", "[dialect][vjp]") {
  check_vjp({random_f64({4, 5})}, make_op<SliceOp>(Axes{1}, Axes{1}, Axes{4}));
  check_vjp({random_f64({3, 4, 5})}, make_op<SliceOp>(Axes{0, -1}, Axes{-2, 0}, Axes{100, -2}));
  GradCheckOptions o;
  o.unknown_batch = true;
  check_vjp({random_f64({4, 3})}, make_op<SliceOp>(Axes{0}, Axes{1}, Axes{3}), o);
}

TEST_CASE("gather's vjp scatter-adds into x, repeated indices adding up", "[dialect][vjp]") {
  check_vjp({random_f64({5, 3}), i64({4}, {4, 0, 4, 2})}, make_op<GatherOp>(std::int64_t{0}));
  check_vjp({random_f64({2, 5, 3}), i64({2, 2}, {1, 1, 0, 4})},
            make_op<GatherOp>(std::int64_t{1}));
  check_vjp({random_f64({2, 3}), i64({3}, {2, 2, 0})}, make_op<GatherOp>(std::int64_t{-1}));
}

TEST_CASE("embedding's vjp scatter-adds rows into the weight, none for padding", "[dialect][vjp]") {
  check_vjp({random_f64({6, 3}), i64({2, 3}, {1, 5, 1, 0, 2, 5})},
            make_op<EmbeddingOp>(std::int64_t{-1}));
  auto r = check_vjp({random_f64({6, 3}), i64({5}, {1, 2, 2, 4, 2})},
                     make_op<EmbeddingOp>(std::int64_t{2}));
  auto g = r.grads[0].to_vector<double>();
  for (int j = 0; j < 3; ++j) CHECK(g[2 * 3 + j] == 0.0);  // the padding row
}

TEST_CASE("dropout's vjp scales the grad by the kept mask", "[dialect][vjp]") {
  // A fixed seed: the forward runs of the finite differences draw one mask.
  check_vjp({random_f64({4, 5})}, make_op<DropoutOp>(0.4, false, std::int64_t{1234}));
  check_vjp({random_f64({4, 5})}, make_op<DropoutOp>(0.4, true, std::int64_t{1234}));
  check_vjp({random_f64({4, 5})}, make_op<DropoutOp>(0.0, false, std::int64_t{7}));
}

// ---- null grads ----

TEST_CASE("reduction, softmax, shape and indexing vjps return null grads for null out_grads",
          "[dialect][vjp]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{4, 3}, DataType::Float64).result();
  auto ids = b.create<DataOp>("ids", std::vector<std::int64_t>{4}, DataType::Int64).result();
  std::vector<Operation*> ops = {
      b.create<SumOp>(x, Axes{0}, false).operation(),
      b.create<MeanOp>(x, Axes{}, false).operation(),
      b.create<MaxOp>(x, Axes{1}, true).operation(),
      b.create<SoftmaxOp>(x, -1).operation(),
      b.create<LogSoftmaxOp>(x, -1).operation(),
      b.create<SoftmaxWithCrossEntropyOp>(x, ids).operation(),
      b.create<ReshapeOp>(x, Axes{12}).operation(),
      b.create<TransposeOp>(x, Axes{1, 0}).operation(),
      b.create<ConcatOp>(std::vector<Value>{x, x}, 0).operation(),
      b.create<SplitOp>(x, std::int64_t{2}, std::int64_t{0}).operation(),
      b.create<SliceOp>(x, Axes{0}, Axes{1}, Axes{2}).operation(),
      b.create<GatherOp>(x, ids, 0).operation(),
      b.create<EmbeddingOp>(x, ids).operation(),
      b.create<DropoutOp>(x, 0.5).operation(),
  };
  for (Operation* op : ops) {
    INFO(op->name());
    std::size_t before = p.block().size();
    auto g = call_vjp(b, op, std::vector<Value>(op->num_results()));
    REQUIRE(g.size() == op->num_operands());
    for (Value v : g) CHECK(!v);
    CHECK(p.block().size() == before);
  }
}

TEST_CASE("labels, ids and indices get a null grad", "[dialect][vjp]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{4, 3}, DataType::Float64).result();
  auto ids = b.create<DataOp>("ids", std::vector<std::int64_t>{4}, DataType::Int64).result();
  auto ce = b.create<SoftmaxWithCrossEntropyOp>(x, ids).operation();
  auto g = call_vjp(b, ce, {Value(), b.create<DataOp>("w", std::vector<std::int64_t>{4, 1},
                                                      DataType::Float64).result()});
  CHECK(g[0]);
  CHECK(!g[1]);
  auto ga = b.create<GatherOp>(x, ids, 0).operation();
  auto gg = call_vjp(b, ga, {b.create<DataOp>("w2", std::vector<std::int64_t>{4, 3},
                                              DataType::Float64).result()});
  CHECK(gg[0]);
  CHECK(!gg[1]);
}

// ---- grad ops in saved programs ----

TEST_CASE("a program holding the grad ops round-trips through JSON and computes the same grads",
          "[dialect][vjp]") {
  Program p;
  Builder b(p);
  auto f64 = DataType::Float64;
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 4}, f64).result();
  auto w = b.create<DataOp>("w", std::vector<std::int64_t>{4, 3}, f64).result();
  auto bias = b.create<DataOp>("bias", std::vector<std::int64_t>{3}, f64).result();
  auto label = b.create<DataOp>("label", std::vector<std::int64_t>{-1, 1}, DataType::Int64).result();
  auto emb = b.create<DataOp>("emb", std::vector<std::int64_t>{5, 4}, f64).result();
  // A small model touching most grad ops: embedding + x → matmul + bias →
  // gelu, max with a slice, concat/split, dropout → cross entropy, mean.
  Value ids = b.create<ReshapeOp>(label, Axes{-1}).result();
  Value h0 = b.create<AddOp>(x, b.create<EmbeddingOp>(emb, ids).result()).result();
  Value h = b.create<AddOp>(b.create<MatmulOp>(h0, w).result(), bias).result();
  Value g = b.create<GeluOp>(h, true).result();
  Value s = b.create<SliceOp>(g, Axes{1}, Axes{0}, Axes{2}).result();
  Value m = b.create<MaximumOp>(s, b.create<SigmoidOp>(s).result()).result();
  Value c = b.create<ConcatOp>(std::vector<Value>{m, b.create<TanhOp>(g).result()}, 1).result();
  auto sp = b.create<SplitOp>(c, Axes{2, 3}, 1);
  Value d = b.create<DropoutOp>(sp.operation()->result(1), 0.3, false, 99).result();
  auto ce = b.create<SoftmaxWithCrossEntropyOp>(d, label);
  Value loss = b.create<MeanOp>(ce.operation()->result(1), Axes{}, false).result();

  // Backward by hand, in reverse program order (what append_backward does).
  std::vector<std::pair<Value, Value>> grads;  // (value, grad)
  auto grad_of = [&](Value v) {
    Value sum;
    for (auto& [val, gv] : grads)
      if (val == v) sum = sum ? Value(b.create<AddOp>(sum, gv).result()) : gv;
    return sum;
  };
  std::vector<Operation*> ops;
  for (Operation* op : p.block()) ops.push_back(op);
  grads.emplace_back(loss, b.create<FullOp>(std::vector<std::int64_t>{}, 1.0, f64).result());
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    Operation* op = *it;
    if (!op->has_interface<VjpInterface>()) continue;
    std::vector<Value> out_grads;
    for (std::uint32_t r = 0; r < op->num_results(); ++r)
      out_grads.push_back(grad_of(op->result(r)));
    auto in_grads = call_vjp(b, op, out_grads);
    for (std::uint32_t i = 0; i < op->num_operands(); ++i)
      if (in_grads[i]) grads.emplace_back(op->operand_source(i), in_grads[i]);
  }
  const char* names[] = {"dx", "dw", "dbias", "demb"};
  Value targets[] = {x, w, bias, emb};
  for (int k = 0; k < 4; ++k) {
    Value gk = grad_of(targets[k]);
    REQUIRE(gk);
    b.create<FetchOp>(gk, names[k]);
  }
  p.verify();

  FeedMap feed = {{"x", random_f64({3, 4}, -1, 1, 1)},
                  {"w", random_f64({4, 3}, -1, 1, 2)},
                  {"bias", random_f64({3}, -1, 1, 3)},
                  {"label", i64({3, 1}, {0, 2, 1})},
                  {"emb", random_f64({5, 4}, -1, 1, 4)}};
  std::vector<FetchTarget> fetch = {"dx", "dw", "dbias", "demb"};
  Executor exe;
  auto before = exe.run(p, feed, fetch);
  Program loaded = load_program_json(save_program_json(p));
  Executor exe2;
  auto after = exe2.run(loaded, feed, fetch);
  REQUIRE(before.size() == 4);
  REQUIRE(after.size() == 4);
  for (int k = 0; k < 4; ++k) {
    INFO(names[k]);
    CHECK(before[k].dims() == after[k].dims());
    CHECK(before[k].to_vector<double>() == after[k].to_vector<double>());
    // Not all zeros: gradients reached every input.
    auto v = before[k].to_vector<double>();
    CHECK(std::any_of(v.begin(), v.end(), [](double e) { return e != 0.0; }));
  }
}
