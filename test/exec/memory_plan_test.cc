// The executor's memory plan (kiln/exec/memory_plan.h): after a probe run,
// a host plan's temporaries live in one arena per run state, values whose
// lifetimes do not overlap sharing bytes; the results never change.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "exec/exec_test_util.h"
#include "kiln/exec/memory_plan.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/kernel/random.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

using Dims0 = std::vector<std::int64_t>;
constexpr std::int64_t kElems = 16 * 1024;  // 64 KiB of f32: above the resident buffers' size
constexpr std::size_t kBytes = kElems * sizeof(float);

// out = x, in a tensor the kernel makes itself (not through alloc_output),
// as a user's kernel may.
struct FreshCopyOp : Op<FreshCopyOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "memory_plan_test.fresh_copy";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder&, OperationArgument& arg, Value x) { arg.add_operand(x); }
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute) { return {in.at(0)}; }
};
KILN_REGISTER_OP(FreshCopyOp);
void fresh_copy_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor out = Tensor::empty(in.dims(), in.dtype());
  std::memcpy(out.raw_data(), in.raw_data(), in.bytes());
  ctx.output(0) = std::move(out);
}
KILN_REGISTER_KERNEL(FreshCopyOp, Cpu, Undefined, fresh_copy_kernel);

ExecutionOptions options(unsigned threads, bool plan = true) {
  ExecutionOptions o;
  o.num_threads = threads;
  o.thread_plan = threads > 1 ? ThreadPlan::Graph : ThreadPlan::Sequential;
  o.plan_memory = plan;
  o.passes = "";  // the ops as written: the cases look at particular values
  return o;
}

Tensor ramp(std::int64_t rows, std::int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.001f * static_cast<float>(i % 997) - 0.4f;
  return Tensor::from_vector<float>({rows, cols}, v);
}

// out's values for feed x, run as written without a memory plan.
std::vector<float> reference(const Program& p, Value out, const Tensor& x) {
  Scope scope;
  InterpreterCore plain(p, scope, {"x"}, {out}, options(1, false));
  return plain.run(std::vector<Tensor>{x})[0].to_vector<float>();
}

const MemoryPlan::Piece* piece_of(const MemoryPlan& mp, std::uint32_t slot) {
  for (const auto& p : mp.pieces)
    if (p.slot == slot) return &p;
  return nullptr;
}

bool overlap(std::size_t a, std::size_t b, std::size_t bytes) { return a < b + bytes && b < a + bytes; }

}  // namespace

TEST_CASE("temporaries whose lifetimes do not overlap share the arena's bytes", "[exec][memory]") {
  Program p;
  Builder b(p);
  Value v = b.create<DataOp>("x", Dims0{kElems}).result();
  std::vector<Value> chain;
  for (int i = 0; i < 12; ++i) chain.push_back(v = b.create<ExpOp>(b.create<ScaleOp>(v, 0.01, 0.0).result()).result());
  const Value out = b.create<SumOp>(v, std::vector<std::int64_t>{}, false).result();
  Scope scope;
  InterpreterCore core(p, scope, {"x"}, {out}, options(1));
  Scope ref_scope;
  InterpreterCore plain(p, ref_scope, {"x"}, {out}, options(1, false));
  const Tensor x = ramp(1, kElems).reshape({kElems});
  CHECK(core.memory_plan() == nullptr);  // no run yet
  for (int run = 0; run < 4; ++run) {
    const auto got = core.run(std::vector<Tensor>{x});
    const auto want = plain.run(std::vector<Tensor>{x});
    REQUIRE(got[0].to_vector<float>() == want[0].to_vector<float>());
  }
  const MemoryPlan* mp = core.memory_plan();
  REQUIRE(mp != nullptr);
  CHECK(plain.memory_plan() == nullptr);
  // 24 values of 64 KiB; at most a value and the next are live at once.
  CHECK(mp->total_bytes >= 24 * kBytes);
  CHECK(mp->live_bytes <= 2 * kBytes);
  CHECK(mp->arena_bytes_in_order == mp->live_bytes);
  CHECK(mp->arena_bytes <= 2 * kBytes);  // a chain: the DAG orders every pair
  CHECK(mp->temporaries_live_bytes >= mp->live_bytes);
}

