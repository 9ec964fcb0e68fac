// The "pure" and "inplace" passes as a user sees them: which ops change into
// their twin, which stay, that the buffers are shared (or freed) as said,
// and that every result is bit for bit what the program as written gives.
#include "passes/passes_test_util.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/frontend/frontend.h"
#include "kiln/runtime/cuda_context.h"

using namespace kiln;
using namespace kiln_passes_test;

TEST_CASE("inplace turns a relu whose operand dies there into relu_, sharing the operand's variable",
          "[passes][inplace]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{6}).result();
  Value e = b.create<ExpOp>(x).result();
  Value r = b.create<ReluOp>(e).result();
  Value y = b.create<TanhOp>(r).result();
  Program q = p.clone();
  run_pipeline(q, "inplace", {q.block().back()->result(0)});
  CHECK(count_ops(q, "kiln.relu_") == 1);
  CHECK(count_ops(q, "kiln.relu") == 0);
  check_same_results(p, {y}, "inplace");
  Executor exe(Place::cpu(), {.passes = "inplace"});
  exe.run(p, six_values_feed(), {y, r});  // r fetched too: it follows its replacement, relu_'s result
  CHECK(exe.last_core()->slot_of(e) == exe.last_core()->slot_of(r));
}

namespace {
// logits = scale(x); (loss, lse) = cross_entropy(logits, label);
// dx = cross_entropy_grad(logits, lse, label, 1); fetched: tanh(dx), dx,
// and neg(logits) read after the gradient when `read_after`.
struct CrossEntropyGradProgram {
  Program p;
  Value logits, dx;
  std::vector<FetchTarget> fetch;
  explicit CrossEntropyGradProgram(bool read_after) {
    Builder b(p);
    Value x = b.create<DataOp>("x", std::vector<std::int64_t>{2, 3}).result();
    Value label = b.create<DataOp>("label", std::vector<std::int64_t>{2}, DataType::Int64).result();
    logits = b.create<ScaleOp>(x, 2.0, 0.5).result();
    auto ce = b.create<CrossEntropyOp>(logits, label);
    Value ones = b.create<FullOp>(std::vector<std::int64_t>{2, 1}, 1.0, DataType::Float32).result();
    dx = b.create<GradOf<CrossEntropyOp>>(ce.operation(), logits, ce.result(1), label, ones).result();
    fetch.push_back(b.create<TanhOp>(dx).result());
    fetch.push_back(dx);  // fetched too: it follows its replacement, cross_entropy_grad_'s result
    if (read_after) fetch.push_back(b.create<NegOp>(logits).result());
  }
};
}  // namespace

TEST_CASE("inplace writes cross_entropy's gradient over logits that die there, with the same bits",
          "[passes][inplace]") {
  CrossEntropyGradProgram g(false);
  Program q = g.p.clone();
  run_pipeline(q, "inplace", {q.block().back()->result(0)});
  CHECK(count_ops(q, "kiln.cross_entropy_grad_") == 1);
  CHECK(count_ops(q, "kiln.cross_entropy_grad") == 0);
  const FeedMap feed{{"x", Tensor::from_vector<float>({2, 3}, {0.1f, -2.f, 3.f, 0.f, 1.f, -1.f})},
                     {"label", Tensor::from_vector<std::int64_t>({2}, {2, 0})}};
  Executor plain(Place::cpu(), {.passes = ""}), inplace(Place::cpu(), {.passes = "inplace"});
  const auto want = plain.run(g.p, feed, g.fetch);
  const auto got = inplace.run(g.p, feed, g.fetch);
  CHECK(same_bits(got[0], want[0]));
  CHECK(same_bits(got[1], want[1]));
  CHECK(inplace.last_core()->slot_of(g.logits) == inplace.last_core()->slot_of(g.dx));
  // Logits read after the gradient keep their buffer.
  CrossEntropyGradProgram later(true);
  PassContext ctx(std::vector<Value>{later.fetch[0].value, later.fetch[1].value, later.fetch[2].value});
  PassManager::parse("inplace").run(later.p, ctx);
  CHECK(count_ops(later.p, "kiln.cross_entropy_grad_") == 0);
}

