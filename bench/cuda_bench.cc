// CUDA benchmarks (`./run bench cuda`, on a machine with a CUDA device; on
// one without, a # line says so and nothing is measured):
//   BENCH cuda.op_overhead         µs per op: a chain of 1000 relu on 256
//                                  floats run by the Executor, minus the same
//                                  kernels launched back to back in a loop
//   BENCH cuda.seed.step           µs: the seed model's training step, a
//                                  launch per kernel
//   BENCH cuda.seed.graph.step     µs: the same step replayed as a CUDA graph
//   BENCH cuda.graph.speedup       ratio step ÷ graph.step
//   BENCH cuda.mlp256.step         ms: the 784-512-512-10 MLP at batch 256
//   BENCH cuda.gpt.step            ms: the small GPT, batch 16, seq 64
//   BENCH cuda.gpt.graph.step      ms: the same, replayed as a CUDA graph
//   BENCH cuda.seed.step.host_feeds µs: the seed step fed host tensors (two
//                                  copies to the device per step)
//   BENCH cuda.gpt2s.f32.step      ms: GPT-2 small (vocab 50257, d 768, 12
//                                  heads, 12 layers, seq 512, batch 8, AdamW),
//                                  full f32 GEMMs
//   BENCH cuda.gpt2s.tf32.step     ms: the same, f32 GEMMs in TF32
//                                  (MatmulPrecision::High)
//   BENCH cuda.gpt2s.amp_bf16.step ms: the same under amp O1 bf16 (its
//                                  matmuls on tensor cores in bf16)
//   BENCH cuda.gpt2s.amp_bf16.recompute.step ms: the same, each block
//                                  recomputed in the backward
//   BENCH cuda.gpt2s.<mode>.peak   MiB: the device memory kiln held at most
//                                  during a step (the caching allocator's
//                                  peak bytes in use)
//   BENCH cuda.gpt2s.adamw.unmerged ms: the AdamW update of GPT-2 small's
//                                  parameters (their shapes, the gradients
//                                  fed on the device), one adamw_ each
//   BENCH cuda.gpt2s.adamw.merged  ms: the same updates merged by
//                                  fuse_optimizer (multi-tensor launches)
//   BENCH cuda.gpt2s.adamw.merge_speedup  ratio unmerged ÷ merged
//   BENCH cuda.layer_norm.fwd_bwd  µs: layer_norm and its gradient on
//                                  [4096, 768] f32 (GPT-2 small's rows)
//   BENCH cuda.layer_norm.bandwidth_fraction  its least traffic (read x,
//                                  write y; read x and dy, write dx) per
//                                  second ÷ a copy's bytes per second
//   BENCH cuda.attention.fused.<dtype>.fwd_bwd  µs: scaled_dot_product_attention
//                                  and its gradient, B 8, H 12, L 512, D 64,
//                                  causal, layout BHLD, in bf16 and f32 (the
//                                  fused kernels); the peer times
//                                  F.scaled_dot_product_attention's forward
//                                  and backward on the same shape
//   BENCH cuda.attention.fused_wmma.bf16.fwd_bwd  µs: the same in bf16 on
//                                  the shared-memory kernels
//                                  (KILN_CUDA_FLASH=wmma), and
//                                  ...bf16.speedup_over_wmma their ratio to
//                                  the register-tile kernels' figure
//   BENCH cuda.attention.fused_atomic_dq.bf16.fwd_bwd  µs: the same with
//                                  dQ summed by atomics
//                                  (AttentionGradSum::Atomic), and
//                                  ...bf16.atomic_dq_speedup the
//                                  deterministic figure over it
//   BENCH cuda.attention.fused.bf16.padded_fwd_bwd  µs: the bf16 figure
//                                  with key_lengths 512, 448, …, 64 (a
//                                  right-padded batch: 56 % of the keys),
//                                  and ...bf16.padded_speedup the unpadded
//                                  figure over it; the peer masks the same
//                                  keys with a boolean attn_mask
//   BENCH cuda.attention.biased.bf16.fwd_bwd  µs: the bf16 figure with an
//                                  ALiBi bias ([1, 12, 512, 512] bf16 mask
//                                  operand: the shared-memory tiles, reading
//                                  the bias per score), and
//                                  ...bf16.biased_slowdown it over the
//                                  unbiased figure; the peer passes the bias
//                                  (the causal mask folded in) as attn_mask
//   BENCH cuda.attention.gqa.bf16.fwd_bwd  µs: the bf16 figure with k
//                                  and v of 4 heads (grouped-query
//                                  attention, 3 query heads each: the
//                                  same products, a third of k and v's
//                                  bytes, and dk, dv summed per group
//                                  after), and ...bf16.gqa_slowdown it over
//                                  the 12-head figure; the peer passes
//                                  enable_gqa=True
//   BENCH cuda.attention.dropout.bf16.fwd_bwd  µs: the bf16 figure with
//                                  attention dropout 0.1 (one kiln.random_key
//                                  per run, read by every link; the register
//                                  tiles' dropout forms draw the keep mask in
//                                  the forward and again in the gradient), and
//                                  ...bf16.dropout_slowdown it over the
//                                  figure without; the peer passes
//                                  dropout_p=0.1
//   BENCH cuda.ffn.<gelu>.{fused,unfused}  µs: a GPT-2-small FFN link in
//                                  bf16 ([4096, 768] · [768, 3072] + bias,
//                                  gelu, gelu_grad reading the
//                                  pre-activation, · [3072, 768]), with the
//                                  fuse pass (one fused_matmul keeping the
//                                  pre-activation: cuBLASLt's GELU_AUX_BIAS
//                                  for gelu_tanh, the BIAS epilogue and a
//                                  pass for the exact gelu) and without
//   BENCH cuda.ffn.<gelu>.speedup  ratio unfused ÷ fused
//   BENCH cuda.{resnet18,mobilenet_v2}.<mode>.step  ms: the CNN's training
//                                  step (bench_cnns.h) at batch 64, 224x224,
//                                  SGD with momentum, cuDNN's timed algorithm
//                                  search (ConvAlgorithmSearch::Benchmark):
//                                  f32 (FMA convolutions and GEMMs), tf32
//                                  (ResNet-18: both in TF32), amp_bf16 (O1,
//                                  convolutions and matmuls in bf16)
//   BENCH cuda.<net>.amp_bf16.heuristic.step  ms: amp with cuDNN's heuristic
//                                  choice (the default) instead
//   BENCH cuda.<net>.amp_bf16.peak MiB: as cuda.gpt2s.<mode>.peak
// `cuda_bench GROUP` runs one group of these (cuda.seed, cuda.gpt2s.amp_bf16,
// ...; `cuda_bench --groups` lists them), as the GPU bundle's run-bench.sh
// does, each in a process of its own; a filter names whole dotted parts: a
// group, a family of groups (cuda.gpt2s) or a figure of one group.
// The models' batches stay on the device (data ops placed there), as the
// peer's do. Each is the median of several repetitions after warm-up; the PyTorch peer
// (bench/peers/cuda_torch.py) prints cuda.*.torch.step in the same run and
// ./run prints the ratios. A # line lists the ops each model runs on the
// CPU (no CUDA kernel yet), which its step time includes. The GPT-2 and CNN
// groups print their step stats per op kind as # lines, and beside them
// the bandwidth each kind reached (bytes by type over device time).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench_cnns.h"
#include "bench_models.h"
#include "bench_util.h"
#include "step_traffic.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/step_stats.h"
#include "kiln/frontend/recompute.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/attention_options.h"
#include "kiln/runtime/conv_options.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/runtime/matmul_precision.h"
#include "kiln/support/half.h"
#include "kiln/support/warning.h"

