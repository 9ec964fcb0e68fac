// InferMeta, Vjp and error tests of the ops of kiln/dialect/debug_ops.h:
// kiln.print counts its runs per op through the executor, runs even when
// nothing reads its result, and passes gradients through.
#include <sstream>

#include "catch.hpp"
#include "dialect/grad_check.h"
#include "kernel/kernel_test_util.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/passes/lower_to_dataflow.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln_vjp_test;
using kiln_test::build_op;

namespace {
using V = std::vector<std::int64_t>;
struct CapturePrint {
  explicit CapturePrint(std::ostream* os) : old(set_print_stream(os)) {}
  ~CapturePrint() { set_print_stream(old); }
  std::ostream* old;
};
}  // namespace

TEST_CASE("print's result has its operand's type", "[dialect][debug]") {
  Program p;
  auto* op = build_op<PrintOp>(p, {{DataType::Float32, {-1, 3}}}, std::string("h"), std::int64_t{5});
  CHECK(op->result_type(0) == op->operand_source(0).type());
  CHECK(op->has_trait<SideEffect>());
}

TEST_CASE("print rejects a summarize below -1", "[dialect][debug]") {
  Program p;
  KILN_CHECK_ERROR((build_op<PrintOp>(p, {{DataType::Float32, {2}}}, std::string("h"),
                                      std::int64_t{-2})),
                   InvalidArgument, {"kiln.print", "summarize", "-2"});
}

TEST_CASE("print counts the runs of each print op through the executor", "[dialect][debug]") {
  std::ostringstream os;
  CapturePrint capture(&os);
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", V{2}, DataType::Float32).result();
  auto y = b.create<PrintOp>(x, "x", -1).result();
  auto z = b.create<ScaleOp>(y, 2.0f, 0.0f, true).result();
  b.create<PrintOp>(z, "z", -1);  // nothing reads it: it runs all the same
  Executor exe;
  Tensor t = Tensor::from_vector<float>({2}, {1, 2});
  auto out = exe.run(p, {{"x", t}}, {z});
  CHECK(out[0].to_vector<float>() == std::vector<float>{2, 4});
  exe.run(p, {{"x", t}}, {z});
  const std::string xs = t.to_string(), zs = out[0].to_string();
  CHECK(os.str() == "x step 1: " + xs + "\nz step 1: " + zs + "\nx step 2: " + xs +
                        "\nz step 2: " + zs + "\n");
}

TEST_CASE("a print in a loop body counts every iteration; another executor's plan counts from 1",
          "[dialect][debug][cf]") {
  std::ostringstream os;
  CapturePrint capture(&os);
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  auto r = while_loop([](const std::vector<Value>& v) { return less_than(v[0], 3); },
                      [](const std::vector<Value>& v) {
                        Value i = main_builder().create<PrintOp>(v[0], "i", 0).result();
                        return std::vector<Value>{increment(i)};
                      },
                      {full({1}, 0, DataType::Int64)});
  Executor first, second;
  first.run(main_prog, {}, {r[0]});
  second.run(main_prog, {}, {r[0]});
  first.run(main_prog, {}, {r[0]});
  const std::string line = " " + Tensor::from_vector<std::int64_t>({1}, {0}).type_string() + " [...]\n";
  const std::string three = "i step 1:" + line + "i step 2:" + line + "i step 3:" + line;
  CHECK(os.str() == three + three + "i step 4:" + line + "i step 5:" + line + "i step 6:" + line);
  // Lowered to dataflow ops, the loop prints the same lines.
  REQUIRE(can_lower_to_dataflow(main_prog));
  std::ostringstream lowered_os;
  CapturePrint lowered_capture(&lowered_os);
  for (unsigned threads : {1u, 2u}) {
    ExecutionOptions o;
    o.num_threads = threads;
    o.passes = std::string("lower_to_dataflow,") + kDefaultPasses;
    Executor lowered(Place::cpu(), o);
    lowered.run(main_prog, {}, {r[0]});
    lowered.run(main_prog, {}, {r[0]});
  }
  CHECK(lowered_os.str() == three + "i step 4:" + line + "i step 5:" + line + "i step 6:" + line + three +
                                "i step 4:" + line + "i step 5:" + line + "i step 6:" + line);
}

TEST_CASE("print's vjp passes the gradient through", "[dialect][vjp][debug]") {
  std::ostringstream sink;
  CapturePrint capture(&sink);
  check_vjp({random_f64({2, 3})}, make_op<PrintOp>(std::string("g"), std::int64_t{-1}));
  CHECK(!sink.str().empty());
}
