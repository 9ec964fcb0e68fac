// Garbage collection in the interpreter core (seed 001 §3.3.2, §4.2
// "CheckGC"): each temporary is freed right after its last user; parameters,
// feeds, fetched values and skip-listed values are never freed; counters are
// restored for the next run (also after a failed one); peak memory with GC is
// lower than without.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "exec/exec_test_util.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cpu_allocator.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

ExecutionOptions config(unsigned threads, bool sequential = false) {
  ExecutionOptions c;
  c.num_threads = threads;
  if (sequential) c.thread_plan = ThreadPlan::Sequential;
  c.recycle_bytes = 0;  // GC frees every temporary (no resident small buffers)
  c.passes = "";        // the ops as written: the cases look at particular values' GC
  c.plan_memory = false;  // GC as the plan's lists say (no arena: memory_plan_test.cc)
  return c;
}

}  // namespace

TEST_CASE("GC: a temporary is freed right after its last user, not before", "[exec]") {
  for (unsigned threads : {1u, 2u, 4u})
    for (bool sequential : {true, false}) {
      if (sequential && threads > 1) continue;
      INFO("threads " << threads << ", sequential " << sequential);
      clear_probes();
      Program p;
      Builder b(p);
      auto a = b.create<FullOp>(std::vector<std::int64_t>{8}, 3.0);  // op 0
      auto r = b.create<ReluOp>(a.result());                         // op 1: a's last user
      // Runs after a's last user (it reads r): a must be gone.
      auto p1 = b.create<ProbeOp>(r.result(), 1);                    // op 2
      // Runs before r's last user (op 4 reads p2): r must still be there.
      auto p2 = b.create<ProbeOp>(p1.result(), 2);                   // op 3
      auto s = b.create<AddOp>(r.result(), p2.result());             // op 4: r's last user
      auto p3 = b.create<ProbeOp>(s.result(), 3);                    // op 5
      Scope scope;
      InterpreterCore core(p, scope, {}, {p3.result()}, config(threads, sequential), queue_for(threads));
      watch(1, core.variable(core.slot_of(a.result())));
      watch(2, core.variable(core.slot_of(r.result())));
      watch(3, core.variable(core.slot_of(r.result())));
      for (int run = 0; run < 5; ++run) {
        auto out = core.run();
        REQUIRE(out[0].to_vector<float>() == std::vector<float>(8, 6.f));
        CHECK(probe_result(1) == 0);
        CHECK(probe_result(2) == 1);
        CHECK(probe_result(3) == 0);
      }
      // The GC plan: a is freed by relu, r by the add.
      auto frees_of = [&](std::uint32_t op) { return core.instruction(instr_of(core, op)).frees; };
      CHECK(frees_of(1) == std::vector<std::uint32_t>{core.slot_of(a.result())});
      auto f4 = frees_of(4);
      CHECK(std::count(f4.begin(), f4.end(), core.slot_of(r.result())) == 1);
      // After the run every temporary is empty but the fetched one.
      for (Value v : {a.result(), r.result(), p1.result(), p2.result(), s.result()})
        CHECK_FALSE(core.variable(core.slot_of(v))->is_initialized());
      CHECK(core.variable(core.slot_of(p3.result()))->is_initialized());
    }
}

TEST_CASE("GC: a value nobody reads is freed right after its writer", "[exec]") {
  clear_probes();
  Program p;
  Builder b(p);
  auto unused = b.create<FullOp>(std::vector<std::int64_t>{4}, 1.0);  // op 0
  auto x = b.create<FullOp>(std::vector<std::int64_t>{4}, 2.0);       // op 1
  auto pr = b.create<ProbeOp>(x.result(), 7);                          // op 2
  Scope scope;
  InterpreterCore core(p, scope, {}, {pr.result()}, config(1, true));
  CHECK(core.instruction(instr_of(core, 0)).frees == std::vector<std::uint32_t>{core.slot_of(unused.result())});
  watch(7, core.variable(core.slot_of(unused.result())));
  core.run();
  CHECK(probe_result(7) == 0);
}

