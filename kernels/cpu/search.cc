// CPU kernels of the search ops: argmax / argmin (expanded from the family's
// math structs; with dims after the axis the comparison runs across them,
// contiguous), topk (per row: the candidates gathered into a per-thread
// scratch buffer, partially sorted) with its gradient (a scatter of the
// grad to the indices), one_hot, and nonzero / unique / non_max_suppression
// (their results sized by the data). Apart from unique's tables, the run path allocates nothing
// but output buffers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu_kernel_util.h"
#include "kiln/dialect/search_ops.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cpu {
namespace {

std::int64_t axis_at_run(const KernelContext& ctx, std::int64_t axis, int rank) {
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axis ", axis,
                " is out of range for an input of rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

// outer × len × inner around `axis`.
struct Split3 {
  std::int64_t outer = 1, len = 1, inner = 1;
};
Split3 split_at(const Dims& d, std::int64_t axis) {
  Split3 s;
  for (int k = 0; k < axis; ++k) s.outer *= d[k];
  s.len = d[static_cast<int>(axis)];
  for (int k = static_cast<int>(axis) + 1; k < d.rank(); ++k) s.inner *= d[k];
  return s;
}

// ---- argmax / argmin ----

template <typename Math>
struct ArgReduceK {
  template <typename T>
  struct K {
    static void run(KernelContext& ctx) {
      using OpT = ArgReduceOp<Math>;
      const auto& a = ctx.attrs<OpT>();
      const Tensor& x = typed_input<T>(ctx, 0);
      const int r = x.rank();
      if (r == 0)
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                    "' needs an input of rank >= 1, got ", x.type_string());
      const std::int64_t axis = axis_at_run(ctx, a.axis, r);
      const Split3 s = split_at(x.dims(), axis);
      if (s.len == 0)
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                    "' cannot search an empty dim of ", x.type_string());
      Dims od = x.dims();
      if (a.keepdim) {
        od[static_cast<int>(axis)] = 1;
      } else {
        std::int64_t d[Dims::kMaxRank];
        int k = 0;
        for (int i = 0; i < r; ++i)
          if (i != axis) d[k++] = x.dims()[i];
        od = Dims(std::span<const std::int64_t>(d, k));
      }
      Tensor& out = ctx.alloc_output(0, od, DataType::Int64);
      const T* px = x.data<T>();
      std::int64_t* po = out.data<std::int64_t>();
      if (s.inner == 1) {
        for (std::int64_t o = 0; o < s.outer; ++o) {
          const T* __restrict row = px + o * s.len;
          std::int64_t best = 0;
          for (std::int64_t i = 1; i < s.len; ++i)
            if (Math::better(row[i], row[best])) best = i;
          po[o] = best;
        }
        return;
      }
      // Across the inner dims: one running best value per column.
      T* __restrict bv = scratch<T>(s.inner);
      for (std::int64_t o = 0; o < s.outer; ++o) {
        const T* block = px + o * s.len * s.inner;
        std::int64_t* __restrict bi = po + o * s.inner;
        std::memcpy(bv, block, static_cast<std::size_t>(s.inner) * sizeof(T));
        for (std::int64_t k = 0; k < s.inner; ++k) bi[k] = 0;
        for (std::int64_t i = 1; i < s.len; ++i) {
          const T* __restrict row = block + i * s.inner;
          for (std::int64_t k = 0; k < s.inner; ++k)
            if (Math::better(row[k], bv[k])) {
              bv[k] = row[k];
              bi[k] = i;
            }
        }
      }
    }
  };
};

template <typename T> using ArgMaxK = ArgReduceK<ArgMaxMath>::K<T>;
template <typename T> using ArgMinK = ArgReduceK<ArgMinMath>::K<T>;

// ---- topk ----

