// Training-step benchmark: the seed's model and a 784-512-512-10
// MLP, built with the frontend as a user builds them and trained with Adam
// through the Executor. Step times at 1 and 2 threads (2 threads: the
// executor's default ThreadPlan::Auto, which measures and keeps the faster
// of 2 graph workers with BLAS at 1, or 1 graph thread with BLAS at 2 —
// never both at once; each forced plan is printed too), the executor
// overhead ratio (step time ÷ the kernels' own time: the same kernels called
// back to back without the executor), and the MLP's GEMM floor (the step's
// sgemm calls timed alone at 1 BLAS thread).
//   BENCH train.seed.t1, .t2 (Auto), .t2.graph, .t2.blas   µs/step; .t2.plan_is_blas
//   BENCH train.seed.kernels µs, .overhead ratio; .kernels.trace / .overhead.trace:
//         the same from the profiler's per-instruction intervals (cross-check)
//   BENCH train.seed.raw µs: the step in plain loops (no kiln at all);
//         .raw.ratio: kiln's t1 step over it, timed in alternating rounds
//   BENCH train.seed.cost.* µs: the executor's per-step cost, layer by layer
//   BENCH train.mlp{64,256}.t1, .t2, .t2.graph, .t2.blas, .floor.t1, .kernels  ms
//   BENCH train.mlp{64,256}.overhead, .floor.ratio  ratios
//   *.cpu: CPU time instead of wall time (t1 and the floor only: one thread),
//         steadier than wall time on a shared, loaded machine
//   *.min: the fastest repetition (wall), for the same reason
// `train_bench train` runs all of these (`train.seed`, `train.mlp64`,
// `train.mlp256`: one model); KILN_BENCH_DETAIL=1 also prints each model's
// program, a per-op breakdown of the kernels' time, and (MLPs) one profiled
// step at 2 executor threads as a Chrome trace (lines with #).
// `train_bench train.loop.{seed,mlp64,mlp256} [seconds] [exec threads] [blas
// threads]` only runs steps (a target for perf / callgrind), printing nothing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cblas.h>

#include "bench_models.h"
#include "bench_util.h"

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/exec/thread_plan.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/scope.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/kernel/blas.h"

namespace bench {

// ---- step time ----

struct Threads {
  unsigned exec;            // ExecutionOptions::num_threads (the whole budget)
  kiln::ThreadPlan plan;    // graph workers or BLAS threads; Auto: the executor measures
  const char* passes = kiln::kDefaultPasses;  // ExecutionOptions::passes
};

// (time of `steps` steps) / steps for each of `reps` repetitions, in ns,
// after warm-up (the first runs build the core and calibrate its cost classes).
std::vector<Sample> step_ns(Model& m, Threads th, int steps, int reps,
                            kiln::ThreadPlan* chosen = nullptr) {
  kiln::ExecutionOptions opts;
  opts.num_threads = th.exec;
  opts.thread_plan = th.plan;
  opts.passes = th.passes;
  kiln::Executor exe(kiln::Place::cpu(), opts);
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);  // reused: a step allocates no result vector
  // Past calibration (2 runs) and the thread-plan trials (2 x kPlanTrials).
  const int warm = 2 + 3 * kiln::ThreadPlanTuner::kTrials + std::max(5, steps / 4);
  for (int i = 0; i < warm; ++i) exe.run(m.main, m.feeds, fetch, out);
  if (chosen) *chosen = exe.last_core()->thread_plan();
  const bool blas_threads = kiln::blas_num_threads() > 1;
  std::vector<Sample> t;
  for (int r = 0; r < reps; ++r) {
    Sample x = time_both([&] {
      for (int i = 0; i < steps; ++i) exe.run(m.main, m.feeds, fetch, out);
    });
    t.push_back({x.wall / steps, x.cpu / steps});
  }
  kiln::blas_set_num_threads(1);
  // OpenBLAS's extra threads keep spinning ~0.1 s after their last GEMM, even
  // at 1 thread again (measured: 80 ms of CPU in the first 100 ms): let them
  // sleep before the next setting is timed.
  if (blas_threads) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  return t;
}

