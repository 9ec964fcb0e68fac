// Training-step benchmark of two real models, built with the frontend as a
// user builds them and trained through the Executor; `./run bench models`
// also runs the same models in PyTorch eager (bench/peers/*_torch.py) in the
// same invocation when python3 can import torch.
//   LeNet-5: x [64, 1, 28, 28] → conv 5×5 1→6 pad 2, relu, maxpool 2 →
//            conv 5×5 6→16, relu, maxpool 2 → flatten 400 → 120 relu → 84
//            relu → 10; cross-entropy (int64 labels); Adam(1e-3).
//   GPT:     vocab 96, d_model 128, 4 heads, 2 pre-LN causal blocks (FF 512,
//            GELU), learned token + position embeddings, final LayerNorm,
//            linear head; seq 64, batch 16; cross-entropy over [B·L, 96];
//            AdamW(3e-4, weight_decay 0.01).
//   RNN:     Elman RNN (tanh) as examples/rnn builds it, input 64, hidden
//            128, seq 32, batch 32, time-major; linear head to 10; MSE; SGD(0.01).
//   GPT d512: the GPT at vocab 8192, d_model 512, 8 heads, FF 2048, 4
//            blocks, seq 128, batch 8 (bench_models.h's gpt_d512()), in f32
//            and under amp O1 in bf16 (oneDNN's bf16 matmuls where the CPU
//            has them).
// Data: random but fixed (one batch, fed every step).
//   BENCH model.{lenet,gpt,rnn}.t1, .t2           ms/step (medians after warm-up)
//         .t1 at 1 thread; .t2 at 2 threads, the executor's default
//         ThreadPlan::Auto (it measures graph workers vs BLAS threads and
//         keeps the faster); .t2.plan_is_blas: the share of rounds (fresh
//         executors) in which it kept Blas, .t2.plan_is_sequential: Sequential;
//         .t2.graph / .t2.blas: each plan forced (2 graph workers with BLAS
//         at 1, or 1 graph thread with BLAS at 2)
//   BENCH model.gpt_d512.{t1,t2}, model.gpt_d512.amp_bf16.{t1,t2}  ms/step
//         (medians of 2 interleaved rounds of 3 steps after warm-up)
//   BENCH model.{lenet,gpt}.t1.cpu, .t1.min      CPU time / fastest repetition (ms)
//   BENCH model.gpt.floor.t1                      ms: every GEMM of a GPT step
//         (forward and backward, the dense layers' and the attention's per
//         head) called back to back via cblas_sgemm at 1 BLAS thread
//   BENCH model.gpt.floor.dense.t1                ms: the dense layers' GEMMs only
//   BENCH model.gpt.floor.t2                      ms: floor.t1's GEMMs at 2 BLAS threads
//   BENCH model.gpt.floor.ratio                   t1 ÷ floor.t1
//   BENCH model.gpt.t1.nopasses, .fused.speedup   ms without the default pass
//                                                 pipeline, and that ÷ t1 with it
//   BENCH model.gpt.fused.ceiling                 t1.nopasses ÷ floor.t1: the most
//         a pipeline could give at one thread leaving the GEMMs as they are
//   BENCH model.{lenet,gpt}.kernels.t1            ms: Σ of the profiled
//         instructions' own times in a step at 1 thread
// Comment lines (#): the loss over 20 training steps from a fresh start (it
// must fall) and each model's per-op breakdown of a profiled step at 1
// thread, biggest first; KILN_BENCH_DETAIL=1 also prints each main program.
// Filters: "models" / "model" (all), "model.lenet", "model.gpt", "model.rnn",
// "model.gpt_d512".
// `model_bench model.loop.{lenet,gpt,rnn} [seconds] [threads] [auto | graph | blas
// | sequential]` only runs steps (a target for perf), printing nothing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
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
#include "kiln/exec/step_stats.h"
#include "kiln/runtime/scope.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/kernel/blas.h"
#include "kiln/kernel/random.h"

