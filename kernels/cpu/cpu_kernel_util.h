// Shared pieces of kiln's CPU kernels (private to kernels/cpu): typed access
// to inputs with errors
// that name the op, and the broadcast plan binary elementwise kernels run:
// numpy broadcasting with size-1 dims dropped and adjacent dims merged, so
// the innermost loop is contiguous (or a scalar) and vectorizes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "intra_op.h"
#include "kiln/kernel/broadcast.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cpu {

// typed_input and output_is_input: kiln/kernel/kernel_context.h.
using kiln::output_is_input;
using kiln::typed_input;

// Input i, of dtype d (typed_input for a dtype with no C++ type, bf16 and
// f16); kiln::Error naming the op otherwise.
inline const Tensor& input_of(const KernelContext& ctx, std::uint32_t i, DataType d) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != d) [[unlikely]]
    throw_input_dtype(ctx, i, d);
  return t;
}

// Input i's one value (i32, i64, f32 or f64) read on the host, as a
// double; kiln::Error naming the op and `what` unless it holds exactly one
// of those.
inline double host_scalar(const KernelContext& ctx, std::uint32_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what, " (input #", i,
                ") must hold one value, got [", t.dims().to_string(), "]");
  switch (t.dtype()) {
    case DataType::Int32: return t.data<std::int32_t>()[0];
    case DataType::Int64: return static_cast<double>(t.data<std::int64_t>()[0]);
    case DataType::Float32: return t.data<float>()[0];
    case DataType::Float64: return t.data<double>()[0];
    default:
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what, " has dtype ",
                  to_string(t.dtype()));
  }
}

// Both inputs must have one shape (the activation grads' operands).
// Output o, which aliases input i: in place, the input's buffer; otherwise
// output o's own buffer holding a copy of input i.
template <typename T>
T* updated(KernelContext& ctx, std::uint32_t o, std::uint32_t i, const Tensor& in) {
  if (output_is_input(ctx, o, i)) return ctx.output(o).data<T>();
  Tensor& out = ctx.alloc_output(o, in.dims(), in.dtype());
  if (in.bytes()) std::memcpy(out.raw_data(), in.raw_data(), in.bytes());
  return out.data<T>();
}

inline void require_same_dims(const KernelContext& ctx, const Tensor& a, const Tensor& b, int ia, int ib) {
  if (a.dims() != b.dims())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' inputs #", ia, " [",
                a.dims().to_string(), "] and #", ib, " [", b.dims().to_string(),
                "] must have one shape");
}

// A per-thread buffer of n elements, grown once and then reused: the run
// path allocates nothing but tensor buffers. Each Slot is a buffer of its
// own, for a caller whose callees take slot 0 of the same T.
template <typename T, int Slot = 0>
T* scratch(std::int64_t n) {
  thread_local std::vector<T> buf;
  if (static_cast<std::int64_t>(buf.size()) < n) buf.resize(static_cast<std::size_t>(n));
  return buf.data();
}

// ---- broadcasting ----

// broadcast_dims, BroadcastPlan and make_broadcast_plan: kiln/kernel/broadcast.h.
using kiln::broadcast_dims;
using kiln::BroadcastPlan;
using kiln::make_broadcast_plan;

