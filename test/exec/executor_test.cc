// Executor behaviours a user sees: Paddle's (full + full,
// the f32 + f64 error, feeds, skip-GC, two cores on one queue) and
// TensorFlow's (a + b, doubling, a random summation tree, no inputs); the
// errors of bad feeds, fetches and parameters; the core cache.
#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "exec/exec_test_util.h"
#include "kiln/ir/tensor_attribute.h"

using namespace kiln;
using namespace kiln_exec_test;

// ---- Paddle's behaviours ----

TEST_CASE("full + full → add: every element, shape kept", "[exec]") {
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{2, 3}, 2.0);
  auto c = b.create<FullOp>(std::vector<std::int64_t>{2, 3}, 3.0);
  auto s = b.create<AddOp>(a.result(), c.result());
  for (unsigned n : {1u, 2u, 4u}) {
    Executor exe(Place::cpu(), threads(n));
    auto out = exe.run(p, {}, {s.result()});
    REQUIRE(out.size() == 1);
    CHECK(out[0].dims().to_vector() == std::vector<std::int64_t>{2, 3});
    CHECK(out[0].dtype() == DataType::Float32);
    CHECK(out[0].to_vector<float>() == std::vector<float>(6, 5.f));
  }
}

TEST_CASE("an f32 + f64 add is an InvalidArgument error naming kiln.add when built", "[exec]") {
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{2}, 1.0, DataType::Float32);
  auto c = b.create<FullOp>(std::vector<std::int64_t>{2}, 1.0, DataType::Float64);
  auto msg = KILN_CHECK_ERROR(b.create<AddOp>(a.result(), c.result()), InvalidArgument, {"kiln.add"});
  CHECK_THAT(msg, Catch::Contains("f32"));
  CHECK_THAT(msg, Catch::Contains("f64"));
}

TEST_CASE("feeding tensors: data ops receive the caller's tensors by name", "[exec]") {
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{2, 3}, 2.0);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3});
  auto y = b.create<DataOp>("y", std::vector<std::int64_t>{2, 3});
  auto s = b.create<AddOp>(a.result(), x.result());
  auto m = b.create<MulOp>(s.result(), y.result());
  Executor exe(Place::cpu(), threads(2));
  Tensor xt = Tensor::from_vector<float>(Dims({2, 3}), {0, 1, 2, 3, 4, 5});
  Tensor yt = Tensor::from_vector<float>(Dims({2, 3}), {1, 1, 1, 2, 2, 2});
  auto out = exe.run(p, {{"x", xt}, {"y", yt}}, {m.result(), "x"});
  CHECK(out[0].to_vector<float>() == std::vector<float>{2, 3, 4, 10, 12, 14});
  // Fetching a fed value by name gives the caller's tensor back, uncopied.
  CHECK(out[1].shares_buffer_with(xt));
  // Feeds are not kept after the run.
  CHECK(xt.use_count() == 2);  // xt and out[1]
}

TEST_CASE("skip-GC values survive a run while the other temporaries are freed", "[exec]") {
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{4}, 1.0);
  auto r1 = b.create<ReluOp>(a.result());
  auto r2 = b.create<ReluOp>(r1.result());
  auto r3 = b.create<ReluOp>(r2.result());
  Scope scope;
  for (bool sequential : {true, false}) {
    ExecutionOptions cfg;
    if (sequential) cfg.thread_plan = ThreadPlan::Sequential;
    cfg.num_threads = sequential ? 1 : 2;
    cfg.skip_gc = {r1.result()};
    cfg.recycle_bytes = 0;  // small temporaries freed too
    cfg.passes = "";        // the GC of these very values (fold would remove them)
    auto q = sequential ? nullptr : std::make_shared<WorkQueue>(1);
    InterpreterCore core(p, scope, {}, {r3.result()}, cfg, q);
    auto out = core.run();
    CHECK(out[0].to_vector<float>() == std::vector<float>(4, 1.f));
    const Variable* v1 = core.variable(core.slot_of(r1.result()));
    REQUIRE(v1->is<Tensor>());
    CHECK(v1->get<Tensor>().to_vector<float>() == std::vector<float>(4, 1.f));
    CHECK_FALSE(core.variable(core.slot_of(a.result()))->is_initialized());
    CHECK_FALSE(core.variable(core.slot_of(r2.result()))->is_initialized());
  }
}

