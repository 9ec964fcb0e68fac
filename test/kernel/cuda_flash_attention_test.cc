// The fused CUDA attention kernels and their gradient against the CPU's
// kernels on the same inputs ([cuda]: skipped without a device): both
// layouts, causal or not, L ∈ {1, 17, 64, 130, 512}, Lq != Lk,
// D ∈ {32, 64, 128} and head dims between them, D != Dv, grouped-query
// attention (k and v of fewer heads). bf16 and f16 run
// both kernel sets: the register tiles (flash_attention_mma.cu, the default)
// and the shared-memory ones (flash_attention.cu, KILN_CUDA_FLASH=wmma),
// f32's only kernels. Attention dropout runs every dtype on its kernels:
// bf16 and f16 on both kernel sets (the register tiles' dropout forms and
// the shared-memory tiles), f32 on the shared-memory tiles, f64 and f32
// with head dims above 128 on the cuBLAS path; against the CPU to the same
// tolerances, so the devices drop the same probabilities.
//
// Tolerances, per element: |got - want| <= rtol·|want| + atol·max(1, max|want|).
//   f32   rtol = atol = 1e-5 (the CPU sums in other orders and its exp is a
//         polynomial);
//   bf16  2e-2 against the CPU's bf16 kernel (f32 arithmetic on the widened
//         operands, results rounded once): the fused kernel rounds P and dS to
//         bf16 (8 bits) for the tensor-core products, and either side may round
//         a result to the neighbouring bf16 (2^-8 relative);
//   f16   5e-3 likewise (11 bits);
//   f64   1e-12 (the cuBLAS path).
// The gradients get the CPU forward's out and lse as inputs on both sides.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kernel/cuda_test_util.h"
#include "kernel/half_test_util.h"
#include "kiln/dialect/attention_ops.h"
#include "kiln/runtime/attention_options.h"

using namespace kiln;
using kiln_test::filled;
using kiln_test::have_cuda;
using kiln_test::run_cuda_op;
using kiln_test::run_op;

// Named, not anonymous: the test files compile in unity blocks.
namespace flash_attention_test {

using Grad = GradOf<ScaledDotProductAttentionOp>;

// The 16-bit kernel sets, as KILN_CUDA_FLASH names them.
const char* const kHalfKernels[] = {"mma", "wmma"};

// KILN_CUDA_FLASH = `kernels` while it lives (the kernels read it per call).
class FlashKernels {
 public:
  explicit FlashKernels(const char* kernels) { ::setenv("KILN_CUDA_FLASH", kernels, 1); }
  ~FlashKernels() { ::unsetenv("KILN_CUDA_FLASH"); }
  FlashKernels(const FlashKernels&) = delete;
  FlashKernels& operator=(const FlashKernels&) = delete;
};

struct Case {
  std::int64_t b, h, lq, lk, d, dv;
  std::int64_t hk = 0;  // k and v's heads (grouped-query attention); 0: h
  std::int64_t kv_heads() const { return hk ? hk : h; }
};

// Values in [-2, 2) of dtype dt (the 16-bit ones exact in their dtype).
Tensor operand(DataType dt, const Dims& dims, unsigned seed) {
  if (dt == DataType::Float32) return filled<float>(dims, -2, 2, seed);
  if (dt == DataType::Float64) return filled<double>(dims, -2, 2, seed);
  return kiln_test::random_half(dims, dt, seed);
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  const DataType dt = t.dtype();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DataType::Float32) out[i] = static_cast<const float*>(t.raw_data())[i];
    else if (dt == DataType::Float64) out[i] = static_cast<const double*>(t.raw_data())[i];
    else out[i] = kiln_test::from_half(static_cast<const std::uint16_t*>(t.raw_data())[i], dt);
  }
  return out;
}

// The largest finite |element| of `t`, at least `floor`.
double peak_of(const Tensor& t, double floor = 1) {
  for (double x : values(t))
    if (std::isfinite(x)) floor = std::max(floor, std::abs(x));
  return floor;
}

// Every element within rtol·|want| + atol·max(1, max|want|, scale); the
// first one that is not is reported.
void check_near(const Tensor& got, const Tensor& want, double rtol, double atol, double scale = 1) {
  REQUIRE(got.dims() == want.dims());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<double> g = values(got), w = values(want);
  const double peak = peak_of(want, scale);
  std::int64_t bad = 0, first = -1;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i] && !(std::abs(g[i] - w[i]) <= rtol * std::abs(w[i]) + atol * peak)) {
      if (first < 0) first = static_cast<std::int64_t>(i);
      ++bad;
    }
  INFO(bad << " of " << g.size() << " elements differ; the first, #" << first << ": got "
            << (first < 0 ? 0 : g[first]) << ", want " << (first < 0 ? 0 : w[first]));
  CHECK(bad == 0);
}