TEST_CASE("values the DAG does not order never share bytes in the arena for several threads",
          "[exec][memory]") {
  // a = exp(x), a2 = tanh(a) and then b = sin(x): in program order a is dead
  // before b is made, but b does not depend on a2, so on two threads they
  // may run at once.
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{kElems}).result();
  Value a = b.create<ExpOp>(x).result();
  Value a2 = b.create<TanhOp>(a).result();
  Value bv = b.create<SinOp>(x).result();
  Value c = b.create<AddOp>(a2, bv).result();
  Value out = b.create<SumOp>(c, std::vector<std::int64_t>{}, false).result();
  const Tensor xt = ramp(1, kElems).reshape({kElems});
  const auto want = reference(p, out, xt);
  for (unsigned threads : {1u, 2u}) {
    INFO("threads " << threads);
    Scope scope;
    InterpreterCore core(p, scope, {"x"}, {out}, options(threads), queue_for(threads));
    for (int run = 0; run < 50; ++run)
      REQUIRE(core.run(std::vector<Tensor>{xt})[0].to_vector<float>() == want);
    const MemoryPlan* mp = core.memory_plan();
    REQUIRE(mp != nullptr);
    const auto* pa = piece_of(*mp, core.slot_of(a));
    const auto* pb = piece_of(*mp, core.slot_of(bv));
    REQUIRE(pa != nullptr);
    REQUIRE(pb != nullptr);
    CHECK_FALSE(overlap(pa->offset, pb->offset, kBytes));
    CHECK(overlap(pa->offset_in_order, pb->offset_in_order, kBytes));
  }
}

TEST_CASE("fetched, skip_gc and feed-viewing values are never in the arena", "[exec][memory]") {
  for (unsigned threads : {1u, 2u}) {
    INFO("threads " << threads);
    Program p;
    Builder b(p);
    Value x = b.create<DataOp>("x", Dims0{64, 256}).result();
    Value view = b.create<ReshapeOp>(x, Dims0{256, 64}).result();  // shares the feed's buffer
    Value t = b.create<ExpOp>(view).result();
    Value kept = b.create<TanhOp>(t).result();
    Value fetched = b.create<SinOp>(kept).result();
    Value tmp = b.create<CosOp>(fetched).result();
    Value out = b.create<AddOp>(tmp, kept).result();
    ExecutionOptions o = options(threads);
    o.skip_gc = {kept};
    Scope scope;
    InterpreterCore core(p, scope, {"x"}, {fetched, out}, o, queue_for(threads));
    for (int run = 0; run < 3; ++run) core.run(std::vector<Tensor>{ramp(64, 256)});
    const MemoryPlan* mp = core.memory_plan();
    REQUIRE(mp != nullptr);
    CHECK(piece_of(*mp, core.slot_of(view)) == nullptr);
    CHECK(piece_of(*mp, core.slot_of(kept)) == nullptr);
    CHECK(piece_of(*mp, core.slot_of(fetched)) == nullptr);
    CHECK(piece_of(*mp, core.slot_of(out)) == nullptr);
    CHECK(piece_of(*mp, core.slot_of(t)) != nullptr);
    CHECK(piece_of(*mp, core.slot_of(tmp)) != nullptr);
    // The skip_gc value still holds this run's tanh(exp(x^T)).
    const Tensor& k = core.variable(core.slot_of(kept))->get<Tensor>();
    CHECK(k.dims() == Dims{256, 64});
  }
}

