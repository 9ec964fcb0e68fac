// CPU kernel of kiln.matmul through a BLAS GEMM (cpu_blas.h): x [..., M, K] (or
// [..., K, M] with transpose_x) times y [..., K, N] (or [..., N, K] with
// transpose_y), batch dims broadcast numpy-style. One GEMM call when y has no
// batch (x's batch rows fold into M), otherwise one call per output matrix.
// The BLAS thread count is left alone (kiln/kernel/blas.h). bf16 and f16
// operands sum in f32 and round once (oneDNN's bf16 products where the CPU
// has them, else widened). Also kiln.det.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/kernel/matmul_shape.h"
#include "cpu_blas.h"
#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "unary_kernel_math.h"
#include "vector_math.h"

namespace kiln {
namespace {

// One output column (n == 1) of a small matrix: plain loops. A BLAS call
// costs ~100-200 ns before any arithmetic (argument checks, a work buffer
// from OpenBLAS's pool under a mutex), several times a 16x16 matrix-vector
// product — the seed model's Linear(16, 1) makes two per step. Both loops
// run in the widest SIMD form the CPU has (vector_math.h).
constexpr std::int64_t kSmallGemvElements = 1024;  // m * k; measured: 32x32 still wins

// Vectors of eight lanes (GCC/Clang vector extensions: the same lanes at
// every SIMD level, so each level sums in the same order; the AVX2 and
// AVX-512 copies fuse multiply-adds, as every kernel of vector_math.h does,
// so their last bits may differ from the baseline copy's), and halves of them.
template <typename T, int kLanes>
struct Lanes;
template <int kLanes>
struct Lanes<float, kLanes> {
  using type [[gnu::vector_size(kLanes * sizeof(float))]] = float;
};
template <int kLanes>
struct Lanes<double, kLanes> {
  using type [[gnu::vector_size(kLanes * sizeof(double))]] = double;
};
template <typename T>
using Vec8 = typename Lanes<T, 8>::type;

template <typename T>
KILN_SIMD_INLINE Vec8<T> load8(const T* p) {
  Vec8<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The sum of v's lanes as a tree: (l0 + l4) + (l2 + l6) + ((l1 + l5) + (l3 + l7)).
template <typename T>
KILN_SIMD_INLINE T sum_lanes(Vec8<T> v) {
  using V4 = typename Lanes<T, 4>::type;
  using V2 = typename Lanes<T, 2>::type;
  const V4 s4 = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  const V2 s2 = __builtin_shufflevector(s4, s4, 0, 1) + __builtin_shufflevector(s4, s4, 2, 3);
  return s2[0] + s2[1];
}

// c[i * ldc] = the dot product of a's row i with b (contiguous): lane l sums
// the products at p = l, l + 8, ... (sum_lanes adds the lanes), then the
// products past the last whole vector, in order.
template <typename T>
struct GemvRows {
  KILN_SIMD_INLINE static void run(int m, int k, const T* a, int lda, const T* b, T* c, int ldc) {
    const int whole = k / 8 * 8;
    int i = 0;
    // Four rows at a time: four independent sums, each b vector loaded once.
    for (; i + 4 <= m; i += 4) {
      const T* r0 = a + std::size_t(i) * lda;
      const T* r1 = r0 + lda;
      const T* r2 = r1 + lda;
      const T* r3 = r2 + lda;
      Vec8<T> a0 = {}, a1 = {}, a2 = {}, a3 = {};
      for (int p = 0; p < whole; p += 8) {
        const Vec8<T> bp = load8<T>(b + p);
        a0 += load8<T>(r0 + p) * bp;
        a1 += load8<T>(r1 + p) * bp;
        a2 += load8<T>(r2 + p) * bp;
        a3 += load8<T>(r3 + p) * bp;
      }
      T s0 = sum_lanes<T>(a0), s1 = sum_lanes<T>(a1), s2 = sum_lanes<T>(a2), s3 = sum_lanes<T>(a3);
      for (int p = whole; p < k; ++p) {
        s0 += r0[p] * b[p];
        s1 += r1[p] * b[p];
        s2 += r2[p] * b[p];
        s3 += r3[p] * b[p];
      }
      c[std::size_t(i) * ldc] = s0;
      c[std::size_t(i + 1) * ldc] = s1;
      c[std::size_t(i + 2) * ldc] = s2;
      c[std::size_t(i + 3) * ldc] = s3;
    }
    for (; i < m; ++i) {
      const T* row = a + std::size_t(i) * lda;
      Vec8<T> acc = {};
      for (int p = 0; p < whole; p += 8) acc += load8<T>(row + p) * load8<T>(b + p);
      T s = sum_lanes<T>(acc);
      for (int p = whole; p < k; ++p) s += row[p] * b[p];
      c[std::size_t(i) * ldc] = s;
    }
  }
};

// c[i] = Σ_p a[p * lda + i] · b[p] (a is [k, m]; c contiguous): a's rows
// walked in order, every output summed over p in order from 0. Outputs of up
// to 32 elements in multiples of eight stay in registers over the whole sum.
template <typename T>
struct GemvColumns {
  template <int kVectors>
  KILN_SIMD_INLINE static void in_registers(int k, const T* a, int lda, const T* b, T* c) {
    Vec8<T> acc[kVectors] = {};
    for (int p = 0; p < k; ++p) {
      const T* row = a + std::size_t(p) * lda;
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) acc[v] += load8<T>(row + 8 * v) * b[p];
    }
    std::memcpy(c, acc, sizeof acc);
  }

  KILN_SIMD_INLINE static void run(int m, int k, const T* a, int lda, const T* b, T* c) {
    switch (m) {
      case 8: return in_registers<1>(k, a, lda, b, c);
      case 16: return in_registers<2>(k, a, lda, b, c);
      case 24: return in_registers<3>(k, a, lda, b, c);
      case 32: return in_registers<4>(k, a, lda, b, c);
      default: break;
    }
    T* __restrict out = c;
    for (int i = 0; i < m; ++i) out[i] = 0;
    for (int p = 0; p < k; ++p) {
      const T bp = b[p];
      const T* __restrict row = a + std::size_t(p) * lda;
      // Blocks of eight, unrolled: straight-line code the block vectorizer
      // turns into vector multiply-adds at -O2 too.
      int i = 0;
      for (; i + 8 <= m; i += 8) {
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) out[i + r] += row[i + r] * bp;
      }
      for (; i < m; ++i) out[i] += row[i] * bp;
    }
  }
};

template <typename T>
bool small_gemv(bool ta, bool tb, int m, int n, int k, const T* a, int lda, const T* b, int ldb, T* c,
                int ldc) {
  // b must be one contiguous column: [1, k] transposed, or [k, 1] with a row step of 1.
  if (n != 1 || (!tb && ldb != 1) || std::int64_t(m) * k > kSmallGemvElements) return false;
  if (!ta) {
    cpu::simd_dispatch<GemvRows<T>>(m, k, a, lda, b, c, ldc);
  } else if (ldc == 1) {
    cpu::simd_dispatch<GemvColumns<T>>(m, k, a, lda, b, c);
  } else {
    for (int i = 0; i < m; ++i) c[std::size_t(i) * ldc] = 0;
    for (int p = 0; p < k; ++p) {
      const T bp = b[p];
      const T* row = a + std::size_t(p) * lda;
      for (int i = 0; i < m; ++i) c[std::size_t(i) * ldc] += row[i] * bp;
    }
  }
  return true;
}

// A bf16 element's bits: what product_into multiplies for a CPU with native
// bf16 products (cpu::gemm_bf16).
using Bf16Bits = std::uint16_t;

template <typename T>
const T* elements(const Tensor& t) {
  if constexpr (std::is_same_v<T, Bf16Bits>) return static_cast<const Bf16Bits*>(t.raw_data());
  else return t.data<T>();
}
template <typename T>
T* elements(Tensor& t) {
  if constexpr (std::is_same_v<T, Bf16Bits>) return static_cast<Bf16Bits*>(t.raw_data());
  else return t.data<T>();
}

// c = op(a) · op(b); false (c unspecified) where a bf16 product was not done.
template <typename T>
bool gemm(bool ta, bool tb, int m, int n, int k, const T* a, int lda, const T* b, int ldb, T* c, int ldc) {
  if constexpr (std::is_same_v<T, Bf16Bits>) {
    return cpu::gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  } else {
    if (!small_gemv(ta, tb, m, n, k, a, lda, b, ldb, c, ldc))
      cpu::gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, T(0), c, ldc);
    return true;
  }
}

