// Scheduler overhead: real Programs run through the Executor
// users call (GC on), whose ops have registered kernels that do nothing; each
// op reads its predecessors' values and defines its own, so the DAG comes
// from the dependency analysis. The same graphs on oneTBB's flow graph in the
// same run, and pre-analysis time and memory.
//   BENCH sched.{chain,fan,random}.t{1,2}  ns/instruction
//   BENCH tbb.{chain,fan,random}.t{1,2}    ns/node
//   BENCH build.random10k, build.chain100k ms;  build.chain100k.mem MB
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <malloc.h>
#include <random>
#include <string>
#include <vector>

#include <tbb/flow_graph.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/scope.h"

namespace bench {

using namespace kiln;

// bench.noop(%a, %b, …) -> tensor<1xf32>: reads its operands, defines one value.
struct NoopOp : Op<NoopOp> {
  using Op::Op;
  static constexpr std::string_view name = "bench.noop";
  static constexpr int num_results = 1;
  static void build(Builder&, OperationArgument& arg, const std::vector<Value>& ins) {
    arg.add_operands(ins);
    arg.add_result(TensorType::get(DataType::Float32, {1}));
  }
};
void noop_kernel(KernelContext&) {}
KILN_REGISTER_KERNEL(NoopOp, Cpu, Float32, noop_kernel);

struct Graph {
  std::vector<std::vector<std::uint32_t>> preds;  // per node, earlier nodes
};

Graph chain(std::uint32_t n) {
  Graph g;
  g.preds.resize(n);
  for (std::uint32_t i = 1; i < n; ++i) g.preds[i] = {i - 1};
  return g;
}

Graph fan(std::uint32_t n) {  // one source, n-2 middles, one sink
  Graph g;
  g.preds.resize(n);
  for (std::uint32_t i = 1; i + 1 < n; ++i) g.preds[i] = {0};
  for (std::uint32_t i = 1; i + 1 < n; ++i) g.preds[n - 1].push_back(i);
  return g;
}

Graph random_dag(std::uint32_t n, std::uint32_t k, std::uint64_t seed) {
  Graph g;
  g.preds.resize(n);
  std::mt19937_64 rng(seed);
  for (std::uint32_t i = 1; i < n; ++i) {
    std::uint32_t m = std::min(i, k);
    for (std::uint32_t j = 0; j < m; ++j) g.preds[i].push_back(std::uniform_int_distribution<std::uint32_t>(0, i - 1)(rng));
    std::sort(g.preds[i].begin(), g.preds[i].end());
    g.preds[i].erase(std::unique(g.preds[i].begin(), g.preds[i].end()), g.preds[i].end());
  }
  return g;
}

Program to_program(const Graph& g) {
  Program p;
  Builder b(p);
  std::vector<Value> vals;
  vals.reserve(g.preds.size());
  std::vector<Value> ins;
  for (const auto& pr : g.preds) {
    ins.clear();
    for (auto j : pr) ins.push_back(vals[j]);
    vals.push_back(b.create<NoopOp>(ins).result());
  }
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double time_ns(F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

double kiln_ns_per_op(const Program& p, std::size_t n, unsigned threads, int reps,
                      ThreadPlan plan = ThreadPlan::Auto) {
  ExecutionOptions opts;
  opts.num_threads = threads;
  opts.thread_plan = plan;
  Executor exe(Place::cpu(), opts);
  // Build the core, warm up, let Auto measure and decide.
  for (int i = 0; i < 2 || (!exe.last_core()->thread_plan_decided() && i < 50); ++i) exe.run(p);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(time_ns([&] { exe.run(p); }) / double(n));
  return median(t);
}

double tbb_ns_per_node(const Graph& g, unsigned threads, int reps) {
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
  tbb::task_arena arena(static_cast<int>(threads));
  double result = 0;
  arena.execute([&] {
    tbb::flow::graph fg;
    using Node = tbb::flow::continue_node<tbb::flow::continue_msg>;
    std::vector<std::unique_ptr<Node>> nodes;
    nodes.reserve(g.preds.size());
    for (std::size_t i = 0; i < g.preds.size(); ++i)
      nodes.push_back(std::make_unique<Node>(fg, [](const tbb::flow::continue_msg&) {}));
    std::vector<std::size_t> roots;
    for (std::size_t i = 0; i < g.preds.size(); ++i) {
      if (g.preds[i].empty()) roots.push_back(i);
      for (auto j : g.preds[i]) tbb::flow::make_edge(*nodes[j], *nodes[i]);
    }
    auto once = [&] {
      for (auto r : roots) nodes[r]->try_put(tbb::flow::continue_msg());
      fg.wait_for_all();
    };
    once();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) t.push_back(time_ns(once) / double(g.preds.size()));
    result = median(t);
  });
  return result;
}

// Bytes the process has allocated and not freed (heap + mmapped chunks):
// RSS would miss memory malloc reuses from earlier benchmarks.
double heap_mb() {
  struct mallinfo2 mi = mallinfo2();
  return double(mi.uordblks + mi.hblkhd) / (1024.0 * 1024.0);
}

kiln::ExecutionOptions one_thread() {
  kiln::ExecutionOptions c;
  c.num_threads = 1;
  return c;
}

void emit(const char* name, double v, const char* unit) { std::printf("BENCH %s %.3f %s\n", name, v, unit); }

}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  std::string filter = argc > 1 ? argv[1] : "";
  auto want = [&](const std::string& group) {
    return filter.empty() || filter == "sched" || filter == group;
  };
  if (!filter.empty() && filter != "sched" && filter != "build") return 0;
  const int reps = 9;

