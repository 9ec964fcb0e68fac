// CPU kernels of the ops of kiln/dialect/compare_ops.h. Comparisons and the
// logical binaries take flat loops for same-shape and scalar operands and the
// collapsed broadcast plan (cpu_kernel_util.h) otherwise; where and
// masked_fill walk a three-operand plan built here the same way.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>

#include "cpu_kernel_util.h"
#include "kiln/dialect/compare_ops.h"

namespace kiln::cpu {
namespace {

// ---- two-operand bool-result families ----

template <typename Math, typename T>
void binary_bool(KernelContext& ctx) {
  run_binary<MathForward<Math>, T, bool>(ctx, typed_input<T>(ctx, 0), typed_input<T>(ctx, 1),
                                   DataType::Bool);
}

template <typename Math>
struct CompareK {
  template <typename T>
  struct K {
    static void run(KernelContext& ctx) { binary_bool<Math, T>(ctx); }
  };
};

template <typename Math>
struct LogicalK {
  static void run(KernelContext& ctx) { binary_bool<Math, bool>(ctx); }
};

template <typename Math>
struct PredicateK {
  template <typename T>
  struct K {
    static void run(KernelContext& ctx) {
      const Tensor& x = typed_input<T>(ctx, 0);
      Tensor& out = ctx.alloc_output(0, x.dims(), DataType::Bool);
      const T* __restrict px = x.data<T>();
      bool* __restrict po = out.data<bool>();
      const std::int64_t n = x.numel();
      for (std::int64_t i = 0; i < n; ++i) po[i] = Math::forward(px[i]);
    }
  };
};

void logical_not_kernel(KernelContext& ctx) {
  const Tensor& x = typed_input<bool>(ctx, 0);
  Tensor& out = ctx.alloc_output(0, x.dims(), DataType::Bool);
  const bool* __restrict px = x.data<bool>();
  bool* __restrict po = out.data<bool>();
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) po[i] = !px[i];
}

// ---- three-operand broadcast plan (where, masked_fill) ----

// Per collapsed output dim: its size and each operand's element stride (0
// where the operand is broadcast). Size-1 dims are dropped and adjacent
// dims merged where every operand is contiguous across them.
struct Plan3 {
  int rank = 0;
  std::int64_t dims[Dims::kMaxRank] = {};
  std::int64_t s[3][Dims::kMaxRank] = {};
};

Plan3 make_plan3(const Dims* in[3], const Dims& out) {
  const int r = out.rank();
  std::int64_t st[3][Dims::kMaxRank] = {};
  for (int k = 0; k < 3; ++k) {
    const Dims& d = *in[k];
    std::int64_t stride = 1;
    for (int i = r - 1; i >= 0; --i) {
      const int j = i - (r - d.rank());
      const std::int64_t n = j >= 0 ? d[j] : 1;
      st[k][i] = n == 1 ? 0 : stride;
      stride *= n;
    }
  }
  Plan3 p;
  for (int i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    if (p.rank > 0) {
      const int l = p.rank - 1;
      bool merge = true;
      for (int k = 0; k < 3 && merge; ++k) merge = p.s[k][l] == st[k][i] * out[i];
      if (merge) {
        for (int k = 0; k < 3; ++k) p.s[k][l] = st[k][i];
        p.dims[l] *= out[i];
        continue;
      }
    }
    p.dims[p.rank] = out[i];
    for (int k = 0; k < 3; ++k) p.s[k][p.rank] = st[k][i];
    ++p.rank;
  }
  return p;
}

// out[o] = F(a[·], b[·], c[·]) along the plan; the inner loop is flat when
// every operand is contiguous or a scalar along it.
template <typename F, typename A, typename B, typename C, typename U>
void run_plan3(const Plan3& p, const A* a, const B* b, const C* c, U* out) {
  if (p.rank == 0) {
    out[0] = F::apply(a[0], b[0], c[0]);
    return;
  }
  const int last = p.rank - 1;
  const std::int64_t n = p.dims[last], sa = p.s[0][last], sb = p.s[1][last], sc = p.s[2][last];
  std::int64_t outer = 1;
  for (int d = 0; d < last; ++d) outer *= p.dims[d];
  std::int64_t idx[Dims::kMaxRank] = {};
  for (std::int64_t o = 0; o < outer; ++o) {
    U* __restrict po = out + o * n;
    if (sa == 1 && sb == 1 && sc == 1) {
      for (std::int64_t i = 0; i < n; ++i) po[i] = F::apply(a[i], b[i], c[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) po[i] = F::apply(a[i * sa], b[i * sb], c[i * sc]);
    }
    for (int d = last - 1; d >= 0; --d) {  // odometer over the outer dims
      if (++idx[d] < p.dims[d]) {
        a += p.s[0][d];
        b += p.s[1][d];
        c += p.s[2][d];
        break;
      }
      a -= p.s[0][d] * (p.dims[d] - 1);
      b -= p.s[1][d] * (p.dims[d] - 1);
      c -= p.s[2][d] * (p.dims[d] - 1);
      idx[d] = 0;
    }
  }
}

struct Select {
  template <typename T> static T apply(bool c, T x, T y) { return c ? x : y; }
};

template <typename T>
struct WhereK {
  static void run(KernelContext& ctx) {
    const Tensor& c = typed_input<bool>(ctx, 0);
    const Tensor& x = typed_input<T>(ctx, 1);
    const Tensor& y = typed_input<T>(ctx, 2);
    const std::string_view op = ctx.op()->name();
    const Dims od = broadcast_dims(op, c.dims(), broadcast_dims(op, x.dims(), y.dims()));
    Tensor& out = ctx.alloc_output(0, od, x.dtype());
    T* __restrict po = out.data<T>();
    const std::int64_t n = od.numel();
    if (n == 0) return;
    const bool* pc = c.data<bool>();
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    if (c.dims() == od && x.dims() == od && y.dims() == od) {
      // Both loads unconditional and the flags read as bytes (GCC has no
      // vector type for bool), so that the select vectorizes.
      const auto* flags = reinterpret_cast<const unsigned char*>(pc);
      for (std::int64_t i = 0; i < n; ++i) {
        const T a = px[i], b = py[i];
        po[i] = flags[i] != 0 ? a : b;
      }
      return;
    }
    const Dims* in[3] = {&c.dims(), &x.dims(), &y.dims()};
    run_plan3<Select>(make_plan3(in, od), pc, px, py, po);
  }
};

template <typename T>
struct MaskedFillK {
  static void run(KernelContext& ctx) {
    const Tensor& x = typed_input<T>(ctx, 0);
    const Tensor& m = typed_input<bool>(ctx, 1);
    const T v = static_cast<T>(ctx.attrs<MaskedFillOp>().value);
    const Dims od = broadcast_dims(ctx.op()->name(), x.dims(), m.dims());
    if (od != x.dims())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' mask ",
                  m.type_string(), " must broadcast to the shape of x ", x.type_string());
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    T* __restrict po = out.data<T>();
    const std::int64_t n = x.numel();
    if (n == 0) return;
    const T* px = x.data<T>();
    const bool* pm = m.data<bool>();
    if (m.dims() == x.dims()) {
      for (std::int64_t i = 0; i < n; ++i) po[i] = pm[i] ? v : px[i];
      return;
    }
    if (m.numel() == 1) {
      if (pm[0]) {
        for (std::int64_t i = 0; i < n; ++i) po[i] = v;
      } else {
        std::memcpy(po, px, static_cast<std::size_t>(n) * sizeof(T));
      }
      return;
    }
    // A scalar stand-in for the fill value as the third operand.
    const T* pv = &v;
    const Dims scalar{};
    const Dims* in[3] = {&m.dims(), &scalar, &x.dims()};
    run_plan3<Select>(make_plan3(in, od), pm, pv, px, po);
  }
};

// ---- clip ----

template <typename T>
T clip_bound(double b) {
  if constexpr (std::is_integral_v<T>) {
    // Saturate bounds outside T's range (a bound of 1e30 on i32 is no bound).
    if (b >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    if (b <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    return static_cast<T>(b);
  } else {
    return static_cast<T>(b);
  }
}

template <typename T>
struct ClipK {
  static void run(KernelContext& ctx) {
    const Tensor& x = typed_input<T>(ctx, 0);
    const auto& a = ctx.attrs<ClipOp>();
    const T lo = clip_bound<T>(a.min), hi = clip_bound<T>(a.max);
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    const T* __restrict px = x.data<T>();
    T* __restrict po = out.data<T>();
    // max first, then min: min > max gives max everywhere (torch.clamp);
    // NaN fails both comparisons and stays NaN.
    parallel_for(x.numel(), items_per_range(2 * sizeof(T)), [=](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        T v = px[i] < lo ? lo : px[i];
        po[i] = v > hi ? hi : v;
      }
    });
  }
};

template <typename T>
struct ClipGradK {
  static void run(KernelContext& ctx) {
    const Tensor& x = typed_input<T>(ctx, 0);
    const Tensor& d = typed_input<T>(ctx, 1);
    require_same_dims(ctx, x, d, 0, 1);
    const auto& a = ctx.attrs<ClipOp>();
    const T lo = static_cast<T>(a.min), hi = static_cast<T>(a.max);
    Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
    const T* __restrict px = x.data<T>();
    const T* __restrict pd = d.data<T>();
    T* __restrict po = out.data<T>();
    // dout where lo <= x <= hi, else (NaN too) 0. Both loads unconditional and
    // the bounds in locals, so that GCC vectorizes two selects: a load under a
    // condition (or a bound it must re-read from the closure) kept it a
    // branch per element, mispredicted half the time on ReLU6's inputs.
    parallel_for(x.numel(), items_per_range(3 * sizeof(T)), [=](std::int64_t b, std::int64_t e) {
      const T low = lo, high = hi;
      for (std::int64_t i = b; i < e; ++i) {
        const T v = px[i], g = pd[i];
        const T below = v >= low ? g : T(0);
        po[i] = v <= high ? below : T(0);
      }
    });
  }
};

// ---- triu / tril ----

template <typename Math>
struct TriangleK {
  template <typename T>
  struct K {
    static void run(KernelContext& ctx) {
      const Tensor& x = typed_input<T>(ctx, 0);
      if (x.rank() < 2)
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                    "' needs a tensor of rank >= 2, got ", x.type_string());
      const std::int64_t diag = ctx.attrs<TriangleOp<Math>>().diagonal;
      Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
      const std::int64_t rows = x.dims()[x.rank() - 2], cols = x.dims()[x.rank() - 1];
      const std::int64_t mat = rows * cols;
      if (mat == 0) return;
      const std::int64_t batch = x.numel() / mat;
      const T* px = x.data<T>();
      T* po = out.data<T>();
      // Row i keeps columns [begin, end): one copy and at most two fills.
      for (std::int64_t bi = 0; bi < batch; ++bi) {
        for (std::int64_t i = 0; i < rows; ++i) {
          const T* __restrict src = px + bi * mat + i * cols;
          T* __restrict dst = po + bi * mat + i * cols;
          std::int64_t begin, end;
          if constexpr (Math::upper) {  // triu: j >= i + diag
            begin = std::clamp<std::int64_t>(i + diag, 0, cols);
            end = cols;
          } else {  // tril: j <= i + diag
            begin = 0;
            end = std::clamp<std::int64_t>(i + diag + 1, 0, cols);
          }
          for (std::int64_t j = 0; j < begin; ++j) dst[j] = T(0);
          for (std::int64_t j = begin; j < end; ++j) dst[j] = src[j];
          for (std::int64_t j = end; j < cols; ++j) dst[j] = T(0);
        }
      }
    }
  };
};

// ---- registration, expanded from the families ----

template <typename... Maths>
struct RegisterCompare;
template <typename... Maths>
struct RegisterCompare<CompareMathList<Maths...>> {
  template <typename Math>
  static KernelRegistrar<CompareOp<Math>> one() {
    if constexpr (Math::allows_bool)
      return KernelRegistrar<CompareOp<Math>>::template for_dtypes<
          CompareK<Math>::template K, float, double, std::int32_t, std::int64_t, bool>(
          PlaceKind::Cpu, "CompareK");
    else
      return KernelRegistrar<CompareOp<Math>>::template for_dtypes<
          CompareK<Math>::template K, float, double, std::int32_t, std::int64_t>(PlaceKind::Cpu,
                                                                                 "CompareK");
  }
  std::tuple<KernelRegistrar<CompareOp<Maths>>...> regs{one<Maths>()...};
};
const RegisterCompare<CompareFamily> compare_kernels;

template <typename... Maths>
struct RegisterLogical;
template <typename... Maths>
struct RegisterLogical<CompareMathList<Maths...>> {
  std::tuple<KernelRegistrar<LogicalOp<Maths>>...> regs{KernelRegistrar<LogicalOp<Maths>>(
      PlaceKind::Cpu, DataType::Bool, &LogicalK<Maths>::run, "LogicalK")...};
};
const RegisterLogical<LogicalFamily> logical_kernels;

template <typename... Maths>
struct RegisterPredicate;
template <typename... Maths>
struct RegisterPredicate<CompareMathList<Maths...>> {
  std::tuple<KernelRegistrar<PredicateOp<Maths>>...> regs{
      KernelRegistrar<PredicateOp<Maths>>::template for_dtypes<PredicateK<Maths>::template K,
                                                               float, double>(PlaceKind::Cpu,
                                                                              "PredicateK")...};
};
const RegisterPredicate<PredicateFamily> predicate_kernels;

template <typename T> using TriuK = TriangleK<TriuMath>::K<T>;
template <typename T> using TrilK = TriangleK<TrilMath>::K<T>;

}  // namespace