// ---- kernels' own time, from a profiled run ----

// What one steady_clock read adds to a measured interval (the profiler reads
// the clock right before and right after each kernel).
double clock_read_ns() {
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    constexpr int n = 100000;
    auto t0 = Clock::now();
    for (int i = 0; i < n - 1; ++i) (void)Clock::now();
    t.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n);
  }
  return median(t);
}

// The per-instruction (name, dur µs) of chrome_trace()'s JSON.
std::vector<std::pair<std::string, double>> trace_durations(const std::string& json) {
  std::vector<std::pair<std::string, double>> out;
  std::size_t p = 0;
  while ((p = json.find("{\"name\":\"", p)) != std::string::npos) {
    p += 9;
    const std::size_t q = json.find('"', p);
    std::string name = json.substr(p, q - p);
    const std::size_t d = json.find("\"dur\":", q);
    if (d == std::string::npos) break;
    out.emplace_back(std::move(name), std::strtod(json.c_str() + d + 6, nullptr));
    p = d;
  }
  return out;
}

// ---- the same kernels called directly (no executor) ----

// The main program's kernels, in program order, each with a KernelContext
// over Variables made here: parameters are copies of the executor's after
// startup, data ops read the feeds, an in-place op's outputs are its inputs'
// Variables, every other value has its own Variable, kept across steps
// (no GC: alloc_output reuses the buffers). Calling them back to back is a
// step with no scheduler and no per-run executor work; each kernel called
// alone in a loop gives its own time without any clock read inside.
class KernelReplay {
 public:
  KernelReplay(Model& m, kiln::Scope& params) {
    std::map<const void*, kiln::Variable*> var_of;
    auto fresh = [&]() {
      vars_.push_back(std::make_unique<kiln::Variable>());
      return vars_.back().get();
    };
    for (kiln::Operation* op : m.main.block()) {
      if (auto p = op->dyn_cast<kiln::ParameterOp>()) {
        kiln::Variable* v = fresh();
        v->get_mutable<kiln::Tensor>() =
            params.find_var(p.attrs().parameter_name)->get<kiln::Tensor>().clone();
        var_of[op->result(0).impl()] = v;
        continue;
      }
      if (auto d = op->dyn_cast<kiln::DataOp>()) {
        kiln::Variable* v = fresh();
        v->get_mutable<kiln::Tensor>() = m.feeds.at(d.attrs().name);
        var_of[op->result(0).impl()] = v;
        continue;
      }
      if (op->dyn_cast<kiln::FetchOp>()) continue;
      kiln::DataType dtype = kiln::DataType::Float32;
      if (op->num_operands() && kiln::is_shaped(op->operand_source(0).type()))
        dtype = kiln::shaped_data_type(op->operand_source(0).type());
      else if (op->num_results() && kiln::is_shaped(op->result_type(0)))
        dtype = kiln::shaped_data_type(op->result_type(0));
      const kiln::KernelInfo& k = kiln::KernelRegistry::instance().get(*op, kiln::PlaceKind::Cpu, dtype);
      Step st;
      st.name = std::string(op->name());
      st.fn = k.fn;
      st.attrs = k.decode_attrs ? k.decode_attrs(op) : nullptr;
      st.ins = std::make_unique<kiln::Variable*[]>(op->num_operands() + 1);
      st.outs = std::make_unique<kiln::Variable*[]>(op->num_results() + 1);
      for (std::uint32_t i = 0; i < op->num_operands(); ++i) st.ins[i] = var_of.at(op->operand_source(i).impl());
      std::vector<kiln::Variable*> outs(op->num_results(), nullptr);
      for (auto [o, i] : op->info().impl()->inplace_map) outs[o] = st.ins[i];
      for (std::uint32_t o = 0; o < op->num_results(); ++o) {
        if (!outs[o]) outs[o] = fresh();
        st.outs[o] = outs[o];
        var_of[op->result(o).impl()] = outs[o];
      }
      st.ctx = kiln::KernelContext(op, st.ins.get(), op->num_operands(), st.outs.get(),
                                   op->num_results(), st.attrs.get(), kiln::Place::cpu(),
                                   &kiln::cpu_allocator());
      steps_.push_back(std::move(st));
    }
  }