namespace bench {

// ---- the models (LeNet-5 and the GPT: bench_models.h) ----

constexpr std::int64_t kRnnSteps = 32, kRnnBatch = 32, kRnnInput = 64, kRnnHidden = 128,
                       kRnnOut = 10;

// The Elman RNN of examples/rnn: nn::SimpleRNN (a while_loop over time,
// the input projection hoisted into one GEMM) and a linear head; MSE; SGD.
std::unique_ptr<Model> rnn_model() {
  auto m = std::make_unique<Model>();
  {
    kiln::ProgramGuard guard(m->main, m->startup);
    auto x = kiln::data("x", {kRnnSteps, kRnnBatch, kRnnInput});
    auto y = kiln::data("y", {kRnnSteps, kRnnBatch, kRnnOut});
    kiln::nn::SimpleRNN rnn(kRnnInput, kRnnHidden);
    kiln::nn::Linear head(kRnnHidden, kRnnOut);
    m->loss = kiln::nn::functional::mse_loss(head(rnn(x).first), y);
    kiln::optim::SGD(/*learning_rate=*/0.01).minimize(m->loss);
  }
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> xs(static_cast<std::size_t>(kRnnSteps * kRnnBatch * kRnnInput)),
      ys(static_cast<std::size_t>(kRnnSteps * kRnnBatch * kRnnOut));
  for (auto& v : xs) v = normal(rng);
  for (auto& v : ys) v = normal(rng);
  m->feeds = {{"x", kiln::Tensor::from_vector<float>({kRnnSteps, kRnnBatch, kRnnInput}, xs)},
              {"y", kiln::Tensor::from_vector<float>({kRnnSteps, kRnnBatch, kRnnOut}, ys)}};
  return m;
}

std::size_t count_ops(const kiln::Program& p, std::string_view name) {
  std::size_t n = 0;
  for (kiln::Operation* op : p.block())
    if (op->name() == name) ++n;
  return n;
}

// ---- step time ----

kiln::ExecutionOptions options(unsigned threads, bool profile = false,
                               kiln::ThreadPlan plan = kiln::ThreadPlan::Auto,
                               const char* passes = kiln::kDefaultPasses) {
  kiln::ExecutionOptions opts;
  opts.num_threads = threads;
  opts.thread_plan = plan;  // default Auto: what a user gets
  opts.profile = profile;
  opts.passes = passes;
  return opts;
}

// ms per step for each of `reps` repetitions of `steps` steps, after warm-up
// (calibration and the thread-plan trials), from a fresh executor.
std::vector<Sample> step_ms(Model& m, unsigned threads, int steps, int reps,
                            kiln::ThreadPlan* chosen = nullptr,
                            kiln::ThreadPlan plan = kiln::ThreadPlan::Auto,
                            const char* passes = kiln::kDefaultPasses) {
  kiln::Executor exe(kiln::Place::cpu(), options(threads, false, plan, passes));
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);
  const int warm = 2 + 3 * kiln::ThreadPlanTuner::kTrials + 5;
  for (int i = 0; i < warm; ++i) exe.run(m.main, m.feeds, fetch, out);
  if (chosen) *chosen = exe.last_core()->thread_plan();
  const bool blas_threads = kiln::blas_num_threads() > 1;
  std::vector<Sample> t;
  for (int r = 0; r < reps; ++r) {
    Sample x = time_both([&] {
      for (int i = 0; i < steps; ++i) exe.run(m.main, m.feeds, fetch, out);
    });
    t.push_back({x.wall / steps / 1e6, x.cpu / steps / 1e6});
  }
  kiln::blas_set_num_threads(1);
  // OpenBLAS's threads spin ~0.1 s after their last GEMM: let them sleep.
  if (blas_threads) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  return t;
}

struct StepTimes {
  Sample t1, t2, t2_graph, t2_blas;
  double t1_min = 0, t2_min = 0;
  double blas_rounds = 0, seq_rounds = 0;  // shares of rounds whose Auto executor kept Blas / Sequential
};

// 1 and 2 threads interleaved round by round (load changes on the shared
// machine hit both alike); medians over every repetition of every round.
StepTimes measure(Model& m, int steps, int reps, int rounds) {
  std::vector<Sample> a, b, g, bl;
  StepTimes s;
  auto add = [](std::vector<Sample>& to, const std::vector<Sample>& v) {
    to.insert(to.end(), v.begin(), v.end());
  };
  for (int r = 0; r < rounds; ++r) {
    add(a, step_ms(m, 1, steps, reps));
    kiln::ThreadPlan chosen = kiln::ThreadPlan::Graph;
    add(b, step_ms(m, 2, steps, reps, &chosen));
    s.blas_rounds += (chosen == kiln::ThreadPlan::Blas ? 1.0 : 0.0) / rounds;
    s.seq_rounds += (chosen == kiln::ThreadPlan::Sequential ? 1.0 : 0.0) / rounds;
    add(g, step_ms(m, 2, steps, reps, nullptr, kiln::ThreadPlan::Graph));
    add(bl, step_ms(m, 2, steps, reps, nullptr, kiln::ThreadPlan::Blas));
  }
  auto min_wall = [](const std::vector<Sample>& v) {
    double mn = v[0].wall;
    for (const auto& x : v) mn = std::min(mn, x.wall);
    return mn;
  };
  s.t1 = median(a);
  s.t2 = median(b);
  s.t2_graph = median(g);
  s.t2_blas = median(bl);
  s.t1_min = min_wall(a);
  s.t2_min = min_wall(b);
  return s;
}