double tolerance(DataType dt) {
  switch (dt) {
    case DataType::Float64: return 1e-12;
    case DataType::Float32: return 1e-5;
    case DataType::BFloat16: return 2e-2;
    default: return 5e-3;
  }
}

// The dropout_key of the dropout cases.
Tensor dropout_key() { return Tensor::from_vector<std::uint64_t>({1}, {0x6b696c6e0d0bULL}); }

// q-like dims of `len` rows of `width` in the layout (or k / v-like: the
// case's k / v heads, when kv).
Dims layout_dims(const Case& c, const std::string& layout, std::int64_t len, std::int64_t width, bool kv = false) {
  const std::int64_t h = kv ? c.kv_heads() : c.h;
  return layout == "BLHD" ? Dims{c.b, len, h, width} : Dims{c.b, h, len, width};
}

// The CUDA forward and gradient against the CPU's on one case (with
// key_lengths when `lengths` is given, a mask when `mask` is, and then the
// gradient of a float mask too; attention dropout with probability
// `dropout` under dropout_key() when it is above 0).
void compare_fused(DataType dt, const Case& c, bool causal, const std::string& layout,
                   double scale = 0, const Tensor* lengths = nullptr, const Tensor* mask = nullptr,
                   double dropout = 0) {
  INFO(to_string(dt) << " " << layout << " B " << c.b << " H " << c.h << " Hk " << c.kv_heads() << " Lq " << c.lq
                     << " Lk " << c.lk << " D " << c.d << " Dv " << c.dv << " causal " << causal
                     << " scale " << scale << (lengths ? " with key_lengths" : "")
                     << (mask ? " with a mask" : "") << " dropout " << dropout);
  const double tol = tolerance(dt);
  const Tensor q = operand(dt, layout_dims(c, layout, c.lq, c.d), 1),
               k = operand(dt, layout_dims(c, layout, c.lk, c.d, true), 2),
               v = operand(dt, layout_dims(c, layout, c.lk, c.dv, true), 3);
  std::vector<Tensor> fwd_in{q, k, v};
  if (lengths) fwd_in.push_back(*lengths);
  if (mask) fwd_in.push_back(*mask);
  if (dropout > 0) fwd_in.push_back(dropout_key());
  auto cpu = run_op<ScaledDotProductAttentionOp>(fwd_in, causal, scale, layout, dropout);
  auto dev = run_cuda_op<ScaledDotProductAttentionOp>(fwd_in, causal, scale, layout, dropout);
  {
    INFO("out");
    check_near(dev.results[0], cpu.results[0], tol, tol);
  }
  {
    INFO("lse");
    check_near(dev.results[1], cpu.results[1], tol, tol);
  }
  const Tensor dout = operand(dt, cpu.results[0].dims(), 4);
  std::vector<Tensor> in{q, k, v, cpu.results[0], cpu.results[1], dout};
  in.insert(in.end(), fwd_in.begin() + 3, fwd_in.end());
  auto gcpu = run_op<Grad>(in, causal, scale, layout, dropout);
  auto gdev = run_cuda_op<Grad>(in, causal, scale, layout, dropout);
  // dq and dk are sums of terms P·(dP − D) that cancel (exactly, where a
  // row sees one key), of the scale of dv's elements: their rounding is
  // bounded by the largest gradient element, not by their own.
  double grad_peak = 1;
  for (int i = 0; i < 3; ++i) grad_peak = peak_of(gcpu.results[i], grad_peak);
  for (int i = 0; i < 3; ++i) {
    INFO("gradient #" << i << " (dq, dk, dv)");
    check_near(gdev.results[i], gcpu.results[i], tol, tol, grad_peak);
  }
  if (mask && mask->dtype() != DataType::Bool) {
    INFO("the mask's gradient");
    const AttentionMaskGradOp::Attributes attrs{causal, scale, layout, dropout, false};
    auto mcpu = run_op<AttentionMaskGradOp>(in, attrs);
    auto mdev = run_cuda_op<AttentionMaskGradOp>(in, attrs);
    check_near(mdev.results[0], mcpu.results[0], tol, tol, peak_of(mcpu.results[0]));
  }
}

