// The dataflow ops (kiln/dialect/dataflow_ops.h): their checks, naming the
// op and what was expected, and programs holding them through the text form
// and JSON. Running them is test/exec/frames_test.cc's.
#include <cstdint>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/dataflow_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/io/json.h"
#include "kiln/ir/parser.h"
#include "test_util.h"

using namespace kiln;

namespace {

using Dims0 = std::vector<std::int64_t>;

Value constant(Builder& b, double v, DataType dt, Dims0 shape = {}) {
  return b.create<FullOp>(shape, v, dt).result();
}

// i = 0; while (i < n) i = i + 1, n fed; returns the exit's value.
Value counter(Program& p) {
  Builder b(p);
  Value n = b.create<DataOp>("n", Dims0{}, DataType::Int64).result();
  Value n_in = b.create<EnterOp>(n, "count", true, 10).result();
  Value one = b.create<EnterOp>(constant(b, 1, DataType::Int64), "count", true, 10).result();
  auto m = b.create<MergeOp>(std::vector<Value>{
      b.create<EnterOp>(constant(b, 0, DataType::Int64), "count", false, 10).result()});
  auto sw = b.create<SwitchOp>(m.output(), b.create<LessThanOp>(m.output(), n_in).result());
  Value out = b.create<ExitOp>(sw.output_false()).result();
  b.create<NextIterationOp>(b.create<AddOp>(sw.output_true(), one).result(), m.output());
  return out;
}

std::int64_t run_counter(const Program& p, std::int64_t n) {
  Executor exe;
  // The exit is the program's only kiln.exit.
  Value out;
  for (Operation* op : p.block())
    if (op->isa<ExitOp>()) out = op->result(0);
  return exe.run(p, {{"n", Tensor::from_vector<std::int64_t>(Dims(), {n})}}, {out})[0]
      .to_vector<std::int64_t>()
      .at(0);
}

}  // namespace

TEST_CASE("a switch whose predicate is not a one-element bool tensor is a clear error",
          "[dialect][frames]") {
  Program p;
  Builder b(p);
  Value x = constant(b, 1, DataType::Float32);
  KILN_CHECK_ERROR(b.create<SwitchOp>(x, constant(b, 1, DataType::Float32)), InvalidArgument,
                   {"kiln.switch", "predicate", "bool", "f32"});
  KILN_CHECK_ERROR(b.create<SwitchOp>(x, constant(b, 1, DataType::Bool, {2})), InvalidArgument,
                   {"kiln.switch", "predicate", "one element", "[2]"});
}

TEST_CASE("the dataflow ops reject bad attributes and operands by name", "[dialect][frames]") {
  Program p;
  Builder b(p);
  Value x = constant(b, 1, DataType::Float32);
  KILN_CHECK_ERROR(b.create<EnterOp>(x, "", false, 10), InvalidArgument, {"kiln.enter", "frame_name"});
  KILN_CHECK_ERROR(b.create<EnterOp>(x, "loop", false, 0), InvalidArgument,
                   {"kiln.enter", "'loop'", "parallel_iterations", "at least 1"});
  KILN_CHECK_ERROR(b.create<MergeOp>(std::vector<Value>{}), InvalidArgument, {"kiln.merge", "at least one"});
  KILN_CHECK_ERROR(b.create<MergeOp>(std::vector<Value>{x, constant(b, 1, DataType::Int64)}), InvalidArgument,
                   {"kiln.merge", "input #1", "i64"});
  Value m = b.create<MergeOp>(std::vector<Value>{x}).output();
  KILN_CHECK_ERROR(b.create<NextIterationOp>(constant(b, 1, DataType::Int64), m), InvalidArgument,
                   {"kiln.next_iteration", "does not fit"});
}

TEST_CASE("a next_iteration must name the output of a merge", "[dialect][frames]") {
  Program p;
  Builder b(p);
  Value x = constant(b, 1, DataType::Int64);
  Value not_merge = b.create<AddOp>(x, x).result();
  auto op = b.create<NextIterationOp>(x, not_merge);
  KILN_CHECK_ERROR(op.operation()->verify(), InvalidArgument,
                   {"kiln.next_iteration", "operand #1", "kiln.merge", "kiln.add"});
}

TEST_CASE("a program of dataflow ops survives the text form and JSON, and still runs", "[dialect][frames]") {
  Program p;
  counter(p);
  REQUIRE_NOTHROW(p.verify());
  CHECK(run_counter(p, 10) == 10);
  const std::string text = p.to_string();
  CHECK_THAT(text, Catch::Contains("kiln.next_iteration"));
  Program parsed = parse_program(text);
  CHECK(parsed.to_string() == text);
  CHECK(run_counter(parsed, 10) == 10);
  Program loaded = load_program_json(save_program_json(p));
  CHECK(loaded.to_string() == text);
  CHECK(run_counter(loaded, 4) == 4);
}