[[noreturn, gnu::cold]] void throw_beyond_blas_int(const KernelContext& ctx, std::int64_t v) {
  throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has a matrix dim of ", v,
              ", beyond what the BLAS takes (", INT_MAX, ")");
}

inline int to_blas_int(const KernelContext& ctx, std::int64_t v) {
  if (v > INT_MAX) [[unlikely]]
    throw_beyond_blas_int(ctx, v);
  return static_cast<int>(v);
}

// What matrix_product did.
enum class Product { NeedsShape, Done, NotDone };

// Two matrices (no batch dims, the common case): no MatmulShape to fill.
// NeedsShape when the dims need matmul_shape (batches, or its error);
// NotDone when gemm did not do it.
template <typename T, typename Alloc>
Product matrix_product(KernelContext& ctx, const Tensor& x, const Tensor& y, bool tx, bool ty, Alloc&& alloc) {
  const Dims& xd = x.dims();
  const Dims& yd = y.dims();
  if (xd.rank() != 2 || yd.rank() != 2) return Product::NeedsShape;
  const std::int64_t m = tx ? xd[1] : xd[0], k = tx ? xd[0] : xd[1];
  const std::int64_t ky = ty ? yd[1] : yd[0], n = ty ? yd[0] : yd[1];
  if (k != ky) return Product::NeedsShape;
  Tensor& out = alloc(Dims{m, n});
  T* o = elements<T>(out);
  if (m == 0 || n == 0) return Product::Done;
  if (k == 0) {  // empty sum: zeros (and no BLAS call with a zero leading dim)
    std::memset(o, 0, out.bytes());
    return Product::Done;
  }
  const int im = to_blas_int(ctx, m), in = to_blas_int(ctx, n), ik = to_blas_int(ctx, k);
  const bool done = gemm(tx, ty, im, in, ik, elements<T>(x), tx ? im : ik, elements<T>(y), ty ? ik : in, o, in);
  return done ? Product::Done : Product::NotDone;
}