TEST_CASE("for a CUDA target, inplace makes only twins with a CUDA kernel for the dtype",
          "[passes][inplace]") {
  if (!built_with_cuda()) return;
  CrossEntropyGradProgram g(false);
  PassContext ctx(std::vector<Value>{g.fetch[0].value, g.fetch[1].value});
  ctx.target_place = Place::cuda(0);
  PassManager::parse("inplace").run(g.p, ctx);
  CHECK(count_ops(g.p, "kiln.cross_entropy_grad_") == 1);
  // relu_ has no bf16 kernel on CUDA either.
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{6}).result();
  Value h = b.create<CastOp>(b.create<ExpOp>(x).result(), DataType::BFloat16).result();
  Value r = b.create<ReluOp>(b.create<NegOp>(h).result()).result();
  Value f = b.create<ReluOp>(b.create<NegOp>(x).result()).result();
  PassContext cuda(std::vector<Value>{r, f});
  cuda.target_place = Place::cuda(0);
  PassManager::parse("inplace").run(p, cuda);
  CHECK(count_ops(p, "kiln.relu_") == 1);  // the f32 one
  CHECK(count_ops(p, "kiln.relu") == 1);
}

TEST_CASE("on CUDA, cross_entropy's gradient written over its logits gives the CPU's results",
          "[passes][inplace][cuda]") {
  if (cuda_device_count() == 0) return;
  CrossEntropyGradProgram g(false);
  const FeedMap feed{{"x", Tensor::from_vector<float>({2, 3}, {0.1f, -2.f, 3.f, 0.f, 1.f, -1.f})},
                     {"label", Tensor::from_vector<std::int64_t>({2}, {2, 0})}};
  Executor cpu(Place::cpu(), {.passes = ""}), gpu(Place::cuda(0), {.passes = "inplace"});
  const auto want = cpu.run(g.p, feed, g.fetch);
  const auto got = gpu.run(g.p, feed, g.fetch);
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto a = copy_to_place(got[i], Place::cpu()).to_vector<float>(), b = want[i].to_vector<float>();
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k) CHECK(a[k] == Approx(b[k]).margin(1e-6));
  }
}

TEST_CASE("inplace leaves an op whose operand is read later, fetched, a feed or read twice there",
          "[passes][inplace]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{6}).result();
  Value fed = b.create<SqrtOp>(x).result();  // x is a feed: never written
  Value e = b.create<ExpOp>(x).result();
  Value later = b.create<ReluOp>(e).result();  // e is read again below
  Value sum = b.create<AddOp>(later, e).result();
  Value t = b.create<TanhOp>(x).result();
  Value fetched = b.create<ReluOp>(t).result();  // t is fetched
  Value s = b.create<SigmoidOp>(x).result();
  Value twice = b.create<MulOp>(s, s).result();  // s read twice by the op itself
  const std::vector<Value> fetch{fed, sum, t, fetched, twice};
  PassContext ctx(fetch);
  PassManager::parse("inplace").run(p, ctx);
  CHECK(count_ops(p, "kiln.relu_") == 0);
  CHECK(count_ops(p, "kiln.sqrt_") == 0);
  check_same_results(p, ctx.live_out(), "inplace");
}

TEST_CASE("inplace leaves a bf16 relu as it is: relu_ has no bf16 kernel", "[passes][inplace]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{6}).result();
  Value h = b.create<CastOp>(b.create<ExpOp>(x).result(), DataType::BFloat16).result();
  Value r = b.create<ReluOp>(b.create<NegOp>(h).result()).result();
  Value y = b.create<CastOp>(r, DataType::Float32).result();
  run_pipeline(p, "inplace", {y});
  CHECK(count_ops(p, "kiln.relu") == 1);
  CHECK(count_ops(p, "kiln.relu_") == 0);
  Executor exe(Place::cpu(), {.passes = "inplace"});
  const auto got = exe.run(p, six_values_feed(), {y});
  CHECK(got[0].dims() == Dims{6});
}

TEST_CASE("pure turns relu_ of a temporary into relu, and later readers of the operand read its result",
          "[passes][pure]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{6}).result();
  Value e = b.create<ExpOp>(x).result();
  Value before = b.create<NegOp>(e).result();  // reads e before the update: the old value
  b.create<Relu_Op>(b.create<ScaleOp>(e, 1.0, -2.0).result());  // not e: a temporary of its own
  Value s = b.create<ScaleOp>(e, 1.0, -2.0).result();
  b.create<Relu_Op>(s);
  Value after = b.create<TanhOp>(s).result();  // reads s after relu_: the updated value
  Program q = p.clone();
  run_pipeline(q, "pure,dce", {q.block().back()->result(0)});
  CHECK(count_ops(q, "kiln.relu_") == 0);
  CHECK(count_ops(q, "kiln.relu") == 1);  // the other relu_ wrote a temporary nobody read: gone
  check_same_results(p, {before, after}, "pure");
}