namespace bench {
namespace {

constexpr int kChain = 1000;
constexpr std::int64_t kChainWidth = 256;

// Median µs of `runs` runs of `p` fetching `total`, after `warm` runs.
double median_run_us(kiln::Executor& exe, kiln::Program& p, const kiln::FeedMap& feed, kiln::Value total, int warm,
                     int runs) {
  const std::vector<kiln::FetchTarget> fetch{total};
  std::vector<kiln::Tensor> out(1);
  for (int i = 0; i < warm; ++i) exe.run(p, feed, fetch, out);
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) t.push_back(time_ns([&] { exe.run(p, feed, fetch, out); }));
  return median(t) / 1e3;
}

// The Executor's run of `chain` relus, µs per op.
double executor_chain_us(int reps) {
  kiln::Program p;
  kiln::Value v;
  {
    kiln::Builder b(p);
    v = b.create<kiln::DataOp>("x", std::vector<std::int64_t>{kChainWidth}).result();
    for (int i = 0; i < kChain; ++i) v = b.create<kiln::ReluOp>(v).result();
  }
  kiln::Executor exe(kiln::Place::cuda(0), {.num_threads = 1});
  kiln::FeedMap feed{{"x", kiln::Tensor::zeros({kChainWidth}, kiln::DataType::Float32)}};
  return median_run_us(exe, p, feed, v, 20, reps) / kChain;
}

// The same relu kernel launched kChain times on the compute stream (two
// buffers, ping-pong), then one synchronisation: µs per launch.
double plain_loop_us(int reps) {
  kiln::Program p;
  kiln::Builder b(p);
  auto x = b.create<kiln::DataOp>("x", std::vector<std::int64_t>{kChainWidth});
  auto relu = b.create<kiln::ReluOp>(x.result());
  kiln::CudaContext& cuda = kiln::cuda_context(0);
  const kiln::KernelInfo& k = kiln::KernelRegistry::instance().get(
      *relu.operation(), kiln::PlaceKind::Cuda, kiln::DataType::Float32);
  kiln::Variable a, c;
  a.get_mutable<kiln::Tensor>() =
      kiln::copy_to_place(kiln::Tensor::zeros({kChainWidth}, kiln::DataType::Float32),
                          kiln::Place::cuda(0));
  kiln::Variable* ab[] = {&a, &c};
  kiln::Variable* ba[] = {&c, &a};
  kiln::KernelContext fwd(relu.operation(), ab, 1, ab + 1, 1, nullptr, kiln::Place::cuda(0),
                          &cuda.allocator());
  kiln::KernelContext back(relu.operation(), ba, 1, ba + 1, 1, nullptr, kiln::Place::cuda(0),
                           &cuda.allocator());
  fwd.set_stream(&cuda.compute_stream());
  back.set_stream(&cuda.compute_stream());
  auto loop = [&] {
    for (int i = 0; i < kChain; i += 2) {
      k.fn(fwd);
      k.fn(back);
    }
    cuda.compute_stream().synchronize();
  };
  for (int i = 0; i < 20; ++i) loop();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(time_ns(loop));
  return median(t) / 1e3 / kChain;
}

// MiB of device memory in use at most during a few steps of `m` on cuda:0
// (after the first steps: the plan and its buffers made).
double peak_mib(Model& m) {
  kiln::Executor exe(kiln::Place::cuda(0), {.num_threads = 1});
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  for (int i = 0; i < 3; ++i) exe.run(m.main, m.feeds, fetch);
  kiln::Allocator& a = kiln::cuda_context(0).allocator();
  a.reset_peak();
  for (int i = 0; i < 3; ++i) exe.run(m.main, m.feeds, fetch);
  return double(a.stats().peak_bytes_in_use) / (1024.0 * 1024.0);
}

// µs per training step of `m` on cuda:0, launches or a CUDA graph.
double step_us(Model& m, bool graph, int steps, int reps) {
  kiln::ExecutionOptions o;
  o.num_threads = 1;
  o.cuda_graph = graph;
  kiln::Executor exe(kiln::Place::cuda(0), o);
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);
  for (int i = 0; i < 10; ++i) exe.run(m.main, m.feeds, fetch, out);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r)
    t.push_back(time_ns([&] {
                  for (int i = 0; i < steps; ++i) exe.run(m.main, m.feeds, fetch, out);
                }) /
                steps);
  return median(t) / 1e3;
}