// f() under each kernel set that runs dtype dt: f32's fused tiles and its
// materialized cuBLAS path, bf16's and f16's register tiles and wmma ones.
template <typename F>
void each_kernel_set(DataType dt, F&& f) {
  if (dt == DataType::Float32) {
    for (AttentionF32Kernels set : {AttentionF32Kernels::Fused, AttentionF32Kernels::Materialized}) {
      INFO("f32 kernels " << (set == AttentionF32Kernels::Fused ? "fused" : "materialized"));
      set_attention_f32_kernels(set);
      f();
    }
    set_attention_f32_kernels(AttentionF32Kernels::Auto);
    return;
  }
  for (const char* kernels : kHalfKernels) {
    INFO("KILN_CUDA_FLASH=" << kernels);
    const FlashKernels set(kernels);
    f();
  }
}

// Each length and head dim of the file's header, both layouts, causal or not.
void sweep(DataType dt) {
  for (const std::string layout : {"BHLD", "BLHD"})
    for (bool causal : {false, true})
      for (std::int64_t l : {1, 17, 64, 130, 512})
        for (std::int64_t d : {32, 64, 128})
          compare_fused(dt, {l >= 512 ? 1 : 2, l >= 512 ? 2 : 3, l, l, d, d}, causal, layout);
}

// Lq != Lk (either way, causal rows past Lk seeing every key), D != Dv,
// head dims that are no tile's, a given scale.
void uneven(DataType dt) {
  const std::vector<Case> cases = {{2, 2, 17, 130, 64, 64}, {2, 2, 130, 17, 64, 64},
                                   {1, 3, 1, 64, 32, 32},   {1, 3, 64, 1, 32, 32},
                                   {1, 2, 70, 70, 32, 64},  {1, 2, 33, 90, 100, 72},
                                   {2, 1, 7, 19, 5, 3},     {1, 1, 129, 65, 128, 16}};
  for (const std::string layout : {"BHLD", "BLHD"})
    for (bool causal : {false, true})
      for (const Case& c : cases) compare_fused(dt, c, causal, layout);
  compare_fused(dt, {2, 2, 40, 40, 16, 16}, true, "BHLD", 0.7);
}

// Two runs of the forward and gradient: the same bits.
void check_deterministic(DataType dt, const std::string& layout) {
  INFO(to_string(dt) << " " << layout);
  const Case c{2, 3, 130, 150, 64, 64};
  const Tensor q = operand(dt, layout_dims(c, layout, c.lq, c.d), 1),
               k = operand(dt, layout_dims(c, layout, c.lk, c.d), 2),
               v = operand(dt, layout_dims(c, layout, c.lk, c.dv), 3);
  auto f1 = run_cuda_op<ScaledDotProductAttentionOp>({q, k, v}, true, 0.0, layout);
  auto f2 = run_cuda_op<ScaledDotProductAttentionOp>({q, k, v}, true, 0.0, layout);
  const Tensor dout = operand(dt, f1.results[0].dims(), 4);
  const std::vector<Tensor> in{q, k, v, f1.results[0], f1.results[1], dout};
  auto g1 = run_cuda_op<Grad>(in, true, 0.0, layout);
  auto g2 = run_cuda_op<Grad>(in, true, 0.0, layout);
  const auto same = [](const Tensor& a, const Tensor& b) {
    return a.bytes() == b.bytes() && std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
  };
  for (int i = 0; i < 2; ++i) CHECK(same(f1.results[i], f2.results[i]));
  for (int i = 0; i < 3; ++i) CHECK(same(g1.results[i], g2.results[i]));
}

// The attention gradient summing dQ by atomics (AttentionGradSum::Atomic)
// while it lives.
class AtomicDq {
 public:
  AtomicDq() { set_attention_grad_sum(AttentionGradSum::Atomic); }
  ~AtomicDq() { set_attention_grad_sum(AttentionGradSum::Deterministic); }
  AtomicDq(const AtomicDq&) = delete;
  AtomicDq& operator=(const AtomicDq&) = delete;
};