void emit_times(const std::string& p, const StepTimes& s) {
  emit(p + ".t1", s.t1.wall, "ms");
  emit(p + ".t2", s.t2.wall, "ms");
  emit(p + ".t2.plan_is_blas", s.blas_rounds, "share");
  emit(p + ".t2.plan_is_sequential", s.seq_rounds, "share");
  emit(p + ".t2.graph", s.t2_graph.wall, "ms");
  emit(p + ".t2.blas", s.t2_blas.wall, "ms");
  emit(p + ".t1.cpu", s.t1.cpu, "ms");
  emit(p + ".t1.min", s.t1_min, "ms");
  emit(p + ".t2.min", s.t2_min, "ms");
}

// ---- does it train? ----

// The loss of 20 steps from a fresh start (1 thread), as a comment line.
void loss_curve(Model& m, const std::string& p) {
  // Initializers with seed 0 draw from the process generator, which every
  // startup run advances: reset it, so the curve is the same whatever ran before.
  kiln::set_random_seed(1);
  kiln::Executor exe(kiln::Place::cpu(), options(1));
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);
  std::vector<float> l;
  for (int i = 0; i < 20; ++i) {
    exe.run(m.main, m.feeds, fetch, out);
    l.push_back(out[0].data<float>()[0]);
  }
  std::printf("# %s loss over 20 steps:", p.c_str());
  for (std::size_t i = 0; i < l.size(); i += 4) std::printf(" %.4f", double(l[i]));
  std::printf(" %.4f  (%s)\n", double(l.back()),
              std::isfinite(l.back()) && l.back() < l.front() ? "falls" : "DOES NOT FALL");
  std::fflush(stdout);
}

// ---- per-op breakdown of a profiled step ----

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

// Σ of the instructions' own times (ms, median over `steps` profiled steps
// at 1 thread), and the per-op-name breakdown printed as comment lines.
double breakdown(Model& m, const std::string& p, int steps) {
  kiln::blas_set_num_threads(1);
  kiln::Executor exe(kiln::Place::cpu(), options(1, /*profile=*/true));
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);
  for (int i = 0; i < 15; ++i) exe.run(m.main, m.feeds, fetch, out);
  std::map<std::string, std::vector<double>> per_op;
  std::map<std::string, int> count;
  std::vector<double> totals, walls;
  for (int i = 0; i < steps; ++i) {
    walls.push_back(time_ns([&] { exe.run(m.main, m.feeds, fetch, out); }) / 1e6);
    std::map<std::string, double> step;
    double sum = 0;
    count.clear();
    for (auto& [name, us] : trace_durations(exe.last_core()->chrome_trace())) {
      step[name] += us / 1e3;
      sum += us / 1e3;
      ++count[name];
    }
    for (auto& [name, ms] : step) per_op[name].push_back(ms);
    totals.push_back(sum);
  }
  std::vector<std::pair<double, std::string>> v;
  for (auto& [name, t] : per_op) v.emplace_back(median(t), name);
  std::sort(v.rbegin(), v.rend());
  const double total = median(totals);
  std::size_t n = 0;
  for (auto& [name, c] : count) n += std::size_t(c);
  std::printf("# %s per-op breakdown, 1 thread (profiled step %.3f ms; instructions %zu, their sum %.3f ms):\n",
              p.c_str(), median(walls), n, total);
  std::printf("#   %-44s %5s %10s %6s\n", "op (all instances)", "n", "ms", "share");
  for (auto& [ms, name] : v) {
    if (ms < 0.005 * total) continue;
    std::printf("#   %-44s %5d %10.3f %5.1f%%\n", name.c_str(), count[name], ms, 100 * ms / total);
  }
  std::fflush(stdout);
  return total;
}

// ---- GEMM floor ----

struct Gemm {
  bool ta, tb;
  int m, n, k;
  int count;  // calls of this shape per step
};