TEST_CASE("a kernel that makes its own output tensor is planned without its piece", "[exec][memory]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{kElems}).result();
  Value a = b.create<ExpOp>(x).result();
  Value f = b.create<FreshCopyOp>(a).result();
  Value c = b.create<TanhOp>(f).result();
  Value out = b.create<SumOp>(c, std::vector<std::int64_t>{}, false).result();
  const Tensor xt = ramp(1, kElems).reshape({kElems});
  const auto want = reference(p, out, xt);
  Scope scope;
  InterpreterCore core(p, scope, {"x"}, {out}, options(1));
  for (int run = 0; run < 6; ++run)
    REQUIRE(core.run(std::vector<Tensor>{xt})[0].to_vector<float>() == want);
  const MemoryPlan* mp = core.memory_plan();
  REQUIRE(mp != nullptr);
  CHECK(piece_of(*mp, core.slot_of(f)) == nullptr);
  CHECK(piece_of(*mp, core.slot_of(a)) != nullptr);
  CHECK(piece_of(*mp, core.slot_of(c)) != nullptr);
}

TEST_CASE("a run with other feed shapes is right, and the arena serves the probe's shapes again",
          "[exec][memory]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{-1, 256}).result();
  Value h = b.create<ExpOp>(b.create<ScaleOp>(x, 0.5, 0.0).result()).result();
  Value out = b.create<SumOp>(b.create<TanhOp>(h).result(), std::vector<std::int64_t>{1}, false).result();
  Scope scope, ref_scope;
  InterpreterCore core(p, scope, {"x"}, {out}, options(1));
  InterpreterCore plain(p, ref_scope, {"x"}, {out}, options(1, false));
  for (std::int64_t rows : {64, 64, 3, 100, 64, 64, 7, 64}) {
    INFO("rows " << rows);
    const Tensor xt = ramp(rows, 256);
    const auto got = core.run(std::vector<Tensor>{xt});
    const auto want = plain.run(std::vector<Tensor>{xt});
    REQUIRE(got[0].dims() == Dims{rows});
    REQUIRE(got[0].to_vector<float>() == want[0].to_vector<float>());
  }
  REQUIRE(core.memory_plan() != nullptr);
  CHECK(core.memory_plan()->feed_dims == std::vector<Dims>{Dims{64, 256}});
}

TEST_CASE("a failed probe run leaves no plan; the next run probes again", "[exec][memory]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{kElems}).result();
  Value a = b.create<ExpOp>(x).result();
  Value t = b.create<ThrowOp>(a, false).result();
  Value out = b.create<SumOp>(b.create<TanhOp>(t).result(), std::vector<std::int64_t>{}, false).result();
  const Tensor xt = ramp(1, kElems).reshape({kElems});
  Scope scope;
  InterpreterCore core(p, scope, {"x"}, {out}, options(1));
  throw_enabled() = true;
  CHECK_THROWS_WITH(core.run(std::vector<Tensor>{xt}), Catch::Contains("boom"));
  throw_enabled() = false;
  CHECK(core.memory_plan() == nullptr);
  const auto want = reference(p, out, xt);
  for (int run = 0; run < 3; ++run) CHECK(core.run(std::vector<Tensor>{xt})[0].to_vector<float>() == want);
  CHECK(core.memory_plan() != nullptr);
}

namespace {

// w = wait_slow(full) and s = slow(full), independent: w waits (at most
// 5 s) for a slow kernel to run beside it, which it sees only when the two
// run on two threads at once (TensorFlow's starvation case, bounded).
struct WaitBesideSlow {
  Program p;
  Value out;
  WaitBesideSlow() {
    Builder b(p);
    Value a = b.create<FullOp>(Dims0{kElems}, 1.0).result();
    Value t = b.create<ThrowOp>(a, false).result();
    Value w = b.create<WaitSlowOp>(t).result();
    Value s = b.create<SlowOp>(b.create<FullOp>(Dims0{kElems}, 2.0).result(), 1000).result();
    out = b.create<SumOp>(b.create<AddOp>(w, s).result(), std::vector<std::int64_t>{}, false).result();
  }
};

}  // namespace