  void step() {
    for (auto& st : steps_) st.fn(st.ctx);
  }
  // Per kernel (by op name, summed over same-named kernels): its own time in
  // ns, the median of `reps` loops of `iters` calls.
  std::map<std::string, double> per_kernel(int iters, int reps) {
    std::map<std::string, double> out;
    for (auto& st : steps_) {
      std::vector<double> t;
      for (int r = 0; r < reps; ++r)
        t.push_back(time_ns([&] {
                      for (int i = 0; i < iters; ++i) st.fn(st.ctx);
                    }) /
                    iters);
      out[st.name] += median(t);
    }
    return out;
  }

 private:
  struct Step {
    std::string name;
    kiln::KernelFn fn = nullptr;
    std::shared_ptr<const void> attrs;
    std::unique_ptr<kiln::Variable*[]> ins, outs;
    kiln::KernelContext ctx;
  };
  std::vector<std::unique_ptr<kiln::Variable>> vars_;
  std::vector<Step> steps_;
};

struct KernelTime {
  double step_ns = 0;        // executor step, 1 thread (median over steps)
  double replay_ns = 0;      // the same kernels called back to back (KernelReplay)
  double overhead = 0;       // median over blocks of step ÷ replay
  double trace_ns = 0;       // Σ of the profiled instructions' intervals, clock cost removed
  double overhead_trace = 0; // median over blocks of step ÷ trace
  std::map<std::string, double> by_op;   // profiled, median per op name (ns)
  std::map<std::string, double> direct;  // each kernel alone in a loop (ns)
  std::size_t instructions = 0;
};

// The kernels' own time of a step, two ways, at 1 thread (BLAS at 1):
// KernelReplay's step (the kernels called back to back, nothing else), and
// the sum of each instruction's [before, after] clock interval in a profiled
// run minus one clock read (scheduling, GC, counters and the executor's
// per-run work lie outside those intervals). Each overhead ratio pairs,
// block by block, the median step time of an unprofiled executor with the
// other measurement taken right after it, so both see the same load on a
// shared machine.
KernelTime kernel_time(Model& m, int block, int blocks, double clock_ns, int direct_iters) {
  kiln::blas_set_num_threads(1);
  kiln::ExecutionOptions opts;
  opts.num_threads = 1;
  kiln::Executor plain(kiln::Place::cpu(), opts);
  opts.profile = true;
  kiln::Executor prof(kiln::Place::cpu(), opts);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);  // reused: a step allocates no result vector
  for (kiln::Executor* e : {&plain, &prof}) {
    e->run(m.startup);
    for (int i = 0; i < 5; ++i) e->run(m.main, m.feeds, fetch);
  }
  KernelReplay replay(m, plain.scope());
  for (int i = 0; i < 5; ++i) replay.step();
  KernelTime kt;
  std::vector<double> all_steps, all_replays, totals, ratios, ratios_trace;
  std::map<std::string, std::vector<double>> per_op;
  for (int r = 0; r < blocks; ++r) {
    std::vector<double> steps, replays, sums;
    for (int i = 0; i < block; ++i)
      steps.push_back(time_ns([&] { plain.run(m.main, m.feeds, fetch, out); }) - clock_ns);
    for (int i = 0; i < block; ++i)
      replays.push_back(time_ns([&] { replay.step(); }) - clock_ns);
    for (int i = 0; i < block; ++i) {
      prof.run(m.main, m.feeds, fetch, out);
      auto durs = trace_durations(prof.last_core()->chrome_trace());
      kt.instructions = durs.size();
      double sum = 0;
      std::map<std::string, double> step;
      for (auto& [name, us] : durs) {
        const double ns = std::max(0.0, us * 1000.0 - clock_ns);
        sum += ns;
        step[name] += ns;
      }
      sums.push_back(sum);
      totals.push_back(sum);
      for (auto& [name, ns] : step) per_op[name].push_back(ns);
    }
    ratios.push_back(median(steps) / median(replays));
    ratios_trace.push_back(median(steps) / median(sums));
    all_steps.insert(all_steps.end(), steps.begin(), steps.end());
    all_replays.insert(all_replays.end(), replays.begin(), replays.end());
  }
  kt.step_ns = median(all_steps);
  kt.replay_ns = median(all_replays);
  kt.overhead = median(ratios);
  kt.trace_ns = median(totals);
  kt.overhead_trace = median(ratios_trace);
  for (auto& [name, v] : per_op) kt.by_op[name] = median(v);
  if (detail()) kt.direct = replay.per_kernel(direct_iters, 5);
  return kt;
}

