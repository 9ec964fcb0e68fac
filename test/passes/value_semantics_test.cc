// The "vtensor" pass as a user sees it: value-semantics ops read and give
// vtensors, kiln.to_vtensor / kiln.to_tensor stand only at the program's
// edges, ops that write or view a value keep it a tensor, the "inplace"
// pass leaves vtensors pure, and every result is bit for bit what the
// program as written gives.
#include <sstream>

#include "passes/passes_test_util.h"
#include "kiln/dialect/value_semantics_ops.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/ir/parser.h"
#include "kiln/kernel/random.h"

using namespace kiln;
using namespace kiln_passes_test;

namespace {

using Dims0 = std::vector<std::int64_t>;

std::string text_of(const Program& p) {
  std::ostringstream os;
  p.print(os);
  return os.str();
}

}  // namespace

TEST_CASE("vtensor makes a chain of value-semantics ops read and give vtensors, converted only at its edges",
          "[passes][vtensor]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{6}).result();
  Value e = b.create<ExpOp>(x).result();
  Value t = b.create<TanhOp>(e).result();
  Value s = b.create<AddOp>(t, e).result();
  Value y = b.create<ReluOp>(s).result();
  Program q = p.clone();
  const auto out = run_pipeline(q, "vtensor", {q.block().back()->result(0)});
  // x (a feed) goes in once, the fetched relu comes out once.
  CHECK(count_ops(q, "kiln.to_vtensor") == 1);
  CHECK(count_ops(q, "kiln.to_tensor") == 1);
  for (Operation* op : q.block())
    if (op->name() == "kiln.exp" || op->name() == "kiln.tanh" || op->name() == "kiln.add" ||
        op->name() == "kiln.relu")
      CHECK(op->result_type(0).isa<VTensorType>());
  CHECK(out[0].type().isa<TensorType>());  // the fetched value is the tensor again
  // The text form reads back as it prints.
  const std::string text = text_of(q);
  CHECK(text.find("vtensor<6xf32>") != std::string::npos);
  CHECK(text_of(parse_program(text)) == text);
  check_same_results(p, {y}, "vtensor");
  check_same_results(p, {y, e}, "vtensor");
}

TEST_CASE("vtensor keeps a tensor where an op writes it in place or views it", "[passes][vtensor]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{6}).result();
  Value e = b.create<ExpOp>(x).result();
  Value r = b.create<Relu_Op>(e).result();  // writes e in place
  Value t = b.create<TanhOp>(r).result();
  Value v = b.create<ReshapeOp>(t, Dims0{2, 3}).result();  // views t
  Value y = b.create<ScaleOp>(v, 2.0, 1.0).result();
  Program q = p.clone();
  run_pipeline(q, "vtensor", {q.block().back()->result(0)});
  for (Operation* op : q.block()) {
    if (op->name() == "kiln.relu_") CHECK(op->operand_source(0).type().isa<TensorType>());
    if (op->name() == "kiln.reshape") CHECK(op->operand_source(0).type().isa<TensorType>());
    if (op->name() == "kiln.exp" || op->name() == "kiln.tanh") CHECK(op->result_type(0).isa<VTensorType>());
  }
  // exp's result goes back to a tensor for relu_, tanh's for the reshape.
  CHECK(count_ops(q, "kiln.to_tensor") >= 2);
  check_same_results(p, {y}, "vtensor");
  check_same_results(p, {y}, "pure,vtensor,dce,cse,fold,simplify,fuse,inplace");
}

TEST_CASE("inplace leaves an op over vtensors pure", "[passes][vtensor][inplace]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{6}).result();
  Value e = b.create<ExpOp>(x).result();
  Value r = b.create<ReluOp>(e).result();  // e dies here: inplace alone makes it relu_
  Value y = b.create<TanhOp>(r).result();
  Program alone = p.clone();
  run_pipeline(alone, "inplace", {alone.block().back()->result(0)});
  CHECK(count_ops(alone, "kiln.relu_") == 1);
  Program q = p.clone();
  run_pipeline(q, "vtensor,inplace", {q.block().back()->result(0)});
  CHECK(count_ops(q, "kiln.relu_") == 0);
  CHECK(count_ops(q, "kiln.relu") == 1);
  check_same_results(p, {y}, "vtensor,inplace");
}

TEST_CASE("training through the vtensor pipeline gives the losses training as written gives",
          "[passes][vtensor]") {
  Program main, startup;
  Value loss;
  {
    ProgramGuard guard(main, startup);
    auto x = data("x", {8, 12});
    auto label = data("label", {8}, DataType::Int64);
    nn::Linear fc1(12, 16), fc2(16, 4);
    nn::ReLU relu;
    loss = nn::CrossEntropyLoss()(fc2(relu(fc1(x))), label);
    optim::Adam(1e-2).minimize(loss);
  }
  std::vector<float> xs(8 * 12);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = 0.05f * static_cast<float>(i % 17) - 0.4f;
  const FeedMap feeds{{"x", Tensor::from_vector<float>({8, 12}, xs)},
                      {"label", Tensor::from_vector<std::int64_t>({8}, {0, 1, 2, 3, 3, 2, 1, 0})}};
  auto train = [&](const char* passes) {
    Executor exe(Place::cpu(), {.passes = passes});
    set_random_seed(5);
    exe.run(startup);
    std::vector<float> losses;
    for (int step = 0; step < 5; ++step) losses.push_back(exe.run(main, feeds, {loss})[0].to_vector<float>()[0]);
    return losses;
  };
  const auto want = train("");
  CHECK(train("vtensor") == want);
  CHECK(train("vtensor,dce,cse,fold,simplify,fuse,inplace") == want);
  Program q = main.clone();
  run_pipeline(q, "vtensor");
  CHECK(count_ops(q, "kiln.to_vtensor") > 0);
  q.verify();
}

TEST_CASE("kiln.to_tensor of a tensor and kiln.to_vtensor of a vtensor are errors naming the op",
          "[passes][vtensor]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{6}).result();
  CHECK_THROWS_WITH(b.create<ToTensorOp>(x), Catch::Contains("kiln.to_tensor") && Catch::Contains("takes a vtensor"));
  Value v = b.create<ToVTensorOp>(x).result();
  CHECK(v.type() == VTensorType::get(DataType::Float32, {6}));
  CHECK_THROWS_WITH(b.create<ToVTensorOp>(v), Catch::Contains("kiln.to_vtensor") && Catch::Contains("takes a tensor"));
}
