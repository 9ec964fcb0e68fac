// CPU kernels of the optimizer update ops (sgd_, momentum_, adam_, adamw_ and
// their merged forms, which run the same update per parameter;
// f32 and f64, an f32 parameter's gradient also bf16 or f16, widened as it
// is read; the element math is kiln/kernel/optimizer_math.h's, which the
// CUDA kernels share). Run in place, each output is its input's variable and the
// kernel updates that buffer; run out of place (an output with its own
// variable), the output is first a copy of the input, then updated.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "cpu_half.h"
#include "cpu_kernel_util.h"
#include "intra_op.h"
#include "kiln/dialect/merged_optimizer_ops.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/kernel/optimizer_math.h"

namespace kiln::cpu {
namespace {

// Where one update's operands and results are in the kernel's lists: the
// single op's own indices (Merged = false: the identity, known at compile
// time, so the single ops' kernels compile as they did before the merged
// ops existed), or parameter `k`'s group in a merged op
// (kiln/dialect/merged_optimizer_ops.h).
template <typename OpT, bool Merged = false>
struct Slots {
  std::uint32_t k = 0;
  std::uint32_t in(std::uint32_t i) const {
    if constexpr (Merged) return MergedLayout<OpT>::operand(k, i);
    else return i;
  }
  std::uint32_t out(std::uint32_t r) const {
    if constexpr (Merged) return MergedLayout<OpT>::result(k, r);
    else return r;
  }
  // The operand's name as the op declares it ("'moment1' (#3)", or
  // "'moment1' of parameter #2 (#15)" in a merged op).
  std::string label(std::uint32_t i) const {
    std::string s = "'" + std::string(OpT::operand_names[i]) + "'";
    if (Merged && i != MergedLayout<OpT>::lr) s += " of parameter #" + std::to_string(k);
    return s + " (#" + std::to_string(in(i)) + ")";
  }
};

// The error of checked_input (out of line: the kernels' hot path stays small).
template <typename OpT, typename S>
[[noreturn, gnu::noinline]] void size_error(const KernelContext& ctx, const S& s,
                                           std::uint32_t i, const Tensor& t, std::int64_t numel) {
  throw_error(ErrorKind::InvalidArgument, "op '", ctx.op() ? ctx.op()->name() : OpT::name,
              "' operand ", s.label(i), " has ", t.numel(), " elements (shape [",
              t.dims().to_string(), "]), expected ", numel);
}

// Single operand i (at ctx input s.in(i)), of T, with `numel` elements;
// kiln::Error naming the op and operand otherwise. Inlined, as `updated_at`
// is (their error and copy paths out of line): an update of a few elements
// is mostly these calls, and a merged op makes them once per parameter.
template <typename OpT, typename T, typename S>
[[gnu::always_inline]] inline const Tensor& checked_input(const KernelContext& ctx, const S& s,
                                                          std::uint32_t i,
                                                          std::int64_t numel) {
  const Tensor& t = typed_input<T>(ctx, s.in(i));
  if (t.numel() != numel) [[unlikely]]
    size_error<OpT>(ctx, s, i, t, numel);
  return t;
}

// The gradient an update reads: of T or, for an f32 parameter, bf16 or f16
// (accepts_gradient), which for_gradient widens as it is read.
struct GradientIn {
  const void* data;
  DataType dtype;
};

// The gradient (single operand kGradOperand) of an update of T with `numel`
// elements; kiln::Error naming the op and operand otherwise.
template <typename OpT, typename T, typename S>
[[gnu::always_inline]] inline GradientIn checked_gradient(const KernelContext& ctx, const S& s,
                                                          std::int64_t numel) {
  const Tensor& t = ctx.input(s.in(kGradOperand));
  if (!accepts_gradient(data_type_of<T>, t.dtype())) [[unlikely]]
    throw_gradient_dtype(ctx.op() ? ctx.op()->name() : OpT::name, s.label(kGradOperand), data_type_of<T>,
                         t.dtype());
  if (t.numel() != numel) [[unlikely]]
    size_error<OpT>(ctx, s, kGradOperand, t, numel);
  return {t.raw_data(), t.dtype()};
}

// Calls f(g, b, e) on the elements [begin, end) of the gradient, g[0] being
// element b: the gradient itself when it is of T, else its bf16 / f16
// values widened (exactly) into the thread's buffer, kHalfChunk at a time.
template <typename T, typename F>
[[gnu::always_inline]] inline void for_gradient(const GradientIn& g, std::int64_t begin, std::int64_t end,
                                                F&& f) {
  if (g.dtype == data_type_of<T>) [[likely]] {
    f(static_cast<const T*>(g.data) + begin, begin, end);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    const auto* h = static_cast<const std::uint16_t*>(g.data);
    float wide[kHalfChunk];
    for (std::int64_t b = begin; b < end; b += kHalfChunk) {
      const std::int64_t e = std::min(end, b + kHalfChunk);
      if (g.dtype == DataType::BFloat16) widen_half_row<DataType::BFloat16>(h + b, wide, e - b);
      else widen_half_row<DataType::Float16>(h + b, wide, e - b);
      f(static_cast<const float*>(wide), b, e);
    }
  }
}

// Single output r, which aliases single operand i: in place, the input's
// buffer; otherwise `updated`'s copy.
template <typename T, typename S>
[[gnu::always_inline]] inline T* updated_at(KernelContext& ctx, const S& s, std::uint32_t r,
                                            std::uint32_t i, const Tensor& in) {
  const std::uint32_t o = s.out(r), j = s.in(i);
  if (output_is_input(ctx, o, j)) [[likely]]
    return ctx.output(o).data<T>();
  return updated<T>(ctx, o, j, in);
}

// The optional skip flag, the input after the first `fixed` ones: whether
// the op leaves everything as it was. kiln::Error naming the op unless it
// is a bool of one element.
bool skip_requested(const KernelContext& ctx, std::uint32_t fixed) {
  if (ctx.num_inputs() <= fixed) [[likely]]
    return false;
  const Tensor& flag = ctx.input(ctx.num_inputs() - 1);
  if (flag.dtype() != DataType::Bool || flag.numel() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op() ? ctx.op()->name() : "?", "' operand '",
                kSkipOperandName, "' (#", ctx.num_inputs() - 1, ") must be a bool of one element, got ",
                flag.type_string());
  return *flag.data<bool>();
}

// A skipped update: each result keeps its operand's value (in place,
// nothing to do; out of place, a copy).
template <typename OpT, typename T, typename S>
void keep_values(KernelContext& ctx, const S& s) {
  for (auto [r, i] : OpT::inplace_map) updated_at<T>(ctx, s, r, i, typed_input<T>(ctx, s.in(i)));
}

// Single op OpT: true (after keeping every value) when its skip flag is set.
template <typename OpT, typename T>
bool skipped_single(KernelContext& ctx) {
  if (!skip_requested(ctx, OpT::num_operands)) return false;
  keep_values<OpT, T>(ctx, Slots<OpT>{});
  return true;
}

template <typename T, typename S>
void sgd_update(KernelContext& ctx, const S& s) {
  const Tensor& p = typed_input<T>(ctx, s.in(0));
  const std::int64_t n = p.numel();
  const GradientIn grad = checked_gradient<Sgd_Op, T>(ctx, s, n);
  const T lr = *checked_input<Sgd_Op, T>(ctx, s, 2, 1).template data<T>();
  T* po = updated_at<T>(ctx, s, 0, 0, p);
  parallel_for(n, items_per_range(3 * sizeof(T)), [&](std::int64_t begin, std::int64_t end) {
    for_gradient<T>(grad, begin, end, [&](const T* g, std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) po[i] = sgd_step(po[i], g[i - b], lr);
    });
  });
}

template <typename T, typename S>
void momentum_update(KernelContext& ctx, const S& s,
                     const Momentum_Op::Attributes& a) {
  const Tensor& p = typed_input<T>(ctx, s.in(0));
  const std::int64_t n = p.numel();
  const GradientIn grad = checked_gradient<Momentum_Op, T>(ctx, s, n);
  const Tensor& v = checked_input<Momentum_Op, T>(ctx, s, 2, n);
  const T lr = *checked_input<Momentum_Op, T>(ctx, s, 3, 1).template data<T>();
  const T mu = static_cast<T>(a.mu);
  T* po = updated_at<T>(ctx, s, 0, 0, p);
  T* vo = updated_at<T>(ctx, s, 1, 2, v);
  const bool nesterov = a.use_nesterov;
  parallel_for(n, items_per_range(5 * sizeof(T)), [&](std::int64_t begin, std::int64_t end) {
    for_gradient<T>(grad, begin, end, [&](const T* g, std::int64_t b, std::int64_t e) {
      if (nesterov) {
        for (std::int64_t i = b; i < e; ++i) momentum_step(po[i], vo[i], g[i - b], lr, mu, true);
      } else {
        for (std::int64_t i = b; i < e; ++i) momentum_step(po[i], vo[i], g[i - b], lr, mu, false);
      }
    });
  });
}

template <typename T>
struct SgdK {
  static void run(KernelContext& ctx) {
    if (!skipped_single<Sgd_Op, T>(ctx)) sgd_update<T>(ctx, Slots<Sgd_Op>{});
  }
};

template <typename T>
struct MomentumK {
  static void run(KernelContext& ctx) {
    if (!skipped_single<Momentum_Op, T>(ctx))
      momentum_update<T>(ctx, Slots<Momentum_Op>{}, ctx.attrs<Momentum_Op>());
  }
};

// The element loop of adam_ and adamw_: p scaled by `keep` (adamw_'s decay,
// 1 - lr · coeff; adam_ passes 1, which changes no value), then m1, m2 and
// p updated in place, in one pass over the five arrays. std::sqrt may set
// errno, so GCC keeps the scalar loop scalar (a sqrt and a div per
// element), and `#pragma GCC optimize("no-math-errno")` does not change
// that. So the f32 loop runs by hand: 8 lanes where the CPU has AVX
// (checked at run time), else 4 with SSE2. The same operations in the same
// order (no FMA), each correctly rounded: the same bits as the scalar loop.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_ADAM_AVX 1
// Elements [0, n rounded down to 8) of adam_elements<float>; returns that count.
__attribute__((target("avx"))) std::int64_t adam_f32_avx(float* p, float* m1, float* m2,
                                                         const float* g, std::int64_t n,
                                                         const AdamStep<float>& s, float keep_by) {
  const __m256 b1 = _mm256_set1_ps(s.beta1), c1 = _mm256_set1_ps(1.0f - s.beta1);
  const __m256 b2 = _mm256_set1_ps(s.beta2), c2 = _mm256_set1_ps(1.0f - s.beta2);
  const __m256 lr = _mm256_set1_ps(s.lr_t), eps = _mm256_set1_ps(s.eps_t);
  const __m256 keep = _mm256_set1_ps(keep_by);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gi = _mm256_loadu_ps(g + i);
    const __m256 a =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m1 + i)), _mm256_mul_ps(c1, gi));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(m2 + i)),
                                   _mm256_mul_ps(_mm256_mul_ps(c2, gi), gi));
    _mm256_storeu_ps(m1 + i, a);
    _mm256_storeu_ps(m2 + i, v);
    const __m256 step =
        _mm256_mul_ps(lr, _mm256_div_ps(a, _mm256_add_ps(_mm256_sqrt_ps(v), eps)));
    const __m256 kept = _mm256_mul_ps(_mm256_loadu_ps(p + i), keep);
    _mm256_storeu_ps(p + i, _mm256_sub_ps(kept, step));
  }
  return i;
}
#endif

