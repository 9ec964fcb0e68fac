// Numpy broadcasting shared by the backends' kernels (kiln/kernel/broadcast.h).
#include "kiln/kernel/broadcast.h"

#include <algorithm>

#include "kiln/support/error.h"

namespace kiln {

Dims broadcast_dims(std::string_view op, const Dims& x, const Dims& y) {
  const int n = std::max(x.rank(), y.rank());
  Dims out = x.rank() >= y.rank() ? x : y;
  for (int i = 0; i < n; ++i) {
    std::int64_t dx = i < n - x.rank() ? 1 : x[i - (n - x.rank())];
    std::int64_t dy = i < n - y.rank() ? 1 : y[i - (n - y.rank())];
    if (dx == dy || dy == 1) out[i] = dx;
    else if (dx == 1) out[i] = dy;
    else
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' cannot broadcast shapes [",
                  x.to_string(), "] and [", y.to_string(), "]");
  }
  return out;
}

BroadcastPlan make_broadcast_plan(const Dims& x, const Dims& y, const Dims& out) {
  const int n = out.rank();
  // Contiguous strides of x and y aligned to out's dims, 0 where broadcast.
  std::int64_t sx[Dims::kMaxRank], sy[Dims::kMaxRank];
  std::int64_t ax = 1, ay = 1;
  for (int i = n - 1; i >= 0; --i) {
    int ix = i - (n - x.rank()), iy = i - (n - y.rank());
    std::int64_t dx = ix >= 0 ? x[ix] : 1, dy = iy >= 0 ? y[iy] : 1;
    sx[i] = (dx == 1) ? 0 : ax;
    sy[i] = (dy == 1) ? 0 : ay;
    ax *= dx;
    ay *= dy;
  }
  BroadcastPlan p;
  for (int i = 0; i < n; ++i) {
    if (out[i] == 1) continue;  // size-1 dims do not move anything
    if (p.rank > 0) {
      int k = p.rank - 1;
      // Merge into the previous kept dim when both operands walk on through.
      if (p.sx[k] == sx[i] * out[i] && p.sy[k] == sy[i] * out[i]) {
        p.dims[k] *= out[i];
        p.sx[k] = sx[i];
        p.sy[k] = sy[i];
        continue;
      }
    }
    p.dims[p.rank] = out[i];
    p.sx[p.rank] = sx[i];
    p.sy[p.rank] = sy[i];
    ++p.rank;
  }
  return p;
}

}  // namespace kiln