// The gradient with dQ summed by atomics: dq near the deterministic one
// (compare_fused's tolerance against the CPU), dk and dv its bits (the
// key-tile pass computes them the same way).
void compare_atomic_dq(DataType dt, const Case& c, bool causal, const std::string& layout) {
  INFO(to_string(dt) << " " << layout << " B " << c.b << " H " << c.h << " Hk " << c.kv_heads() << " Lq " << c.lq
                     << " Lk " << c.lk << " D " << c.d << " Dv " << c.dv << " causal " << causal);
  const Tensor q = operand(dt, layout_dims(c, layout, c.lq, c.d), 1),
               k = operand(dt, layout_dims(c, layout, c.lk, c.d, true), 2),
               v = operand(dt, layout_dims(c, layout, c.lk, c.dv, true), 3);
  auto cpu = run_op<ScaledDotProductAttentionOp>({q, k, v}, causal, 0.0, layout);
  const Tensor dout = operand(dt, cpu.results[0].dims(), 4);
  const std::vector<Tensor> in{q, k, v, cpu.results[0], cpu.results[1], dout};
  auto gcpu = run_op<Grad>(in, causal, 0.0, layout);
  auto fixed = run_cuda_op<Grad>(in, causal, 0.0, layout);
  std::vector<Tensor> summed;
  {
    const AtomicDq atomic;
    summed = run_cuda_op<Grad>(in, causal, 0.0, layout).results;
  }
  double grad_peak = 1;
  for (int i = 0; i < 3; ++i) grad_peak = peak_of(gcpu.results[i], grad_peak);
  const double tol = tolerance(dt);
  check_near(summed[0], gcpu.results[0], tol, tol, grad_peak);
  for (int i = 1; i < 3; ++i) {
    INFO("gradient #" << i << " (dk, dv): the deterministic kernels' bits");
    CHECK(std::memcmp(summed[i].raw_data(), fixed.results[i].raw_data(), summed[i].bytes()) == 0);
  }
}

}  // namespace flash_attention_test

namespace fat = flash_attention_test;

TEST_CASE("fused and materialized CUDA attention match the CPU in f32 for each length, head dim and layout",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  fat::each_kernel_set(DataType::Float32, [] { fat::sweep(DataType::Float32); });
}

TEST_CASE("fused CUDA attention matches the CPU in bf16 and f16 for each length, head dim and layout",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::BFloat16, DataType::Float16})
    fat::each_kernel_set(dt, [&] { fat::sweep(dt); });
}

TEST_CASE("fused CUDA attention matches the CPU with Lq != Lk, D != Dv and a given scale",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16})
    fat::each_kernel_set(dt, [&] { fat::uneven(dt); });
}

// Small cases, cheap enough for compute-sanitizer (run-checks.sh runs
// [sanitize]); 200 rows are four tiles, so the copy pipeline refills each
// stage at least once.
TEST_CASE("fused CUDA attention on small cases of every dtype and layout matches the CPU",
          "[cuda][kernel][sanitize]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16})
    fat::each_kernel_set(dt, [&] {
      for (const std::string layout : {"BHLD", "BLHD"})
        for (bool causal : {false, true}) {
          fat::compare_fused(dt, {1, 2, 17, 70, 32, 64}, causal, layout);
          fat::compare_fused(dt, {2, 1, 70, 17, 128, 8}, causal, layout);
          fat::compare_fused(dt, {1, 1, 200, 200, 64, 64}, causal, layout);
        }
    });
}

TEST_CASE("fused CUDA attention and its gradient are bit-identical run to run",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::Float32, DataType::BFloat16})
    fat::each_kernel_set(dt, [&] {
      for (const std::string layout : {"BHLD", "BLHD"}) fat::check_deterministic(dt, layout);
    });
}

TEST_CASE("fused CUDA attention with no keys or no head dims gives the CPU's results in 16 bits",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    fat::compare_fused(dt, {1, 2, 5, 0, 4, 4}, false, "BHLD");
    fat::compare_fused(dt, {1, 2, 5, 5, 0, 4}, true, "BLHD");
    fat::compare_fused(dt, {1, 2, 5, 5, 4, 0}, false, "BHLD");
  }
  fat::compare_fused(DataType::Float32, {1, 2, 5, 5, 4, 0}, true, "BLHD");
}

TEST_CASE("a head dim above 128 takes the cuBLAS path in f32 and is an error naming it in bf16",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  fat::compare_fused(DataType::Float32, {1, 2, 33, 40, 160, 160}, true, "BHLD");
  fat::compare_fused(DataType::Float32, {1, 2, 20, 20, 16, 200}, false, "BLHD");
  const Dims big{1, 2, 16, 160};
  KILN_CHECK_ERROR(run_cuda_op<ScaledDotProductAttentionOp>(
                       {fat::operand(DataType::BFloat16, big, 1), fat::operand(DataType::BFloat16, big, 2),
                        fat::operand(DataType::BFloat16, big, 3)},
                       false, 0.0, std::string("BHLD")),
                   Unimplemented, {"kiln.scaled_dot_product_attention", "bf16", "D 160", "128"});
}