// Elements [i, n) of adam_elements<float> with SSE2's 4 lanes; returns the
// first one left.
#if defined(__SSE2__)
std::int64_t adam_f32_sse2(float* p, float* m1, float* m2, const float* g, std::int64_t i,
                           std::int64_t n, const AdamStep<float>& s, float keep_by) {
  const __m128 b1 = _mm_set1_ps(s.beta1), c1 = _mm_set1_ps(1.0f - s.beta1);
  const __m128 b2 = _mm_set1_ps(s.beta2), c2 = _mm_set1_ps(1.0f - s.beta2);
  const __m128 lr = _mm_set1_ps(s.lr_t), eps = _mm_set1_ps(s.eps_t);
  const __m128 keep = _mm_set1_ps(keep_by);
  for (; i + 4 <= n; i += 4) {
    const __m128 gi = _mm_loadu_ps(g + i);
    const __m128 a = _mm_add_ps(_mm_mul_ps(b1, _mm_loadu_ps(m1 + i)), _mm_mul_ps(c1, gi));
    const __m128 v =
        _mm_add_ps(_mm_mul_ps(b2, _mm_loadu_ps(m2 + i)), _mm_mul_ps(_mm_mul_ps(c2, gi), gi));
    _mm_storeu_ps(m1 + i, a);
    _mm_storeu_ps(m2 + i, v);
    const __m128 step = _mm_mul_ps(lr, _mm_div_ps(a, _mm_add_ps(_mm_sqrt_ps(v), eps)));
    _mm_storeu_ps(p + i, _mm_sub_ps(_mm_mul_ps(_mm_loadu_ps(p + i), keep), step));
  }
  return i;
}
#endif