TEST_CASE("two cores share one work queue: two programs on one Executor run concurrently",
          "[exec]") {
  auto chain = [](float start, int len) {
    auto p = std::make_unique<Program>();
    Builder b(*p);
    Value v = b.create<FullOp>(std::vector<std::int64_t>{64}, double(start)).result();
    // A fan-out/fan-in ladder so both threads of each core have work.
    for (int i = 0; i < len; ++i) {
      Value l = b.create<IdentityOp>(v).result();
      Value r = b.create<IdentityOp>(v).result();
      v = b.create<AddOp>(l, r).result();
    }
    return std::make_pair(std::move(p), v);
  };
  auto [p1, v1] = chain(1.f, 10);   // 1 · 2^10
  auto [p2, v2] = chain(3.f, 12);   // 3 · 2^12
  Executor exe(Place::cpu(), threads(3));
  exe.run(*p1, {}, {v1});
  exe.run(*p2, {}, {v2});
  CHECK(exe.num_cores_built() == 2);
  std::atomic<int> bad{0};
  auto worker = [&](const Program& p, Value v, float want) {
    for (int i = 0; i < 200; ++i) {
      auto out = exe.run(p, {}, {v});
      for (float x : out[0].to_vector<float>())
        if (x != want) bad.fetch_add(1);
    }
  };
  std::thread t1(worker, std::cref(*p1), v1, 1024.f);
  std::thread t2(worker, std::cref(*p2), v2, 3.f * 4096.f);
  t1.join();
  t2.join();
  CHECK(bad.load() == 0);
  CHECK(exe.num_cores_built() == 2);
}

TEST_CASE("two cores built directly on one work queue run concurrently", "[exec]") {
  auto q = std::make_shared<WorkQueue>(2);
  Program p1, p2;
  Value v1, v2;
  {
    Builder b(p1);
    Value v = b.create<FullOp>(std::vector<std::int64_t>{8}, 1.0).result();
    for (int i = 0; i < 30; ++i) v = b.create<AddOp>(b.create<IdentityOp>(v).result(), v).result();
    v1 = v;  // 2^30
  }
  {
    Builder b(p2);
    Value x = b.create<DataOp>("x", std::vector<std::int64_t>{8}).result();
    Value v = x;
    for (int i = 0; i < 20; ++i) v = b.create<MulOp>(b.create<IdentityOp>(v).result(), x).result();
    v2 = v;  // x^21
  }
  Scope scope;
  ExecutionOptions cfg;
  cfg.num_threads = 3;
  InterpreterCore c1(p1, scope, {}, {v1}, cfg, q), c2(p2, scope, {"x"}, {v2}, cfg, q);
  std::atomic<int> bad{0};
  std::thread t1([&] {
    for (int i = 0; i < 300; ++i)
      if (c1.run()[0].to_vector<float>() != std::vector<float>(8, 1073741824.f)) bad++;
  });
  std::thread t2([&] {
    std::vector<Tensor> feeds{filled_f32({8}, 1.f)};
    for (int i = 0; i < 300; ++i)
      if (c2.run(feeds)[0].to_vector<float>() != std::vector<float>(8, 1.f)) bad++;
  });
  t1.join();
  t2.join();
  CHECK(bad.load() == 0);
}

// ---- TensorFlow's behaviours ----

TEST_CASE("a + b", "[exec]") {
  Program p;
  Builder b(p);
  auto a = b.create<DataOp>("a", std::vector<std::int64_t>{}, DataType::Float64);
  auto c = b.create<DataOp>("b", std::vector<std::int64_t>{}, DataType::Float64);
  auto s = b.create<AddOp>(a.result(), c.result());
  Executor exe(Place::cpu(), threads(2));
  auto out = exe.run(p,
                     {{"a", Tensor::from_vector<double>(Dims(std::vector<std::int64_t>{}), {1.5})},
                      {"b", Tensor::from_vector<double>(Dims(std::vector<std::int64_t>{}), {2.25})}},
                     {s.result()});
  CHECK(out[0].to_vector<double>() == std::vector<double>{3.75});
}

TEST_CASE("doubling a value 10 times gives 1024", "[exec]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{1}).result();
  for (int i = 0; i < 10; ++i) x = b.create<AddOp>(x, x).result();
  for (unsigned n : {1u, 2u}) {
    Executor exe(Place::cpu(), threads(n));
    auto out = exe.run(p, {{"x", filled_f32({1}, 1.f)}}, {x});
    CHECK(out[0].to_vector<float>() == std::vector<float>{1024.f});
  }
}