// The GEMMs of one GPT training step. Dense layers (inputs [B·L, in]):
// forward x·W; backward dX = dY·Wᵀ (every layer: the embeddings train, so
// each layer's input needs its gradient) and dW = Xᵀ·dY. Attention per
// (batch, head): forward S = Q·Kᵀ, O = P·V; backward dV = Pᵀ·dO,
// dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q (full L×L, no causal skipping).
std::vector<Gemm> gpt_gemms(bool with_attention) {
  const int t = int(kBatch * kSeq), e = int(kModel), f = int(kFF), v = int(kVocab);
  const int l = int(kSeq), d = int(kModel / kHeads), bh = int(kBatch * kHeads);
  std::vector<std::pair<int, int>> dense;  // (in, out)
  for (int i = 0; i < kLayers; ++i) {
    dense.push_back({e, 3 * e});  // qkv
    dense.push_back({e, e});      // out_proj
    dense.push_back({e, f});      // linear1
    dense.push_back({f, e});      // linear2
  }
  dense.push_back({e, v});  // head
  std::vector<Gemm> g;
  for (auto [in, o] : dense) {
    g.push_back({false, false, t, o, in, 1});  // forward
    g.push_back({false, true, t, in, o, 1});   // dX
    g.push_back({true, false, in, o, t, 1});   // dW
  }
  if (with_attention) {
    const int n = bh * int(kLayers);
    g.push_back({false, true, l, l, d, n});   // S = Q·Kᵀ
    g.push_back({false, false, l, d, l, n});  // O = P·V
    g.push_back({true, false, l, d, l, n});   // dV = Pᵀ·dO
    g.push_back({false, true, l, l, d, n});   // dP = dO·Vᵀ
    g.push_back({false, false, l, d, l, n});  // dQ = dS·K
    g.push_back({true, false, l, d, l, n});   // dK = dSᵀ·Q
  }
  return g;
}

// Median over reps of all `gemms` back to back (ms), BLAS at `threads`.
Sample gemm_floor_ms(const std::vector<Gemm>& gemms, int reps, int threads = 1) {
  kiln::blas_set_num_threads(threads);
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
      for (int c = 0; c < g.count; ++c)
        cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans,
                    g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f, bufs[i].a.data(),
                    g.ta ? g.m : g.k, bufs[i].b.data(), g.tb ? g.k : g.n, 0.0f,
                    bufs[i].c.data(), g.n);
    }
  };
  for (int i = 0; i < 5; ++i) once();
  std::vector<Sample> t;
  for (int r = 0; r < reps; ++r) {
    Sample x = time_both(once);
    t.push_back({x.wall / 1e6, x.cpu / 1e6});
  }
  kiln::blas_set_num_threads(1);
  if (threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  return median(t);
}

// ---- the two models ----

void run_lenet() {
  auto m = lenet_model();
  if (detail()) std::printf("# model.lenet main program:\n%s", m->main.to_string().c_str());
  loss_curve(*m, "model.lenet");
  StepTimes s = measure(*m, 2, 15, 3);
  emit_times("model.lenet", s);
  emit("model.lenet.kernels.t1", breakdown(*m, "model.lenet", 21), "ms");
}

void run_gpt() {
  auto m = gpt_model();
  if (detail()) std::printf("# model.gpt main program:\n%s", m->main.to_string().c_str());
  std::printf("# model.gpt: %zu ops in the main program, %zu kiln.matmul, %zu kiln.scaled_dot_product_attention\n",
              std::size_t(std::distance(m->main.block().begin(), m->main.block().end())),
              count_ops(m->main, "kiln.matmul"), count_ops(m->main, "kiln.scaled_dot_product_attention"));
  loss_curve(*m, "model.gpt");
  StepTimes s = measure(*m, 1, 15, 3);
  const Sample floor = gemm_floor_ms(gpt_gemms(true), 41);
  const Sample dense = gemm_floor_ms(gpt_gemms(false), 41);
  const Sample floor2 = gemm_floor_ms(gpt_gemms(true), 41, 2);
  emit_times("model.gpt", s);
  emit("model.gpt.floor.t1", floor.wall, "ms");
  emit("model.gpt.floor.dense.t1", dense.wall, "ms");
  emit("model.gpt.floor.t2", floor2.wall, "ms");
  emit("model.gpt.floor.ratio", s.t1.wall / floor.wall, "ratio");
  emit("model.gpt.floor.t1.cpu", floor.cpu, "ms");
  emit("model.gpt.floor.ratio.cpu", s.t1.cpu / floor.cpu, "ratio");
  emit("model.gpt.kernels.t1", breakdown(*m, "model.gpt", 11), "ms");
  // The default pass pipeline's effect: t1 with and without it, interleaved.
  std::vector<Sample> with, without;
  for (int r = 0; r < 3; ++r) {
    for (const Sample& x : step_ms(*m, 1, 1, 9)) with.push_back(x);
    for (const Sample& x : step_ms(*m, 1, 1, 9, nullptr, kiln::ThreadPlan::Auto, "")) without.push_back(x);
  }
  emit("model.gpt.t1.nopasses", median(without).wall, "ms");
  emit("model.gpt.fused.speedup", median(without).wall / median(with).wall, "ratio");
  // The most any pipeline could give at one thread without changing the
  // GEMMs: the step without passes over its GEMMs alone.
  emit("model.gpt.fused.ceiling", median(without).wall / floor.wall, "ratio");
}