template <typename T>
void adam_elements(T* p, T* m1, T* m2, const T* g, std::int64_t n, const AdamStep<T>& step,
                   T keep) {
  std::int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
#if defined(KILN_ADAM_AVX)
    static const bool avx = __builtin_cpu_supports("avx");
    if (avx) i = adam_f32_avx(p, m1, m2, g, n, step, keep);
#endif
#if defined(__SSE2__)
    i = adam_f32_sse2(p, m1, m2, g, i, n, step, keep);
#endif
  }
  for (; i < n; ++i) {
    p[i] *= keep;
    adam_element(p[i], m1[i], m2[i], g[i], step);
  }
}

// adam_ (coeff = 0, decay off) and adamw_. The elements are split across
// the kernel's threads: each is computed alone, so the bits do not depend
// on the thread count.
template <typename OpT, typename T, typename S>
void adam_update(KernelContext& ctx, const S& s, double beta1_d, double beta2_d, double eps_d, double coeff_d,
                 bool decay) {
  const Tensor& p = typed_input<T>(ctx, s.in(0));
  const std::int64_t n = p.numel();
  const GradientIn grad = checked_gradient<OpT, T>(ctx, s, n);
  const T lr = *checked_input<OpT, T>(ctx, s, 2, 1).template data<T>();
  const Tensor& m1 = checked_input<OpT, T>(ctx, s, 3, n);
  const Tensor& m2 = checked_input<OpT, T>(ctx, s, 4, n);
  const Tensor& b1p_in = checked_input<OpT, T>(ctx, s, 5, 1);
  const Tensor& b2p_in = checked_input<OpT, T>(ctx, s, 6, 1);
  const T beta1 = static_cast<T>(beta1_d), beta2 = static_cast<T>(beta2_d);
  const T eps = static_cast<T>(eps_d);
  const T b1p = *b1p_in.data<T>(), b2p = *b2p_in.data<T>();
  const AdamStep<T> step = adam_step_of(lr, b1p, b2p, beta1, beta2, eps);

  T* po = updated_at<T>(ctx, s, 0, 0, p);
  T* m1o = updated_at<T>(ctx, s, 1, 3, m1);
  T* m2o = updated_at<T>(ctx, s, 2, 4, m2);
  T* b1po = updated_at<T>(ctx, s, 3, 5, b1p_in);
  T* b2po = updated_at<T>(ctx, s, 4, 6, b2p_in);
  const T keep = decay ? T(1) - lr * static_cast<T>(coeff_d) : T(1);  // param -= lr * coeff * param
  parallel_for(n, items_per_range(7 * sizeof(T)), [&](std::int64_t begin, std::int64_t end) {
    for_gradient<T>(grad, begin, end, [&](const T* g, std::int64_t b, std::int64_t e) {
      adam_elements(po + b, m1o + b, m2o + b, g, e - b, step, keep);
    });
  });
  *b1po = b1p * beta1;
  *b2po = b2p * beta2;
}