TEST_CASE("4096 identities of 1 summed in a random binary tree give 4096 at 1, 2, 4 threads",
          "[exec]") {
  Program p;
  Builder b(p);
  Value one = b.create<FullOp>(std::vector<std::int64_t>{}, 1.0).result();
  std::vector<Value> pool;
  for (int i = 0; i < 4096; ++i) pool.push_back(b.create<IdentityOp>(one).result());
  std::mt19937 rng(4096);
  while (pool.size() > 1) {
    std::uniform_int_distribution<std::size_t> pick(0, pool.size() - 1);
    std::size_t i = pick(rng);
    std::swap(pool[i], pool.back());
    Value l = pool.back();
    pool.pop_back();
    std::size_t j = std::uniform_int_distribution<std::size_t>(0, pool.size() - 1)(rng);
    std::swap(pool[j], pool.back());
    Value r = pool.back();
    pool.pop_back();
    pool.push_back(b.create<AddOp>(l, r).result());
  }
  for (unsigned n : {1u, 2u, 4u}) {
    Executor exe(Place::cpu(), threads(n));
    for (int run = 0; run < 3; ++run) {
      auto out = exe.run(p, {}, {pool[0]});
      INFO("threads " << n << " run " << run);
      CHECK(out[0].to_vector<float>() == std::vector<float>{4096.f});
    }
  }
}

TEST_CASE("a program with no inputs runs; an empty program returns at once", "[exec]") {
  Program p;
  Builder b(p);
  auto r = b.create<UniformRandomOp>(std::vector<std::int64_t>{5}, 2.0, 3.0, 42);
  Executor exe(Place::cpu(), threads(2));
  auto out = exe.run(p, {}, {r.result()});
  for (float v : out[0].to_vector<float>()) {
    CHECK(v >= 2.f);
    CHECK(v < 3.f);
  }
  // Fixed seed: the same numbers every run.
  CHECK(exe.run(p, {}, {r.result()})[0].to_vector<float>() == out[0].to_vector<float>());
  Program empty;
  CHECK(exe.run(empty).empty());
  CHECK(exe.run(p).empty());  // nothing fetched
}

// ---- errors ----

TEST_CASE("a missing feed is an error naming it and the type expected", "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3});
  auto r = b.create<ReluOp>(x.result());
  Executor exe;
  KILN_CHECK_ERROR(exe.run(p, {}, {r.result()}), InvalidArgument, {"'x'", "missing", "3xf32"});
}

TEST_CASE("a feed of the wrong dtype is an error naming it, expected vs given", "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3});
  auto r = b.create<ReluOp>(x.result());
  Executor exe;
  Tensor bad = Tensor::from_vector<double>(Dims({2, 3}), std::vector<double>(6, 1.0));
  KILN_CHECK_ERROR(exe.run(p, {{"x", bad}}, {r.result()}), InvalidArgument,
                   {"'x'", "expected", "f32", "got", "f64"});
}

TEST_CASE("a feed of the wrong shape is an error naming it, expected vs given; -1 accepts any",
          "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 3});
  auto r = b.create<ReluOp>(x.result());
  Executor exe;
  KILN_CHECK_ERROR(exe.run(p, {{"x", filled_f32({2, 4}, 1.f)}}, {r.result()}), InvalidArgument,
                   {"'x'", "expected", "3xf32", "got", "2x4"});
  KILN_CHECK_ERROR(exe.run(p, {{"x", filled_f32({6}, 1.f)}}, {r.result()}), InvalidArgument, {"'x'"});
  for (std::int64_t rows : {0, 1, 7})
    CHECK(exe.run(p, {{"x", filled_f32({rows, 3}, -1.f)}}, {r.result()})[0].numel() == rows * 3);
}

TEST_CASE("an unknown fetch name is an error naming it", "[exec]") {
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{1}, 1.0);
  b.create<FetchOp>(a.result(), "out");
  Executor exe;
  KILN_CHECK_ERROR(exe.run(p, {}, {"nope"}), NotFound, {"'nope'"});
  CHECK(exe.run(p, {}, {"out"})[0].to_vector<float>() == std::vector<float>{1.f});
  // A value of another program.
  Program q;
  Builder bq(q);
  auto other = bq.create<FullOp>(std::vector<std::int64_t>{1}, 1.0);
  KILN_CHECK_ERROR(exe.run(p, {}, {other.result()}), InvalidArgument, {"not in this program"});
}