TEST_CASE("fused CUDA attention's gradient summing dQ by atomics matches the CPU and keeps dK and dV",
          "[cuda][kernel][sanitize]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::BFloat16, DataType::Float16})
    for (const std::string layout : {"BHLD", "BLHD"})
      for (bool causal : {false, true}) {
        fat::compare_atomic_dq(dt, {1, 2, 200, 130, 64, 64}, causal, layout);
        fat::compare_atomic_dq(dt, {2, 1, 70, 17, 128, 128}, causal, layout);
        fat::compare_atomic_dq(dt, {1, 2, 33, 90, 32, 24}, causal, layout);
      }
}

TEST_CASE("CUDA attention with key_lengths matches the CPU on every kernel path",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  // Batches cut inside a tile, at a tile's end, without keys; int32 and int64.
  const Tensor n32 = Tensor::from_vector<std::int32_t>({3}, {70, 64, 0});
  const Tensor n64 = Tensor::from_vector<std::int64_t>({2}, {1, 129});
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16})
    fat::each_kernel_set(dt, [&] {
      for (const std::string layout : {"BHLD", "BLHD"})
        for (bool causal : {false, true}) {
          fat::compare_fused(dt, {3, 2, 100, 130, 64, 64}, causal, layout, 0, &n32);
          fat::compare_fused(dt, {2, 1, 150, 140, 128, 128}, causal, layout, 0, &n64);
        }
    });
  for (bool causal : {false, true}) {  // the cuBLAS path (head dims above 128)
    fat::compare_fused(DataType::Float32, {3, 2, 33, 80, 160, 160}, causal, "BHLD", 0, &n32);
    fat::compare_fused(DataType::Float32, {2, 1, 20, 140, 16, 200}, causal, "BLHD", 0, &n64);
  }
  {
    const fat::AtomicDq atomic;
    for (bool causal : {false, true})
      fat::compare_fused(DataType::BFloat16, {3, 2, 100, 130, 64, 64}, causal, "BLHD", 0, &n32);
  }
}

// A small case for compute-sanitizer: a batch cut inside its only key
// tile, one cut at a tile's end, one without keys.
TEST_CASE("CUDA attention with key_lengths on a small case of every dtype matches the CPU",
          "[cuda][kernel][sanitize]") {
  if (!have_cuda()) return;
  const Tensor lengths = Tensor::from_vector<std::int32_t>({3}, {40, 64, 0});
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16})
    fat::each_kernel_set(dt, [&] {
      for (bool causal : {false, true}) fat::compare_fused(dt, {3, 1, 30, 70, 32, 32}, causal, "BLHD", 0, &lengths);
    });
  const fat::AtomicDq atomic;
  fat::compare_fused(DataType::BFloat16, {3, 1, 30, 70, 32, 32}, true, "BHLD", 0, &lengths);
}

namespace flash_attention_test {

// A bool mask of dims `dims` (every fifth element false) and a float one of dt (values in [-2, 2], every
// seventh -inf).
Tensor bool_mask(const Dims& dims) {
  Tensor m = Tensor::empty(dims, DataType::Bool);
  for (std::int64_t i = 0; i < m.numel(); ++i) m.data<bool>()[i] = i % 5 != 2;
  return m;
}
Tensor float_mask(DataType dt, const Dims& dims) {
  Tensor f = filled<float>(dims, -2, 2, 11);
  for (std::int64_t i = 3; i < f.numel(); i += 7) f.data<float>()[i] = -INFINITY;
  return dt == DataType::Float32 ? f : run_op<CastOp>({f}, dt).results[0];
}

}  // namespace flash_attention_test