template <typename T>
struct AdamK {
  static void run(KernelContext& ctx) {
    if (skipped_single<Adam_Op, T>(ctx)) return;
    const auto& a = ctx.attrs<Adam_Op>();
    adam_update<Adam_Op, T>(ctx, Slots<Adam_Op>{}, a.beta1, a.beta2, a.epsilon, 0.0, false);
  }
};

template <typename T>
struct AdamWK {
  static void run(KernelContext& ctx) {
    if (skipped_single<AdamW_Op, T>(ctx)) return;
    const auto& a = ctx.attrs<AdamW_Op>();
    adam_update<AdamW_Op, T>(ctx, Slots<AdamW_Op>{}, a.beta1, a.beta2, a.epsilon, a.coeff, true);
  }
};

// The merged ops: each parameter's update as the single op's kernel runs
// it, one after another, in the parameters' order (or, with the skip flag
// set, each parameter's values kept).
template <typename Merged, typename T, typename F>
void for_each_parameter(KernelContext& ctx, F&& update) {
  using Single = typename Merged::SingleOp;
  const std::uint32_t n = ctx.num_inputs();
  const std::uint32_t k = Merged::parameter_count(n);
  if (Merged::has_skip(n) && skip_requested(ctx, n - 1)) {
    for (std::uint32_t p = 0; p < k; ++p) keep_values<Single, T>(ctx, Slots<Single, true>{p});
    return;
  }
  for (std::uint32_t p = 0; p < k; ++p) update(Slots<Single, true>{p});
}