// x · y with these transposes, into the tensor alloc(dims) returns; false
// (its contents unspecified) where gemm did not do a product.
template <typename T, typename Alloc>
bool product_into(KernelContext& ctx, const Tensor& x, const Tensor& y, const MatmulOp::Attributes& a,
                  Alloc&& alloc) {
  if (const Product p = matrix_product<T>(ctx, x, y, a.transpose_x, a.transpose_y, alloc); p != Product::NeedsShape)
    return p == Product::Done;
  const MatmulShape s =
      matmul_shape(ctx.op()->name(), x.dims(), y.dims(), a.transpose_x, a.transpose_y);
  const std::int64_t m = s.m, n = s.n, k = s.k, batch = s.batch, y_count = s.y_count;
  const int br = s.batch_rank;
  const std::int64_t* out_d = s.out_batch;
  const std::int64_t* x_step = s.x_step;
  const std::int64_t* y_step = s.y_step;
  Tensor& out = alloc(s.out_dims);
  T* o = elements<T>(out);
  const T* xp = elements<T>(x);
  const T* yp = elements<T>(y);
  if (batch == 0 || m == 0 || n == 0) return true;
  if (k == 0) {  // empty sum: zeros (and no BLAS call with a zero leading dim)
    std::memset(o, 0, out.bytes());
    return true;
  }
  const int ik = to_blas_int(ctx, k), in = to_blas_int(ctx, n);
  const int lda = a.transpose_x ? to_blas_int(ctx, m) : ik;
  const int ldb = a.transpose_y ? ik : in;
  if (y_count == 1 && !a.transpose_x)  // y is one matrix and x's matrices are consecutive rows: one GEMM
    return gemm(false, a.transpose_y, to_blas_int(ctx, batch * m), in, ik, xp, lda, yp, ldb, o, in);
  const int im = to_blas_int(ctx, m);
  const std::int64_t x_mat = m * k, y_mat = k * n, o_mat = m * n;
  std::int64_t idx[Dims::kMaxRank] = {};
  std::int64_t xo = 0, yo = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    if (!gemm(a.transpose_x, a.transpose_y, im, in, ik, xp + xo * x_mat, lda, yp + yo * y_mat, ldb, o + b * o_mat, in))
      return false;
    // Odometer over the output batch index, moving x's and y's matrix index along.
    for (int i = br - 1; i >= 0; --i) {
      xo += x_step[i];
      yo += y_step[i];
      if (++idx[i] < out_d[i]) break;
      xo -= x_step[i] * out_d[i];
      yo -= y_step[i] * out_d[i];
      idx[i] = 0;
    }
  }
  return true;
}