TEST_CASE("CUDA attention with a bool or float mask and the float mask's gradient match the CPU in every dtype "
          "and on the cuBLAS path",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  const Tensor lengths = Tensor::from_vector<std::int32_t>({2}, {90, 33});
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16})
    for (const std::string layout : {"BHLD", "BLHD"})
      for (bool causal : {false, true}) {
        const Tensor per_head = fat::float_mask(dt, {1, 3, 70, 90}), rows = fat::bool_mask({2, 1, 70, 1});
        const Tensor keys = fat::float_mask(dt, {2, 1, 1, 90});
        fat::compare_fused(dt, {2, 3, 70, 90, 64, 64}, causal, layout, 0, nullptr, &per_head);
        fat::compare_fused(dt, {2, 3, 70, 90, 32, 16}, causal, layout, 0.4, &lengths, &rows);
        fat::compare_fused(dt, {2, 3, 70, 90, 64, 64}, causal, layout, 0, &lengths, &keys);
      }
  // The cuBLAS path's row passes (head dims above 128).
  const Tensor lengths2 = Tensor::from_vector<std::int64_t>({2}, {40, 17});
  const Tensor per_key = fat::float_mask(DataType::Float32, {2, 1, 1, 40}), rows = fat::bool_mask({33, 1});
  for (bool causal : {false, true}) {
    fat::compare_fused(DataType::Float32, {2, 3, 33, 40, 160, 160}, causal, "BHLD", 0, &lengths2, &per_key);
    fat::compare_fused(DataType::Float32, {2, 3, 33, 40, 16, 200}, causal, "BLHD", 0, nullptr, &rows);
  }
}

// A small case for compute-sanitizer: a float mask per head and a bool one
// shared by all, in each dtype.
TEST_CASE("CUDA attention with a mask on a small case of every dtype matches the CPU", "[cuda][kernel][sanitize]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16}) {
    const Tensor fm = fat::float_mask(dt, {2, 1, 9, 13}), bm = fat::bool_mask({9, 13});
    fat::compare_fused(dt, {2, 2, 9, 13, 8, 8}, true, "BLHD", 0, nullptr, &fm);
    fat::compare_fused(dt, {2, 2, 9, 13, 8, 8}, false, "BHLD", 0, nullptr, &bm);
  }
}

namespace flash_attention_test {

// t ([B, H, L, W], dtype dt) with NaN in the rows of batch b from
// lengths[b] on.
void poison_padding(Tensor& t, DataType dt, const std::vector<std::int64_t>& lengths) {
  const Dims& d = t.dims();
  for (std::int64_t b = 0; b < d[0]; ++b)
    for (std::int64_t h = 0; h < d[1]; ++h)
      for (std::int64_t j = lengths[static_cast<std::size_t>(b)]; j < d[2]; ++j)
        for (std::int64_t c = 0; c < d[3]; ++c) {
          const std::int64_t i = ((b * d[1] + h) * d[2] + j) * d[3] + c;
          if (dt == DataType::Float32) static_cast<float*>(t.raw_data())[i] = NAN;
          else static_cast<std::uint16_t*>(t.raw_data())[i] = dt == DataType::BFloat16 ? 0x7FC0 : 0x7E00;
        }
}

bool all_finite(const Tensor& t) {
  for (double x : values(t))
    if (!std::isfinite(x) && x != -INFINITY) return false;
  return true;
}

}  // namespace flash_attention_test

TEST_CASE("fused CUDA attention never reads a NaN past a batch's key_lengths into a result",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  const std::vector<std::int64_t> counts{70, 64, 0};
  const Tensor lengths = Tensor::from_vector<std::int64_t>({3}, counts);
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16})
    fat::each_kernel_set(dt, [&] {
      for (bool causal : {false, true}) {
        INFO(to_string(dt) << " causal " << causal);
        const Tensor q = fat::operand(dt, {3, 2, 100, 64}, 1);
        Tensor k = fat::operand(dt, {3, 2, 130, 64}, 2), v = fat::operand(dt, {3, 2, 130, 64}, 3);
        fat::poison_padding(k, dt, counts);
        fat::poison_padding(v, dt, counts);
        auto f = run_cuda_op<ScaledDotProductAttentionOp>({q, k, v, lengths}, causal, 0.0, std::string("BHLD"));
        CHECK(fat::all_finite(f.results[0]));
        CHECK(fat::all_finite(f.results[1]));  // -inf for the batch without keys
        const Tensor dout = fat::operand(dt, f.results[0].dims(), 4);
        for (bool atomic : {false, true}) {
          std::optional<fat::AtomicDq> sum;
          if (atomic) sum.emplace();
          auto g = run_cuda_op<fat::Grad>({q, k, v, f.results[0], f.results[1], dout, lengths}, causal, 0.0,
                                          std::string("BHLD"));
          for (int i = 0; i < 3; ++i) CHECK(fat::all_finite(g.results[i]));
        }
      }
    });
}