template <typename T>
struct MergedSgdK {
  static void run(KernelContext& ctx) {
    for_each_parameter<MergedSgd_Op, T>(ctx, [&](const Slots<Sgd_Op, true>& s) { sgd_update<T>(ctx, s); });
  }
};

template <typename T>
struct MergedMomentumK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<MergedMomentum_Op>();
    for_each_parameter<MergedMomentum_Op, T>(
        ctx, [&](const Slots<Momentum_Op, true>& s) { momentum_update<T>(ctx, s, a); });
  }
};

template <typename T>
struct MergedAdamK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<MergedAdam_Op>();
    for_each_parameter<MergedAdam_Op, T>(ctx, [&](const Slots<Adam_Op, true>& s) {
      adam_update<Adam_Op, T>(ctx, s, a.beta1, a.beta2, a.epsilon, 0.0, false);
    });
  }
};

template <typename T>
struct MergedAdamWK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<MergedAdamW_Op>();
    for_each_parameter<MergedAdamW_Op, T>(ctx, [&](const Slots<AdamW_Op, true>& s) {
      adam_update<AdamW_Op, T>(ctx, s, a.beta1, a.beta2, a.epsilon, a.coeff, true);
    });
  }
};

}  // namespace

KILN_REGISTER_KERNELS(Sgd_Op, Cpu, SgdK, float, double);
KILN_REGISTER_KERNELS(Momentum_Op, Cpu, MomentumK, float, double);
KILN_REGISTER_KERNELS(Adam_Op, Cpu, AdamK, float, double);
KILN_REGISTER_KERNELS(AdamW_Op, Cpu, AdamWK, float, double);
KILN_REGISTER_KERNELS(MergedSgd_Op, Cpu, MergedSgdK, float, double);
KILN_REGISTER_KERNELS(MergedMomentum_Op, Cpu, MergedMomentumK, float, double);
KILN_REGISTER_KERNELS(MergedAdam_Op, Cpu, MergedAdamK, float, double);
KILN_REGISTER_KERNELS(MergedAdamW_Op, Cpu, MergedAdamWK, float, double);

}  // namespace kiln::cpu