// ---- where the executor's per-step time goes ----

// The seed step peeled layer by layer, all at 1 thread, BLAS at 1 (ns/step,
// median of reps × `steps` steps, the variants interleaved rep by rep):
//   exe       Executor::run (cache key + lookup, feed map → vector, core run)
//   core      InterpreterCore::run called directly (no Executor layer)
//   core.nogc the same with ExecutionOptions::gc = false (temporaries kept:
//             kernels reuse their buffers instead of free + allocate)
//   core.seq  gc off and sequential (program order, no dependency counters)
//   replay    the kernels called back to back (KernelReplay)
struct Anatomy {
  double exe, core, core_nogc, core_seq, replay;
};

Anatomy anatomy(Model& m, int steps, int reps) {
  kiln::blas_set_num_threads(1);
  kiln::ExecutionOptions opts;
  opts.num_threads = 1;
  kiln::Executor exe(kiln::Place::cpu(), opts);
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);  // reused: a step allocates no result vector
  std::vector<std::string> names;
  std::vector<kiln::Tensor> feeds;
  for (const auto& [name, t] : m.feeds) {
    names.push_back(name);
    feeds.push_back(t);
  }
  auto config = [](bool gc, bool seq) {
    kiln::ExecutionOptions c;
    c.num_threads = 1;
    c.gc = gc;
    if (seq) c.thread_plan = kiln::ThreadPlan::Sequential;
    return c;
  };
  // Each core gets its own copy of the parameters (adam_ updates in place).
  kiln::Scope s1, s2, s3;
  for (kiln::Scope* sc : {&s1, &s2, &s3})
    for (kiln::Operation* op : m.main.block())
      if (auto p = op->dyn_cast<kiln::ParameterOp>())
        sc->var(p.attrs().parameter_name).get_mutable<kiln::Tensor>() =
            exe.scope().find_var(p.attrs().parameter_name)->get<kiln::Tensor>().clone();
  kiln::InterpreterCore core(m.main, s1, names, fetch, config(true, false));
  kiln::InterpreterCore nogc(m.main, s2, names, fetch, config(false, false));
  kiln::InterpreterCore seq(m.main, s3, names, fetch, config(false, true));
  KernelReplay replay(m, exe.scope());
  std::vector<std::function<void()>> runs = {
      [&] { exe.run(m.main, m.feeds, fetch, out); }, [&] { core.run(feeds, false, out); },
      [&] { nogc.run(feeds, false, out); }, [&] { seq.run(feeds, false, out); }, [&] { replay.step(); }};
  std::vector<std::vector<double>> t(runs.size());
  for (auto& f : runs)
    for (int i = 0; i < 20; ++i) f();
  for (int r = 0; r < reps; ++r)
    for (std::size_t k = 0; k < runs.size(); ++k)
      t[k].push_back(time_ns([&] {
                       for (int i = 0; i < steps; ++i) runs[k]();
                     }) /
                     steps);
  return {median(t[0]), median(t[1]), median(t[2]), median(t[3]), median(t[4])};
}