// Prints, as "# " lines, the bandwidth each op kind of `m`'s step reached
// in `stats`: the bytes its ops read and write by their types
// (step_traffic.h) over their device time, beside its calls in the plan
// and in the program the passes made (equal unless the executor rewrote
// more).
void print_bandwidths(Model& m, const kiln::StepStats& stats, const char* name) {
  const auto traffic = bench::step_traffic(m.main, m.loss, kiln::Place::cuda(0));
  std::printf("# bandwidth of %s: kind, calls (run / typed), ms, MiB, GB/s\n", name);
  for (const kiln::OpSummary& s : kiln::summarize(stats)) {
    const auto it = traffic.find(s.op_name);
    if (it == traffic.end() || s.total_ns <= 0) continue;
    std::printf("# %-40s %4llu / %4d %9.3f %9.1f %8.1f\n", s.op_name.c_str(),
                static_cast<unsigned long long>(s.calls), it->second.ops, double(s.total_ns) / 1e6,
                it->second.bytes / (1024.0 * 1024.0), it->second.bytes / double(s.total_ns));
  }
}

// Prints, as "# " lines, kiln's per-op-kind step stats of one training step
// of `m` on cuda:0 (after warm-up steps): where a model's step time goes.
void print_step_stats(Model& m, const char* name) {
  kiln::Executor exe(kiln::Place::cuda(0), {.num_threads = 1});
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  for (int i = 0; i < 5; ++i) exe.run(m.main, m.feeds, fetch);
  kiln::StepStats stats;
  exe.run(m.main, m.feeds, fetch, stats);
  std::printf("# step stats of %s\n", name);
  std::istringstream table(kiln::summary_table(stats));
  for (std::string line; std::getline(table, line);) std::printf("# %s\n", line.c_str());
  print_bandwidths(m, stats, name);
}

