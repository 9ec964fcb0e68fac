// What kiln's CPU kernels take from oneDNN (Debian's libdnnl-dev), behind
// functions that say "not done" instead of failing: a build without oneDNN
// compiles onednn_none.cc, whose functions all return false, and the
// kernels use their own code. Primitives run on OpenMP threads, as many as
// intra_op_threads() (intra_op.h): BLAS's count, which the executor's thread
// plan sets, within the calling thread's limit (1 on graph workers).
#pragma once

#include <cstdint>

#include "kiln/dialect/conv_ops.h"

namespace kiln::cpu::onednn {

// Whether kiln was built with oneDNN.
bool available();

// c = alpha · op(a) · op(b) + beta · c, row-major, f32, on the calling
// thread alone (cpu::gemm splits it across threads); false when not done.
bool sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc);

// What follows a convolution in the same pass: nothing, max(·, 0),
// min(max(·, 0), 6), or SiLU (x·sigmoid(x)).
enum class ConvActivation { None, Relu, Relu6, Silu };

// Which contents a tensor holds: its buffer's Buffer::id() and writes()
// and its byte offset; what the caches of data derived from a tensor are
// keyed by (reordered weights, kept blocked results: ConvLayout,
// name_result). buffer 0: unknown, never found in a cache.
struct ContentsIdentity {
  std::uint64_t buffer = 0, writes = 0, offset = 0;
  bool known_as(const ContentsIdentity& o) const {
    return buffer != 0 && buffer == o.buffer && writes == o.writes && offset == o.offset;
  }
};

// How conv2d_forward lays out and writes its data. channels_last: x
// [n, h, w, c] and out [n, ho, wo, o] as they are (no reorders: oneDNN's
// NHWC convolutions run as fast as its blocked ones); else NCHW, blocked
// layouts inside. allow_winograd: a 3x3 NHWC f32 convolution may run as
// Winograd (worth it only while w stays the same: its transform is slow).
// residual: laid out as out (it may be out), added before the activation
// (oneDNN's sum post-op). x_contents, residual_contents: theirs, where the
// caller knows them (taken before its kernel wrote anything): where they
// are a result this thread's last convolutions left in a blocked layout
// (name_result), the primitive reads that copy instead of reordering them
// into it again.
struct ConvLayout {
  bool channels_last = false, allow_winograd = true;
  const void* residual = nullptr;
  ContentsIdentity x_contents = {}, residual_contents = {};
};

// out [n, o, ho, wo] = conv2d(x [n, c, h, w], w [o, c/groups, kh, kw]) + bias
// (when given), through `act`, laid out as `layout` says. w's blocked copy
// is kept while `weights` stays the same (a parameter's between optimizer
// steps, an inference model's for ever). False when oneDNN has no
// primitive for g or its run fails (the caller then computes all of out
// itself; a residual in out may be gone), and for an f32 Silu on NCHW.
// oneDNN 2.6's swish post-op is slow (blocked and depthwise convolutions
// 2-3x, EfficientNet's dense NHWC ones 1.25x): kiln's f32 convolution
// kernels ask for None and run their own SiLU over out (the bf16 ones
// still use it).
bool conv2d_forward(const float* x, const float* w, const float* bias, float* out, const Conv2dGeometry& g,
                    ConvActivation act, const ContentsIdentity& weights, const ConvLayout& layout = {});

// Names the result the last conv2d_forward on this thread wrote (out's
// contents now): call it right after that call returned true, before
// anything else writes out. Where its primitive computed out in a blocked
// layout and reordered it into kiln's, that blocked copy is kept under
// this name (the last two such results), for the next convolution whose
// x_contents are these: a chain of Winograd convolutions reorders each
// result once instead of twice. A write through a Tensor's non-const
// accessor changes the name, so a changed out is never mistaken for the
// copy; memory written another way must not be named.
void name_result(const ContentsIdentity& out_contents);

// Whether oneDNN computes bf16 convolutions and products natively on this
// CPU (its AVX512-BF16 or AMX kernels: about twice its f32 speed, 2-3x for
// products); elsewhere it would emulate them, slower than f32, and the
// bf16 overloads below and bf16_gemm return false / nothing.
bool native_bf16();

// c = op(a) · op(b) of row-major bf16 matrices (bit patterns), each sum
// taken in f32 and rounded once into c, on the calling thread alone (one
// primitive per shape and thread, kept); false where !native_bf16() or
// oneDNN has only its reference kernel for the shape (c then unspecified).
bool bf16_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a,
               std::int64_t lda, const std::uint16_t* b, std::int64_t ldb, std::uint16_t* c, std::int64_t ldc);

// conv2d_forward of bf16 x, w, bias and out (bit patterns), accumulated in
// f32 with bias and activation applied in f32, out rounded once; false
// where !native_bf16().
bool conv2d_forward(const std::uint16_t* x, const std::uint16_t* w, const std::uint16_t* bias,
                    std::uint16_t* out, const Conv2dGeometry& g, ConvActivation act,
                    const ContentsIdentity& weights, const ConvLayout& layout = {});

// Which of conv2d_backward's gradients it wrote.
struct ConvGrads {
  bool dx = false, dw = false;
};

// The gradients of conv2d(x, w) from dout [n, o, ho, wo], NCHW in and out
// (blocked layouts inside), or with channels_last x, dout and dx NHWC as
// they are; a null dx or dw is not wanted.
//   dx [n, c, h, w]: one primitive on the intra-op team.
//   dw [o, c/groups, kh, kw]: the sum over four fixed slices of the batch
//   of each slice's weight gradient, in slice order. A primitive on a team
//   splits this sum over the batch by its thread count, so each slice runs
//   a one-thread primitive and the team shares the slices: the same bits at
//   any thread count. The slices are added in the primitive's own layout
//   and reordered once, and read dout where the data gradient reordered it.
// A gradient not written (oneDNN has no primitive for g, or its run
// failed) is the caller's to compute.
ConvGrads conv2d_backward(const float* x, const float* w, const float* dout, float* dx, float* dw,
                          const Conv2dGeometry& g, bool channels_last = false);

// conv2d_backward of bf16 operands: dx rounded once from oneDNN's f32
// accumulation, dw summed over the slices in f32 and rounded once; nothing
// where !native_bf16().
ConvGrads conv2d_backward(const std::uint16_t* x, const std::uint16_t* w, const std::uint16_t* dout,
                          std::uint16_t* dx, std::uint16_t* dw, const Conv2dGeometry& g,
                          bool channels_last = false);

}  // namespace kiln::cpu::onednn
