// Fusion rewrites: several ops become one that runs as one kernel. Run
// fuse_matmul_epilogue before fuse_elementwise (else the bias add may go
// into an elementwise group).
//
// fuse_elementwise: chains of elementwise ops (the unary family and its
// gradients, add/sub/mul/div/maximum/minimum/pow, scale, a mean's gradient
// over all elements, kiln.full constants) over one shape, f32 or f64, become
// kiln.fused_elementwise ops (kiln/dialect/fused_ops.h), each placed where
// all its inputs exist and before every op that reads one of its results.
// A value stays a result when an op outside the group reads it or when it
// is in `keep` (the values a caller fetches). Groups never move an op
// across an in-place op, a side effect or an op with regions. Results are
// bit-identical (each step computes what its op's kernel computes).
#pragma once

#include <cstddef>
#include <unordered_set>

#include "kiln/ir/program.h"
#include "kiln/passes/pass.h"

namespace kiln {

// The values (by impl) a rewrite must keep as they are: fetched, fed.
using ValueSet = std::unordered_set<const void*>;

// The context's live-out values, as a ValueSet.
ValueSet live_out_set(const PassContext& ctx);

// The fusion rewrites' edits: through the context when there is one (it
// follows live-out values and tells its listener what goes), else on the
// IR directly.
void replace_all_uses(Value from, Value to, PassContext* ctx);
void erase_op(Operation* op, PassContext* ctx);

// Fuses in `block` and in every region nested in it; returns the number of
// fused ops created.
// With a PassContext, replacements and erasures go through it.
std::size_t fuse_elementwise(Block& block, const ValueSet& keep = {}, PassContext* ctx = nullptr);
inline std::size_t fuse_elementwise(Program& program, const ValueSet& keep = {}) {
  return fuse_elementwise(program.block(), keep);
}

// fuse_matmul_epilogue: kiln.matmul whose product only an add of a bias
// (the product's last dim, or one element) reads, and optionally the
// activation that first reads that sum — an op of the unary family or
// kiln.gelu — become one kiln.fused_matmul (bias and activation applied
// while the product is in cache). Where ops after the activation read the
// sum too (a training program's gelu_grad), the fused op keeps it as its
// second result and they read that. Values in `keep` are never fused away.
// Returns the number of fused ops created. For the CPU (`target`): f32,
// f64, bf16 and f16 (the fused kernels' results are the unfused ops' bits:
// 16-bit ones rounded after the add and after the activation, as the
// unfused ops round), any such activation. For another place: the dtypes
// with a kernel there, and kiln.relu and kiln.gelu the activations (on
// CUDA, cuBLASLt's epilogue; 16-bit results of one GEMM with a row bias
// rounded once instead of after each op, gelu's tanh form cuBLASLt's own,
// kernels/cuda/fused_matmul.cc).
std::size_t fuse_matmul_epilogue(Block& block, const ValueSet& keep = {}, PassContext* ctx = nullptr,
                                 const Place& target = Place::cpu());
inline std::size_t fuse_matmul_epilogue(Program& program, const ValueSet& keep = {}) {
  return fuse_matmul_epilogue(program.block(), keep);
}

// fuse_batch_norm_activation: kiln.batch_norm whose y only a kiln.relu or a
// kiln.clip to [0, 6] reads becomes one kiln.fused_batch_norm, and, in a
// training program, batch_norm_grad of that activation's gradient becomes
// its fused_batch_norm_grad (reading the activation's dout). A clip's
// gradient reads y, so a clip fuses only together with its gradient. Values
// in `keep` are never fused away. The results are the unfused ops' bits.
// Returns the number of fused ops created (forward and gradient ones).
// For the CPU (`target`): every batch norm. For another place: those whose
// dtype has kernels there for fused_batch_norm and its gradient (CUDA: f32
// and f64).
std::size_t fuse_batch_norm_activation(Block& block, const ValueSet& keep = {}, PassContext* ctx = nullptr,
                                       const Place& target = Place::cpu());

// fuse_conv_epilogue: kiln.conv2d whose output only an add of a per-channel
// bias reads (an [O] tensor reshaped to [1, O, 1, 1] or [O, 1, 1], as the
// ONNX importer and the frontend's conv2d write it), and optionally a
// kiln.relu or a kiln.clip to [0, 6] that only reads that sum, or a SiLU
// (sum · sigmoid(sum), the sigmoid read by that product alone), become one
// kiln.fused_conv2d (activation relu / relu6 / silu). Values in `keep` are
// never fused away. Returns the number of fused ops created.
std::size_t fuse_conv_epilogue(Block& block, const ValueSet& keep = {}, PassContext* ctx = nullptr);

// fuse_conv_residual: a kiln.fused_conv2d without activation or residual
// whose result only an add of another value of its type reads (a ResNet
// block's skip connection), and optionally a relu / relu6 / SiLU that only
// reads that sum (as fuse_conv_epilogue finds them), become one
// kiln.fused_conv2d with that value as its residual. Values in `keep` are
// never fused away. Returns the number of fused ops created.
std::size_t fuse_conv_residual(Block& block, const ValueSet& keep = {}, PassContext* ctx = nullptr);

// fuse_conv_input_scale: a kiln.fused_conv2d of an inference program
// (weights_trained false) whose x is kiln.mul(v, s) read by that conv alone,
// s one factor per channel of v ([N or 1, C, 1, 1], [N or 1, 1, 1, C] in
// NHWC; a squeeze-and-excitation block's gate), becomes one
// kiln.channel_scaled_conv2d(v, s, ...): the product is never written.
// f32 and f64. Values in `keep` are never fused away. Returns the number of
// fused ops created.
std::size_t fuse_conv_input_scale(Block& block, const ValueSet& keep = {}, PassContext* ctx = nullptr);

// fuse_conv_channel_mean: kiln.mean over axes 1 and 2 (kept) of an
// inference NHWC f32 kiln.fused_conv2d's result (no residual; H·W > 1,
// O > 1: a squeeze-and-excitation block's squeeze) becomes the second
// result of one kiln.fused_conv2d_mean, which sums each block of pixels as
// its activation pass writes it. The same bits as the unfused ops. Returns
// the number of fused ops created.
std::size_t fuse_conv_channel_mean(Block& block, const ValueSet& keep = {}, PassContext* ctx = nullptr);

// fuse_pointwise_depthwise: an inference NHWC f32 kiln.fused_conv2d that is
// depthwise (groups = channels in = channels out) and reads, alone, the
// result of a 1x1 one (stride 1, unpadded, ungrouped; an inverted residual
// block's expansion), neither with a residual, becomes one
// kiln.pointwise_depthwise_conv2d where the CPU computes the pair in one
// pass and that pays (cpu_fuses_pointwise_depthwise, a large expanded
// tensor): that tensor is never written. Its sums round differently from
// oneDNN's by f32's few ulps.
// Values in `keep` are never fused away. Returns the number of fused ops
// created.
std::size_t fuse_pointwise_depthwise(Block& block, const ValueSet& keep = {}, PassContext* ctx = nullptr);

// The "fuse" pass: fuse_softmax_cross_entropy
// (kiln/passes/fuse_softmax_cross_entropy.h), fuse_conv_epilogue,
// fuse_conv_residual, convert_to_channels_last (kiln/passes/channels_last.h),
// fuse_conv_input_scale, fuse_conv_channel_mean, fuse_pointwise_depthwise,
// fuse_batch_norm_activation, fuse_matmul_epilogue, then
// fuse_elementwise, keeping the context's live-out values, then
// fuse_optimizer_updates (kiln/passes/fuse_optimizer.h). For a CUDA target
// the rewrites whose ops have CUDA kernels: fold_attention_transposes
// (where the flash kernels read BLHD in place), fuse_softmax_cross_entropy,
// fuse_batch_norm_activation, fuse_matmul_epilogue (bias and relu) and
// fuse_optimizer_updates; for any other target nothing.
std::unique_ptr<Pass> create_fuse_pass();

}  // namespace kiln
