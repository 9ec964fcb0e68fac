// Memory of a training step: the bytes its temporaries take from the CPU
// allocator (in use or cached for reuse, after warm-up: the footprint the
// step keeps) over their live-set minimum (the most bytes of temporaries
// live at once when the step runs in program order — no assignment of
// buffers to values does better), with the executor's memory plan
// (ExecutionOptions::plan_memory, kiln/exec/memory_plan.h) and without it
// (every temporary freed after its last user into the caching allocator).
//   BENCH mem.<model>.peak_ratio          footprint / live-set minimum, plan on
//   BENCH mem.<model>.peak_ratio.noplan   the same, plan off
//   BENCH mem.<model>.arena / .arena.any_order / .live / .footprint / .footprint.noplan   MiB
//   BENCH mem.<model>.step.t1 / .step.t1.noplan   ms (interleaved)
// Models: the seed's, the MLP at batch 64 and 256, the small GPT
// (bench_models.h); the seed's step is timed in batches of 2000 (µs).
// The GPT again with each block recomputed in the backward
// (kiln/frontend/recompute.h), beside the plain one:
//   BENCH mem.gpt.recompute.live / .footprint   MiB
//   BENCH mem.gpt.recompute.live_ratio / .step_ratio   over the plain step's
// GPT-2 small's step planned from its types, not run (the CUDA benchmark's
// model: its bytes without a device), f32, amp O1 bf16 and amp recomputed:
//   BENCH mem.gpt2s.<mode>.persistent / .live / .total   MiB
//   BENCH mem.gpt2s.amp_bf16.recompute.live_ratio / .total_ratio   over amp's
//   BENCH mem.gpt2s.<mode>.cuda_traffic   MiB its ops read and write after a
//         CUDA executor's passes (step_traffic.h), with "# " lines per op kind
// `./run bench mem` (also run by `./run bench passes`).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_models.h"
#include "bench_util.h"
#include "step_traffic.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/exec/memory_plan.h"
#include "kiln/exec/plan_builder.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/frontend/recompute.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cpu_allocator.h"

using namespace kiln;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct Footprint {
  double bytes = 0;       // in use + cached, over the base
  double live = 0;        // the live-set minimum (plan on only)
  double arena = 0;      // the in-order arena
  double any_order = 0;  // the arena for runs on several threads
  std::vector<double> step_ms;
};

