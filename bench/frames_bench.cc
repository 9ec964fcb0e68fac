// Dataflow-loop benchmarks (`./run bench frames`): loops built from
// kiln.switch / merge / enter / exit / next_iteration, run by the frame
// propagator.
//   BENCH frames.loop.per_iter          ns: one iteration of i = 0; while (i < n)
//         i = i + 1 — one tiny op in the body, plus the loop's merge, less,
//         switch and next_iteration; 1 thread, n = 10^5
//   BENCH frames.loop2.per_iter         ns: the same with a second carried value
//         (x = x + 1), the loop of `./run bench cf`'s cf.while.ns_per_iter
//   BENCH frames.parallel_iterations.op_us   µs: the independent op each
//         iteration of the next loop runs (kiln.exp of a tensor sized to take
//         about 20 µs), alone in a flat program
//   BENCH frames.parallel_iterations.speedup  time of 512 iterations with
//         parallel_iterations = 1 ÷ with 2, both with 2 threads
//   BENCH frames.auto.lowered           1 when the default pipeline lowered (at 2
//         threads) a structured while_loop whose iterations each run that op
//         (s = s + sum(exp(x))), reading only a capture
//   BENCH frames.auto.speedup           its time structured (the default pipeline
//         without auto_lower_to_dataflow) ÷ with the default pipeline, 2 threads,
//         256 iterations
//   BENCH frames.loop.mem_growth        bytes in use after a 10^5-iteration run
//         minus after a 1-iteration run
// Medians of 9 repetitions (speedup: of 15).
#include <algorithm>
#include <cstdio>
#include <map>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"

#include "kiln/dialect/dataflow_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/exec/step_stats.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cpu_allocator.h"

