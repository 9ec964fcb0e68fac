// The data_format attribute of the ops that take NHWC besides NCHW
// (kiln.conv2d, kiln.fused_conv2d, kiln.max_pool2d, kiln.batch_norm and
// their gradients): its check and the dims between the two layouts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/support/error.h"

namespace kiln::data_format {

// Whether `format` is NHWC; kiln::Error naming `op` unless it is NCHW or
// NHWC (or empty, as attributes built without it: NCHW).
inline bool channels_last(std::string_view op, const std::string& format) {
  if (!format.empty() && format != "NCHW" && format != "NHWC")
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' data_format '", format,
                "' is not NCHW or NHWC");
  return format == "NHWC";
}

// kiln::Error (Unimplemented) naming `op` when `format` is NHWC: for the
// kernels (CUDA's) that run NCHW only.
inline void require_nchw_kernel(std::string_view op, const std::string& format, std::string_view device) {
  if (channels_last(op, format))
    throw_error(ErrorKind::Unimplemented, "op '", op, "' runs NHWC (data_format ", format, ") on the CPU only, not on ",
                device);
}

// [a, b, c, d] -> [a, d, b, c] (NHWC dims as NCHW) and back; other ranks as they are.
inline std::vector<std::int64_t> nhwc_to_nchw(std::vector<std::int64_t> d) {
  if (d.size() == 4) d = {d[0], d[3], d[1], d[2]};
  return d;
}
inline std::vector<std::int64_t> nchw_to_nhwc(std::vector<std::int64_t> d) {
  if (d.size() == 4) d = {d[0], d[2], d[3], d[1]};
  return d;
}

}  // namespace kiln::data_format
