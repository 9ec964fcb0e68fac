// Dead-code elimination as a user sees it: what goes (unused pure ops, an
// in-place update of a temporary, effect-free control flow) and what stays
// (optimizer updates of parameters, random draws, fetches, feeds,
// set_parameter, live-out values and their producers, prints in bodies).
#include "passes/passes_test_util.h"
#include "kiln/frontend/frontend.h"

using namespace kiln;
using namespace kiln_passes_test;

namespace {

Value param(Program& p, Builder& b, const std::string& name, std::vector<std::int64_t> dims) {
  p.set_parameter(name, Parameter{f32(dims)});
  return b.create<ParameterOp>(name, f32(dims)).result();
}

}  // namespace

TEST_CASE("dce removes an unused matmul but keeps an unused adam_ update", "[passes][dce]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4, 4}).result();
  Value w = param(p, b, "w", {4, 4});
  Value g = param(p, b, "g", {4, 4});
  Value lr = param(p, b, "lr", {1});
  Value m1 = param(p, b, "m1", {4, 4}), m2 = param(p, b, "m2", {4, 4});
  Value b1 = param(p, b, "b1", {1}), b2 = param(p, b, "b2", {1});
  b.create<MatmulOp>(x, w);  // unused
  b.create<Adam_Op>(w, g, lr, m1, m2, b1, b2);  // results unused: it writes the parameters
  run_pipeline(p, "dce");
  CHECK(count_ops(p, "kiln.matmul") == 0);
  CHECK(count_ops(p, "kiln.adam_") == 1);
  CHECK(count_ops(p, "builtin.parameter") == 7);  // all read by adam_
  CHECK(count_ops(p, "kiln.data") == 1);           // feeds stay
}

TEST_CASE("dce removes an in-place update of a temporary nothing reads, but keeps one of a feed",
          "[passes][dce]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value t = b.create<ExpOp>(x).result();
  b.create<Relu_Op>(t);  // writes a temporary whose value nobody reads after
  b.create<Relu_Op>(x);  // writes the fed variable: a fetch of "x" sees it
  run_pipeline(p, "dce");
  CHECK(count_ops(p, "kiln.relu_") == 1);
  CHECK(count_ops(p, "kiln.exp") == 0);
  CHECK(p.block().back()->operand_source(0) == x);
}

TEST_CASE("dce keeps an in-place update of a live-out value", "[passes][dce]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value t = b.create<ExpOp>(x).result();
  b.create<Relu_Op>(t);  // a fetch of t observes it
  run_pipeline(p, "dce", {t});
  CHECK(count_ops(p, "kiln.relu_") == 1);
  CHECK(count_ops(p, "kiln.exp") == 1);
}

TEST_CASE("dce keeps random ops whose draws nobody reads: they advance the generator",
          "[passes][dce]") {
  Program p;
  Builder b(p);
  b.create<UniformRandomOp>(std::vector<std::int64_t>{4}, -1.0, 1.0, 0);
  Value keep = b.create<UniformRandomOp>(std::vector<std::int64_t>{4}, -1.0, 1.0, 0).result();
  b.create<DropoutOp>(keep, 0.5);
  run_pipeline(p, "dce", {keep});
  CHECK(count_ops(p, "kiln.uniform_random") == 2);
  CHECK(count_ops(p, "kiln.dropout") == 1);
}

TEST_CASE("dce keeps fetch, print and set_parameter ops and the producers of what they read",
          "[passes][dce]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value e = b.create<ExpOp>(x).result();
  Value t = b.create<TanhOp>(x).result();
  Value s = b.create<SqrtOp>(x).result();
  b.create<FetchOp>(e, "e");
  b.create<PrintOp>(t);
  p.set_parameter("w", Parameter{f32({4})});
  b.create<SetParameterOp>(s, "w");
  b.create<AbsOp>(x);  // the one dead op
  run_pipeline(p, "dce");
  CHECK(count_ops(p, "kiln.abs") == 0);
  for (const char* n : {"kiln.exp", "kiln.tanh", "kiln.sqrt", "kiln.fetch", "kiln.print",
                        "builtin.set_parameter", "kiln.data"}) {
    INFO(n);
    CHECK(count_ops(p, n) == 1);
  }
}

TEST_CASE("dce keeps a live-out value's producer chain and removes the rest", "[passes][dce]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value a = b.create<ExpOp>(x).result();
  Value c = b.create<TanhOp>(a).result();
  Value d = b.create<AbsOp>(c).result();  // unused
  b.create<ReluOp>(d);                    // unused
  run_pipeline(p, "dce", {c});
  CHECK(count_ops(p, "kiln.exp") == 1);
  CHECK(count_ops(p, "kiln.tanh") == 1);
  CHECK(count_ops(p, "kiln.abs") == 0);
  CHECK(count_ops(p, "kiln.relu") == 0);
}

TEST_CASE("dce removes an if whose results are unused and whose branches have no effect, "
          "but keeps one whose branch prints",
          "[passes][dce]") {
  Program main_prog, startup;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {4});
    Value pred = greater_than(full({1}, 1.0), full({1}, 0.0));
    cond(pred, [&]() -> Value { return main_builder().create<ReluOp>(x).result(); },
         [&]() -> Value { return main_builder().create<TanhOp>(x).result(); });
    cond(pred, [&]() -> Value { return main_builder().create<PrintOp>(x).result(); },
         [&]() -> Value { return main_builder().create<TanhOp>(x).result(); });
  }
  CHECK(count_ops(main_prog, "kiln.if") == 2);
  run_pipeline(main_prog, "dce");
  CHECK(count_ops(main_prog, "kiln.if") == 1);
  CHECK(count_ops(main_prog, "kiln.print") == 1);
  CHECK(count_ops(main_prog, "kiln.relu") == 0);
}

TEST_CASE("dce removes dead ops inside a while body and keeps what the body yields",
          "[passes][dce]") {
  Program main_prog, startup;
  std::vector<Value> out;
  {
    ProgramGuard guard(main_prog, startup);
    Value i = full({1}, 0.0, DataType::Int64);
    Value acc = data("acc", {4});
    out = while_loop([](const std::vector<Value>& v) { return less_than(v[0], 3); },
                     [](const std::vector<Value>& v) -> std::vector<Value> {
                       main_builder().create<ExpOp>(v[1]);  // dead
                       Value next = main_builder().create<TanhOp>(v[1]).result();
                       return {increment(v[0]), next};
                     },
                     {i, acc});
  }
  CHECK(count_ops(main_prog, "kiln.exp") == 1);
  run_pipeline(main_prog, "dce", {out[1]});
  CHECK(count_ops(main_prog, "kiln.exp") == 0);
  CHECK(count_ops(main_prog, "kiln.tanh") == 1);
  CHECK(count_ops(main_prog, "kiln.while") == 1);
}

TEST_CASE("a pass erasing a live-out value's producer is an Internal error naming the op",
          "[passes][dce]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value e = b.create<ExpOp>(x).result();
  PassContext ctx({e});
  KILN_CHECK_ERROR(ctx.erase_op(e.defining_op()), Internal, {"kiln.exp", "live-out"});
  CHECK(count_ops(p, "kiln.exp") == 1);
}

TEST_CASE("dce keeps an in-place update whose buffer a later op reads", "[passes][dce]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value t = b.create<ExpOp>(x).result();
  b.create<Relu_Op>(t);                   // results unused, but...
  Value r = b.create<TanhOp>(t).result();  // ...this reads the updated variable
  run_pipeline(p, "dce", {r});
  CHECK(count_ops(p, "kiln.relu_") == 1);
}