// A program of `reps` links, each `link(builder, value)` → value, on a
// [rows, cols] f32 fed on cuda:0, ending in a sum the run fetches; µs per
// link (the median of `runs` runs, after warm-up).
template <typename Link>
double chain_us(std::int64_t rows, std::int64_t cols, int reps, int runs, Link&& link) {
  const kiln::Place dev = kiln::Place::cuda(0);
  kiln::Program p, startup;
  kiln::ProgramGuard guard(p, startup);
  kiln::Value v = kiln::data("x", {rows, cols}, kiln::DataType::Float32, dev);
  kiln::Builder b = kiln::main_builder();
  for (int r = 0; r < reps; ++r) v = link(b, v);
  kiln::Value total = b.create<kiln::SumOp>(v).result();
  kiln::Executor exe(dev, {.num_threads = 1});
  const kiln::FeedMap feed{{"x", kiln::Tensor::zeros(kiln::Dims{rows, cols}, kiln::DataType::Float32, dev)}};
  return median_run_us(exe, p, feed, total, 5, runs) / reps;
}

// layer_norm forward and backward per link (the gradient's dx feeds the
// next link; dy is the forward's y), and a copy (scale) per link.
void layer_norm_bench() {
  constexpr std::int64_t kRows = 4096, kCols = 768;
  constexpr int kReps = 20;
  kiln::Value w, bias;
  const double ln = chain_us(kRows, kCols, kReps, 15, [&](kiln::Builder& b, kiln::Value x) {
    if (!w) {
      const kiln::Place dev = kiln::Place::cuda(0);
      w = b.create<kiln::FullOp>(std::vector<std::int64_t>{kCols}, 1.0, kiln::DataType::Float32, dev).result();
      bias = b.create<kiln::FullOp>(std::vector<std::int64_t>{kCols}, 0.0, kiln::DataType::Float32, dev).result();
    }
    kiln::Operation* f = b.create<kiln::LayerNormOp>(x, w, bias, 1, 1e-5).operation();
    return b.create<kiln::GradOf<kiln::LayerNormOp>>(kiln::LayerNormOp::Attributes{1, 1e-5}, x, w, f->result(1),
                                                       f->result(2), f->result(0))
        .result(0);
  });
  const double copy = chain_us(kRows, kCols, kReps, 15, [](kiln::Builder& b, kiln::Value x) {
    return b.create<kiln::ScaleOp>(x, 1.0).result();
  });
  emit("cuda.layer_norm.fwd_bwd", ln, "us");
  emit("cuda.layer_norm.copy", copy, "us");
  // Least bytes: forward 2 passes, backward 3; a copy 2.
  emit("cuda.layer_norm.bandwidth_fraction", (5.0 / ln) / (2.0 / copy), "ratio");
}

// Key counts of a right-padded batch of 8 sequences of up to 512.
const std::vector<std::int64_t> kPaddedKeys{512, 448, 384, 320, 256, 192, 128, 64};

// ALiBi's bias for 12 heads over 512 × 512 scores, f32 or bf16: head h
// adds -2^(-8 (h + 1) / 12) · (i - j) to score (i, j).
kiln::Tensor alibi_bias(kiln::DataType dt) {
  std::vector<float> bias(12 * 512 * 512);
  for (int h = 0; h < 12; ++h)
    for (int i = 0; i < 512; ++i)
      for (int j = 0; j < 512; ++j)
        bias[static_cast<std::size_t>((h * 512 + i) * 512 + j)] =
            -std::exp2(-8.0f * float(h + 1) / 12.0f) * float(i - j);
  if (dt == kiln::DataType::Float32) return kiln::Tensor::from_vector<float>({1, 12, 512, 512}, bias);
  kiln::Tensor t = kiln::Tensor::empty(kiln::Dims{1, 12, 512, 512}, kiln::DataType::BFloat16);
  auto* bits = static_cast<std::uint16_t*>(t.raw_data());
  for (std::size_t i = 0; i < bias.size(); ++i) bits[i] = kiln::float_to_bfloat16(bias[i]);
  return t;
}

enum class AttentionMasks { Causal, Padded, Biased, Dropout };