// ms per step of `steps` steps after the warm-up the thread-plan tuner
// needs, from a fresh executor (step_ms's lean form, for a model whose step
// takes a large part of a second); the loss after them in *loss.
std::vector<double> steps_ms(Model& m, unsigned threads, int steps, float* loss) {
  kiln::Executor exe(kiln::Place::cpu(), options(threads));
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);
  // The first steps create oneDNN's primitives and fill the allocator's
  // cache (the amp step at one thread: 1.6, 1.0, 0.9, 0.9 s, then 0.43).
  const int warm = threads > 1 ? 2 + 2 * kiln::ThreadPlanTuner::kTrials : 5;
  for (int i = 0; i < warm; ++i) exe.run(m.main, m.feeds, fetch, out);
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) t.push_back(time_ns([&] { exe.run(m.main, m.feeds, fetch, out); }) / 1e6);
  *loss = out[0].to_vector<float>()[0];
  kiln::blas_set_num_threads(1);  // as step_ms leaves it
  if (threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  return t;
}

// model.gpt_d512 in f32 and under amp O1 in bf16, at 1 and 2 threads, in
// two interleaved rounds.
void run_gpt_d512() {
  const std::string name[2] = {"model.gpt_d512", "model.gpt_d512.amp_bf16"};
  std::unique_ptr<Model> m[2] = {gpt_model(kiln::Place::cpu(), gpt_d512()),
                                 gpt_model(kiln::Place::cpu(), gpt_d512(), /*amp=*/true)};
  std::vector<double> t1[2], t2[2];
  float loss[2] = {};
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 2; ++i) {
      for (double v : steps_ms(*m[i], 1, 3, &loss[i])) t1[i].push_back(v);
      for (double v : steps_ms(*m[i], 2, 3, &loss[i])) t2[i].push_back(v);
    }
  for (int i = 0; i < 2; ++i) {
    std::printf("# %s: loss %.5f after %d steps at 2 threads\n", name[i].c_str(), double(loss[i]),
                3 + 2 + 2 * kiln::ThreadPlanTuner::kTrials);  // warm-up and timed
    emit(name[i] + ".t1", median(t1[i]), "ms");
    emit(name[i] + ".t2", median(t2[i]), "ms");
  }
}

void run_rnn() {
  auto m = rnn_model();
  if (detail()) std::printf("# model.rnn main program:\n%s", m->main.to_string().c_str());
  loss_curve(*m, "model.rnn");
  StepTimes s = measure(*m, 5, 15, 3);
  emit_times("model.rnn", s);
  emit("model.rnn.kernels.t1", breakdown(*m, "model.rnn", 11), "ms");
}

}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  const std::string filter = argc > 1 ? argv[1] : "";
  if (filter.rfind("model.loop.", 0) == 0) {  // a profiler's target: steps only
    const double seconds = argc > 2 ? std::atof(argv[2]) : 5.0;
    const unsigned threads = argc > 3 ? unsigned(std::atoi(argv[3])) : 1u;
    const std::string plan = argc > 4 ? argv[4] : "auto";
    auto m = filter == "model.loop.lenet" ? lenet_model()
             : filter == "model.loop.rnn" ? rnn_model()
                                          : gpt_model();
    kiln::Executor exe(kiln::Place::cpu(),
                       options(threads, false,
                               plan == "graph"        ? kiln::ThreadPlan::Graph
                               : plan == "blas"       ? kiln::ThreadPlan::Blas
                               : plan == "sequential" ? kiln::ThreadPlan::Sequential
                                                      : kiln::ThreadPlan::Auto));
    exe.run(m->startup);
    const std::vector<kiln::FetchTarget> fetch{m->loss};
    std::vector<kiln::Tensor> out(1);
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) exe.run(m->main, m->feeds, fetch, out);
    return 0;
  }
  const bool all = filter.empty() || filter == "models" || filter == "model";
  // "cf": the control-flow benchmarks' model, the RNN (a while_loop over time).
  if (!all && filter != "cf" && filter.rfind("model.", 0) != 0) return 0;
  if (all || filter == "model.lenet") run_lenet();
  if (all || filter == "model.gpt") run_gpt();
  if (all || filter == "model.rnn" || filter == "cf") run_rnn();
  if (all || filter == "model.gpt_d512") run_gpt_d512();
  return 0;
}