TEST_CASE("the probe run keeps the thread plan: an op waiting for an independent op on a one-thread "
          "pool sees it run from the first run on",
          "[exec][memory]") {
  WaitBesideSlow prog;
  throw_enabled() = false;
  wait_slow_enabled() = true;
  Scope scope;
  InterpreterCore core(prog.p, scope, {}, {prog.out}, options(2), queue_for(2));
  for (int run = 0; run < 3; ++run) {
    INFO("run " << run);
    reset_saw_slow();
    CHECK(core.run()[0].to_vector<float>() == std::vector<float>{3.f * kElems});
    REQUIRE(saw_slow_in_flight() == 1);
  }
  CHECK(core.memory_plan() != nullptr);  // probed over the pool
}

TEST_CASE("after a failed probe the next run keeps the thread plan, and a later one plans the arena",
          "[exec][memory]") {
  WaitBesideSlow prog;
  Scope scope;
  InterpreterCore core(prog.p, scope, {}, {prog.out}, options(2), queue_for(2));
  wait_slow_enabled() = false;  // the slow kernel does not wait for a waiter that never comes
  throw_enabled() = true;
  CHECK_THROWS_WITH(core.run(), Catch::Contains("boom"));
  throw_enabled() = false;
  wait_slow_enabled() = true;
  CHECK(core.memory_plan() == nullptr);
  for (int run = 0; run < 2; ++run) {
    INFO("run " << run);
    reset_saw_slow();
    CHECK(core.run()[0].to_vector<float>() == std::vector<float>{3.f * kElems});
    REQUIRE(saw_slow_in_flight() == 1);
  }
  CHECK(core.memory_plan() != nullptr);
}

TEST_CASE("no memory plan without GC or with plan_memory off", "[exec][memory]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", Dims0{kElems}).result();
  Value out = b.create<SumOp>(b.create<ExpOp>(b.create<TanhOp>(x).result()).result(),
                              std::vector<std::int64_t>{}, false).result();
  for (bool gc : {false, true}) {
    ExecutionOptions o = options(1, /*plan=*/!gc);  // (gc off, plan on) and (gc on, plan off)
    o.gc = gc;
    Scope scope;
    InterpreterCore core(p, scope, {"x"}, {out}, o);
    for (int run = 0; run < 3; ++run) core.run(std::vector<Tensor>{ramp(1, kElems).reshape({kElems})});
    CHECK(core.memory_plan() == nullptr);
  }
}

TEST_CASE("training an MLP with the memory plan gives the parameters training without it gives",
          "[exec][memory]") {
  auto train = [](bool plan, unsigned threads) {
    Program main, startup;
    Value loss;
    {
      ProgramGuard guard(main, startup);
      auto x = data("x", {-1, 64});
      auto label = data("label", {-1}, DataType::Int64);
      nn::Linear fc1(64, 128), fc2(128, 128), fc3(128, 10);
      nn::ReLU relu;
      loss = nn::CrossEntropyLoss()(fc3(relu(fc2(relu(fc1(x))))), label);
      optim::Adam(1e-3).minimize(loss);
    }
    ExecutionOptions o;
    o.num_threads = threads;
    o.plan_memory = plan;
    Executor exe(Place::cpu(), o);
    set_random_seed(7);
    exe.run(startup);
    std::vector<float> xs(32 * 64);
    std::vector<std::int64_t> ys(32);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = 0.01f * static_cast<float>(i % 89) - 0.3f;
    for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<std::int64_t>(i % 10);
    const FeedMap feeds{{"x", Tensor::from_vector<float>({32, 64}, xs)},
                        {"label", Tensor::from_vector<std::int64_t>({32}, ys)}};
    std::vector<float> losses;
    for (int step = 0; step < 8; ++step) losses.push_back(exe.run(main, feeds, {loss})[0].to_vector<float>()[0]);
    if (plan) CHECK(exe.last_core()->memory_plan() != nullptr);
    return losses;
  };
  const auto want = train(false, 1);
  CHECK(train(true, 1) == want);
  CHECK(train(true, 2) == want);
}