TEST_CASE("CUDA grouped-query attention matches the CPU on every kernel path", "[cuda][kernel][gqa]") {
  if (!have_cuda()) return;
  const Tensor lengths = Tensor::from_vector<std::int32_t>({2}, {90, 33});
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16})
    fat::each_kernel_set(dt, [&] {
      for (const std::string layout : {"BHLD", "BLHD"})
        for (bool causal : {false, true}) {
          fat::compare_fused(dt, {2, 6, 130, 130, 64, 64, 2}, causal, layout);  // three query heads per k / v head
          fat::compare_fused(dt, {2, 4, 70, 90, 128, 128, 1}, causal, layout, 0, &lengths);  // multi-query
        }
    });
  const Tensor mask = fat::float_mask(DataType::Float32, {1, 4, 70, 90});  // the shared-memory tiles' mask pass
  for (bool causal : {false, true}) {
    fat::compare_fused(DataType::Float32, {2, 4, 70, 90, 32, 32, 2}, causal, "BLHD", 0, &lengths, &mask);
    // The cuBLAS path (head dims above 128): k and v repeated, dk and dv summed.
    fat::compare_fused(DataType::Float32, {2, 4, 70, 90, 160, 160, 2}, causal, "BHLD", 0, &lengths, &mask);
    fat::compare_fused(DataType::Float32, {2, 4, 20, 40, 16, 200, 2}, causal, "BLHD");
    fat::compare_fused(DataType::Float32, {2, 4, 20, 40, 16, 200, 1}, causal, "BLHD");
    // A bf16 float mask's gradient (widened to f32 around the cuBLAS path's).
    const Tensor bias = fat::float_mask(DataType::BFloat16, {2, 1, 70, 90});
    fat::compare_fused(DataType::BFloat16, {2, 4, 70, 90, 64, 64, 2}, causal, "BHLD", 0, nullptr, &bias);
  }
  // f64: the cuBLAS path's repeated k and v and the group sum of doubles.
  for (const std::string layout : {"BHLD", "BLHD"}) {
    const bool inner = layout == "BLHD";
    const Tensor q = filled<double>(inner ? Dims{2, 9, 4, 8} : Dims{2, 4, 9, 8}, -1, 1, 1),
                 k = filled<double>(inner ? Dims{2, 11, 2, 8} : Dims{2, 2, 11, 8}, -1, 1, 2),
                 v = filled<double>(inner ? Dims{2, 11, 2, 8} : Dims{2, 2, 11, 8}, -1, 1, 3);
    auto cpu = run_op<ScaledDotProductAttentionOp>({q, k, v}, true, 0.0, layout);
    auto dev = run_cuda_op<ScaledDotProductAttentionOp>({q, k, v}, true, 0.0, layout);
    fat::check_near(dev.results[0], cpu.results[0], 1e-12, 1e-12);
    const std::vector<Tensor> in{q, k, v, cpu.results[0], cpu.results[1], q};
    auto gcpu = run_op<fat::Grad>(in, true, 0.0, layout);
    auto gdev = run_cuda_op<fat::Grad>(in, true, 0.0, layout);
    for (int i = 0; i < 3; ++i) fat::check_near(gdev.results[i], gcpu.results[i], 1e-12, 1e-12);
  }
  const fat::AtomicDq atomic;
  for (bool causal : {false, true}) fat::compare_atomic_dq(DataType::BFloat16, {2, 6, 130, 130, 64, 64, 3}, causal, "BLHD");
}

// A small case for compute-sanitizer: two query heads per k / v head, in each dtype and kernel set.
TEST_CASE("CUDA grouped-query attention on a small case of every dtype matches the CPU",
          "[cuda][kernel][gqa][sanitize]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16})
    fat::each_kernel_set(dt, [&] { fat::compare_fused(dt, {2, 4, 30, 70, 32, 32, 2}, true, "BLHD"); });
  fat::compare_fused(DataType::Float32, {1, 2, 9, 13, 8, 160, 1}, false, "BHLD");  // the cuBLAS path
}