// One executor over `m` (its startup run in a scope of its own): warm-up
// steps, the allocator's cache emptied, then `steps` measured.
struct Trainer {
  Trainer(bench::Model& model, bool plan) : m(model) {
    ExecutionOptions o;
    o.num_threads = 1;
    o.plan_memory = plan;
    exe = std::make_unique<Executor>(Place::cpu(), o);
    exe->run(m.startup);
  }
  double step() {
    const auto t0 = std::chrono::steady_clock::now();
    exe->run(m.main, m.feeds, fetch, out);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  bench::Model& m;
  std::vector<FetchTarget> fetch{m.loss};
  std::vector<Tensor> out = std::vector<Tensor>(1);
  std::unique_ptr<Executor> exe;
};

Footprint measure(bench::Model& m, bool plan, int steps) {
  CpuAllocator& alloc = cpu_allocator();
  alloc.release_cache();
  const double base = static_cast<double>(alloc.bytes_in_use());
  Trainer t(m, plan);
  const double params = static_cast<double>(alloc.bytes_in_use()) - base;
  for (int i = 0; i < 3; ++i) t.step();
  alloc.release_cache();  // what the first (probe) steps left cached is not the step's
  Footprint f;
  for (int i = 0; i < steps; ++i) f.step_ms.push_back(t.step());
  const AllocatorStats st = alloc.stats();
  f.bytes = static_cast<double>(st.bytes_in_use + st.cached_bytes) - base - params;
  if (const MemoryPlan* mp = t.exe->last_core()->memory_plan()) {
    // One thread: the run goes in program order, over the in-order arena,
    // which comes from the system (not in the allocator's statistics).
    f.live = static_cast<double>(mp->temporaries_live_bytes);
    f.arena = static_cast<double>(mp->arena_bytes_in_order);
    f.any_order = static_cast<double>(mp->arena_bytes);
    f.bytes += f.arena;
  }
  return f;
}

void run_model(const std::string& name, bench::Model& m, int steps) {
  const Footprint on = measure(m, true, steps);
  const Footprint off = measure(m, false, steps);
  // Step times, the two executors interleaved (ratios hold on a noisy machine).
  Trainer a(m, true), b(m, false);
  std::vector<double> ta, tb;
  for (int i = 0; i < 3; ++i) a.step(), b.step();
  for (int i = 0; i < steps; ++i) ta.push_back(a.step()), tb.push_back(b.step());
  const std::string p = "mem." + name;
  if (on.live > 0) {
    bench::emit(p + ".peak_ratio", on.bytes / on.live, "ratio");
    bench::emit(p + ".peak_ratio.noplan", off.bytes / on.live, "ratio");
  }
  bench::emit(p + ".live", on.live / kMiB, "MiB");
  bench::emit(p + ".arena", on.arena / kMiB, "MiB");
  bench::emit(p + ".arena.any_order", on.any_order / kMiB, "MiB");
  bench::emit(p + ".footprint", on.bytes / kMiB, "MiB");
  bench::emit(p + ".footprint.noplan", off.bytes / kMiB, "MiB");
  // Batches of steps for the seed's microsecond step, one step otherwise.
  const bool micro = bench::median(tb) < 0.05;
  if (micro) {
    ta.clear(), tb.clear();
    for (int r = 0; r < 15; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 2000; ++i) a.step();
      const auto t1 = std::chrono::steady_clock::now();
      for (int i = 0; i < 2000; ++i) b.step();
      const auto t2 = std::chrono::steady_clock::now();
      ta.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2000);
      tb.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count() / 2000);
    }
  }
  bench::emit(p + ".step.t1", bench::median(ta), micro ? "us" : "ms");
  bench::emit(p + ".step.t1.noplan", bench::median(tb), micro ? "us" : "ms");
}

// `rec` is `plain` built again and recomputed between its checkpoints.
void run_recompute(const std::string& name, bench::Model& plain, bench::Model& rec, int steps) {
  const Footprint a = measure(plain, true, steps);
  const Footprint b = measure(rec, true, steps);
  Trainer ta(plain, true), tb(rec, true);
  std::vector<double> ratio;
  for (int i = 0; i < 3; ++i) ta.step(), tb.step();
  for (int i = 0; i < steps; ++i) {
    const double x = ta.step();
    ratio.push_back(tb.step() / x);
  }
  const std::string p = "mem." + name + ".recompute";
  bench::emit(p + ".live", b.live / kMiB, "MiB");
  bench::emit(p + ".footprint", b.bytes / kMiB, "MiB");
  if (a.live > 0) bench::emit(p + ".live_ratio", b.live / a.live, "ratio");
  bench::emit(p + ".step_ratio", bench::median(ratio), "ratio");
}

// GPT-2 small's step (bench_models.h's gpt2_small, the CUDA benchmark's
// model) estimated from its types, without running it: the program after
// the passes a CUDA executor runs (kDefaultPasses for cuda:0, so its bias
// epilogues, merged AdamW and in-place cross-entropy gradient where the
// CUDA kernels are built in; amp decides by the CPU's kernels), planned as
// the CPU executor plans it. Its bytes: the parameters and their AdamW
// state (what every step keeps), and the temporaries' live-set minimum (the
// most live at once in program order). Beside it a GPU run's
// cuda.gpt2s.<mode>.peak reads what the device's allocator and libraries
// add.
struct PlannedStep {
  double persistent = 0, live = 0;
};