[[noreturn, gnu::cold]] void throw_two_dtypes(const KernelContext& ctx, DataType x, DataType y) {
  throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' operands must have one dtype, got ",
              to_string(x), " and ", to_string(y));
}

// Both operands must have one dtype.
inline void require_one_dtype(const KernelContext& ctx, const Tensor& x, const Tensor& y) {
  if (x.dtype() != y.dtype()) [[unlikely]]
    throw_two_dtypes(ctx, x.dtype(), y.dtype());
}

// Output 0 = x · y (inputs 0 and 1) with these transposes.
template <typename T>
void matmul_product(KernelContext& ctx, const MatmulOp::Attributes& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  require_one_dtype(ctx, x, y);
  product_into<T>(ctx, x, y, a, [&](const Dims& d) -> Tensor& { return ctx.alloc_output(0, d, x.dtype()); });
}

template <typename T>
void matmul_kernel(KernelContext& ctx) {
  matmul_product<T>(ctx, ctx.attrs<MatmulOp>());
}

// The 16-bit floats (mixed precision): f32 sums rounded once to D. bf16 on
// a CPU with native bf16 products through cpu::gemm_bf16 (oneDNN, the
// operands as they are, summed in its order: within a rounding of the
// widened product); otherwise both operands widened to f32 and the f32
// product rounded at the end.
template <DataType D>
void matmul_half_product(KernelContext& ctx, const MatmulOp::Attributes& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  require_one_dtype(ctx, x, y);
  if constexpr (D == DataType::BFloat16)
    if (cpu::native_bf16_gemm() &&
        product_into<Bf16Bits>(ctx, x, y, a, [&](const Dims& d) -> Tensor& { return ctx.alloc_output(0, d, D); }))
      return;
  Tensor product;
  product_into<float>(ctx, cpu::widen_half<D>(x), cpu::widen_half<D>(y), a,
                      [&](const Dims& d) -> Tensor& { return product = Tensor::empty(d, DataType::Float32); });
  cpu::round_half<D>(product, ctx.alloc_output(0, product.dims(), D));
}

template <DataType D>
void matmul_half_kernel(KernelContext& ctx) {
  matmul_half_product<D>(ctx, ctx.attrs<MatmulOp>());
}