void print_breakdown(const std::string& model, const KernelTime& kt) {
  std::vector<std::pair<double, std::string>> v;
  for (auto& [name, ns] : kt.by_op) v.emplace_back(ns, name);
  std::sort(v.rbegin(), v.rend());
  double direct = 0;
  for (auto& [name, ns] : kt.direct) direct += ns;
  std::printf("# %s: %zu instructions; step %.3f us, replay %.3f us, profiled sum %.3f us, "
              "each kernel alone %.3f us\n",
              model.c_str(), kt.instructions, kt.step_ns / 1e3, kt.replay_ns / 1e3, kt.trace_ns / 1e3,
              direct / 1e3);
  std::printf("#   %-36s %12s %12s\n", "op (all instances)", "profiled us", "alone us");
  for (auto& [ns, name] : v) {
    auto it = kt.direct.find(name);
    std::printf("#   %-36s %12.3f %12.3f\n", name.c_str(), ns / 1e3,
                it == kt.direct.end() ? 0.0 : it->second / 1e3);
  }
}

// ---- GEMM floor ----

struct Gemm {
  bool ta, tb;
  int m, n, k;
};

// The sgemm calls a training step of the MLP makes: forward x·W per layer;
// backward per layer dX = dY·Wᵀ (not for the first layer when the data
// needs no gradient) and dW = Xᵀ·dY (MatmulOp::vjp's flags, so the same
// transposes), counted from the program's kiln.matmul ops.
std::vector<Gemm> mlp_gemms(std::int64_t batch, bool first_dx) {
  const int b = static_cast<int>(batch);
  const int dims[4] = {int(kFeatures), int(kHidden), int(kHidden), int(kClasses)};
  std::vector<Gemm> g;
  for (int l = 0; l < 3; ++l) g.push_back({false, false, b, dims[l + 1], dims[l]});
  for (int l = 2; l >= 0; --l) {
    if (l > 0 || first_dx) g.push_back({false, true, b, dims[l], dims[l + 1]});   // dX
    g.push_back({true, false, dims[l], dims[l + 1], b});                          // dW
  }
  return g;
}

// Median over reps of the time of all `gemms` back to back (ms), BLAS at 1 thread.
Sample gemm_floor_ms(const std::vector<Gemm>& gemms, int iters, int reps) {
  kiln::blas_set_num_threads(1);
  struct Buf {
    std::vector<float> a, b, c;
  };
  std::vector<Buf> bufs;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const auto& g : gemms) {
    Buf x{std::vector<float>(std::size_t(g.m) * g.k), std::vector<float>(std::size_t(g.k) * g.n),
          std::vector<float>(std::size_t(g.m) * g.n)};
    for (auto& v : x.a) v = u(rng);
    for (auto& v : x.b) v = u(rng);
    bufs.push_back(std::move(x));
  }
  auto once = [&] {
    for (std::size_t i = 0; i < gemms.size(); ++i) {
      const Gemm& g = gemms[i];
      cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
                  g.m, g.n, g.k, 1.0f, bufs[i].a.data(), g.ta ? g.m : g.k, bufs[i].b.data(),
                  g.tb ? g.k : g.n, 0.0f, bufs[i].c.data(), g.n);
    }
  };
  for (int i = 0; i < 3; ++i) once();
  std::vector<Sample> t;
  for (int r = 0; r < reps; ++r) {
    Sample x = time_both([&] {
      for (int i = 0; i < iters; ++i) once();
    });
    t.push_back({x.wall / iters / 1e6, x.cpu / iters / 1e6});
  }
  return median(t);
}

std::size_t count_ops(const kiln::Program& p, std::string_view name) {
  std::size_t n = 0;
  for (kiln::Operation* op : p.block())
    if (op->name() == name) ++n;
  return n;
}

// ---- the seed model in plain loops (no frontend, no executor) ----

// One Adam step of out = x·w + b, loss = mean((out - y)²), Paddle's adam with
// beta powers, the same arithmetic the kernels do; and kiln's step (one
// thread, the default options) timed in the same rounds, alternating: on
// this shared 2-core machine a job on the other core slowed the plain loops
// 2-4x (0.2, 0.4 or 0.8 us from one run to the next) while kiln's step,
// timed earlier, had not seen it. Medians over the rounds of the loops' ns
// per step and of the per-round ratio.
struct RawSeed {
  double raw_ns = 0, ratio = 0;
};

