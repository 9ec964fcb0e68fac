// Host-side pieces shared by the host halves of the CUDA kernels (reduce.cc,
// train.cc; compiled by the host compiler): scratch device memory, the
// run-time index check that gives the CPU kernels' errors, an axis swap,
// and the copy an in-place op makes when it runs out of place.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "context_stream.h"
#include "launch.h"
#include "kiln/runtime/buffer.h"

namespace kiln::cuda {

// `bytes` of device memory for work on ctx's stream; freed back to that
// stream's cache when the last reference dies, so kernels still queued may
// read it.
BufferRef scratch_buffer(const KernelContext& ctx, std::size_t bytes);

// The first element of `ids` (a device tensor, i32 or i64) outside [0, n)
// and not equal to `skip`: its position (-1 when none) and value. Waits for
// ctx's stream (one word comes back to the host).
struct BadIndex {
  std::int64_t pos = -1;
  std::int64_t id = 0;
};
BadIndex find_bad_index(const KernelContext& ctx, const Tensor& ids, std::int64_t n,
                        std::int64_t skip);

// dst = src [D0, D1, D2, D3] (es bytes per element) with axes 1 and 2
// swapped, [D0, D2, D1, D3], on ctx's stream (shape.cc's strided copy).
void swap_axes_12(const KernelContext& ctx, const void* src, void* dst, std::int64_t es,
                  const std::int64_t (&dims)[4]);

// dst [outer, hk, group, inner] = src [outer, hk, inner] repeated along
// the group axis (es bytes per element), on ctx's stream: k or v copied to
// every query head of its group (shape.cc's strided copy).
void repeat_heads(const KernelContext& ctx, const void* src, void* dst, std::int64_t es, std::int64_t outer,
                  std::int64_t hk, std::int64_t group, std::int64_t inner);

// An optimizer update's gradient: input i of ctx's op, `numel` elements of
// the parameter's dtype `param` or, for f32, bf16 or f16 (accepts_gradient
// in kiln/dialect/optimizer_ops.h). kiln::Error naming `op` and `operand`
// ("'grad' (#1)") otherwise, with the CPU kernels' messages.
GradientIn gradient_input(const KernelContext& ctx, std::uint32_t i, DataType param, std::int64_t numel,
                          std::string_view op, const std::string& operand);

// Output o, which aliases input i: in place, the input's buffer; otherwise
// output o's own buffer holding a device copy of `in`.
template <typename T>
T* updated(KernelContext& ctx, std::uint32_t o, std::uint32_t i, const Tensor& in);

template <typename T>
T* updated(KernelContext& ctx, std::uint32_t o, std::uint32_t i, const Tensor& in) {
  if (output_is_input(ctx, o, i)) return ctx.output(o).data<T>();
  const Tensor src = in;  // alive while the output is (re)allocated
  Tensor& out = ctx.alloc_output(o, src.dims(), src.dtype());
  if (src.bytes())
    check_cuda(cudaMemcpyAsync(out.raw_data(), src.raw_data(), src.bytes(),
                               cudaMemcpyDeviceToDevice, stream_of(ctx)),
               "copying an operand of an in-place op");
  return out.data<T>();
}

}  // namespace kiln::cuda