TEST_CASE("a static-shape program's memory plan and peak are known when its plan is built; the probe run "
          "finds the same",
          "[exec][memory]") {
  auto same = [](const MemoryPlan& built, const MemoryPlan& probed) {
    CHECK(built.arena_bytes == probed.arena_bytes);
    CHECK(built.arena_bytes_in_order == probed.arena_bytes_in_order);
    CHECK(built.total_bytes == probed.total_bytes);
    CHECK(built.live_bytes == probed.live_bytes);
    CHECK(built.temporaries_live_bytes == probed.temporaries_live_bytes);
    REQUIRE(built.pieces.size() == probed.pieces.size());
    for (std::size_t k = 0; k < built.pieces.size(); ++k) {
      CHECK(built.pieces[k].slot == probed.pieces[k].slot);
      CHECK(built.pieces[k].bytes == probed.pieces[k].bytes);
      CHECK(built.pieces[k].offset == probed.pieces[k].offset);
      CHECK(built.pieces[k].dims == probed.pieces[k].dims);
    }
    CHECK(built.gc == probed.gc);
  };
  SECTION("a chain of 12 scale + exp") {
    Program p;
    Builder b(p);
    Value v = b.create<DataOp>("x", Dims0{kElems}).result();
    for (int i = 0; i < 12; ++i) v = b.create<ExpOp>(b.create<ScaleOp>(v, 0.01, 0.0).result()).result();
    const Value out = b.create<SumOp>(v, std::vector<std::int64_t>{}, false).result();
    for (unsigned threads : {1u, 2u}) {
      Scope scope;
      InterpreterCore core(p, scope, {"x"}, {out}, options(threads), queue_for(threads));
      const std::shared_ptr<const MemoryPlan> built = plan_memory_from_types(core.plan());
      REQUIRE(built);
      CHECK(built->arena_bytes <= 2 * kBytes);
      for (int run = 0; run < 2; ++run) core.run(std::vector<Tensor>{ramp(1, kElems).reshape({kElems})});
      REQUIRE(core.memory_plan());
      same(*built, *core.memory_plan());
    }
  }
  SECTION("an MLP's training step (backward and Adam), after the default passes") {
    Program main, startup;
    Value loss;
    {
      ProgramGuard guard(main, startup);
      auto x = data("x", {32, 64});
      auto label = data("label", {32}, DataType::Int64);
      nn::Linear fc1(64, 128), fc2(128, 10);
      loss = nn::CrossEntropyLoss()(fc2(nn::ReLU()(fc1(x))), label);
      optim::Adam(1e-3).minimize(loss);
    }
    Executor exe(Place::cpu(), ExecutionOptions{.num_threads = 1});
    exe.run(startup);
    std::vector<std::int64_t> ys(32);
    for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<std::int64_t>(i % 10);
    const std::vector<Tensor> feeds{ramp(32, 64), Tensor::from_vector<std::int64_t>({32}, ys)};
    InterpreterCore core(main, exe.scope(), {"x", "label"}, {loss}, ExecutionOptions{.num_threads = 1});
    const std::shared_ptr<const MemoryPlan> built = plan_memory_from_types(core.plan());
    REQUIRE(built);
    CHECK(core.memory_plan() == nullptr);  // the run state's own comes with its first run
    for (int step = 0; step < 2; ++step) core.run(feeds);
    REQUIRE(core.memory_plan());
    same(*built, *core.memory_plan());
  }
  SECTION("none when a temporary's shape is known only at run time") {
    Program p;
    Builder b(p);
    const Value out = b.create<ExpOp>(b.create<DataOp>("x", Dims0{-1}).result()).result();
    Scope scope;
    InterpreterCore core(p, scope, {"x"}, {b.create<SumOp>(out, std::vector<std::int64_t>{}, false).result()},
                         options(1));
    CHECK(plan_memory_from_types(core.plan()) == nullptr);
  }
}