// The epilogue's activation over one thread's elements, through its own
// kernel's SIMD loop (the unary family's; gelu's as unary.cc's GeluK):
// from x into out, or in place, the same bits. Called inside the epilogue's
// split across threads, so not map_elementwise, which splits again.
template <typename T>
struct ActivationLoop {
  void (*map)(const T* x, T* out, std::int64_t n) = nullptr;
  void (*in_place)(T* x, std::int64_t n) = nullptr;
};
template <typename F, typename T>
ActivationLoop<T> activation_loop_of() {
  return {[](const T* x, T* out, std::int64_t n) { cpu::simd_dispatch<cpu::simd_detail::MapLoop<F, T>>(x, out, n); },
          [](T* x, std::int64_t n) { cpu::simd_dispatch<cpu::simd_detail::MapInPlaceLoop<F, T>>(x, n); }};
}
template <typename T, typename... Maths>
std::vector<ActivationLoop<T>> activation_table(MathList<Maths...>) {
  return {activation_loop_of<cpu::KernelMath<Maths>, T>()...};
}
// Null loops for none.
template <typename T>
ActivationLoop<T> activation_loop(const EpilogueActivation& a) {
  static const std::vector<ActivationLoop<T>> family = activation_table<T>(UnaryFamily{});
  if (a.gelu == EpilogueActivation::Gelu::Erf) return activation_loop_of<cpu::GeluErfF, T>();
  if (a.gelu == EpilogueActivation::Gelu::Tanh) return activation_loop_of<cpu::GeluTanhF, T>();
  return a.index >= 0 ? family[static_cast<std::size_t>(a.index)] : ActivationLoop<T>{};
}

// What kiln.fused_matmul's epilogue works from, once the product is made:
// the bias (input 2; null: none), a tensor that outlives the product's
// allocation (its variable holds it, unless that variable is an output's
// too: then `bias_copy` keeps it); the output's element count and last
// dim, the bias's element count (checked against that dim), the
// activation, and the pre-activation output (null unless kept).
struct FusedEpilogue {
  Tensor bias_copy;
  const Tensor* bias = nullptr;
  Tensor* pre = nullptr;
  std::int64_t total = 0, n = 1, bias_elements = 0;
  const EpilogueActivation* activation = nullptr;

  bool empty() const { return total == 0 || (!bias && activation->empty()); }
};

// Output 0 = the product, made by product(attributes); then e's fields
// (output 1 allocated where the op keeps its pre-activation).
template <typename Product>
void fused_matmul_product(KernelContext& ctx, FusedEpilogue& e, Product&& product) {
  const auto& a = ctx.attrs<FusedMatmulOp>();
  if (ctx.num_inputs() > 2) {
    const bool shared = &ctx.input_var(2) == &ctx.output_var(0) ||
                        (a.keep_pre_activation && &ctx.input_var(2) == &ctx.output_var(1));
    if (shared) e.bias_copy = ctx.input(2);
    e.bias = shared ? &e.bias_copy : &ctx.input(2);
  }
  product(MatmulOp::Attributes{a.transpose_x, a.transpose_y});
  const Tensor& out = ctx.output(0);
  e.activation = &a.activation;
  if (a.keep_pre_activation) e.pre = &ctx.alloc_output(1, out.dims(), out.dtype());
  e.total = out.numel();
  if (e.total == 0) return;
  e.n = out.dims().rank() ? out.dims()[out.dims().rank() - 1] : 1;
  e.bias_elements = e.bias ? e.bias->numel() : 0;
  if (e.bias) check_matmul_bias(ctx.op()->name(), e.bias->dtype(), e.bias_elements, out.dtype(), e.n);
}

// kiln.fused_matmul: the product, then out[…, j] = out[…, j] + bias[j] (as
// kiln.add's broadcast loop computes it; into the kept pre-activation
// where there is one), then the activation through its own kernel's loop:
// in place, or from the kept pre-activation.
template <typename T>
void fused_matmul_kernel(KernelContext& ctx) {
  FusedEpilogue e;
  fused_matmul_product(ctx, e, [&](const MatmulOp::Attributes& m) { matmul_product<T>(ctx, m); });
  if (e.empty()) return;
  T* o = ctx.output(0).data<T>();
  T* pre = e.pre ? e.pre->data<T>() : nullptr;
  const std::int64_t total = e.total, n = e.n, bn = e.bias_elements;
  const T* b = e.bias ? e.bias->data<T>() : nullptr;
  const ActivationLoop<T> act = activation_loop<T>(*e.activation);
  // Rows of the product split across the kernel's threads: each element's
  // sum and activation computed alone, the same bits at any thread count.
  const std::int64_t per_range = cpu::items_per_range(4 * n * std::int64_t(sizeof(T)));
  cpu::parallel_for(total / n, per_range, [&](std::int64_t r0, std::int64_t r1) {
    T* rows = o + r0 * n;
    T* sum = pre ? pre + r0 * n : rows;  // where the biased product goes
    const std::int64_t len = (r1 - r0) * n;
    if (b && bn == 1) {
      const T b0 = b[0];
      for (std::int64_t i = 0; i < len; ++i) sum[i] = AddMath::forward(rows[i], b0);
    } else if (b) {
      for (std::int64_t r = 0; r < len; r += n)
        for (std::int64_t j = 0; j < n; ++j) sum[r + j] = AddMath::forward(rows[r + j], b[j]);
    } else if (pre) {
      std::copy(rows, rows + len, sum);
    }
    if (pre && act.map) act.map(sum, rows, len);
    else if (act.in_place) act.in_place(rows, len);
  });
}