// a ranks before b: the larger (or smaller) value, NaN as the largest, the
// lower index on ties.
template <typename T>
struct TopKOrder {
  bool largest;
  bool operator()(const std::pair<T, std::int64_t>& a, const std::pair<T, std::int64_t>& b) const {
    if constexpr (std::is_floating_point_v<T>) {
      const bool na = std::isnan(a.first), nb = std::isnan(b.first);
      if (na || nb) {
        if (na && nb) return a.second < b.second;
        return largest ? na : nb;
      }
    }
    if (a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
    return a.second < b.second;
  }
};

template <typename T>
struct TopKK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<TopKOp>();
    const Tensor& x = typed_input<T>(ctx, 0);
    const int r = x.rank();
    if (r == 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' needs an input of rank >= 1, got ", x.type_string());
    const std::int64_t axis = axis_at_run(ctx, a.axis, r);
    const Split3 s = split_at(x.dims(), axis);
    if (a.k < 0 || a.k > s.len)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' k = ", a.k,
                  " must be in [0, ", s.len, "] for ", x.type_string());
    Dims od = x.dims();
    od[static_cast<int>(axis)] = a.k;
    Tensor& vals = ctx.alloc_output(0, od, x.dtype());
    Tensor& idxs = ctx.alloc_output(1, od, DataType::Int64);
    if (vals.numel() == 0) return;
    const T* px = x.data<T>();
    T* pv = vals.data<T>();
    std::int64_t* pi = idxs.data<std::int64_t>();
    auto* cand = scratch<std::pair<T, std::int64_t>>(s.len);
    const TopKOrder<T> order{a.largest};
    const std::int64_t k = a.k;
    for (std::int64_t o = 0; o < s.outer; ++o)
      for (std::int64_t c = 0; c < s.inner; ++c) {
        const T* src = px + o * s.len * s.inner + c;
        for (std::int64_t i = 0; i < s.len; ++i) cand[i] = {src[i * s.inner], i};
        if (a.sorted) {
          std::partial_sort(cand, cand + k, cand + s.len, order);
        } else if (k < s.len) {
          std::nth_element(cand, cand + k, cand + s.len, order);
        }
        T* dv = pv + o * k * s.inner + c;
        std::int64_t* di = pi + o * k * s.inner + c;
        for (std::int64_t j = 0; j < k; ++j) {
          dv[j * s.inner] = cand[j].first;
          di[j * s.inner] = cand[j].second;
        }
      }
  }
};

// topk_grad(x, indices, dvalues): zeros like x, dvalues written at the
// indices (distinct within a row, so no sums are needed).
template <typename T>
struct TopKGradK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<TopKOp>>();
    const Dims xd = ctx.input(0).dims();
    const Tensor& idx = typed_input<std::int64_t>(ctx, 1);
    const Tensor& dv = typed_input<T>(ctx, 2);
    const int r = xd.rank();
    const std::int64_t axis = axis_at_run(ctx, a.axis, r);
    const Split3 s = split_at(xd, axis);
    Dims want = xd;
    want[static_cast<int>(axis)] = a.k;
    if (idx.dims() != want || dv.dims() != want)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' indices ",
                  idx.type_string(), " and dvalues ", dv.type_string(), " must be [",
                  want.to_string(), "]");
    Tensor& dx = ctx.alloc_output(0, xd, dv.dtype());
    T* pdx = dx.data<T>();
    if (dx.numel()) std::memset(pdx, 0, dx.bytes());
    const std::int64_t* pi = idx.data<std::int64_t>();
    const T* pd = dv.data<T>();
    const std::int64_t k = a.k;
    for (std::int64_t o = 0; o < s.outer; ++o)
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t* ri = pi + (o * k + j) * s.inner;
        const T* rd = pd + (o * k + j) * s.inner;
        T* base = pdx + o * s.len * s.inner;
        for (std::int64_t c = 0; c < s.inner; ++c) {
          const std::int64_t i = ri[c];
          if (i < 0 || i >= s.len)
            throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' index ", i,
                        " is outside [0, ", s.len, ")");
          base[i * s.inner + c] = rd[c];
        }
      }
  }
};

// ---- one_hot: kernels by the ids' dtype ----

template <typename I>
struct OneHotK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<OneHotOp>();
    const Tensor& ids = typed_input<I>(ctx, 0);
    const std::int64_t c = a.num_classes;
    if (c < 1)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' num_classes must be >= 1, got ", c);
    std::int64_t d[Dims::kMaxRank];
    const int r = ids.rank();
    if (r + 1 > Dims::kMaxRank)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' result rank ", r + 1,
                  " exceeds the maximum rank ", Dims::kMaxRank);
    for (int i = 0; i < r; ++i) d[i] = ids.dims()[i];
    d[r] = c;
    Tensor& out = ctx.alloc_output(0, Dims(std::span<const std::int64_t>(d, r + 1)),
                                   DataType::Float32);
    float* po = out.data<float>();
    const I* pi = ids.data<I>();
    const std::int64_t n = ids.numel();
    for (std::int64_t i = 0; i < n; ++i)
      if (pi[i] < 0 || pi[i] >= c)
        throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' id ",
                    static_cast<std::int64_t>(pi[i]), " at element ", i, " is outside [0, ", c,
                    ")");
    if (out.numel()) std::memset(po, 0, out.bytes());
    for (std::int64_t i = 0; i < n; ++i) po[i * c + pi[i]] = 1.0f;
  }
};

// ---- nonzero ----

