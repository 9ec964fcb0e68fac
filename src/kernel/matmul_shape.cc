// kiln.matmul's shapes for every backend (kiln/kernel/matmul_shape.h).
#include "kiln/kernel/matmul_shape.h"

#include <algorithm>
#include <span>
#include <utility>

#include "kiln/support/error.h"

namespace kiln {

MatmulShape matmul_shape(std::string_view op, const Dims& xs, const Dims& ys, bool tx, bool ty) {
  auto fail = [&](const char* why) {
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", why, ": x is [", xs.to_string(),
                "], y is [", ys.to_string(), "], transpose_x = ", tx, ", transpose_y = ", ty);
  };
  const int xr = xs.rank(), yr = ys.rank();
  if (xr < 2 || yr < 2) fail("needs operands of rank >= 2");
  MatmulShape s;
  s.m = xs[xr - 2];
  s.k = xs[xr - 1];
  if (tx) std::swap(s.m, s.k);
  std::int64_t ky = ys[yr - 2];
  s.n = ys[yr - 1];
  if (ty) std::swap(ky, s.n);
  if (s.k != ky) fail("has contraction dims that differ");
  // Batch dims right-aligned; per output batch dim, the step of x's and y's
  // matrix index (0 where that side broadcasts).
  const int xb = xr - 2, yb = yr - 2, br = std::max(xb, yb);
  s.batch_rank = br;
  for (int i = br - 1; i >= 0; --i) {
    const int ix = i - (br - xb), iy = i - (br - yb);
    const std::int64_t dx = ix >= 0 ? xs[ix] : 1, dy = iy >= 0 ? ys[iy] : 1;
    if (dx != dy && dx != 1 && dy != 1) fail("has batch dims that do not broadcast");
    s.out_batch[i] = dx == 1 ? dy : dx;
    s.x_step[i] = dx == 1 ? 0 : s.x_count;
    s.y_step[i] = dy == 1 ? 0 : s.y_count;
    s.x_count *= dx;
    s.y_count *= dy;
  }
  std::int64_t shape[Dims::kMaxRank + 2];
  for (int i = 0; i < br; ++i) {
    shape[i] = s.out_batch[i];
    s.batch *= s.out_batch[i];
  }
  shape[br] = s.m;
  shape[br + 1] = s.n;
  s.out_dims = Dims(std::span<const std::int64_t>(shape, static_cast<std::size_t>(br + 2)));
  return s;
}

void throw_matmul_bias(std::string_view op, DataType bias, std::int64_t bias_elements, DataType product,
                       std::int64_t n) {
  if (bias != product)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' bias is ", to_string(bias), ", the product ",
                to_string(product));
  throw_error(ErrorKind::InvalidArgument, "op '", op, "' bias has ", bias_elements,
              " elements: it must have the product's last dim (", n, ") or one");
}

}  // namespace kiln