TEST_CASE("GC: parameters, feeds and fetched values are never freed", "[exec]") {
  Scope scope;
  scope.var("w").set(Tensor::from_vector<float>(Dims({3}), {1, 2, 3}));
  Program p;
  Builder b(p);
  auto w = b.create<ParameterOp>("w", TensorType::get(DataType::Float32, {3}));
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{3});
  auto m = b.create<MulOp>(w.result(), x.result());
  auto t = b.create<ReluOp>(m.result());
  auto f = b.create<NegOp>(t.result());
  for (unsigned threads : {1u, 2u}) {
    InterpreterCore core(p, scope, {"x"}, {f.result(), m.result()}, config(threads), queue_for(threads));
    Tensor feed = filled_f32({3}, 2.f);
    std::vector<Tensor> feeds{feed};
    auto out = core.run(feeds);
    CHECK(out[0].to_vector<float>() == std::vector<float>{-2, -4, -6});
    CHECK(out[1].to_vector<float>() == std::vector<float>{2, 4, 6});
    // No instruction frees the parameter, the feed or a fetched value.
    for (std::uint32_t i = 0; i < core.num_instructions(); ++i)
      for (auto s : core.instruction(i).frees) {
        CHECK(s != core.slot_of(w.result()));
        CHECK(s != core.slot_of(x.result()));
        CHECK(s != core.slot_of(m.result()));
        CHECK(s != core.slot_of(f.result()));
      }
    CHECK(scope.find_var("w")->get<Tensor>().to_vector<float>() == std::vector<float>{1, 2, 3});
    CHECK(core.variable(core.slot_of(m.result()))->is_initialized());
    CHECK(core.variable(core.slot_of(f.result()))->is_initialized());
    CHECK_FALSE(core.variable(core.slot_of(t.result()))->is_initialized());
    // The user's feed is intact and not held by the core after the run.
    CHECK(feed.to_vector<float>() == std::vector<float>(3, 2.f));
    feeds.clear();
    CHECK(feed.use_count() == 1);
  }
}

TEST_CASE("GC: a variable with several last users is freed once all are done, every run",
          "[exec]") {
  // a is read by four unordered branches; each branch's end joins in add_n.
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{16}, 1.0);
  std::vector<Value> ends;
  for (int k = 0; k < 4; ++k) {
    Value v = b.create<IdentityOp>(a.result()).result();
    v = b.create<IdentityOp>(v).result();
    ends.push_back(v);
  }
  auto sum = b.create<AddNOp>(ends);
  for (unsigned threads : {1u, 2u, 4u}) {
    Scope scope;
    InterpreterCore core(p, scope, {}, {sum.result()}, config(threads), queue_for(threads));
    const auto sa = core.slot_of(a.result());
    int users_freeing_a = 0;
    for (std::uint32_t i = 0; i < core.num_instructions(); ++i) {
      auto f = core.instruction(i).frees;
      users_freeing_a += static_cast<int>(std::count(f.begin(), f.end(), sa));
    }
    CHECK(users_freeing_a == 4);
    for (int run = 0; run < 50; ++run) {
      auto out = core.run();
      REQUIRE(out[0].to_vector<float>() == std::vector<float>(16, 4.f));
      REQUIRE_FALSE(core.variable(sa)->is_initialized());
    }
  }
}