template <typename T>
struct NonzeroK {
  static void run(KernelContext& ctx) {
    const Tensor x = typed_input<T>(ctx, 0);
    const Dims& d = x.dims();
    const T* px = x.data<T>();
    const std::int64_t n = x.numel();
    std::int64_t count = 0;
    for (std::int64_t i = 0; i < n; ++i) count += px[i] != T(0);
    Tensor& out = ctx.alloc_output(0, Dims{d.rank(), count}, DataType::Int64);
    std::int64_t* po = out.data<std::int64_t>();
    std::int64_t col = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (px[i] == T(0)) continue;
      std::int64_t rest = i;
      for (int k = d.rank() - 1; k >= 0; --k) {
        po[k * count + col] = rest % d[k];
        rest /= d[k];
      }
      ++col;
    }
  }
};

// ---- unique ----

// Orders slices element by element, NaN after every number and equal to
// NaN (a strict weak order, so NaNs are one distinct value, sorted last).
template <typename T>
struct NanLast {
  static bool less(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return !std::isnan(a) && (std::isnan(b) || a < b);
    else
      return a < b;
  }
  bool operator()(const std::vector<T>& a, const std::vector<T>& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), &NanLast::less);
  }
};

// The distinct slices of x along an axis (outer × len × inner; flattened:
// outer = inner = 1), compared element by element.
template <typename T>
struct UniqueK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<UniqueOp>();
    const Tensor x = typed_input<T>(ctx, 0);
    const Dims& d = x.dims();
    const std::int64_t axis = a.flatten ? 0 : axis_at_run(ctx, a.axis, d.rank());
    Split3 s;
    if (a.flatten)
      s.len = x.numel();
    else
      s = split_at(d, axis);
    const T* px = x.data<T>();
    // slice j as a vector (outer · inner elements), for ordering and look-up
    auto slice = [&](std::int64_t j) {
      std::vector<T> v;
      v.reserve(static_cast<std::size_t>(s.outer * s.inner));
      for (std::int64_t o = 0; o < s.outer; ++o)
        for (std::int64_t i = 0; i < s.inner; ++i) v.push_back(px[(o * s.len + j) * s.inner + i]);
      return v;
    };
    std::map<std::vector<T>, std::int64_t, NanLast<T>> first;  // slice -> its first position
    std::vector<std::int64_t> order;  // first positions, in occurrence order
    std::vector<std::int64_t> of(static_cast<std::size_t>(s.len));  // each slice's first position
    for (std::int64_t j = 0; j < s.len; ++j) {
      auto [it, fresh] = first.emplace(slice(j), j);
      if (fresh) order.push_back(j);
      of[static_cast<std::size_t>(j)] = it->second;
    }
    if (a.sorted) {
      order.clear();
      for (const auto& [v, j] : first) order.push_back(j);
    }
    const auto u = static_cast<std::int64_t>(order.size());
    std::map<std::int64_t, std::int64_t> place;  // first position -> index in y
    for (std::int64_t k = 0; k < u; ++k) place[order[static_cast<std::size_t>(k)]] = k;
    std::vector<std::int64_t> yd;
    if (a.flatten)
      yd = {u};
    else {
      yd = d.to_vector();
      yd[static_cast<std::size_t>(axis)] = u;
    }
    Tensor& y =
        ctx.alloc_output(0, Dims(std::span<const std::int64_t>(yd.data(), yd.size())), x.dtype());
    T* py = y.data<T>();
    for (std::int64_t o = 0; o < s.outer; ++o)
      for (std::int64_t k = 0; k < u; ++k)
        for (std::int64_t i = 0; i < s.inner; ++i)
          py[(o * u + k) * s.inner + i] =
              px[(o * s.len + order[static_cast<std::size_t>(k)]) * s.inner + i];
    std::int64_t* pidx = ctx.alloc_output(1, Dims{u}, DataType::Int64).data<std::int64_t>();
    for (std::int64_t k = 0; k < u; ++k) pidx[k] = order[static_cast<std::size_t>(k)];
    std::int64_t* pinv = ctx.alloc_output(2, Dims{s.len}, DataType::Int64).data<std::int64_t>();
    std::int64_t* pcnt = ctx.alloc_output(3, Dims{u}, DataType::Int64).data<std::int64_t>();
    std::fill(pcnt, pcnt + u, 0);
    for (std::int64_t j = 0; j < s.len; ++j) {
      pinv[j] = place[of[static_cast<std::size_t>(j)]];
      ++pcnt[pinv[j]];
    }
  }
};

// ---- non_max_suppression ----