// Rows [r0, r1) of out[i] = F::apply(x[·], y[·]) along `p` (a row: the
// innermost dim); the innermost loop is specialised for (contiguous,
// contiguous), (contiguous, scalar) and (scalar, contiguous).
template <typename F, typename T, typename U>
void run_broadcast_rows(const BroadcastPlan& p, const T* x, const T* y, U* out, std::int64_t r0,
                        std::int64_t r1) {
  const int last = p.rank - 1;
  const std::int64_t n = p.dims[last], ix = p.sx[last], iy = p.sy[last];
  std::int64_t idx[Dims::kMaxRank] = {};
  for (std::int64_t d = last - 1, r = r0; d >= 0; --d) {  // the odometer at row r0
    idx[d] = r % p.dims[d];
    r /= p.dims[d];
    x += idx[d] * p.sx[d];
    y += idx[d] * p.sy[d];
  }
  for (std::int64_t o = r0; o < r1; ++o) {
    U* __restrict po = out + o * n;
    if (ix == 1 && iy == 1) {
      const T* __restrict a = x;
      const T* __restrict b = y;
      for (std::int64_t i = 0; i < n; ++i) po[i] = F::apply(a[i], b[i]);
    } else if (ix == 1) {
      const T* __restrict a = x;
      const T b = *y;
      for (std::int64_t i = 0; i < n; ++i) po[i] = F::apply(a[i], b);
    } else if (iy == 1) {
      const T a = *x;
      const T* __restrict b = y;
      for (std::int64_t i = 0; i < n; ++i) po[i] = F::apply(a, b[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) po[i] = F::apply(x[i * ix], y[i * iy]);
    }
    for (int d = last - 1; d >= 0; --d) {  // odometer over the outer dims
      if (++idx[d] < p.dims[d]) {
        x += p.sx[d];
        y += p.sy[d];
        break;
      }
      x -= p.sx[d] * (p.dims[d] - 1);
      y -= p.sy[d] * (p.dims[d] - 1);
      idx[d] = 0;
    }
  }
}

// out[i] = F::apply(x[·], y[·]) along `p`, rows split across the kernel's
// threads (intra_op.h).
template <typename F, typename T, typename U>
void run_broadcast(const BroadcastPlan& p, const T* x, const T* y, U* out) {
  if (p.rank == 0) {
    out[0] = F::apply(x[0], y[0]);
    return;
  }
  const std::int64_t n = p.dims[p.rank - 1];
  std::int64_t outer = 1;
  for (int d = 0; d < p.rank - 1; ++d) outer *= p.dims[d];
  parallel_for(outer, items_per_range(n * std::int64_t(2 * sizeof(T) + sizeof(U))),
               [&](std::int64_t r0, std::int64_t r1) {
                 run_broadcast_rows<F>(p, x, y, out, r0, r1);
               });
}

// A family member's Math::forward(a, b) as the F::apply of run_broadcast /
// run_binary.
template <typename Math>
struct MathForward {
  template <typename T> static auto apply(T a, T b) { return Math::forward(a, b); }
};

// Output 0 of `ctx` = F::apply(x, y) elementwise with numpy broadcasting,
// as `out_dtype` (element type U): same-shape and scalar operands take flat
// loops, everything else the collapsed broadcast plan. Reads x and y before
// allocating the output, which may reuse a buffer only they held.
template <typename F, typename T, typename U>
void run_binary(KernelContext& ctx, const Tensor& x, const Tensor& y, DataType out_dtype) {
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  constexpr std::int64_t bytes = 2 * sizeof(T) + sizeof(U);
  if (x.dims() == y.dims()) {
    Tensor& out = ctx.alloc_output(0, x.dims(), out_dtype);
    U* __restrict po = out.data<U>();
    parallel_for(x.numel(), items_per_range(bytes), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) po[i] = F::apply(px[i], py[i]);
    });
    return;
  }
  const Dims od = broadcast_dims(ctx.op()->name(), x.dims(), y.dims());
  Tensor& out = ctx.alloc_output(0, od, out_dtype);
  U* __restrict po = out.data<U>();
  const std::int64_t n = od.numel();
  if (n == 0) return;
  if (y.numel() == 1 && x.numel() == n) {
    const T b = py[0];
    parallel_for(n, items_per_range(bytes), [&](std::int64_t s, std::int64_t e) {
      for (std::int64_t i = s; i < e; ++i) po[i] = F::apply(px[i], b);
    });
  } else if (x.numel() == 1 && y.numel() == n) {
    const T a = px[0];
    parallel_for(n, items_per_range(bytes), [&](std::int64_t s, std::int64_t e) {
      for (std::int64_t i = s; i < e; ++i) po[i] = F::apply(a, py[i]);
    });
  } else {
    run_broadcast<F>(make_broadcast_plan(x.dims(), y.dims(), od), px, py, po);
  }
}

}  // namespace kiln::cpu