TEST_CASE("CUDA attention dropout drops what the CPU drops on every kernel path, forward and gradients",
          "[cuda][kernel][dropout]") {
  if (!have_cuda()) return;
  const Tensor lengths = Tensor::from_vector<std::int32_t>({2}, {90, 33});
  const Tensor per_key = fat::float_mask(DataType::Float32, {2, 1, 1, 90});
  // f32's shared-memory tiles; bf16 and f16 on either kernel set.
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16})
    fat::each_kernel_set(dt, [&] {
      for (const std::string layout : {"BHLD", "BLHD"})
        for (bool causal : {false, true}) {
          fat::compare_fused(dt, {2, 3, 70, 90, 64, 64}, causal, layout, 0, nullptr, nullptr, 0.3);
          fat::compare_fused(dt, {1, 2, 33, 90, 128, 72}, causal, layout, 0, nullptr, nullptr, 0.1);
          fat::compare_fused(dt, {2, 4, 70, 90, 32, 32, 2}, causal, layout, 0, &lengths, nullptr, 0.5);  // GQA
        }
    });
  // With a float mask (and its gradient, the cuBLAS path's): f32 also with key_lengths (nine operands).
  for (bool causal : {false, true}) {
    fat::compare_fused(DataType::Float32, {2, 3, 70, 90, 64, 64}, causal, "BLHD", 0, &lengths, &per_key, 0.3);
    for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
      const Tensor bias = fat::float_mask(dt, {1, 3, 70, 90});
      fat::compare_fused(dt, {2, 3, 70, 90, 32, 32}, causal, "BHLD", 0, nullptr, &bias, 0.2);
    }
  }
  // The cuBLAS path: f64, and f32 with head dims above 128; k and v repeated under GQA, BLHD staged.
  const Tensor lengths2 = Tensor::from_vector<std::int64_t>({2}, {40, 17});
  const Tensor per_head = fat::float_mask(DataType::Float64, {1, 4, 33, 40});
  for (const std::string layout : {"BHLD", "BLHD"})
    for (bool causal : {false, true}) {
      fat::compare_fused(DataType::Float64, {2, 3, 33, 40, 16, 16}, causal, layout, 0, &lengths2, nullptr, 0.3);
      fat::compare_fused(DataType::Float64, {2, 4, 33, 40, 8, 12, 2}, causal, layout, 0, nullptr, &per_head, 0.5);
      fat::compare_fused(DataType::Float32, {2, 3, 33, 40, 160, 160}, causal, layout, 0, &lengths2, nullptr, 0.3);
      fat::compare_fused(DataType::Float32, {2, 4, 20, 41, 16, 200, 1}, causal, layout, 0, nullptr, nullptr, 0.2);
    }
  // Summing dQ by atomics is the register tiles' only: with dropout the deterministic kernels run.
  const fat::AtomicDq atomic;
  fat::compare_fused(DataType::BFloat16, {2, 3, 130, 90, 64, 64}, true, "BLHD", 0, nullptr, nullptr, 0.3);
}

TEST_CASE("CUDA attention under is_test, or with dropout_p 0, drops nothing", "[cuda][kernel][dropout]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float64}) {
    INFO(to_string(dt));
    const Dims dims{2, 3, 40, 32};
    const Tensor q = fat::operand(dt, dims, 1), k = fat::operand(dt, dims, 2), v = fat::operand(dt, dims, 3);
    const std::string layout = "BHLD";
    auto plain = run_cuda_op<ScaledDotProductAttentionOp>({q, k, v}, true, 0.0, layout);
    auto test = run_cuda_op<ScaledDotProductAttentionOp>({q, k, v, fat::dropout_key()}, true, 0.0, layout, 0.5, true);
    auto zero = run_cuda_op<ScaledDotProductAttentionOp>({q, k, v, fat::dropout_key()}, true, 0.0, layout, 0.0);
    for (const auto* run : {&test, &zero})
      for (int i = 0; i < 2; ++i)
        CHECK(std::memcmp(run->results[i].raw_data(), plain.results[i].raw_data(), plain.results[i].bytes()) == 0);
  }
}

// A small case of every dtype and path for compute-sanitizer.
TEST_CASE("CUDA attention dropout on a small case of every dtype matches the CPU", "[cuda][kernel][dropout][sanitize]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16, DataType::Float64}) {
    const Tensor fm = fat::float_mask(dt, {2, 1, 9, 13});
    fat::compare_fused(dt, {2, 2, 9, 13, 8, 8}, true, "BLHD", 0, nullptr, &fm, 0.4);
    fat::compare_fused(dt, {2, 4, 9, 13, 8, 8, 2}, false, "BHLD", 0, nullptr, nullptr, 0.4);
  }
  fat::compare_fused(DataType::Float32, {1, 2, 9, 13, 8, 160, 1}, false, "BLHD", 0, nullptr, nullptr, 0.4);
}