// scaled_dot_product_attention forward and backward per link, causal, on
// [8, 12, 512, 64] q and [8, kv_heads, 512, 64] k, v of dtype dt fed on
// cuda:0 (the gradient's dq is the next link's q; dout is the forward's
// out); Padded: with key_lengths kPaddedKeys; Biased: with ALiBi's bias as
// the mask operand; Dropout: attention dropout 0.1 under a key drawn per run.
double attention_us(kiln::DataType dt, int reps, int runs, AttentionMasks masks = AttentionMasks::Causal,
                     std::int64_t kv_heads = 12) {
  const kiln::Place dev = kiln::Place::cuda(0);
  const std::vector<std::int64_t> shape{8, 12, 512, 64}, kv_shape{8, kv_heads, 512, 64};
  kiln::Program p, startup;
  kiln::ProgramGuard guard(p, startup);
  kiln::Value q = kiln::data("q", shape, dt, dev), k = kiln::data("k", kv_shape, dt, dev),
              v = kiln::data("v", kv_shape, dt, dev);
  std::vector<kiln::Value> extra;  // key_lengths or the mask
  if (masks == AttentionMasks::Padded) extra.push_back(kiln::data("n", {8}, kiln::DataType::Int64, dev));
  if (masks == AttentionMasks::Biased) extra.push_back(kiln::data("bias", {1, 12, 512, 512}, dt, dev));
  kiln::Builder b = kiln::main_builder();
  using Attention = kiln::ScaledDotProductAttentionOp;
  using Grad = kiln::GradOf<Attention>;
  const Attention::Attributes attrs{true, 0.0, "BHLD", masks == AttentionMasks::Dropout ? 0.1 : 0.0, false};
  if (masks == AttentionMasks::Dropout) extra.push_back(b.create<kiln::RandomKeyOp>().result());
  for (int r = 0; r < reps; ++r) {
    std::vector<kiln::Value> in{q, k, v};
    in.insert(in.end(), extra.begin(), extra.end());
    kiln::Operation* f = b.create<Attention>(in, attrs).operation();
    std::vector<kiln::Value> grad_in{q, k, v, f->result(0), f->result(1), f->result(0)};
    grad_in.insert(grad_in.end(), extra.begin(), extra.end());
    q = b.create<Grad>(attrs, grad_in).result(0);
  }
  if (dt != kiln::DataType::Float32) q = b.create<kiln::CastOp>(q, kiln::DataType::Float32).result();
  kiln::Value total = b.create<kiln::SumOp>(q).result();
  kiln::Executor exe(dev, {.num_threads = 1});
  const kiln::Dims dims(shape), kv_dims(kv_shape);
  kiln::FeedMap feed{{"q", kiln::Tensor::zeros(dims, dt, dev)},
                     {"k", kiln::Tensor::zeros(kv_dims, dt, dev)},
                     {"v", kiln::Tensor::zeros(kv_dims, dt, dev)}};
  if (masks == AttentionMasks::Padded)
    feed["n"] = kiln::copy_to_place(kiln::Tensor::from_vector<std::int64_t>({8}, kPaddedKeys), dev);
  if (masks == AttentionMasks::Biased) feed["bias"] = kiln::copy_to_place(alibi_bias(dt), dev);
  return median_run_us(exe, p, feed, total, 3, runs) / reps;
}

void attention_bench() {
  const double mma = attention_us(kiln::DataType::BFloat16, 10, 9);
  emit("cuda.attention.fused.bf16.fwd_bwd", mma, "us");
  ::setenv("KILN_CUDA_FLASH", "wmma", 1);  // the shared-memory kernels, read per call
  const double wmma = attention_us(kiln::DataType::BFloat16, 10, 9);
  ::unsetenv("KILN_CUDA_FLASH");
  emit("cuda.attention.fused_wmma.bf16.fwd_bwd", wmma, "us");
  emit("cuda.attention.fused.bf16.speedup_over_wmma", wmma / mma, "ratio");
  kiln::set_attention_grad_sum(kiln::AttentionGradSum::Atomic);
  const double atomic = attention_us(kiln::DataType::BFloat16, 10, 9);
  kiln::set_attention_grad_sum(kiln::AttentionGradSum::Deterministic);
  emit("cuda.attention.fused_atomic_dq.bf16.fwd_bwd", atomic, "us");
  emit("cuda.attention.fused.bf16.atomic_dq_speedup", mma / atomic, "ratio");
  const double padded = attention_us(kiln::DataType::BFloat16, 10, 9, AttentionMasks::Padded);
  emit("cuda.attention.fused.bf16.padded_fwd_bwd", padded, "us");
  emit("cuda.attention.fused.bf16.padded_speedup", mma / padded, "ratio");
  const double biased = attention_us(kiln::DataType::BFloat16, 5, 5, AttentionMasks::Biased);
  emit("cuda.attention.biased.bf16.fwd_bwd", biased, "us");
  emit("cuda.attention.biased.bf16.biased_slowdown", biased / mma, "ratio");
  const double grouped = attention_us(kiln::DataType::BFloat16, 10, 9, AttentionMasks::Causal, 4);
  emit("cuda.attention.gqa.bf16.fwd_bwd", grouped, "us");
  emit("cuda.attention.gqa.bf16.gqa_slowdown", grouped / mma, "ratio");
  const double dropped = attention_us(kiln::DataType::BFloat16, 10, 9, AttentionMasks::Dropout);
  emit("cuda.attention.dropout.bf16.fwd_bwd", dropped, "us");
  emit("cuda.attention.dropout.bf16.dropout_slowdown", dropped / mma, "ratio");
  // f32 on each of its kernel sets (Auto, the default, takes the
  // materialized one at this size), and the materialized one in TF32.
  kiln::set_attention_f32_kernels(kiln::AttentionF32Kernels::Fused);
  const double tiles = attention_us(kiln::DataType::Float32, 5, 5);
  kiln::set_attention_f32_kernels(kiln::AttentionF32Kernels::Materialized);
  const double materialized = attention_us(kiln::DataType::Float32, 5, 5);
  kiln::set_float32_matmul_precision(kiln::MatmulPrecision::High);
  const double tf32 = attention_us(kiln::DataType::Float32, 5, 5);
  kiln::set_float32_matmul_precision(kiln::MatmulPrecision::Highest);
  kiln::set_attention_f32_kernels(kiln::AttentionF32Kernels::Auto);
  emit("cuda.attention.fused.f32.fwd_bwd", tiles, "us");
  emit("cuda.attention.materialized.f32.fwd_bwd", materialized, "us");
  emit("cuda.attention.materialized.tf32.fwd_bwd", tf32, "us");
  emit("cuda.attention.f32.materialized_speedup", tiles / materialized, "ratio");
}

