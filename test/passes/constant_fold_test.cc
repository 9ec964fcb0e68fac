// Constant folding as a user sees it: ops over constants become one
// builtin.constant holding the result their CPU kernel computes, and the
// folded program runs to the same numbers; random ops, huge results and
// ops over fed values stay.
#include <cstring>

#include "passes/passes_test_util.h"
#include "kiln/dialect/placement_attributes.h"
#include "kiln/exec/executor.h"
#include "kiln/ir/tensor_attribute.h"
#include "kiln/passes/constant_fold.h"

using namespace kiln;
using namespace kiln_passes_test;

namespace {

std::vector<float> constant_values(Value v) {
  auto c = v.defining_op()->dyn_cast<ConstantOp>();
  REQUIRE(c);
  auto t = c.value().cast<TensorAttribute>();
  REQUIRE(t.dtype() == DataType::Float32);
  std::vector<float> out(t.numel());
  std::memcpy(out.data(), t.bytes().data(), t.bytes().size());
  return out;
}

}  // namespace

TEST_CASE("fold evaluates a chain over constants with the ops' kernels into one constant",
          "[passes][fold]") {
  Program p;
  Builder b(p);
  Value a = b.create<FullOp>(std::vector<std::int64_t>{2, 3}, 2.0).result();
  Value c = b.create<FullOp>(std::vector<std::int64_t>{3}, 0.5).result();
  Value s = b.create<AddOp>(a, c).result();            // broadcast: [2, 3]
  Value e = b.create<MulOp>(s, s).result();
  Value t = b.create<TransposeOp>(e, std::vector<std::int64_t>{1, 0}).result();
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{3, 2}).result();
  Value out = b.create<AddOp>(t, x).result();          // over a feed: stays
  auto live = run_pipeline(p, "fold,dce", {out});
  CHECK(count_ops(p, "kiln.mul") == 0);
  CHECK(count_ops(p, "kiln.transpose") == 0);
  CHECK(count_ops(p, "kiln.full") == 0);
  CHECK(count_ops(p, "kiln.add") == 1);
  CHECK(count_ops(p, "builtin.constant") == 1);
  Value folded = live[0].defining_op()->operand_source(0);
  CHECK(folded.type() == f32({3, 2}));
  CHECK(constant_values(folded) == std::vector<float>(6, 6.25f));

  Executor exe;
  auto got = exe.run(p, {{"x", Tensor::from_vector<float>(Dims({3, 2}), {0, 1, 2, 3, 4, 5})}},
                     {live[0]});
  CHECK(got[0].to_vector<float>() == std::vector<float>{6.25f, 7.25f, 8.25f, 9.25f, 10.25f, 11.25f});
}

TEST_CASE("fold leaves none of the constants it read behind to run each step, but keeps those "
          "others read",
          "[passes][fold]") {
  Program p;
  Builder b(p);
  Value a = b.create<FullOp>(std::vector<std::int64_t>{2, 3}, 2.0).result();
  Value c = b.create<FullOp>(std::vector<std::int64_t>{3}, 0.5).result();
  Value s = b.create<AddOp>(a, c).result();
  Value e = b.create<MulOp>(s, s).result();
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3}).result();
  Value out = b.create<AddOp>(e, x).result();
  Value also = b.create<SubOp>(x, c).result();  // c has another reader: stays
  run_pipeline(p, "fold", {out, also});
  CHECK(count_ops(p, "kiln.full") == 1);
  CHECK(count_ops(p, "builtin.constant") == 1);  // e's; s's went with its only reader
  CHECK(count_ops(p, "kiln.mul") == 0);
}

TEST_CASE("a fetched value that folding replaces is still fetched, through the replacement",
          "[passes][fold]") {
  Program p;
  Builder b(p);
  Value a = b.create<FullOp>(std::vector<std::int64_t>{2}, 3.0).result();
  Value e = b.create<ExpOp>(a).result();
  auto live = run_pipeline(p, "fold,dce", {e});
  REQUIRE(live[0].defining_op()->name() == "builtin.constant");
  CHECK(count_ops(p, "kiln.exp") == 0);
  Executor exe;
  Program q;
  Builder qb(q);
  Value qe = qb.create<ExpOp>(qb.create<FullOp>(std::vector<std::int64_t>{2}, 3.0).result()).result();
  // Bit for bit what the exp kernel computes at run time.
  CHECK(exe.run(p, {}, {live[0]})[0].to_vector<float>() == exe.run(q, {}, {qe})[0].to_vector<float>());
}