namespace bench {
namespace {

using kiln::Builder;
using kiln::DataType;
using kiln::Value;

Value constant(Builder& b, double v, DataType dt, std::vector<std::int64_t> shape = {}) {
  return b.create<kiln::FullOp>(shape, v, dt).result();
}

kiln::Tensor scalar_i64(std::int64_t v) { return kiln::Tensor::from_vector<std::int64_t>(kiln::Dims(), {v}); }

// carried = inits; while (carried[0] < n) carried = body(carried), in frame
// "loop"; `constants` enter with is_constant. Returns the exits.
using BodyFn = std::function<std::vector<Value>(Builder&, const std::vector<Value>& carried,
                                                const std::vector<Value>& constants)>;
std::vector<Value> dataflow_loop(Builder& b, std::int64_t parallel, Value n, const std::vector<Value>& inits,
                                 const std::vector<Value>& constants, const BodyFn& body) {
  std::vector<Value> merged, consts, exits, taken;
  Value n_in = b.create<kiln::EnterOp>(n, "loop", true, parallel).result();
  for (Value c : constants) consts.push_back(b.create<kiln::EnterOp>(c, "loop", true, parallel).result());
  for (Value v : inits)
    merged.push_back(b.create<kiln::MergeOp>(std::vector<Value>{
                                                 b.create<kiln::EnterOp>(v, "loop", false, parallel).result()})
                         .output());
  Value pred = b.create<kiln::LessThanOp>(merged[0], n_in).result();
  for (Value m : merged) {
    auto sw = b.create<kiln::SwitchOp>(m, pred);
    exits.push_back(b.create<kiln::ExitOp>(sw.output_false()).result());
    taken.push_back(sw.output_true());
  }
  std::vector<Value> next = body(b, taken, consts);
  for (std::size_t k = 0; k < next.size(); ++k) b.create<kiln::NextIterationOp>(next[k], merged[k]);
  return exits;
}

struct Program {
  kiln::Program p;
  std::vector<Value> out;
};

// i = 0; while (i < n) i = i + 1 (and x = x + 1 when `second`).
Program counter(bool second) {
  Program r;
  Builder b(r.p);
  Value n = b.create<kiln::DataOp>("n", std::vector<std::int64_t>{}, DataType::Int64).result();
  std::vector<Value> inits{constant(b, 0, DataType::Int64)};
  if (second) inits.push_back(constant(b, 0, DataType::Float32));
  r.out = dataflow_loop(b, 10, n, inits, {constant(b, 1, DataType::Int64), constant(b, 1, DataType::Float32)},
                        [second](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& k) {
                          std::vector<Value> next{bb.create<kiln::AddOp>(c[0], k[0]).result()};
                          if (second) next.push_back(bb.create<kiln::AddOp>(c[1], k[1]).result());
                          return next;
                        });
  return r;
}

// Each iteration: exp(x) of a constant x, independent of the other iterations.
Program independent(std::int64_t parallel, std::int64_t size) {
  Program r;
  Builder b(r.p);
  Value n = b.create<kiln::DataOp>("n", std::vector<std::int64_t>{}, DataType::Int64).result();
  r.out = dataflow_loop(b, parallel, n, {constant(b, 0, DataType::Int64)},
                        {constant(b, 1, DataType::Int64), constant(b, 0.5, DataType::Float32, {size})},
                        [](Builder& bb, const std::vector<Value>& c, const std::vector<Value>& k) {
                          bb.create<kiln::ExpOp>(k[1]);
                          return std::vector<Value>{bb.create<kiln::AddOp>(c[0], k[0]).result()};
                        });
  return r;
}

// The same independent work in a structured loop (what a frontend's
// while_loop builds): s = 0; while (i < n) { s = s + sum(exp(x)); i = i + 1 }.
// exp and sum read only the capture x: auto_lower_to_dataflow lowers it at 2 threads.
Program structured_independent(std::int64_t size) {
  Program r;
  Builder b(r.p);
  Value n = b.create<kiln::DataOp>("n", std::vector<std::int64_t>{}, DataType::Int64).result();
  Value x = constant(b, 0.5, DataType::Float32, {size});
  Value i0 = constant(b, 0, DataType::Int64), s0 = constant(b, 0, DataType::Float32);
  auto w = b.create<kiln::WhileOp>(b.create<kiln::LessThanOp>(i0, n).result(), std::vector<Value>{i0, s0},
                                   std::vector<Value>{n, x}, std::int64_t{-1});
  kiln::Block& body = w->region(0).emplace_block();
  Value i = body.add_argument(i0.type()), s = body.add_argument(s0.type());
  Value nn = body.add_argument(n.type()), xx = body.add_argument(x.type());
  Builder bb(body);
  Value t = bb.create<kiln::SumOp>(bb.create<kiln::ExpOp>(xx).result(), std::vector<std::int64_t>{0}, false)
                .result();
  Value i1 = bb.create<kiln::AddOp>(i, constant(bb, 1, DataType::Int64)).result();
  bb.create<kiln::YieldOp>(std::vector<Value>{bb.create<kiln::LessThanOp>(i1, nn).result(), i1,
                                              bb.create<kiln::AddOp>(s, t).result()});
  r.out = {w->result(1)};
  return r;
}

kiln::ExecutionOptions options(unsigned threads) {
  kiln::ExecutionOptions o;
  o.num_threads = threads;
  o.thread_plan = threads == 1 ? kiln::ThreadPlan::Sequential : kiln::ThreadPlan::Graph;
  return o;
}

double per_iter(const Program& prog, std::int64_t iters, int reps) {
  kiln::Executor exe(kiln::Place::cpu(), options(1));
  exe.run(prog.p, {{"n", scalar_i64(iters)}}, {prog.out[0]});  // the plan
  std::vector<double> v;
  for (int r = 0; r < reps; ++r)
    v.push_back(time_ns([&] { exe.run(prog.p, {{"n", scalar_i64(iters)}}, {prog.out[0]}); }) / double(iters));
  return median(v);
}

// The size of a kiln.exp that takes about `target_us` here, and its time.
std::pair<std::int64_t, double> calibrate_exp(double target_us) {
  kiln::ExecutionOptions o = options(1);
  o.passes = "";  // fold would compute exp(constant) once, at plan time
  kiln::Executor exe(kiln::Place::cpu(), o);
  std::int64_t size = 4096;
  double us = 0;
  for (int step = 0; step < 12; ++step) {
    kiln::Program p;
    Builder b(p);
    Value y = b.create<kiln::ExpOp>(constant(b, 0.5, DataType::Float32, {size})).result();
    exe.run(p, {}, {y});
    std::vector<double> v;
    for (int r = 0; r < 21; ++r) v.push_back(time_ns([&] { exe.run(p, {}, {y}); }));
    us = median(v) / 1e3;
    if (us > target_us * 0.9 && us < target_us * 1.2) break;
    size = static_cast<std::int64_t>(double(size) * target_us / std::max(us, 0.5));
  }
  return {size, us};
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  const std::string filter = argc > 1 ? argv[1] : "";
  if (!filter.empty() && filter != "frames" && filter.rfind("frames.", 0) != 0) return 0;
  const int reps = 9;
  const std::int64_t iters = 100000;

  Program one = counter(false), two = counter(true);
  if (filter == "frames.profile") {  // a profiler's target: 10^6 iterations of the counter loop
    per_iter(one, iters, 10);
    return 0;
  }
  emit("frames.loop.per_iter", per_iter(one, iters, reps), "ns");
  emit("frames.loop2.per_iter", per_iter(two, iters, reps), "ns");

  const auto [size, op_us] = calibrate_exp(20.0);
  emit("frames.parallel_iterations.op_us", op_us, "us");
  const std::int64_t n = 512;
  Program serial = independent(1, size), overlapped = independent(2, size);
  // No passes: dce would remove the exp, which nothing reads.
  kiln::ExecutionOptions no_passes = options(2);
  no_passes.passes = "";
  kiln::Executor exe1(kiln::Place::cpu(), no_passes), exe2(kiln::Place::cpu(), no_passes);
  exe1.run(serial.p, {{"n", scalar_i64(n)}}, {serial.out[0]});
  exe2.run(overlapped.p, {{"n", scalar_i64(n)}}, {overlapped.out[0]});
  if (detail()) {  // which threads ran the independent ops, and how much they overlapped
    kiln::StepStats st;
    exe2.run(overlapped.p, {{"n", scalar_i64(n)}}, {overlapped.out[0]}, st);
    std::vector<std::pair<std::int64_t, std::int64_t>> spans;
    std::vector<std::uint32_t> tags;
    for (const auto& node : st.nodes)
      if (node.op_name == "kiln.exp") {
        spans.emplace_back(node.start_ns, node.end_ns);
        if (std::find(tags.begin(), tags.end(), node.thread) == tags.end()) tags.push_back(node.thread);
      }
    std::int64_t overlap = 0;
    for (std::size_t a = 0; a < spans.size(); ++a)
      for (std::size_t b = a + 1; b < spans.size(); ++b)
        overlap += std::max<std::int64_t>(0, std::min(spans[a].second, spans[b].second) -
                                                 std::max(spans[a].first, spans[b].first));
    std::map<std::uint32_t, int> per_thread;
    for (const auto& node : st.nodes) per_thread[node.thread]++;
    for (auto [t, c] : per_thread) std::printf("  thread %u ran %d ops\n", t, c);
    std::printf("  exp runs %zu on %zu threads, overlapping %.1f us of %.1f us wall\n", spans.size(), tags.size(),
                double(overlap) / 1e3, double(st.wall_ns) / 1e3);
  }
  std::vector<double> ratio;
  for (int r = 0; r < 15; ++r) {
    const double t1 = time_ns([&] { exe1.run(serial.p, {{"n", scalar_i64(n)}}, {serial.out[0]}); });
    const double t2 = time_ns([&] { exe2.run(overlapped.p, {{"n", scalar_i64(n)}}, {overlapped.out[0]}); });
    ratio.push_back(t1 / t2);
    if (detail()) std::printf("  pi=1 %.1f us, pi=2 %.1f us\n", t1 / 1e3, t2 / 1e3);
  }
  emit("frames.parallel_iterations.speedup", median(ratio), "x");

  {  // the default pipeline's automatic lowering of a structured loop with that work
    Program loop = structured_independent(size);
    kiln::ExecutionOptions structured = options(2);
    structured.passes = "pure,dce,cse,fold,simplify,fuse,inplace";  // kDefaultPasses without auto_lower_to_dataflow
    kiln::Executor plain(kiln::Place::cpu(), structured), automatic(kiln::Place::cpu(), options(2));
    const std::int64_t m = 256;
    plain.run(loop.p, {{"n", scalar_i64(m)}}, {loop.out[0]});
    automatic.run(loop.p, {{"n", scalar_i64(m)}}, {loop.out[0]});
    const bool lowered = automatic.last_core()->plan().frames != nullptr;
    std::vector<double> r;
    for (int k = 0; k < 9; ++k) {
      const double t1 = time_ns([&] { plain.run(loop.p, {{"n", scalar_i64(m)}}, {loop.out[0]}); });
      const double t2 = time_ns([&] { automatic.run(loop.p, {{"n", scalar_i64(m)}}, {loop.out[0]}); });
      r.push_back(t1 / t2);
    }
    emit("frames.auto.lowered", lowered ? 1.0 : 0.0, "bool");
    emit("frames.auto.speedup", median(r), "x");
  }

  kiln::Executor exe(kiln::Place::cpu(), options(1));
  auto& alloc = kiln::cpu_allocator();
  auto after = [&](std::int64_t k) {
    auto out = exe.run(one.p, {{"n", scalar_i64(k)}}, {one.out[0]});
    out.clear();
    return static_cast<double>(alloc.bytes_in_use());
  };
  const double base = after(1);
  emit("frames.loop.mem_growth", after(iters) - base, "bytes");
  return 0;
}