// µs per link of GPT-2 small's FFN in bf16, its gelu's gradient read too
// (as a training step reads the pre-activation), under `passes`.
double ffn_us(bool approximate, const char* passes, int reps, int runs) {
  constexpr std::int64_t kRows = 4096, kModel = 768, kHidden = 3072;
  const kiln::Place dev = kiln::Place::cuda(0);
  const kiln::DataType bf16 = kiln::DataType::BFloat16;
  kiln::Program p, startup;
  kiln::ProgramGuard guard(p, startup);
  kiln::Value x = kiln::data("x", {kRows, kModel}, bf16, dev);
  kiln::Builder b = kiln::main_builder();
  auto full = [&](std::vector<std::int64_t> shape, double v) {
    return b.create<kiln::FullOp>(std::move(shape), v, bf16, dev).result();
  };
  const kiln::Value w1 = full({kModel, kHidden}, 0.01), b1 = full({kHidden}, 0.01);
  const kiln::Value w2 = full({kHidden, kModel}, 0.01);
  for (int r = 0; r < reps; ++r) {
    kiln::Value z = b.create<kiln::AddOp>(b.create<kiln::MatmulOp>(x, w1).result(), b1).result();
    kiln::Value y = b.create<kiln::GeluOp>(z, approximate).result();
    kiln::Value dz = b.create<kiln::GradOf<kiln::GeluOp>>(kiln::GeluOp::Attributes{approximate}, z, y).result();
    x = b.create<kiln::MatmulOp>(b.create<kiln::AddOp>(y, dz).result(), w2).result();
  }
  kiln::Value total = b.create<kiln::SumOp>(b.create<kiln::CastOp>(x, kiln::DataType::Float32).result()).result();
  kiln::Executor exe(dev, {.num_threads = 1, .passes = passes});
  const kiln::FeedMap feed{{"x", kiln::Tensor::zeros(kiln::Dims{kRows, kModel}, bf16, dev)}};
  exe.run(startup);
  return median_run_us(exe, p, feed, total, 3, runs) / reps;
}

void ffn_bench() {
  for (const bool approximate : {false, true}) {
    const std::string name = std::string("cuda.ffn.") + (approximate ? "gelu_tanh" : "gelu");
    const double fused = ffn_us(approximate, "fuse", 8, 9), unfused = ffn_us(approximate, "", 8, 9);
    emit(name + ".fused", fused, "us");
    emit(name + ".unfused", unfused, "us");
    emit(name + ".speedup", unfused / fused, "ratio");
  }
}