TEST_CASE("GC: counters are restored after a failed run", "[exec]") {
  // a has two last users; the throwing op sits on one branch, so a's counter
  // is left half-decremented by the failed run.
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{4}, 2.0);
  auto l = b.create<IdentityOp>(a.result());
  auto t = b.create<ThrowOp>(l.result());
  auto r = b.create<SlowOp>(a.result(), 200);
  auto r2 = b.create<IdentityOp>(a.result());
  auto s = b.create<AddNOp>(std::vector<Value>{t.result(), r.result(), r2.result()});
  for (unsigned threads : {1u, 2u}) {
    Scope scope;
    InterpreterCore core(p, scope, {}, {s.result()}, config(threads), queue_for(threads));
    for (int round = 0; round < 3; ++round) {
      throw_enabled() = true;
      CHECK_THROWS_AS(core.run(), Error);
      throw_enabled() = false;
      for (int run = 0; run < 3; ++run) {
        auto out = core.run();
        REQUIRE(out[0].to_vector<float>() == std::vector<float>(4, 6.f));
        REQUIRE_FALSE(core.variable(core.slot_of(a.result()))->is_initialized());
      }
    }
    throw_enabled() = true;
  }
}

TEST_CASE("GC lowers peak memory: a chain of 20 big temporaries", "[exec]") {
  constexpr std::int64_t kElems = 1 << 18;  // 1 MiB of f32 each
  constexpr std::size_t kBytes = kElems * sizeof(float);
  Program p;
  Builder b(p);
  Value v = b.create<FullOp>(std::vector<std::int64_t>{kElems}, 1.0).result();
  for (int i = 0; i < 20; ++i) v = b.create<IdentityOp>(v).result();
  auto peak_of = [&](bool gc) {
    ExecutionOptions o;
    o.num_threads = 1;
    o.gc = gc;
    Executor exe(Place::cpu(), o);
    CpuAllocator& alloc = cpu_allocator();
    const std::size_t before = alloc.bytes_in_use();
    alloc.reset_peak();
    auto out = exe.run(p, {}, {v});
    REQUIRE(out[0].numel() == kElems);
    return alloc.peak_bytes_in_use() - before;
  };
  const std::size_t with_gc = peak_of(true), without_gc = peak_of(false);
  INFO("peak with GC " << with_gc << " B, without " << without_gc << " B");
  CHECK(with_gc < without_gc);
  CHECK(with_gc <= 3 * kBytes);      // input, output (+ slack)
  CHECK(without_gc >= 20 * kBytes);  // everything stays
}

TEST_CASE("GC: a small temporary of static shape is collected, reporting no data, yet keeps its buffer run "
          "after run; a large one is freed",
          "[exec][gc]") {
  for (std::int64_t n : {std::int64_t{8}, std::int64_t{4096}}) {  // 32 bytes vs 16 KiB
    INFO("elements " << n);
    Program p;
    Builder b(p);
    auto x = b.create<DataOp>("x", std::vector<std::int64_t>{n});
    auto r = b.create<ReluOp>(x.result());  // temporary
    auto s = b.create<ScaleOp>(r.result(), 2.0, 0.0);
    Scope scope;
    InterpreterCore core(p, scope, {"x"}, {s.result()}, {.num_threads = 1, .plan_memory = false});  // default buffer plan
    Variable* tmp = core.variable(core.slot_of(r.result()));
    const void* buffer = nullptr;
    for (float v : {1.0f, -3.0f, 5.0f}) {
      std::vector<float> in(static_cast<std::size_t>(n), v);
      auto out = core.run(std::vector<Tensor>{Tensor::from_vector<float>({n}, in)});
      CHECK(out[0].to_vector<float>() == std::vector<float>(static_cast<std::size_t>(n), v > 0 ? 2 * v : 0.0f));
      CHECK_FALSE(tmp->is_initialized());  // collected after its last user
      if (n == 8) {  // parked: the same buffer every run
        REQUIRE(tmp->held_or_parked() != nullptr);
        if (buffer) CHECK(tmp->held_or_parked()->raw_data() == buffer);
        buffer = tmp->held_or_parked()->raw_data();
      } else {
        CHECK(tmp->held_or_parked() == nullptr);
        CHECK_FALSE(tmp->has_spare());
      }
    }
  }
}