TEST_CASE("fold leaves random ops, ops over them and ops over feeds alone", "[passes][fold]") {
  Program p;
  Builder b(p);
  Value r = b.create<UniformRandomOp>(std::vector<std::int64_t>{4}, -1.0, 1.0, 3).result();
  Value e = b.create<ExpOp>(r).result();
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value t = b.create<TanhOp>(x).result();
  run_pipeline(p, "fold", {e, t});
  CHECK(count_ops(p, "kiln.uniform_random") == 1);
  CHECK(count_ops(p, "kiln.exp") == 1);
  CHECK(count_ops(p, "kiln.tanh") == 1);
  CHECK(count_ops(p, "builtin.constant") == 0);
}

TEST_CASE("evaluate_on_cpu runs a pure op's kernel on given values, unknown dims included, and "
          "refuses random ops and operand counts that do not fit",
          "[passes][fold]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 2}).result();
  Operation* add = b.create<AddOp>(x, x).operation();
  std::vector<Tensor> got =
      evaluate_on_cpu(add, {Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6}),
                            Tensor::from_vector<float>({3, 2}, {1, 1, 1, 1, 1, 1})});
  REQUIRE(got.size() == 1);
  CHECK(got[0].dims().to_vector() == std::vector<std::int64_t>{3, 2});
  CHECK(got[0].to_vector<float>() == std::vector<float>{2, 3, 4, 5, 6, 7});
  // A result whose known dim differs from the op's type ([-1, 2]).
  CHECK(evaluate_on_cpu(add, {Tensor::from_vector<float>({1, 3}, {1, 2, 3}),
                              Tensor::from_vector<float>({1, 3}, {1, 2, 3})})
            .empty());
  // Operands the kernel refuses (f64 into an f32 add): no results, no error.
  CHECK(evaluate_on_cpu(add, {Tensor::from_vector<double>({1, 2}, {1, 2}),
                              Tensor::from_vector<double>({1, 2}, {1, 2})})
            .empty());
  CHECK(evaluate_on_cpu(add, {Tensor::from_vector<float>({1, 2}, {1, 2})}).empty());
  Operation* noise = b.create<DropoutOp>(x, 0.5).operation();
  CHECK(evaluate_on_cpu(noise, {Tensor::from_vector<float>({1, 2}, {1, 2})}).empty());
}

TEST_CASE("fold, cse and fuse leave an op the user put on an execution stream as written",
          "[passes][fold]") {
  Program p;
  Builder b(p);
  Value one = b.create<FullOp>(std::vector<std::int64_t>{4}, 1.0).result();
  Operation* e1 = b.create<ExpOp>(one).operation();
  Operation* e2 = b.create<ExpOp>(one).operation();
  Operation* n = b.create<NegOp>(e1->result(0)).operation();
  for (Operation* op : {e1, e2, n}) op->set_attribute(kExecutionStreamAttr, StrAttribute::get("s1"));
  run_pipeline(p, "fold,cse,fuse", {n->result(0), e2->result(0)});
  CHECK(count_ops(p, "kiln.exp") == 2);
  CHECK(count_ops(p, "kiln.neg") == 1);
  CHECK(count_ops(p, "builtin.constant") == 0);
}

TEST_CASE("a reader of a folded-looking value that an in-place op updated sees the update",
          "[passes][fold]") {
  // m = (-1)·2 is updated by relu_ before n = m + 1 reads it: n is 1, not -1.
  Program p;
  Builder b(p);
  Value m = b.create<MulOp>(b.create<FullOp>(std::vector<std::int64_t>{4}, -1.0).result(),
                            b.create<FullOp>(std::vector<std::int64_t>{4}, 2.0).result())
                .result();
  b.create<Relu_Op>(m);
  Value n = b.create<AddOp>(m, b.create<FullOp>(std::vector<std::int64_t>{4}, 1.0).result()).result();
  for (const char* passes : {"", "fold", kDefaultPasses}) {
    INFO(passes);
    Executor exe(Place::cpu(), {.passes = passes});
    for (int run = 0; run < 2; ++run) CHECK(exe.run(p, {}, {n})[0].to_vector<float>() == std::vector<float>(4, 1.f));
  }
}