template <typename T>
struct NonMaxSuppressionK {
  struct Box {
    double y0, x0, y1, x1;  // min and max corners
  };
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<NonMaxSuppressionOp>();
    const std::string_view op = ctx.op()->name();
    const Tensor boxes = typed_input<T>(ctx, 0), scores = typed_input<T>(ctx, 1);
    const Dims& bd = boxes.dims();
    const Dims& sd = scores.dims();
    if (bd.rank() != 3 || bd[2] != 4 || sd.rank() != 3 || sd[0] != bd[0] || sd[2] != bd[1])
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' boxes [", bd.to_string(),
                  "] and scores [", sd.to_string(),
                  "] must be [batches, boxes, 4] and [batches, classes, boxes]");
    const auto max_per_class = static_cast<std::int64_t>(host_scalar(ctx, 2, "max_per_class"));
    const double iou_threshold = host_scalar(ctx, 3, "iou_threshold");
    const double score_threshold = host_scalar(ctx, 4, "score_threshold");
    const std::int64_t batches = bd[0], n = bd[1], classes = sd[1];
    const T* pb = boxes.data<T>();
    const T* ps = scores.data<T>();
    std::vector<std::int64_t> rows;  // (batch, class, box) triples
    std::vector<Box> box(static_cast<std::size_t>(n));
    std::vector<std::int64_t> order, kept;
    for (std::int64_t b = 0; b < batches; ++b) {
      for (std::int64_t i = 0; i < n; ++i) {
        const T* p = pb + (b * n + i) * 4;
        Box& q = box[static_cast<std::size_t>(i)];
        if (a.center_point_box) {
          q = {p[1] - p[3] / 2.0, p[0] - p[2] / 2.0, p[1] + p[3] / 2.0, p[0] + p[2] / 2.0};
        } else {
          q = {std::min<double>(p[0], p[2]), std::min<double>(p[1], p[3]),
               std::max<double>(p[0], p[2]), std::max<double>(p[1], p[3])};
        }
      }
      for (std::int64_t c = 0; c < classes; ++c) {
        const T* s = ps + (b * classes + c) * n;
        order.clear();
        for (std::int64_t i = 0; i < n; ++i)
          if (static_cast<double>(s[i]) > score_threshold) order.push_back(i);
        std::stable_sort(order.begin(), order.end(),
                         [&](std::int64_t i, std::int64_t j) { return s[i] > s[j]; });
        kept.clear();
        for (std::int64_t i : order) {
          if (static_cast<std::int64_t>(kept.size()) >= max_per_class) break;
          bool suppressed = false;
          for (std::int64_t k : kept)
            if (iou(box[static_cast<std::size_t>(i)], box[static_cast<std::size_t>(k)]) >
                iou_threshold) {
              suppressed = true;
              break;
            }
          if (suppressed) continue;
          kept.push_back(i);
          rows.insert(rows.end(), {b, c, i});
        }
      }
    }
    const auto count = static_cast<std::int64_t>(rows.size() / 3);
    std::int64_t* po = ctx.alloc_output(0, Dims{count, 3}, DataType::Int64).data<std::int64_t>();
    std::copy(rows.begin(), rows.end(), po);
  }
  // Intersection over union; 0 for boxes of no area.
  static double iou(const Box& p, const Box& q) {
    const double ih = std::min(p.y1, q.y1) - std::max(p.y0, q.y0),
                 iw = std::min(p.x1, q.x1) - std::max(p.x0, q.x0);
    if (ih <= 0 || iw <= 0) return 0;
    const double ap = (p.y1 - p.y0) * (p.x1 - p.x0), aq = (q.y1 - q.y0) * (q.x1 - q.x0);
    if (ap <= 0 || aq <= 0) return 0;
    const double inter = ih * iw, uni = ap + aq - inter;
    return uni <= 0 ? 0 : inter / uni;
  }
};

}  // namespace

KILN_REGISTER_KERNELS(NonMaxSuppressionOp, Cpu, NonMaxSuppressionK, float, double);
KILN_REGISTER_KERNELS(NonzeroOp, Cpu, NonzeroK, float, double, std::int32_t, std::int64_t, bool);
KILN_REGISTER_KERNELS(UniqueOp, Cpu, UniqueK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(ArgMaxOp, Cpu, ArgMaxK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(ArgMinOp, Cpu, ArgMinK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(TopKOp, Cpu, TopKK, float, double, std::int32_t, std::int64_t);
KILN_REGISTER_KERNELS(GradOf<TopKOp>, Cpu, TopKGradK, float, double);
KILN_REGISTER_KERNELS(OneHotOp, Cpu, OneHotK, std::int32_t, std::int64_t);

}  // namespace kiln::cpu