RawSeed seed_raw(Model& m, int steps, int rounds) {
  const float* x = m.feeds.at("x").data<float>();
  const float* y = m.feeds.at("label").data<float>();
  float w[16], b, m1[17], m2[17], b1p, b2p;
  // Each round starts from the model's first step (the same values each time).
  auto reset = [&] {
    for (int j = 0; j < 16; ++j) w[j] = 0.01f * float(j);
    b = 0.1f;
    std::fill(m1, m1 + 17, 0.0f);
    std::fill(m2, m2 + 17, 0.0f);
    b1p = 0.9f;
    b2p = 0.999f;
  };
  reset();
  volatile float sink = 0;
  auto step = [&] {
    float out[16], d[16], g[17] = {};
    float loss = 0;
    for (int i = 0; i < 16; ++i) {
      float s = b;
      for (int j = 0; j < 16; ++j) s += x[i * 16 + j] * w[j];
      out[i] = s - y[i];
      loss += out[i] * out[i];
      d[i] = 2.0f * out[i] / 16.0f;
    }
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 16; ++j) g[j] += x[i * 16 + j] * d[i];
      g[16] += d[i];
    }
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const float lr_t = lr * std::sqrt(1 - b2p) / (1 - b1p);
    for (int j = 0; j < 17; ++j) {
      m1[j] = b1 * m1[j] + (1 - b1) * g[j];
      m2[j] = b2 * m2[j] + (1 - b2) * g[j] * g[j];
      const float upd = lr_t * m1[j] / (std::sqrt(m2[j]) + eps * std::sqrt(1 - b2p));
      if (j < 16) w[j] -= upd;
      else b -= upd;
    }
    b1p *= b1;
    b2p *= b2;
    sink = loss / 16.0f;
  };
  kiln::ExecutionOptions opts;
  opts.num_threads = 1;
  kiln::Executor exe(kiln::Place::cpu(), opts);
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);
  constexpr int kKilnSteps = 2000;
  for (int i = 0; i < 200; ++i) exe.run(m.main, m.feeds, fetch, out);
  for (int i = 0; i < 1000; ++i) step();
  std::vector<double> raw, ratio;
  for (int r = 0; r < rounds; ++r) {
    const double k = time_ns([&] {
                       for (int i = 0; i < kKilnSteps; ++i) exe.run(m.main, m.feeds, fetch, out);
                     }) /
                     kKilnSteps;
    reset();
    const double l = time_ns([&] {
                       for (int i = 0; i < steps; ++i) step();
                     }) /
                     steps;
    raw.push_back(l);
    ratio.push_back(k / l);
  }
  (void)sink;
  return {median(raw), median(ratio)};
}

// ---- one model: t1, both t2 variants, overhead ----

struct StepTimes {
  Sample t1, t2_graph, t2_blas, t2_auto;
  double t1_min, t2_graph_min, t2_blas_min;  // wall
  kiln::ThreadPlan chosen;                   // what Auto picked (last round)
};

// The three thread settings interleaved round by round, so load changes on
// the shared machine hit them alike; the median over every repetition of
// every round. Short repetitions: on a loaded machine the median then skips
// the ones a time slice of another process fell into.
StepTimes measure(Model& m, int steps, int reps, int rounds) {
  std::vector<Sample> a, g, b, au;
  kiln::ThreadPlan chosen = kiln::ThreadPlan::Graph;
  auto add = [](std::vector<Sample>& to, std::vector<Sample> v) { to.insert(to.end(), v.begin(), v.end()); };
  for (int r = 0; r < rounds; ++r) {
    add(a, step_ns(m, {1, kiln::ThreadPlan::Auto}, steps, reps));
    add(g, step_ns(m, {2, kiln::ThreadPlan::Graph}, steps, reps));
    add(b, step_ns(m, {2, kiln::ThreadPlan::Blas}, steps, reps));
    add(au, step_ns(m, {2, kiln::ThreadPlan::Auto}, steps, reps, &chosen));
  }
  auto min_wall = [](const std::vector<Sample>& v) {
    double m = v[0].wall;
    for (const auto& x : v) m = std::min(m, x.wall);
    return m;
  };
  return {median(a), median(g), median(b), median(au), min_wall(a), min_wall(g), min_wall(b), chosen};
}