TEST_CASE("GC: a small temporary whose shape is known only at run time is freed and keeps a spare buffer",
          "[exec][gc]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1});
  auto r = b.create<ReluOp>(x.result());
  auto s = b.create<ScaleOp>(r.result(), 2.0, 0.0);
  Scope scope;
  InterpreterCore core(p, scope, {"x"}, {s.result()}, {.num_threads = 1, .plan_memory = false});  // default buffer plan
  Variable* tmp = core.variable(core.slot_of(r.result()));
  for (std::int64_t n : {std::int64_t{8}, std::int64_t{4096}, std::int64_t{8}}) {
    INFO("elements " << n);
    auto out = core.run(std::vector<Tensor>{filled_f32({n}, 1.f)});
    CHECK(out[0].to_vector<float>() == std::vector<float>(static_cast<std::size_t>(n), 2.f));
    CHECK_FALSE(tmp->is_initialized());
    CHECK(tmp->has_spare() == (n == 8));
  }
}

TEST_CASE("GC: with recycle_bytes 0 every freed temporary gives its buffer back", "[exec][gc]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{4});
  auto r = b.create<ReluOp>(x.result());
  auto s = b.create<ScaleOp>(r.result(), 2.0, 0.0);
  Scope scope;
  ExecutionOptions c = config(1);
  c.recycle_bytes = 0;
  InterpreterCore core(p, scope, {"x"}, {s.result()}, c);
  core.run(std::vector<Tensor>{Tensor::from_vector<float>({4}, {1, 2, 3, 4})});
  Variable* tmp = core.variable(core.slot_of(r.result()));
  CHECK_FALSE(tmp->is_initialized());
  CHECK_FALSE(tmp->has_spare());
}

TEST_CASE("GC is what a user sees: a collected temporary holds no data, a skip_gc one keeps this run's, "
          "with the default buffer plan and over the memory plan's arena",
          "[exec][gc]") {
  // Paddle's skip_gc_vars: small static temporaries (kept from run to run
  // underneath) and arena pieces are collected like any other.
  for (std::int64_t n : {std::int64_t{8}, std::int64_t{16 * 1024}})
    for (unsigned threads : {1u, 2u})
      for (bool plan : {false, true}) {
        INFO("elements " << n << ", threads " << threads << ", memory plan " << plan);
        Program p;
        Builder b(p);
        auto x = b.create<DataOp>("x", std::vector<std::int64_t>{n});
        auto e = b.create<ExpOp>(x.result());                   // collected
        auto kept = b.create<ScaleOp>(e.result(), 2.0, 0.0);    // skip_gc
        auto t = b.create<TanhOp>(kept.result());               // collected
        auto out = b.create<SumOp>(t.result(), std::vector<std::int64_t>{}, false);
        ExecutionOptions o;
        o.num_threads = threads;
        o.plan_memory = plan;
        o.passes = "";
        o.skip_gc = {kept.result()};
        Scope scope;
        InterpreterCore core(p, scope, {"x"}, {out.result()}, o, queue_for(threads));
        for (float v : {0.5f, -1.0f, 0.25f}) {
          core.run(std::vector<Tensor>{filled_f32({n}, v)});
          CHECK_FALSE(core.variable(core.slot_of(e.result()))->is_initialized());
          CHECK_FALSE(core.variable(core.slot_of(t.result()))->is_initialized());
          const Variable* k = core.variable(core.slot_of(kept.result()));
          REQUIRE(k->is<Tensor>());
          const std::vector<float> got = k->get<Tensor>().to_vector<float>();
          REQUIRE(got.size() == static_cast<std::size_t>(n));
          CHECK(got.front() == Approx(2.0 * std::exp(v)).epsilon(1e-5));
          CHECK(std::all_of(got.begin(), got.end(), [&](float g) { return g == got.front(); }));
        }
        if (plan) CHECK(core.memory_plan() != nullptr);
      }
}