KILN_REGISTER_KERNEL(LogicalNotOp, Cpu, Bool, logical_not_kernel);
// where's kernel is chosen by its first input's dtype (cond, bool) and
// dispatches on x's.
namespace {
void where_kernel(KernelContext& ctx) {
  switch (ctx.input(1).dtype()) {
    case DataType::Float32: return WhereK<float>::run(ctx);
    case DataType::Float64: return WhereK<double>::run(ctx);
    case DataType::Int32: return WhereK<std::int32_t>::run(ctx);
    case DataType::Int64: return WhereK<std::int64_t>::run(ctx);
    case DataType::Bool: return WhereK<bool>::run(ctx);
    default:
      throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' has no CPU kernel for ",
                  to_string(ctx.input(1).dtype()));
  }
}
}  // namespace
KILN_REGISTER_KERNEL(WhereOp, Cpu, Bool, where_kernel);
KILN_REGISTER_KERNELS(ClipOp, Cpu, ClipK, float, double, std::int8_t, std::int16_t, std::int32_t,
                      std::int64_t, std::uint8_t, std::uint16_t, std::uint32_t, std::uint64_t);
KILN_REGISTER_KERNELS(GradOf<ClipOp>, Cpu, ClipGradK, float, double);
KILN_REGISTER_KERNELS(MaskedFillOp, Cpu, MaskedFillK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(TriuOp, Cpu, TriuK, float, double, std::int32_t, std::int64_t, bool);
KILN_REGISTER_KERNELS(TrilOp, Cpu, TrilK, float, double, std::int32_t, std::int64_t, bool);

}  // namespace kiln::cpu
