// Common-subexpression elimination as a user sees it: equal pure ops become
// one (a fetched duplicate keeps being fetched, through the replacement),
// while random draws, in-place updates, prints, ops of differing attributes
// and ops in isolated bodies stay apart.
#include "passes/passes_test_util.h"
#include "kiln/frontend/frontend.h"

using namespace kiln;
using namespace kiln_passes_test;

TEST_CASE("cse merges equal matmuls and the adds over them, chaining through", "[passes][cse]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4, 4}).result();
  Value y = b.create<DataOp>("y", std::vector<std::int64_t>{4, 4}).result();
  Value m1 = b.create<MatmulOp>(x, y).result();
  Value m2 = b.create<MatmulOp>(x, y).result();
  Value a1 = b.create<AddOp>(m1, x).result();
  Value a2 = b.create<AddOp>(m2, x).result();
  Value s = b.create<SubOp>(a1, a2).result();
  auto live = run_pipeline(p, "cse", {a2, s});
  CHECK(count_ops(p, "kiln.matmul") == 1);
  CHECK(count_ops(p, "kiln.add") == 1);
  CHECK(live[0] == a1);  // the fetched duplicate maps to its twin
  CHECK(s.defining_op()->operand_source(0) == a1);
  CHECK(s.defining_op()->operand_source(1) == a1);
}

TEST_CASE("cse keeps ops whose attributes or operand order differ", "[passes][cse]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4, 4}).result();
  Value y = b.create<DataOp>("y", std::vector<std::int64_t>{4, 4}).result();
  b.create<MatmulOp>(x, y, false, false);
  b.create<MatmulOp>(x, y, true, false);
  b.create<MatmulOp>(y, x, false, false);
  b.create<ScaleOp>(x, 2.0);
  b.create<ScaleOp>(x, 3.0);
  run_pipeline(p, "cse");
  CHECK(count_ops(p, "kiln.matmul") == 3);
  CHECK(count_ops(p, "kiln.scale") == 2);
}

TEST_CASE("cse never merges random draws, prints or in-place updates", "[passes][cse]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  b.create<UniformRandomOp>(std::vector<std::int64_t>{4}, -1.0, 1.0, 7);
  b.create<UniformRandomOp>(std::vector<std::int64_t>{4}, -1.0, 1.0, 7);
  b.create<PrintOp>(x);
  b.create<PrintOp>(x);
  Value e = b.create<ExpOp>(x).result();
  b.create<Relu_Op>(e);
  b.create<Relu_Op>(e);
  run_pipeline(p, "cse");
  CHECK(count_ops(p, "kiln.uniform_random") == 2);
  CHECK(count_ops(p, "kiln.print") == 2);
  CHECK(count_ops(p, "kiln.relu_") == 2);
}

TEST_CASE("cse keeps a twin whose result is written in place apart from its reader",
          "[passes][cse]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value e1 = b.create<ExpOp>(x).result();
  b.create<Relu_Op>(e1);  // e1 is a buffer updated in place
  Value e2 = b.create<ExpOp>(x).result();
  run_pipeline(p, "cse", {e2});
  CHECK(count_ops(p, "kiln.exp") == 2);
}

TEST_CASE("cse does not reach into an isolated body from outside, but merges within it",
          "[passes][cse]") {
  Program main_prog, startup;
  Value out;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {4});
    Value outer = main_builder().create<ExpOp>(x).result();
    Value pred = greater_than(full({1}, 1.0), full({1}, 0.0));
    out = cond(
        pred,
        [&]() -> Value {
          Value a = main_builder().create<ExpOp>(x).result();  // x is a captured block argument here
          Value c = main_builder().create<ExpOp>(x).result();
          return main_builder().create<AddOp>(a, c).result();
        },
        [&]() -> Value { return main_builder().create<TanhOp>(x).result(); });
    out = main_builder().create<AddOp>(out, outer).result();
  }
  CHECK(count_ops(main_prog, "kiln.exp") == 3);
  run_pipeline(main_prog, "cse", {out});
  CHECK(count_ops(main_prog, "kiln.exp") == 2);  // one outside, one inside the branch
  main_prog.verify();
}

TEST_CASE("cse merges equal constants", "[passes][cse]") {
  Program p;
  Builder b(p);
  Value c1 = b.create<FullOp>(std::vector<std::int64_t>{2}, 1.5).result();
  Value c2 = b.create<FullOp>(std::vector<std::int64_t>{2}, 1.5).result();
  Value c3 = b.create<FullOp>(std::vector<std::int64_t>{2}, 2.5).result();
  Value s = b.create<AddOp>(b.create<AddOp>(c1, c2).result(), c3).result();
  run_pipeline(p, "cse", {s});
  CHECK(count_ops(p, "kiln.full") == 2);
}

TEST_CASE("cse keeps apart equal constants that set two parameters: one buffer would make their "
          "in-place updates reach each other",
          "[passes][cse]") {
  Program startup;
  Builder b(startup);
  startup.set_parameter("m1", Parameter{f32({4})});
  startup.set_parameter("m2", Parameter{f32({4})});
  Value z1 = b.create<FullOp>(std::vector<std::int64_t>{4}, 0.0).result();
  b.create<SetParameterOp>(z1, "m1");
  Value z2 = b.create<FullOp>(std::vector<std::int64_t>{4}, 0.0).result();
  b.create<SetParameterOp>(z2, "m2");
  run_pipeline(startup, "cse");
  CHECK(count_ops(startup, "kiln.full") == 2);
}

TEST_CASE("cse keeps apart equal reads of a value updated in place between them", "[passes][cse]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  Value t = b.create<ExpOp>(x).result();
  Value a = b.create<TanhOp>(t).result();
  b.create<Relu_Op>(t);  // a later reader of t sees relu(t): kiln's in-place ops change the variable
  Value c = b.create<TanhOp>(t).result();
  run_pipeline(p, "cse", {a, c});
  CHECK(count_ops(p, "kiln.tanh") == 2);
}
