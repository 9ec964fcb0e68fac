// The PassManager a user drives: pipelines by name, the verifier after
// each pass, timing, printing the IR around a pass, the pass registry and
// passes over control-flow bodies.
#include <sstream>

#include "passes/passes_test_util.h"
#include "kiln/frontend/frontend.h"
#include "kiln/passes/dce.h"

using namespace kiln;
using namespace kiln_passes_test;

namespace {

// A user's pass, registered from this file: tags every kiln.relu it sees
// (nested ones too, through the default per-block walk).
class TagReluPass : public Pass {
 public:
  TagReluPass() : Pass("test-tag-relu") {}
  void run_on_block(Block& block, PassContext&) override {
    for (Operation* op : block)
      if (op->name() == "kiln.relu") op->set_attribute("tagged", BoolAttribute::get(true));
  }
};
KILN_REGISTER_PASS("test-tag-relu", [] { return std::make_unique<TagReluPass>(); },
                   "tags kiln.relu ops (a test pass)");

// Breaks the IR: moves the first op to the end of the top block, after its users.
class BreakIrPass : public Pass {
 public:
  BreakIrPass() : Pass("test-break-ir") {}
  void run(Program& p, PassContext&) override { p.block().front()->move_to_end(&p.block()); }
};
KILN_REGISTER_PASS("test-break-ir", [] { return std::make_unique<BreakIrPass>(); });

class ThrowingPass : public Pass {
 public:
  ThrowingPass() : Pass("test-throw") {}
  void run(Program&, PassContext&) override {
    throw_error(ErrorKind::InvalidArgument, "op 'kiln.relu' is not what I expected");
  }
};
KILN_REGISTER_PASS("test-throw", [] { return std::make_unique<ThrowingPass>(); });

// x -> relu -> relu, plus an unused exp.
struct Chain {
  Program p;
  Value x, r1, r2;
  Chain() {
    Builder b(p);
    x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
    r1 = b.create<ReluOp>(x).result();
    r2 = b.create<ReluOp>(r1).result();
    b.create<ExpOp>(x);
  }
};

}  // namespace

TEST_CASE("a pipeline string names registered passes, run in order", "[passes][pass_manager]") {
  PassManager pm = PassManager::parse(" dce ,test-tag-relu,cse");
  CHECK(pm.pass_names() == std::vector<std::string>{"dce", "test-tag-relu", "cse"});
  Chain c;
  auto live = run_pipeline(c.p, "dce,test-tag-relu", {c.r2});
  CHECK(count_ops(c.p, "kiln.exp") == 0);
  CHECK(c.r1.defining_op()->attribute("tagged"));
  CHECK(c.r2.defining_op()->attribute("tagged"));
  CHECK(live[0] == c.r2);
}

TEST_CASE("kiln's own passes are registered by name", "[passes][pass_manager]") {
  for (const char* n : {"dce", "cse", "fold", "simplify"}) {
    INFO(n);
    CHECK(PassRegistry::instance().contains(n));
    CHECK_FALSE(PassRegistry::instance().description(n).empty());
  }
}

TEST_CASE("an unknown pass in a pipeline is a NotFound error naming it and listing the known ones",
          "[passes][pass_manager]") {
  KILN_CHECK_ERROR(PassManager::parse("dce,cse,frobnicate"), NotFound,
                   {"'frobnicate'", "known passes", "dce", "cse", "fold", "simplify"});
}

TEST_CASE("junk in a pipeline string is an error naming the junk", "[passes][pass_manager]") {
  KILN_CHECK_ERROR(PassManager::parse("dce;cse"), NotFound, {"'dce;cse'", "known passes"});
  KILN_CHECK_ERROR(PassManager::parse("dce,,cse"), InvalidArgument, {"empty entry", "#2"});
  KILN_CHECK_ERROR(PassManager::parse(""), InvalidArgument, {"empty entry"});
  KILN_CHECK_ERROR(PassManager::parse("dce,"), InvalidArgument, {"empty entry"});
  // A pipeline that fails to parse adds nothing.
  PassManager pm = PassManager::parse("dce");
  KILN_CHECK_ERROR(pm.add_pipeline("cse,nope"), NotFound, {"'nope'"});
  CHECK(pm.size() == 1);
}

TEST_CASE("a pass that breaks the IR is named in an Internal error carrying the verifier's message",
          "[passes][pass_manager]") {
  Chain c;
  auto msg = KILN_CHECK_ERROR(run_pipeline(c.p, "dce,test-break-ir,cse", {c.r2}), Internal,
                              {"pass 'test-break-ir' left the IR invalid"});
  CHECK_THAT(msg, Catch::Contains("kiln.relu"));  // the verifier names the op it rejects
}