// The unary family's f32 loops over a 16-bit chunk widened in place, as
// its bf16 / f16 kernels run them (unary.cc: MapInPlaceLoop of KernelMath;
// gelu's of its own math).
using InPlaceFn = void (*)(float* x, std::int64_t n);
template <typename F>
void in_place_f32(float* x, std::int64_t n) {
  cpu::simd_dispatch<cpu::simd_detail::MapInPlaceLoop<F, float>>(x, n);
}
template <typename... Maths>
std::vector<InPlaceFn> in_place_table(MathList<Maths...>) {
  return {&in_place_f32<cpu::KernelMath<Maths>>...};
}
InPlaceFn in_place_activation(const EpilogueActivation& a) {
  static const std::vector<InPlaceFn> family = in_place_table(UnaryFamily{});
  if (a.gelu == EpilogueActivation::Gelu::Erf) return &in_place_f32<cpu::GeluErfF>;
  if (a.gelu == EpilogueActivation::Gelu::Tanh) return &in_place_f32<cpu::GeluTanhF>;
  return a.index >= 0 ? family[static_cast<std::size_t>(a.index)] : nullptr;
}

// kiln.fused_matmul in bf16 / f16: the 16-bit product (kiln.matmul's,
// rounded once), then, a chunk of its elements at a time, the bias add and
// the activation as kiln.add's and the unary family's (gelu's) 16-bit
// kernels compute them: widened, in f32, each rounded once. The unfused
// ops' bits, without their passes over the product.
template <DataType D>
void fused_matmul_half_kernel(KernelContext& ctx) {
  FusedEpilogue e;
  fused_matmul_product(ctx, e, [&](const MatmulOp::Attributes& m) { matmul_half_product<D>(ctx, m); });
  if (e.empty()) return;
  const Tensor* bias = e.bias;
  const std::int64_t total = e.total, n = e.n, bn = e.bias_elements;
  const InPlaceFn act = in_place_activation(*e.activation);
  // The bias widened once, in the calling thread's second scratch slot
  // (each thread's chunk buffer is its first).
  float* b = bias ? cpu::scratch<float, 1>(bn) : nullptr;
  if (bias) cpu::widen_half_row<D>(static_cast<const std::uint16_t*>(bias->raw_data()), b, bn);
  auto* o = static_cast<std::uint16_t*>(ctx.output(0).raw_data());
  auto* pre = e.pre ? static_cast<std::uint16_t*>(e.pre->raw_data()) : nullptr;
  // Elements split across the kernel's threads: each computed alone, the
  // same bits at any thread count.
  cpu::parallel_for(total, cpu::items_per_range(8), [&](std::int64_t begin, std::int64_t end) {
    float* buf = cpu::scratch<float>(cpu::kHalfChunk);
    for (std::int64_t i = begin; i < end; i += cpu::kHalfChunk) {
      const std::int64_t m = std::min(cpu::kHalfChunk, end - i);
      cpu::widen_half_row<D>(o + i, buf, m);
      if (bn == 1) {
        for (std::int64_t k = 0; k < m; ++k) buf[k] = AddMath::forward(buf[k], b[0]);
      } else if (bias) {
        for (std::int64_t k = 0, j = i % n; k < m;) {  // row pieces: bias[j..]
          const std::int64_t run = std::min(m - k, n - j);
          for (std::int64_t t = 0; t < run; ++t) buf[k + t] = AddMath::forward(buf[k + t], b[j + t]);
          k += run;
          j = 0;
        }
      }
      if ((bias && act) || pre) {  // the add's result as kiln.add stores it
        std::uint16_t* sum = pre ? pre + i : o + i;
        cpu::round_half_row<D>(buf, sum, m);
        cpu::widen_half_row<D>(sum, buf, m);
      }
      if (act) act(buf, m);
      cpu::round_half_row<D>(buf, o + i, m);
    }
  });
}