TEST_CASE("a parameter the startup program never set is an error naming it", "[exec]") {
  Program startup, main_prog;
  {
    Builder b(startup);
    auto init = b.create<FullOp>(std::vector<std::int64_t>{2}, 0.5);
    b.create<SetParameterOp>(init.result(), "w");
  }
  Value y;
  {
    Builder b(main_prog);
    auto w = b.create<ParameterOp>("w", TensorType::get(DataType::Float32, {2}));
    auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
    y = b.create<MulOp>(w.result(), x.result()).result();
  }
  Executor exe;
  FeedMap feed{{"x", filled_f32({2}, 4.f)}};
  KILN_CHECK_ERROR(exe.run(main_prog, feed, {y}), NotFound, {"'w'", "expected", "2xf32", "startup"});
  exe.run(startup);
  CHECK(exe.run(main_prog, feed, {y})[0].to_vector<float>() == std::vector<float>{2.f, 2.f});
  CHECK(exe.run(main_prog, feed, {"w"})[0].to_vector<float>() == std::vector<float>{0.5f, 0.5f});
}

TEST_CASE("a kernel that throws at op k: kiln::Error naming op k; the next run succeeds",
          "[exec]") {
  for (bool std_exception : {false, true})
    for (unsigned n : {1u, 2u, 4u}) {
      INFO("std exception " << std_exception << ", threads " << n);
      Program p;
      Builder b(p);
      Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
      // Independent branches so other threads are busy when the throw happens.
      std::vector<Value> branches;
      for (int k = 0; k < 4; ++k) {
        Value v = x;
        for (int i = 0; i < 5; ++i) v = b.create<IdentityOp>(v).result();
        branches.push_back(v);
      }
      const std::size_t k = p.block().size();
      Value t = b.create<ThrowOp>(branches[0], std_exception).result();
      Value after = b.create<RecordOp>(t, 777).result();  // the throwing op's successor
      Value sum = b.create<AddNOp>(std::vector<Value>{after, branches[1], branches[2], branches[3]}).result();
      Executor exe(Place::cpu(), threads(n));
      FeedMap feed{{"x", Tensor::from_vector<float>(Dims({4}), {1, 2, 3, 4})}};
      for (int round = 0; round < 3; ++round) {
        throw_enabled() = true;
        clear_run_log();
        try {
          exe.run(p, feed, {sum});
          FAIL("no error");
        } catch (const Error& e) {
          CHECK(e.kind() == (std_exception ? ErrorKind::Internal : ErrorKind::OutOfRange));
          CHECK_THAT(e.message(), Catch::Contains("op #" + std::to_string(k)));
          CHECK_THAT(e.message(), Catch::Contains("exec_test.throw"));
          CHECK_THAT(e.message(), Catch::Contains(std_exception ? "boom (std)" : "boom (kiln)"));
        }
        auto log = run_log();
        CHECK(std::count(log.begin(), log.end(), 777) == 0);  // no successor of k ran
        throw_enabled() = false;
        for (int ok = 0; ok < 3; ++ok) {
          auto out = exe.run(p, feed, {sum});
          REQUIRE(out[0].to_vector<float>() == std::vector<float>{4, 8, 12, 16});
        }
        CHECK(exe.num_cores_built() == 1);
      }
      throw_enabled() = true;
    }
}

// ---- the core cache ----

namespace {
// x -> full(2) + x -> relu; fetch by value.
Value build_small(Program& p, double c = 2.0) {
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{3}, c);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{3});
  auto s = b.create<AddOp>(a.result(), x.result());
  return b.create<ReluOp>(s.result()).result();
}
}  // namespace

TEST_CASE("the executor cache: same program twice builds one core", "[exec]") {
  Program p;
  Value out = build_small(p);
  Executor exe;
  FeedMap feed{{"x", filled_f32({3}, 1.f)}};
  CHECK(exe.run(p, feed, {out})[0].to_vector<float>() == std::vector<float>(3, 3.f));
  InterpreterCore* first = exe.last_core();
  CHECK(exe.run(p, feed, {out})[0].to_vector<float>() == std::vector<float>(3, 3.f));
  CHECK(exe.num_cores_built() == 1);
  CHECK(exe.last_core() == first);
}