// ms per run of the AdamW update of GPT-2 small's parameters, one adamw_
// per parameter (no passes) and merged (fuse_optimizer), the gradients
// device tensors fed once.
void gpt2s_adamw_bench() {
  const kiln::Place dev = kiln::Place::cuda(0);
  std::vector<std::vector<std::int64_t>> shapes;
  {
    auto m = gpt_model(kiln::Place::cpu(), gpt2_small());
    for (kiln::Value p : kiln::trainable_parameters(m->main)) shapes.push_back(kiln::shaped_dims(p.type()));
  }
  Model u;
  {
    kiln::ProgramGuard guard(u.main, u.startup);
    std::vector<std::pair<kiln::Value, kiln::Value>> pairs;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const std::string g = "g" + std::to_string(k);
      pairs.emplace_back(kiln::create_parameter("w" + std::to_string(k), shapes[k], kiln::DataType::Float32,
                                                kiln::init::Constant(0.1)),
                         kiln::data(g, shapes[k], kiln::DataType::Float32, dev));
      u.feeds[g] = kiln::Tensor::zeros(kiln::Dims(shapes[k]), kiln::DataType::Float32, dev);
    }
    kiln::optim::AdamW(3e-4, 0.9, 0.999, 1e-8, 0.01).apply_gradients(pairs);
  }
  const auto run_ms = [&](const char* passes) {
    kiln::ExecutionOptions o;
    o.num_threads = 1;
    o.passes = passes;
    kiln::Executor exe(dev, o);
    exe.run(u.startup);
    for (int i = 0; i < 5; ++i) exe.run(u.main, u.feeds);
    std::vector<double> t;
    for (int r = 0; r < 9; ++r) t.push_back(time_ns([&] { exe.run(u.main, u.feeds); }));
    return median(t) / 1e6;
  };
  const double unmerged = run_ms(""), merged = run_ms("fuse_optimizer");
  std::printf("# cuda.gpt2s.adamw: %zu parameters\n", shapes.size());
  emit("cuda.gpt2s.adamw.unmerged", unmerged, "ms");
  emit("cuda.gpt2s.adamw.merged", merged, "ms");
  emit("cuda.gpt2s.adamw.merge_speedup", unmerged / merged, "ratio");
}

// ---- the groups: each a process of its own in run-bench.sh ----

void op_overhead_bench() {
  const double chain = executor_chain_us(15), loop = plain_loop_us(15);
  emit("cuda.op_overhead", chain - loop, "us");
  emit("cuda.op_overhead.executor", chain, "us");
  emit("cuda.op_overhead.loop", loop, "us");
}

// The batch stays on the device, as in PyTorch's peer (fed once, not
// copied every step); the loss comes back to the host each step.
void seed_bench() {
  auto m = seed_model(kiln::Place::cuda(0));
  const double launches = step_us(*m, false, 200, 9), graph = step_us(*m, true, 200, 9);
  emit("cuda.seed.step", launches, "us");
  emit("cuda.seed.graph.step", graph, "us");
  emit("cuda.graph.speedup", launches / graph, "ratio");
  auto host = seed_model();
  emit("cuda.seed.step.host_feeds", step_us(*host, false, 200, 9), "us");
}

void mlp256_bench() {
  auto m = mlp_model(256, kiln::Place::cuda(0));
  emit("cuda.mlp256.step", step_us(*m, false, 50, 9) / 1e3, "ms");
}

void small_gpt_bench() {
  auto m = gpt_model(kiln::Place::cuda(0));
  emit("cuda.gpt.step", step_us(*m, false, 20, 9) / 1e3, "ms");
  emit("cuda.gpt.graph.step", step_us(*m, true, 20, 9) / 1e3, "ms");
}

void gpt2s_f32_bench() {
  auto m = gpt_model(kiln::Place::cuda(0), gpt2_small());
  emit("cuda.gpt2s.f32.step", step_us(*m, false, 5, 5) / 1e3, "ms");
  emit("cuda.gpt2s.f32.peak", peak_mib(*m), "MiB");
  print_step_stats(*m, "cuda.gpt2s.f32");
}

void gpt2s_tf32_bench() {
  auto m = gpt_model(kiln::Place::cuda(0), gpt2_small());
  kiln::set_float32_matmul_precision(kiln::MatmulPrecision::High);
  emit("cuda.gpt2s.tf32.step", step_us(*m, false, 5, 5) / 1e3, "ms");
  kiln::set_float32_matmul_precision(kiln::MatmulPrecision::Highest);
}

// amp O1 bf16, then the same with each block recomputed in the backward.
void gpt2s_amp_bench() {
  {
    auto m = gpt_model(kiln::Place::cuda(0), gpt2_small(), /*amp=*/true);
    emit("cuda.gpt2s.amp_bf16.step", step_us(*m, false, 5, 5) / 1e3, "ms");
    emit("cuda.gpt2s.amp_bf16.peak", peak_mib(*m), "MiB");
    print_step_stats(*m, "cuda.gpt2s.amp_bf16");
  }
  auto r = gpt_model(kiln::Place::cuda(0), gpt2_small(), /*amp=*/true);
  kiln::recompute(r->main, r->checkpoints);
  emit("cuda.gpt2s.amp_bf16.recompute.step", step_us(*r, false, 5, 5) / 1e3, "ms");
  emit("cuda.gpt2s.amp_bf16.recompute.peak", peak_mib(*r), "MiB");
}