TEST_CASE("pure leaves relu_ of a feed, a parameter, a fetched value or a value a fetch op keeps",
          "[passes][pure]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{6}).result();
  p.set_parameter("w", Parameter{f32({6})});
  Value w = b.create<ParameterOp>("w", f32({6})).result();
  b.create<Relu_Op>(x);
  b.create<Relu_Op>(w);
  Value e = b.create<ExpOp>(x).result();
  b.create<Relu_Op>(e);
  Value k = b.create<ExpOp>(x).result();
  b.create<FetchOp>(k, "k");
  b.create<Sqrt_Op>(k);
  PassContext ctx({e});
  PassManager::parse("pure").run(p, ctx);
  CHECK(count_ops(p, "kiln.relu_") == 3);
  CHECK(count_ops(p, "kiln.sqrt_") == 1);
}

TEST_CASE("after pure, an in-place relu no longer splits an elementwise chain; inplace takes the buffer back",
          "[passes][pure][inplace]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{6}).result();
  Value e = b.create<ScaleOp>(b.create<ExpOp>(x).result(), 2.0, -1.0).result();
  b.create<Relu_Op>(e);
  Value y = b.create<TanhOp>(b.create<SqrtOp>(e).result()).result();
  Program fused = p.clone();
  run_pipeline(fused, "fuse", {fused.block().back()->result(0)});
  CHECK(count_ops(fused, "kiln.relu_") == 1);  // a barrier: sqrt and tanh stay apart
  CHECK(count_ops(fused, "kiln.sqrt") == 1);
  Program both = p.clone();
  run_pipeline(both, "pure,fuse", {both.block().back()->result(0)});
  CHECK(count_ops(both, "kiln.fused_elementwise") == 1);
  CHECK(count_ops(both, "kiln.relu_") == 0);
  CHECK(count_ops(both, "kiln.sqrt") == 0);
  check_same_results(p, {y}, "pure,fuse");
  check_same_results(p, {y}, "pure,inplace");
  check_same_results(p, {y}, "pure,dce,cse,fold,simplify,fuse,inplace");
}

namespace {
// A GPT-like head trained with SGD: ids [2, 4] → Embedding(11, 8) →
// LayerNorm → Linear(8, 11), logits [2, 4, 11] → cross_entropy (Mean)
// against label [2, 4]; with `reshape`, the logits reshaped to [8, 11]
// against label [8] first.
struct GptHead {
  Program main, startup;
  Value loss;
  FeedMap feed;
  explicit GptHead(bool reshape) {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    Value ids = data("ids", {2, 4}, DataType::Int64);
    Value label = data("label", reshape ? std::vector<std::int64_t>{8} : std::vector<std::int64_t>{2, 4},
                       DataType::Int64);
    Value logits = nn::Linear(8, 11)(nn::LayerNorm({8})(nn::Embedding(11, 8)(ids)));
    if (reshape) logits = main_builder().create<ReshapeOp>(logits, std::vector<std::int64_t>{-1, 11}).result();
    loss = nn::functional::cross_entropy(logits, label);
    optim::SGD(0.5).minimize(loss);
    const std::vector<std::int64_t> next{3, 1, 4, 1, 5, 9, 2, 6};
    feed = {{"ids", Tensor::from_vector<std::int64_t>({2, 4}, {1, 3, 1, 4, 1, 5, 9, 2})},
            {"label", reshape ? Tensor::from_vector<std::int64_t>({8}, next)
                              : Tensor::from_vector<std::int64_t>({2, 4}, next)}};
  }
};

std::size_t count_instructions(const InterpreterCore& core, std::string_view op_name) {
  std::size_t n = 0;
  for (std::uint32_t i = 0; i < core.num_instructions(); ++i) n += core.instruction(i).op_name == op_name;
  return n;
}
}  // namespace

TEST_CASE("a GPT-like head, [B, L, V] logits against [B, L] labels, writes cross_entropy's gradient over "
          "its logits under the default passes; reshaped to [B·L, V] (a view), the logits keep their buffer",
          "[passes][inplace]") {
  GptHead direct(false), reshaped(true);
  Executor a, b;
  a.run(direct.startup);
  b.run(reshaped.startup);
  for (const std::string& name : a.scope().local_var_names())  // the same parameters in both
    b.scope().var(name).set(a.scope().find_var(name)->get<Tensor>().clone());
  for (int step = 0; step < 2; ++step) {
    const Tensor la = a.run(direct.main, direct.feed, {direct.loss})[0];
    const Tensor lb = b.run(reshaped.main, reshaped.feed, {reshaped.loss})[0];
    CHECK(same_bits(la, lb));
  }
  CHECK(count_instructions(*a.last_core(), "kiln.cross_entropy_grad_") == 1);
  CHECK(count_instructions(*a.last_core(), "kiln.cross_entropy_grad") == 0);
  CHECK(count_instructions(*b.last_core(), "kiln.cross_entropy_grad_") == 0);
  CHECK(count_instructions(*b.last_core(), "kiln.cross_entropy_grad") == 1);
}