void emit_threads(const std::string& p, const StepTimes& s, double scale, const char* unit) {
  emit(p + ".t1", s.t1.wall / scale, unit);
  // t2: what a user gets (ExecutionOptions default: the executor measures
  // the plans and keeps the fastest); .graph / .blas: each plan forced.
  emit(p + ".t2", s.t2_auto.wall / scale, unit);
  emit(p + ".t2.plan_is_blas", s.chosen == kiln::ThreadPlan::Blas ? 1.0 : 0.0, "bool");
  emit(p + ".t2.plan_is_sequential", s.chosen == kiln::ThreadPlan::Sequential ? 1.0 : 0.0, "bool");
  emit(p + ".t2.graph", s.t2_graph.wall / scale, unit);
  emit(p + ".t2.blas", s.t2_blas.wall / scale, unit);
  emit(p + ".t1.cpu", s.t1.cpu / scale, unit);
  // The fastest repetition of each: what the step takes when no other
  // process gets in (the machine is shared; medians include their slices).
  emit(p + ".t1.min", s.t1_min / scale, unit);
  emit(p + ".t2.graph.min", s.t2_graph_min / scale, unit);
  emit(p + ".t2.blas.min", s.t2_blas_min / scale, unit);
}

void run_seed(double clock_ns) {
  auto m = seed_model();
  if (detail()) std::printf("# seed main program:\n%s", m->main.to_string().c_str());
  StepTimes s = measure(*m, 200, 25, 3);
  KernelTime kt = kernel_time(*m, 101, 21, clock_ns, 20000);
  emit_threads("train.seed", s, 1e3, "us");
  emit("train.seed.kernels", kt.replay_ns / 1e3, "us");
  emit("train.seed.overhead", kt.overhead, "ratio");
  emit("train.seed.kernels.trace", kt.trace_ns / 1e3, "us");
  emit("train.seed.overhead.trace", kt.overhead_trace, "ratio");
  const RawSeed raw = seed_raw(*m, 20000, 9);
  emit("train.seed.raw", raw.raw_ns / 1e3, "us");
  emit("train.seed.raw.ratio", raw.ratio, "ratio");
  // The default pass pipeline's effect: t1 with and without it, interleaved.
  std::vector<Sample> with, without;
  for (int r = 0; r < 3; ++r) {
    for (const Sample& x : step_ns(*m, {1, kiln::ThreadPlan::Auto}, 200, 25)) with.push_back(x);
    for (const Sample& x : step_ns(*m, {1, kiln::ThreadPlan::Auto, ""}, 200, 25)) without.push_back(x);
  }
  emit("train.seed.t1.nopasses", median(without).wall / 1e3, "us");
  emit("train.seed.passes.speedup", median(without).wall / median(with).wall, "ratio");
  // The executor's per-step cost, layer by layer (see anatomy()).
  const Anatomy a = anatomy(*m, 200, 25);
  emit("train.seed.cost.executor_layer", (a.exe - a.core) / 1e3, "us");
  emit("train.seed.cost.gc_realloc", (a.core - a.core_nogc) / 1e3, "us");
  emit("train.seed.cost.scheduling", (a.core_nogc - a.core_seq) / 1e3, "us");
  emit("train.seed.cost.core_run_rest", (a.core_seq - a.replay) / 1e3, "us");
  emit("train.seed.cost.kernels", a.replay / 1e3, "us");
  if (detail()) print_breakdown("seed", kt);
}