// kiln.det: per matrix, LU with partial pivoting in double.
template <typename T>
void det_kernel(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const Dims& d = x.dims();
  const std::string_view op = ctx.op()->name();
  if (d.rank() < 2 || d[d.rank() - 1] != d[d.rank() - 2])
    throw_error(ErrorKind::InvalidArgument, "op '", op,
                "' needs square matrices [..., n, n], got [", d.to_string(), "]");
  const std::int64_t n = d[d.rank() - 1];
  std::vector<std::int64_t> od(d.begin(), d.end() - 2);
  Tensor& out =
      ctx.alloc_output(0, Dims(std::span<const std::int64_t>(od.data(), od.size())), x.dtype());
  const std::int64_t batch = out.numel();
  const T* px = x.data<T>();
  T* po = out.data<T>();
  std::vector<double> a(static_cast<std::size_t>(n * n));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < n * n; ++i) a[static_cast<std::size_t>(i)] = px[b * n * n + i];
    double det = 1;
    for (std::int64_t c = 0; c < n && det != 0; ++c) {
      std::int64_t p = c;
      for (std::int64_t r = c + 1; r < n; ++r)
        if (std::abs(a[static_cast<std::size_t>(r * n + c)]) >
            std::abs(a[static_cast<std::size_t>(p * n + c)]))
          p = r;
      if (a[static_cast<std::size_t>(p * n + c)] == 0) {
        det = 0;
        break;
      }
      if (p != c) {
        for (std::int64_t k = 0; k < n; ++k)
          std::swap(a[static_cast<std::size_t>(p * n + k)], a[static_cast<std::size_t>(c * n + k)]);
        det = -det;
      }
      const double piv = a[static_cast<std::size_t>(c * n + c)];
      det *= piv;
      for (std::int64_t r = c + 1; r < n; ++r) {
        const double f = a[static_cast<std::size_t>(r * n + c)] / piv;
        for (std::int64_t k = c; k < n; ++k)
          a[static_cast<std::size_t>(r * n + k)] -= f * a[static_cast<std::size_t>(c * n + k)];
      }
    }
    po[b] = static_cast<T>(det);
  }
}

}  // namespace

KILN_REGISTER_KERNEL(MatmulOp, Cpu, Float32, matmul_kernel<float>);
KILN_REGISTER_KERNEL(MatmulOp, Cpu, Float64, matmul_kernel<double>);
KILN_REGISTER_KERNEL(MatmulOp, Cpu, BFloat16, matmul_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(MatmulOp, Cpu, Float16, matmul_half_kernel<DataType::Float16>);
KILN_REGISTER_KERNEL(FusedMatmulOp, Cpu, Float32, fused_matmul_kernel<float>);
KILN_REGISTER_KERNEL(FusedMatmulOp, Cpu, BFloat16, fused_matmul_half_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(FusedMatmulOp, Cpu, Float16, fused_matmul_half_kernel<DataType::Float16>);
KILN_REGISTER_KERNEL(FusedMatmulOp, Cpu, Float64, fused_matmul_kernel<double>);
KILN_REGISTER_KERNEL(DetOp, Cpu, Float32, det_kernel<float>);
KILN_REGISTER_KERNEL(DetOp, Cpu, Float64, det_kernel<double>);

}  // namespace kiln