TEST_CASE("the executor cache: a different fetch builds a new core", "[exec]") {
  Program p;
  Value out = build_small(p);
  Executor exe;
  FeedMap feed{{"x", filled_f32({3}, 1.f)}};
  exe.run(p, feed, {out});
  exe.run(p, feed, {out, "x"});
  CHECK(exe.num_cores_built() == 2);
  exe.run(p, feed, {});
  CHECK(exe.num_cores_built() == 3);
  exe.run(p, feed, {out});
  CHECK(exe.num_cores_built() == 3);
  CHECK(exe.cache_size() == 3);
}

TEST_CASE("the executor cache: another Program object with equal content reuses the core",
          "[exec]") {
  Executor exe;
  FeedMap feed{{"x", filled_f32({3}, -5.f)}};
  Program p;
  Value out = build_small(p);
  CHECK(exe.run(p, feed, {out})[0].to_vector<float>() == std::vector<float>(3, 0.f));
  {
    Program q;
    Value out_q = build_small(q);
    CHECK(exe.run(q, feed, {out_q})[0].to_vector<float>() == std::vector<float>(3, 0.f));
    CHECK(exe.num_cores_built() == 1);
  }
  // Still usable after the second program is gone; and the first again.
  CHECK(exe.run(p, feed, {out})[0].to_vector<float>() == std::vector<float>(3, 0.f));
  CHECK(exe.num_cores_built() == 1);
  // Different content: a new core.
  Program r;
  Value out_r = build_small(r, 9.0);
  CHECK(exe.run(r, feed, {out_r})[0].to_vector<float>() == std::vector<float>(3, 4.f));
  CHECK(exe.num_cores_built() == 2);
}

TEST_CASE("the executor cache: after the program is mutated a new core is built", "[exec]") {
  Program p;
  Builder b(p);
  auto a = b.create<FullOp>(std::vector<std::int64_t>{2}, 2.0);
  auto r = b.create<ReluOp>(a.result());
  Executor exe;
  CHECK(exe.run(p, {}, {r.result()})[0].to_vector<float>() == std::vector<float>(2, 2.f));
  a.operation()->set_attribute("value", Float64Attribute::get(6.0));
  CHECK(exe.run(p, {}, {r.result()})[0].to_vector<float>() == std::vector<float>(2, 6.f));
  CHECK(exe.num_cores_built() == 2);
  CHECK(exe.run(p, {}, {r.result()})[0].to_vector<float>() == std::vector<float>(2, 6.f));
  CHECK(exe.num_cores_built() == 2);
  // Adding an op changes the content too.
  auto n = b.create<NegOp>(r.result());
  CHECK(exe.run(p, {}, {n.result()})[0].to_vector<float>() == std::vector<float>(2, -6.f));
  CHECK(exe.num_cores_built() == 3);
}

TEST_CASE("the executor cache evicts the least recently used core", "[exec]") {
  ExecutionOptions o;
  o.cache_capacity = 2;
  Executor exe(Place::cpu(), o);
  std::vector<std::unique_ptr<Program>> progs;
  std::vector<Value> outs;
  for (int i = 0; i < 3; ++i) {
    progs.push_back(std::make_unique<Program>());
    outs.push_back(build_small(*progs.back(), double(i)));
  }
  FeedMap feed{{"x", filled_f32({3}, 1.f)}};
  exe.run(*progs[0], feed, {outs[0]});
  exe.run(*progs[1], feed, {outs[1]});
  exe.run(*progs[0], feed, {outs[0]});  // 0 is now the most recent
  exe.run(*progs[2], feed, {outs[2]});  // evicts 1
  CHECK(exe.cache_size() == 2);
  CHECK(exe.num_cores_built() == 3);
  exe.run(*progs[0], feed, {outs[0]});
  CHECK(exe.num_cores_built() == 3);
  CHECK(exe.run(*progs[1], feed, {outs[1]})[0].to_vector<float>() == std::vector<float>(3, 2.f));
  CHECK(exe.num_cores_built() == 4);
}