// Detail: one profiled step at 2 executor threads (BLAS at 1) as Chrome
// trace events, to see which instructions overlap on the two threads.
void print_two_thread_trace(Model& m) {
  kiln::blas_set_num_threads(1);
  kiln::ExecutionOptions opts;
  opts.num_threads = 2;
  opts.profile = true;
  kiln::Executor exe(kiln::Place::cpu(), opts);
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);  // reused: a step allocates no result vector
  for (int i = 0; i < 10; ++i) exe.run(m.main, m.feeds, fetch, out);
  std::printf("# one step at 2 executor threads: %s\n", exe.last_core()->chrome_trace().c_str());
}

void run_mlp(std::int64_t batch, double clock_ns) {
  auto m = mlp_model(batch);
  const std::string p = "train.mlp" + std::to_string(batch);
  if (detail()) std::printf("# %s main program:\n%s", p.c_str(), m->main.to_string().c_str());
  const std::size_t matmuls = count_ops(m->main, "kiln.matmul");
  StepTimes s = measure(*m, 1, 21, 3);
  KernelTime kt = kernel_time(*m, 3, 11, clock_ns, 5);
  // 8 matmuls: no dX for the first layer (the data needs no gradient); 9: it is computed.
  const Sample floor = gemm_floor_ms(mlp_gemms(batch, matmuls >= 9), 1, 31);
  emit_threads(p, s, 1e6, "ms");
  emit(p + ".floor.t1", floor.wall, "ms");
  emit(p + ".floor.ratio", s.t1.wall / 1e6 / floor.wall, "ratio");
  emit(p + ".floor.t1.cpu", floor.cpu, "ms");
  emit(p + ".floor.ratio.cpu", s.t1.cpu / 1e6 / floor.cpu, "ratio");
  emit(p + ".kernels", kt.replay_ns / 1e6, "ms");
  emit(p + ".overhead", kt.overhead, "ratio");
  emit(p + ".kernels.trace", kt.trace_ns / 1e6, "ms");
  emit(p + ".overhead.trace", kt.overhead_trace, "ratio");
  emit(p + ".matmuls", double(matmuls), "ops");
  if (detail()) {
    print_breakdown(p, kt);
    print_two_thread_trace(*m);
  }
}

}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  const std::string filter = argc > 1 ? argv[1] : "";
  // "train" runs everything here; "train.seed", "train.mlp64", "train.mlp256" one model.
  auto want = [&](const std::string& group) {
    return filter.empty() || filter == "train" || filter == group;
  };
  if (!filter.empty() && filter.rfind("train", 0) != 0) return 0;
  if (filter.rfind("train.loop.", 0) == 0) {  // a profiler's target: steps only
    const double seconds = argc > 2 ? std::atof(argv[2]) : 5.0;
    // [threads] [plan: auto | graph | blas]
    const unsigned threads = argc > 3 ? unsigned(std::atoi(argv[3])) : 1u;
    const std::string plan = argc > 4 ? argv[4] : "auto";
    auto m = filter == "train.loop.seed" ? seed_model() : mlp_model(filter == "train.loop.mlp256" ? 256 : 64);
    kiln::ExecutionOptions opts;
    opts.num_threads = threads;
    opts.thread_plan = plan == "graph" ? kiln::ThreadPlan::Graph
                       : plan == "blas" ? kiln::ThreadPlan::Blas
                                        : kiln::ThreadPlan::Auto;
    kiln::Executor exe(kiln::Place::cpu(), opts);
    exe.run(m->startup);
    const std::vector<kiln::FetchTarget> fetch{m->loss};
    std::vector<kiln::Tensor> out(1);
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end)
      for (int i = 0; i < 100; ++i) exe.run(m->main, m->feeds, fetch, out);
    return 0;
  }
  const double clock_ns = clock_read_ns();
  if (detail()) std::printf("# steady_clock read: %.1f ns\n", clock_ns);
  if (want("train.seed")) run_seed(clock_ns);
  if (want("train.mlp64")) run_mlp(64, clock_ns);
  if (want("train.mlp256")) run_mlp(256, clock_ns);
  return 0;
}