TEST_CASE("an error thrown by a pass carries the pass's name", "[passes][pass_manager]") {
  Chain c;
  KILN_CHECK_ERROR(run_pipeline(c.p, "test-throw"), InvalidArgument,
                   {"pass 'test-throw' failed", "not what I expected"});
}

TEST_CASE("a program invalid before the pipeline is reported as the input's fault, not a pass's",
          "[passes][pass_manager]") {
  Chain c;
  c.p.block().front()->move_to_end(&c.p.block());
  KILN_CHECK_ERROR(run_pipeline(c.p, "dce"), InvalidArgument, {"invalid before the pass pipeline"});
}

TEST_CASE("registering a pass name twice, or a name a pipeline cannot hold, is an error",
          "[passes][pass_manager]") {
  auto make = [] { return create_dce_pass(); };
  KILN_CHECK_ERROR(PassRegistry::instance().add("dce", make), AlreadyExists, {"'dce'"});
  KILN_CHECK_ERROR(PassRegistry::instance().add("a,b", make), InvalidArgument, {"'a,b'"});
  KILN_CHECK_ERROR(PassRegistry::instance().add("", make), InvalidArgument, {"empty"});
}

TEST_CASE("a user's pass object runs beside registered ones", "[passes][pass_manager]") {
  Chain c;
  PassManager pm;
  pm.add(std::make_unique<TagReluPass>()).add_pipeline("dce");
  PassContext ctx({c.r2});
  pm.run(c.p, ctx);
  CHECK(c.r1.defining_op()->attribute("tagged"));
  CHECK(count_ops(c.p, "kiln.exp") == 0);
}

TEST_CASE("per-pass timing is a report a user can print", "[passes][pass_manager]") {
  Chain c;
  PassManagerOptions o;
  o.timing = true;
  PassManager pm = PassManager::parse("dce,cse", o);
  PassContext ctx({c.r2});
  pm.run(c.p, ctx);
  const auto& report = pm.timing_report();
  REQUIRE(report.entries.size() == 2);
  CHECK(report.entries[0].pass == "dce");
  CHECK(report.entries[0].runs == 1);
  CHECK(report.entries[0].ops_erased == 1);  // the unused exp
  CHECK(report.total_ms() >= 0);
  const std::string text = report.to_string();
  CHECK_THAT(text, Catch::Contains("dce"));
  CHECK_THAT(text, Catch::Contains("cse"));
  CHECK_THAT(text, Catch::Contains("total"));
}

TEST_CASE("the IR is printed before and after the chosen passes only", "[passes][pass_manager]") {
  Chain c;
  std::ostringstream os;
  PassManagerOptions o;
  o.print_ir_after = {"dce"};
  o.print_ir_before = {"cse"};
  o.print_stream = &os;
  PassManager pm = PassManager::parse("dce,cse,simplify", o);
  PassContext ctx({c.r2});
  pm.run(c.p, ctx);
  const std::string s = os.str();
  CHECK_THAT(s, Catch::Contains("IR after 'dce'"));
  CHECK_THAT(s, Catch::Contains("IR before 'cse'"));
  CHECK_THAT(s, !Catch::Contains("IR before 'dce'"));
  CHECK_THAT(s, !Catch::Contains("simplify"));
  CHECK_THAT(s, Catch::Contains("kiln.relu"));
  CHECK_THAT(s, !Catch::Contains("kiln.exp"));  // dce ran before the first print
}

TEST_CASE("a nested pass reaches the bodies of kiln.if and kiln.while", "[passes][pass_manager]") {
  Program main_prog, startup;
  Value out;
  {
    ProgramGuard guard(main_prog, startup);
    Value x = data("x", {4});
    Value pred = greater_than(full({1}, 1.0), full({1}, 0.0));
    out = cond(
        pred,
        [&]() -> Value {
          Value r = main_builder().create<ReluOp>(x).result();
          main_builder().create<ExpOp>(x);  // unused, inside the then branch
          return r;
        },
        [&]() -> Value { return main_builder().create<TanhOp>(x).result(); });
  }
  CHECK(count_ops(main_prog, "kiln.exp") == 1);
  run_pipeline(main_prog, "test-tag-relu,dce", {out});
  CHECK(count_ops(main_prog, "kiln.exp") == 0);
  bool tagged = false;
  for (Block* b : blocks_innermost_first(main_prog))
    for (Operation* op : *b)
      if (op->name() == "kiln.relu") tagged = static_cast<bool>(op->attribute("tagged"));
  CHECK(tagged);
}