TEST_CASE("evicting a program drops its compiled copies, and only those; its next run compiles "
          "it anew",
          "[exec]") {
  Program p, q;
  Value out_p = build_small(p, 1.0), out_q = build_small(q, 5.0);
  Executor exe;
  FeedMap feed{{"x", filled_f32({3}, 1.f)}};
  exe.run(p, feed, {out_p});
  exe.run(p, feed, {});
  exe.run(q, feed, {out_q});
  REQUIRE(exe.cache_size() == 3);
  exe.evict(p);
  CHECK(exe.cache_size() == 1);
  CHECK(exe.last_core() != nullptr);  // q's, still cached
  exe.run(q, feed, {out_q});
  CHECK(exe.num_cores_built() == 3);
  exe.evict(q);
  CHECK(exe.cache_size() == 0);
  CHECK(exe.last_core() == nullptr);
  exe.evict(q);  // nothing left: nothing happens
  CHECK(exe.run(p, feed, {out_p})[0].to_vector<float>() == std::vector<float>(3, 2.f));
  CHECK(exe.num_cores_built() == 4);
}

TEST_CASE("a held constant's bytes are freed once its program is gone and no executor keeps a "
          "compiled copy",
          "[exec]") {
  const std::vector<float> v{1, 2, 3};
  // Runs a program of one constant holding `held` in `exe`, then drops the
  // program (having evicted it or not).
  const auto run_once = [&](Executor& exe, bool evict) {
    const TensorAttribute held = TensorAttribute::get_held(
        DataType::Float32, {3}, std::string(reinterpret_cast<const char*>(v.data()), 3 * sizeof(float)));
    {
      Program p;
      Builder b(p);
      Value c = b.create<ConstantOp>(held, TensorType::get(DataType::Float32, {3})).result();
      CHECK(exe.run(p, {}, {c})[0].to_vector<float>() == v);
      if (evict) exe.evict(p);
      CHECK_FALSE(held.released());  // p still carries it
    }
    return held;
  };
  TensorAttribute cached;
  {
    Executor keeps;
    cached = run_once(keeps, false);
    CHECK_FALSE(cached.released());  // the executor's compiled copy carries it
  }
  CHECK(cached.released());
  Executor exe;
  CHECK(run_once(exe, true).released());
}

TEST_CASE("cores built and dropped in a loop while the pool is busy stay correct", "[exec]") {
  // Each run's last task may finish on a pool thread just before the core is
  // destroyed (cache capacity 1 evicts it on the next run).
  ExecutionOptions o;
  o.num_threads = 2;
  o.cache_capacity = 1;
  Executor exe(Place::cpu(), o);
  for (int i = 0; i < 200; ++i) {
    Program p;
    Value out = build_small(p, double(i % 7));
    Builder b(p);
    Value l = b.create<IdentityOp>(out).result();
    Value r = b.create<IdentityOp>(out).result();
    Value s = b.create<AddOp>(l, r).result();
    REQUIRE(exe.run(p, {{"x", filled_f32({3}, 1.f)}}, {s})[0].to_vector<float>() ==
            std::vector<float>(3, 2.f * float(i % 7 + 1)));
  }
}

TEST_CASE("after a kernel throws, the run returns only once the running kernels have finished",
          "[exec]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{4}).result();
  std::vector<Value> parts;
  // Slow branches that are running on other threads when the throw happens.
  for (int k = 0; k < 6; ++k) parts.push_back(b.create<SlowOp>(b.create<IdentityOp>(x).result(), 2000).result());
  parts.push_back(b.create<ThrowOp>(b.create<SlowOp>(x, 300).result()).result());
  Value sum = b.create<AddNOp>(parts).result();
  for (unsigned n : {2u, 4u}) {
    Executor exe(Place::cpu(), threads(n));
    FeedMap feed{{"x", filled_f32({4}, 1.f)}};
    for (int round = 0; round < 3; ++round) {
      throw_enabled() = true;
      CHECK_THROWS_AS(exe.run(p, feed, {sum}), Error);
      CHECK(slow_in_flight() == 0);
      throw_enabled() = false;
      CHECK(exe.run(p, feed, {sum})[0].to_vector<float>() == std::vector<float>(4, 7.f));
    }
    throw_enabled() = true;
  }
}

TEST_CASE("one Executor, one program, runs from several threads share its core and all succeed",
          "[exec]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{16}).result();
  Value v = x;
  for (int i = 0; i < 8; ++i) v = b.create<AddOp>(b.create<IdentityOp>(v).result(), x).result();
  Executor exe(Place::cpu(), threads(2));
  std::atomic<int> bad{0};
  auto worker = [&](float base) {
    for (int i = 0; i < 100; ++i) {
      float in = base + float(i);
      auto out = exe.run(p, {{"x", filled_f32({16}, in)}}, {v});
      if (out[0].to_vector<float>() != std::vector<float>(16, 9.f * in)) bad++;
    }
  };
  std::thread t1(worker, 0.f), t2(worker, 1000.f), t3(worker, 5000.f);
  t1.join();
  t2.join();
  t3.join();
  CHECK(bad.load() == 0);
  CHECK(exe.num_cores_built() == 1);
}