  Graph gc = chain(100000), gf = fan(100000), gr = random_dag(10000, 4, 7);
  if (want("sched")) {
    Program pc = to_program(gc), pf = to_program(gf), pr = to_program(gr);
    for (unsigned t : {1u, 2u}) {
      std::string s = ".t" + std::to_string(t);
      emit(("sched.chain" + s).c_str(), kiln_ns_per_op(pc, gc.preds.size(), t, reps), "ns");
      emit(("sched.fan" + s).c_str(), kiln_ns_per_op(pf, gf.preds.size(), t, reps), "ns");
      emit(("sched.random" + s).c_str(), kiln_ns_per_op(pr, gr.preds.size(), t, reps), "ns");
      if (t > 1) {  // the pool forced (Auto may keep the caller alone: tiny ops)
        emit(("sched.chain" + s + ".graph").c_str(),
             kiln_ns_per_op(pc, gc.preds.size(), t, reps, ThreadPlan::Graph), "ns");
        emit(("sched.fan" + s + ".graph").c_str(),
             kiln_ns_per_op(pf, gf.preds.size(), t, reps, ThreadPlan::Graph), "ns");
        emit(("sched.random" + s + ".graph").c_str(),
             kiln_ns_per_op(pr, gr.preds.size(), t, reps, ThreadPlan::Graph), "ns");
      }
      emit(("tbb.chain" + s).c_str(), tbb_ns_per_node(gc, t, reps), "ns");
      emit(("tbb.fan" + s).c_str(), tbb_ns_per_node(gf, t, reps), "ns");
      emit(("tbb.random" + s).c_str(), tbb_ns_per_node(gr, t, reps), "ns");
    }
  }
  if (want("build")) {
    Program pr = to_program(gr);
    std::vector<double> t;
    for (int r = 0; r < 5; ++r) {
      kiln::Scope scope;
      t.push_back(time_ns([&] { kiln::InterpreterCore core(pr, scope, {}, {}, one_thread()); }) / 1e6);
    }
    emit("build.random10k", median(t), "ms");
    Program pc = to_program(gc);
    t.clear();
    double mem = 0;
    for (int r = 0; r < 3; ++r) {
      kiln::Scope scope;
      double before = heap_mb();
      double ms = 0, after = 0;
      {
        auto t0 = std::chrono::steady_clock::now();
        kiln::InterpreterCore core(pc, scope, {}, {}, one_thread());
        ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        after = heap_mb();
      }
      t.push_back(ms);
      mem = std::max(mem, after - before);
    }
    emit("build.chain100k", median(t), "ms");
    emit("build.chain100k.mem", mem, "MB");
  }
  return 0;
}