// A real CNN's training step (bench_cnns.h: batch 64, SGD with momentum)
// in f32 (FMA convolutions and GEMMs), tf32 (both in TF32: PyTorch's
// cuDNN default, with TF32 matmuls as its peer) and amp O1 bf16 (its
// convolutions and matmuls in bf16), each with cuDNN's timed algorithm
// search (the peer's cudnn.benchmark = True); amp also with the heuristic
// choice; the step stats of both amp runs.
void cnn_bench(const std::string& net, bool tf32) {
  constexpr std::int64_t kCnnBatch = 64;
  const std::string fig = "cuda." + net;
  kiln::set_conv_algorithm_search(kiln::ConvAlgorithmSearch::Benchmark);
  {
    auto m = cnn_model(net, kCnnBatch, kiln::Place::cuda(0));
    emit(fig + ".f32.step", step_us(*m, false, 5, 5) / 1e3, "ms");
  }
  if (tf32) {
    kiln::set_float32_conv_precision(kiln::MatmulPrecision::High);
    kiln::set_float32_matmul_precision(kiln::MatmulPrecision::High);
    auto m = cnn_model(net, kCnnBatch, kiln::Place::cuda(0));
    emit(fig + ".tf32.step", step_us(*m, false, 5, 5) / 1e3, "ms");
    kiln::set_float32_conv_precision(kiln::MatmulPrecision::Highest);
    kiln::set_float32_matmul_precision(kiln::MatmulPrecision::Highest);
  }
  auto amp = cnn_model(net + "_amp_bf16", kCnnBatch, kiln::Place::cuda(0));
  emit(fig + ".amp_bf16.step", step_us(*amp, false, 5, 5) / 1e3, "ms");
  emit(fig + ".amp_bf16.peak", peak_mib(*amp), "MiB");
  print_step_stats(*amp, (fig + ".amp_bf16").c_str());
  kiln::set_conv_algorithm_search(kiln::ConvAlgorithmSearch::Heuristic);
  emit(fig + ".amp_bf16.heuristic.step", step_us(*amp, false, 5, 5) / 1e3, "ms");
  print_step_stats(*amp, (fig + ".amp_bf16.heuristic").c_str());
}

void resnet18_bench() { cnn_bench("resnet18", /*tf32=*/true); }
void mobilenet_v2_bench() { cnn_bench("mobilenet_v2", /*tf32=*/false); }

struct Group {
  const char* name;  // the prefix of its figures' names
  void (*run)();
};

constexpr Group kGroups[] = {
    {"cuda.op_overhead", op_overhead_bench}, {"cuda.seed", seed_bench},
    {"cuda.mlp256", mlp256_bench},           {"cuda.gpt", small_gpt_bench},
    {"cuda.layer_norm", layer_norm_bench},   {"cuda.attention", attention_bench},
    {"cuda.ffn", ffn_bench},
    {"cuda.gpt2s.adamw", gpt2s_adamw_bench}, {"cuda.gpt2s.f32", gpt2s_f32_bench},
    {"cuda.gpt2s.tf32", gpt2s_tf32_bench},   {"cuda.gpt2s.amp_bf16", gpt2s_amp_bench},
    {"cuda.resnet18", resnet18_bench},       {"cuda.mobilenet_v2", mobilenet_v2_bench},
};

// Whether `filter` runs group `g`: everything ("" or "cuda"), the group by
// name, a family of groups ("cuda.gpt2s"), or one of its figures
// ("cuda.gpt2s.amp_bf16.recompute.step"); names match whole dotted parts.
bool selects(std::string_view filter, std::string_view g) {
  auto within = [](std::string_view a, std::string_view b) {  // a is b or under it
    return a == b || (a.size() > b.size() && a.substr(0, b.size()) == b && a[b.size()] == '.');
  };
  return filter.empty() || filter == "cuda" || within(g, filter) || within(filter, g);
}

}  // namespace
}  // namespace bench

// cuda_bench [FILTER]: the groups FILTER selects; cuda_bench --groups: their
// names, a line each.
int main(int argc, char** argv) {
  using namespace bench;
  const std::string filter = argc > 1 ? argv[1] : "";
  if (filter == "--groups") {
    for (const Group& g : kGroups) std::printf("%s\n", g.name);
    return 0;
  }
  if (!filter.empty() && filter.rfind("cuda", 0) != 0) return 0;
  if (kiln::cuda_device_count() == 0) {
    std::printf("# cuda benchmarks skipped: %s\n",
                kiln::built_with_cuda() ? "no CUDA device" : "kiln was built without CUDA");
    return 0;
  }
  // The ops each model runs on the CPU, as the plan's warning names them.
  kiln::set_warning_handler([](std::string_view m) {
    std::printf("# %.*s\n", static_cast<int>(m.size()), m.data());
  });
  for (const Group& g : kGroups)
    if (selects(filter, g.name)) {
      g.run();
      std::fflush(stdout);  // a later group's crash keeps this one's lines
    }
  return 0;
}