TEST_CASE("fold does not materialise tensors above its size cap", "[passes][fold]") {
  Program p;
  Builder b(p);
  Value big = b.create<FullOp>(std::vector<std::int64_t>{1024, 1024}, 1.0).result();  // 4 MiB
  Value e = b.create<ExpOp>(big).result();
  Value small = b.create<FullOp>(std::vector<std::int64_t>{8}, 1.0).result();
  Value f = b.create<ExpOp>(small).result();
  PassContext ctx({e, f});
  PassManager pm;
  pm.add(create_constant_fold_pass(ConstantFoldOptions{/*max_bytes=*/1024}));
  pm.run(p, ctx);
  CHECK(count_ops(p, "kiln.exp") == 1);  // the big one
  CHECK(ctx.live_out()[1].defining_op()->name() == "builtin.constant");
}

TEST_CASE("fold skips an op whose kernel fails at compile time: the run reports it",
          "[passes][fold]") {
  Program p;
  Builder b(p);
  Value x = b.create<FullOp>(std::vector<std::int64_t>{4}, 1.0).result();
  Value idx = b.create<FullOp>(std::vector<std::int64_t>{2}, 9.0, DataType::Int64).result();
  Value g = b.create<GatherOp>(x, idx).result();  // index 9 of 4: out of range
  run_pipeline(p, "fold", {g});
  CHECK(count_ops(p, "kiln.gather") == 1);
  Executor exe;
  KILN_CHECK_ERROR(exe.run(p, {}, {g}), OutOfRange, {"kiln.gather"});
}

TEST_CASE("constant_splat_value reads kiln.full and uniform builtin.constant tensors",
          "[passes][fold]") {
  Program p;
  Builder b(p);
  Value f = b.create<FullOp>(std::vector<std::int64_t>{3}, 1.0).result();
  float two[2] = {2.f, 2.f}, mixed[2] = {1.f, 2.f};
  Value c = b.create<ConstantOp>(
                 TensorAttribute::get(DataType::Float32, {2}, std::string(reinterpret_cast<char*>(two), 8)),
                 f32({2}))
                .result();
  Value m = b.create<ConstantOp>(
                 TensorAttribute::get(DataType::Float32, {2}, std::string(reinterpret_cast<char*>(mixed), 8)),
                 f32({2}))
                .result();
  CHECK(constant_splat_value(f) == std::optional<double>(1.0));
  CHECK(constant_splat_value(c) == std::optional<double>(2.0));
  CHECK_FALSE(constant_splat_value(m));
  CHECK(is_constant_value(m));
}

TEST_CASE("fold does not take a constant updated in place for a constant", "[passes][fold]") {
  Program p;
  Builder b(p);
  Value c = b.create<FullOp>(std::vector<std::int64_t>{2}, -0.5).result();
  b.create<Relu_Op>(c);  // later readers of c see 0
  Value e = b.create<ExpOp>(c).result();
  Executor plain;
  const auto want = plain.run(p, {}, {e})[0].to_vector<float>();
  CHECK(want == std::vector<float>(2, 1.f));
  auto live = run_pipeline(p, "fold,simplify,dce", {e});
  CHECK(count_ops(p, "kiln.exp") == 1);
  Executor exe;
  CHECK(exe.run(p, {}, {live[0]})[0].to_vector<float>() == want);
}

TEST_CASE("fold folds nothing for a program that will run on a device", "[passes][fold]") {
  Program p;
  Builder b(p);
  Value e = b.create<ExpOp>(b.create<FullOp>(std::vector<std::int64_t>{2}, 3.0).result()).result();
  PassContext ctx({e});
  ctx.target_place = Place::cuda(0);
  PassManager::parse("fold").run(p, ctx);
  CHECK(count_ops(p, "kiln.exp") == 1);
  CHECK(count_ops(p, "builtin.constant") == 0);
}