PlannedStep plan_of(bench::Model& m) {
  Program& p = m.main;
  PassContext ctx;
  ctx.target_place = Place::cuda(0);
  ctx.add_live_out(m.loss);
  PassManager::parse(kDefaultPasses).run(p, ctx);
  std::vector<std::string> feeds;
  PlannedStep s;
  for (Operation* op : p.block()) {
    if (auto data = op->dyn_cast<DataOp>()) feeds.push_back(data.attrs().name);
    if (op->isa<ParameterOp>()) {
      const Type t = op->result(0).type();
      s.persistent += static_cast<double>(Dims(shaped_dims(t)).numel() * size_of(shaped_data_type(t)));
    }
  }
  ExecutionOptions o;
  o.num_threads = 1;
  o.passes = "";
  const auto plan = PlanBuilder(p, std::move(feeds), {}, std::move(o)).build();
  if (const auto mp = plan_memory_from_types(*plan)) s.live = static_cast<double>(mp->live_bytes);
  return s;
}

// The bytes the step's ops move on a CUDA device (step_traffic.h: by their
// types, after a CUDA executor's passes), in all and per op kind.
void print_traffic(const std::string& prefix, bench::Model& m) {
  const auto by_kind = bench::step_traffic(m.main, m.loss, Place::cuda(0));
  bench::emit(prefix + ".cuda_traffic", bench::total_bytes(by_kind) / kMiB, "MiB");
  for (const auto& [kind, t] : by_kind)
    std::printf("# %s.cuda_traffic %-40s %4d ops %9.1f MiB\n", prefix.c_str(), kind.c_str(), t.ops,
                t.bytes / kMiB);
}

void planned_gpt2s() {
  auto f32 = bench::gpt_model(Place::cpu(), bench::gpt2_small());
  auto amp = bench::gpt_model(Place::cpu(), bench::gpt2_small(), /*amp=*/true);
  auto rec = bench::gpt_model(Place::cpu(), bench::gpt2_small(), /*amp=*/true);
  recompute(rec->main, rec->checkpoints);
  const std::pair<const char*, bench::Model*> modes[] = {
      {"f32", f32.get()}, {"amp_bf16", amp.get()}, {"amp_bf16.recompute", rec.get()}};
  double amp_total = 0, amp_live = 0;
  for (const auto& [mode, m] : modes) {
    const PlannedStep s = plan_of(*m);
    const std::string p = std::string("mem.gpt2s.") + mode;
    bench::emit(p + ".persistent", s.persistent / kMiB, "MiB");
    bench::emit(p + ".live", s.live / kMiB, "MiB");
    bench::emit(p + ".total", (s.persistent + s.live) / kMiB, "MiB");
    if (m == amp.get()) amp_total = s.persistent + s.live, amp_live = s.live;
    print_traffic(p, *m);
    if (m == rec.get() && amp_live > 0) {
      bench::emit(p + ".live_ratio", s.live / amp_live, "ratio");
      bench::emit(p + ".total_ratio", (s.persistent + s.live) / amp_total, "ratio");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  auto wants = [&](const std::string& name) {
    return filter.empty() || filter == "mem" || filter == "passes" || filter == "mem." + name;
  };
  if (wants("seed")) {
    auto m = bench::seed_model();
    run_model("seed", *m, 4000);
  }
  if (wants("mlp64")) {
    auto m = bench::mlp_model(64);
    run_model("mlp64", *m, 20);
  }
  if (wants("mlp256")) {
    auto m = bench::mlp_model(256);
    run_model("mlp256", *m, 10);
  }
  if (wants("gpt")) {
    auto m = bench::gpt_model();
    run_model("gpt", *m, 5);
    auto r = bench::gpt_model();
    recompute(r->main, r->checkpoints);
    run_recompute("gpt", *m, *r, 5);
  }
  if (wants("gpt2s")) planned_gpt2s();
  return 0;
}