TEST_CASE("a repeated run reuses its core; another fetch or a changed program gets another",
          "[exec][executor]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto y = b.create<ScaleOp>(x.result(), 3.0, 0.0);
  auto z = b.create<ScaleOp>(x.result(), 5.0, 0.0);
  Executor exe(Place::cpu(), threads(1));
  auto feed = [](float v) { return FeedMap{{"x", Tensor::from_vector<float>({2}, {v, v})}}; };
  for (int i = 0; i < 3; ++i) CHECK(exe.run(p, feed(1), {y.result()})[0].to_vector<float>()[0] == 3);
  CHECK(exe.num_cores_built() == 1);
  CHECK(exe.run(p, feed(1), {z.result()})[0].to_vector<float>()[0] == 5);
  CHECK(exe.num_cores_built() == 2);
  CHECK(exe.run(p, feed(2), {y.result()})[0].to_vector<float>()[0] == 6);
  CHECK(exe.num_cores_built() == 2);  // from the cache
  // Changing the program after a run: the next run sees the change.
  y->set_attribute("scale", Float64Attribute::get(7.0));
  CHECK(exe.run(p, feed(1), {y.result()})[0].to_vector<float>()[0] == 7);
  CHECK(exe.num_cores_built() == 3);
  // A fetch by name of the same request shape is a different request.
  b.create<FetchOp>(y.result(), "y");
  CHECK(exe.run(p, feed(1), {"y"})[0].to_vector<float>()[0] == 7);
}

TEST_CASE("a program moved into the address of one that ran is run as the new program",
          "[exec][executor]") {
  auto make = [](double v) {
    Program p;
    Builder b(p);
    b.create<FetchOp>(b.create<FullOp>(std::vector<std::int64_t>{1}, v).result(), "out");
    return p;
  };
  Program a = make(1.0), other = make(2.0);
  Executor exe(Place::cpu(), threads(1));
  CHECK(exe.run(a, {}, {"out"})[0].to_vector<float>()[0] == 1.0f);
  std::swap(a, other);
  CHECK(exe.run(a, {}, {"out"})[0].to_vector<float>()[0] == 2.0f);
  CHECK(exe.run(other, {}, {"out"})[0].to_vector<float>()[0] == 1.0f);
}

TEST_CASE("a data op that nothing reads or fetches needs no feed; fetching it does", "[exec]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{2});
  auto label = b.create<DataOp>("label", std::vector<std::int64_t>{2});  // unused
  auto y = b.create<ScaleOp>(x.result(), 2.0, 0.0);
  Executor exe(Place::cpu(), threads(1));
  auto out = exe.run(p, {{"x", Tensor::from_vector<float>({2}, {1, 2})}}, {y.result()});
  CHECK(out[0].to_vector<float>() == std::vector<float>{2, 4});
  KILN_CHECK_ERROR(exe.run(p, {{"x", Tensor::from_vector<float>({2}, {1, 2})}}, {label.result()}),
                   InvalidArgument, {"'label'", "missing"});
  KILN_CHECK_ERROR(exe.run(p, {{"x", Tensor::from_vector<float>({2}, {1, 2})}}, {"label"}),
                   InvalidArgument, {"'label'", "missing"});
}

TEST_CASE("a scope destroyed before the executor that ran in it leaves the executor usable and safe to destroy",
          "[exec][scope]") {
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{3}).result();
  Value y = b.create<ReluOp>(b.create<ExpOp>(x).result()).result();
  const FeedMap feed{{"x", Tensor::from_vector<float>(Dims({3}), {0.f, 1.f, 2.f})}};
  auto exe = std::make_unique<Executor>(Place::cpu(), ExecutionOptions{.num_threads = 1});
  for (int round = 0; round < 3; ++round) {
    // Each scope dies while the executor still caches the core that ran in
    // it; the next one may well get the same address.
    auto scope = std::make_unique<Scope>();
    auto out = exe->run(p, feed, {y}, *scope);
    CHECK(out[0].to_vector<float>() == std::vector<float>{1.f, std::exp(1.f), std::exp(2.f)});
    scope.reset();
  }
  exe.reset();  // the cores drop kid scopes of scopes that are gone
}
