// The device halves of kiln's CUDA kernels: launchers compiled by nvcc
// (the .cu files) that take raw device pointers and sizes, called by the
// host halves (the .cc files and elementwise_kernels.h), which read the
// op's attributes, check shapes with the CPU kernels' messages and allocate
// outputs. No .cu file reads a KernelContext, a Tensor or the IR, so a
// change to those headers recompiles none of them. Each launcher enqueues its work on `s` and returns;
// explicit instantiations for f32 / f64 (and the dtypes noted).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kiln/dialect/pool_window.h"
#include "kiln/kernel/broadcast.h"
#include "kiln/kernel/loss_scaling_math.h"
#include "kiln/support/dims.h"
#include "kiln/support/data_type.h"

namespace kiln::cuda {

// ---- elementwise (elementwise.cu) ----

// out = Math::forward(x, y) (out's element type U: T, or bool for the
// comparison and logical families), over n output elements: x and y of one
// shape when `plan` is null, else broadcast through *plan. The members and
// dtypes register.cc registers.
template <typename Math, typename T, typename U>
void launch_binary(const T* x, const T* y, U* out, std::int64_t n, const BroadcastPlan* plan,
                   cudaStream_t s);
// out = Math::forward(x), dx = Math::backward(x, d): the unary family, and
// the math structs of ops with attributes (gelu: GeluErfMath,
// GeluTanhMath). T: f32, f64 (forward: i32, i64 unless floating-only).
template <typename Math, typename T>
void launch_unary_forward(const T* x, T* out, std::int64_t n, cudaStream_t s);
// x = Math::forward(x) (the in-place twins: relu_, sqrt_, …).
template <typename Math, typename T>
void launch_unary_in_place(T* x, std::int64_t n, cudaStream_t s);
template <typename Math, typename T>
void launch_unary_backward(const T* x, const T* d, T* out, std::int64_t n, cudaStream_t s);
// out = Math::forward(x) as bool (the predicate family: isnan, isfinite).
template <typename Math, typename T>
void launch_predicate(const T* x, bool* out, std::int64_t n, cudaStream_t s);
void launch_logical_not(const bool* x, bool* out, std::int64_t n, cudaStream_t s);
// The same over bf16 / f16 bits (dt), computed in f32 and rounded once
// (elementwise_half.cu); out may be x (the in-place twins).
template <typename Math>
void launch_binary_half(DataType dt, const void* x, const void* y, void* out, std::int64_t n,
                        const BroadcastPlan* plan, cudaStream_t s);
template <typename Math>
void launch_unary_forward_half(DataType dt, const void* x, void* out, std::int64_t n, cudaStream_t s);
template <typename Math>
void launch_unary_backward_half(DataType dt, const void* x, const void* d, void* out, std::int64_t n,
                                cudaStream_t s);
// out = Σ in[0..k) (k >= 1; `in` is a host array of device pointers, read
// before return). T: f32, f64, i32, i64.
template <typename T>
void launch_add_n(const T* const* in, int k, T* out, std::int64_t n, cudaStream_t s);

// ---- reductions (reduce.cu) ----

enum class ReduceKind { Sum, Mean, Max, Prod };

// A reduction's input as two index spaces: `outputs` kept positions (the
// output's elements, row-major over kept_dims) times `count` reduced ones
// (row-major over red_dims), each dim with its element stride in the input.
struct ReduceWalk {
  int kept_rank = 0, red_rank = 0;
  std::int64_t kept_dims[Dims::kMaxRank] = {}, kept_strides[Dims::kMaxRank] = {};
  std::int64_t red_dims[Dims::kMaxRank] = {}, red_strides[Dims::kMaxRank] = {};
  std::int64_t outputs = 1, count = 1;
};
// The other way round, for the gradients: x's flat index, row-major over
// dims, to its output element (out_strides 0 on reduced dims).
struct ReduceMap {
  int rank = 0;
  std::int64_t dims[Dims::kMaxRank] = {}, out_strides[Dims::kMaxRank] = {};
};

// out[o] = ⊕ of x over walk; Mean divides by walk.count. T: f32, f64, i32, i64.
template <typename T>
void launch_reduce(ReduceKind kind, const T* x, T* out, const ReduceWalk& walk, cudaStream_t s);
// Whether `walk` sums the rows of a row-major [count, outputs] block (a
// bias gradient, a mean over the batch) with enough rows that
// launch_column_sum beats launch_reduce's thread-per-output walk.
bool is_column_walk(const ReduceWalk& walk);
// out[j] = Σ_r x[r, j] (÷ rows when `mean`), coalesced, in chunks of rows
// whose partials wait in `scratch` (column_sum_scratch(rows, cols) bytes).
template <typename T>
std::size_t column_sum_scratch(std::int64_t rows, std::int64_t cols);
template <typename T>
void launch_column_sum(const T* x, T* out, std::int64_t rows, std::int64_t cols, bool mean, void* scratch,
                       cudaStream_t s);
// The same sum over bf16 / f16 bits (dt), read widened, summed in f64 and
// rounded through f32 (half_via_f32's bits); scratch as for f32.
void launch_column_sum_half(DataType dt, const void* x, void* out, std::int64_t rows, std::int64_t cols,
                            void* scratch, cudaStream_t s);
// dx of sum / mean / max / prod (out: max's result, else null); scratch:
// walk.outputs · 16 bytes of device memory (max's tie counts, prod's
// non-zero products and zero counts). T: f32, f64.
template <typename T>
void launch_reduce_grad(ReduceKind kind, const T* x, const T* out, const T* dout, T* dx,
                        std::int64_t n, const ReduceWalk& walk, const ReduceMap& map, void* scratch,
                        cudaStream_t s);

// ---- softmax, cross-entropy (reduce.cu) ----

// x seen as [outer, c, inner], along c: softmax or (log) log_softmax.
template <typename T>
void launch_softmax(bool log, const T* x, T* y, std::int64_t outer, std::int64_t c,
                    std::int64_t inner, cudaStream_t s);
// softmax_grad (out · (dout - Σ dout · out)) or log_softmax_grad (dout -
// exp(out) · Σ dout), same view.
template <typename T>
void launch_softmax_grad(bool log, const T* y, const T* dy, T* dx, std::int64_t outer,
                         std::int64_t c, std::int64_t inner, cudaStream_t s);
// softmax_with_cross_entropy over n rows of c classes (labels already
// checked). L: i32, i64.
template <typename T, typename L>
void launch_cross_entropy(const T* x, const L* label, T* sm, T* loss, std::int64_t n,
                          std::int64_t c, std::int64_t ignore, cudaStream_t s);
template <typename T, typename L>
void launch_cross_entropy_grad(const T* sm, const L* label, const T* dloss, T* dx, std::int64_t n,
                               std::int64_t c, std::int64_t ignore, cudaStream_t s);
// kiln.cross_entropy: each row's loss and lse in one read of the row (an
// online max and sum per lane); its gradient dloss · (exp(x - lse) - onehot).
template <typename T, typename L>
void launch_cross_entropy_lse(const T* x, const L* label, T* loss, T* lse, std::int64_t n,
                              std::int64_t c, std::int64_t ignore, cudaStream_t s);
template <typename T, typename L>
void launch_cross_entropy_lse_grad(const T* x, const T* lse, const L* label, const T* dloss, T* dx,
                                   std::int64_t n, std::int64_t c, std::int64_t ignore,
                                   cudaStream_t s);
// The same over 16-bit logits (dt bf16 / f16; x and dx their bits): loss,
// lse and dloss f32, the gradient rounded once to dt.
template <typename L>
void launch_cross_entropy_lse_half(DataType dt, const void* x, const L* label, float* loss, float* lse,
                                   std::int64_t n, std::int64_t c, std::int64_t ignore, cudaStream_t s);
template <typename L>
void launch_cross_entropy_lse_grad_half(DataType dt, const void* x, const float* lse, const L* label,
                                        const float* dloss, void* dx, std::int64_t n, std::int64_t c,
                                        std::int64_t ignore, cudaStream_t s);

// ---- scaled-dot-product attention (attention.cu), rows of all heads' scores ----

// An attention op's key_lengths operand: batch b's rows see only its first
// key_lengths[b] keys (int64 when wide, else int32; device memory; clamped
// to [0, Lk]). Null lengths: every row sees all Lk (before a causal mask).
struct KeyLengths {
  const void* lengths = nullptr;
  bool wide = false;
};
// An attention op's mask operand (device memory; null data: none): bool
// (false: the score is -inf) or the scores' dtype (added to the score);
// element (b, h, i, j) at b·sb + h·sh + i·si + j·sj (0 along a dim it
// broadcasts over).
struct ScoreMaskRef {
  const void* data = nullptr;
  bool boolean = false;
  std::int64_t sb = 0, sh = 0, si = 0, sj = 0;
};
// An attention op's dropout (kiln/kernel/attention_dropout.h): the rule's
// threshold, row_words and scale (attention_dropout(p, 0, Lk)'s) and the
// address of its dropout_key (device memory, u64 [1]), which each kernel
// reads into the rule (key_lengths.cuh: dropout_rule). Null key: none.
struct DropoutRef {
  const std::uint64_t* key = nullptr;
  std::uint32_t threshold = 0;
  std::int64_t row_words = 0;
  double scale = 1;
};
// Which keys the rows of all heads' [B·H·Lq, Lk] scores see: query row
// index row % lq, batch row / lq / h; the dropout's row is `row` itself.
struct AttentionRows {
  std::int64_t rows = 0, lq = 0, lk = 0, h = 1;
  bool causal = false;
  KeyLengths keys;
  ScoreMaskRef mask;
  DropoutRef dropout;
};
// Each row of s ([rows, lk]) → its softmax over the keys it sees (0 beyond
// them), then dropped out (kept ones scaled, dropped ones 0) under
// r.dropout; lse[row] = the softmax's log-sum-exp (-inf for a row that
// sees none).
template <typename T>
void launch_attention_softmax(T* s, T* lse, const AttentionRows& r, cudaStream_t st);
// Gradient: scores → probabilities exp(s - lse) (0 where masked) in place;
// delta[row] = Σ dout[row] ∘ out[row] over dv.
template <typename T>
void launch_attention_probabilities(T* p, const T* lse, const T* dout, const T* out, T* delta,
                                    const AttentionRows& r, std::int64_t dv, cudaStream_t st);
// dS = P ∘ (Z ∘ dP - delta[row]) in place of dP ([r.rows, r.lk] each),
// Z the dropout's keep mask times its scale under r.dropout (then P ∘ Z,
// what weighed V, in place of P), else 1.
template <typename T>
void launch_attention_score_grad(T* p, T* dp, const T* delta, const AttentionRows& r, cudaStream_t st);
// A float mask's gradient: dmask (the mask's elements, [nb, nh, ni, nj]
// row-major, each 1 or B, H, Lq, Lk by whether it broadcasts) = dS ([rows,
// lk]) summed over the dims the mask broadcasts over, one thread per dmask
// element (deterministic; a mask broadcast over most of the scores, as
// [B, 1, 1, Lk], gets few threads that each sum many elements).
template <typename T>
void launch_attention_mask_grad(const T* ds, T* dmask, const AttentionRows& r, std::int64_t b,
                                cudaStream_t st);
// Zeros the rows of x ([B, H, Lk, W]) past each batch's key count, so that
// a GEMM over the keys meets P's and dS's zeros there with zeros and not
// with whatever the padding held (a GEMM's 0 · NaN is NaN).
template <typename T>
void launch_zero_past_key_lengths(T* x, const KeyLengths& keys, std::int64_t b, std::int64_t h, std::int64_t lk,
                                  std::int64_t w, cudaStream_t st);

// ---- fused scaled-dot-product attention (flash_attention.cu) ----

// One attention call as the fused kernels see it: q [B, H, Lq, D],
// k [B, Hk, Lk, D], v [B, Hk, Lk, Dv] (or [B, L, H, ·] each when
// heads_inner; Hk divides H: grouped-query attention), bh = B·H, scale
// already resolved (attention_scale), keys the op's key_lengths (if any).
// The kernels take it by value: 128 bytes, the size up to which nvcc loads
// a parameter struct's fields into registers (the register tiles'
// registers were counted so); the op's dropout goes beside it, a
// DropoutRef of its own (score (i, j) of head bh: dropout row bh·Lq + i).
struct FlashAttentionShape {
  std::int64_t bh = 0, h = 0, lq = 0, lk = 0, d = 0, dv = 0;
  std::int64_t hk = 0;  // k and v's heads (H without grouped-query attention)
  bool heads_inner = false, causal = false;
  float scale = 1;
  KeyLengths keys;
  ScoreMaskRef mask;  // the shared-memory kernels' only (flash_attention_tiles.cuh)
};
// nullptr when the fused kernels take the call (dtype f32, bf16 or f16,
// D and Dv at most 128, the grid and the tiles' shared memory within the
// current device's limits), else what they do not take, as a phrase.
const char* flash_attention_refusal(DataType dt, const FlashAttentionShape& s);
// out (the layout's [.., Dv]) and lse ([B·H, Lq]), every element written;
// q, k, v, out of dtype dt, lse f32. Needs lq > 0, lk > 0 and bh > 0.
void launch_flash_attention_forward(DataType dt, const FlashAttentionShape& s, const DropoutRef& dropout,
                                    const void* q, const void* k, const void* v, void* out, void* lse,
                                    cudaStream_t st);
// dq, dk, dv (every element written) from the forward's out and lse (f32)
// and the incoming dout; delta is device scratch of bh·lq floats. With
// dq_sum null, deterministic: no atomics, every sum in a fixed order. Else
// dq_sum is device scratch of q's element count floats, and where the
// kernels can (bf16 and f16 on register tiles, without a mask or dropout:
// flash_attention_sums_dq) the key-tile pass adds each key tile's share of
// dQ there by f32 atomics (FlashAttention-2's five products instead of
// seven; dQ's last bits may differ run to run), then rounds it into dq.
// Needs lq > 0, lk > 0 and bh > 0.
void launch_flash_attention_backward(DataType dt, const FlashAttentionShape& s, const DropoutRef& dropout,
                                     const void* q, const void* k, const void* v, const void* out,
                                     const void* lse, const void* dout, void* dq, void* dk,
                                     void* dv, float* delta, float* dq_sum, cudaStream_t st);
// Under grouped-query attention (s.hk < s.h) dk and dv above are shaped
// as q's heads (q's head count, k's / v's length and width, s's layout):
// each query head's share, which launch_sum_head_groups adds per group.
//
// out [outer, hk, inner] = x [outer, hk, group, inner] summed over group:
// a k / v head's gradient from its query heads' shares (outer B and inner
// Lk·W in layout BHLD; outer B·Lk and inner W in BLHD). dt f32, f64, bf16
// or f16; the 16-bit dtypes summed in f32.
void launch_sum_head_groups(DataType dt, const void* x, void* out, std::int64_t outer, std::int64_t hk,
                            std::int64_t group, std::int64_t inner, cudaStream_t st);
// Whether launch_flash_attention_backward sums dq in dq_sum for dt, s and
// dropout.
bool flash_attention_sums_dq(DataType dt, const FlashAttentionShape& s, const DropoutRef& dropout);

// ---- max_pool2d / avg_pool2d (pool.cu), NCHW ----

// max (else avg, dividing by avg_pool_count(exclusive)) over each window.
// T: f32, f64, i32, i64 (the integers: max only).
template <typename T>
void launch_pool(bool max, const T* x, T* out, const Pool2dGeometry& g, bool exclusive,
                 cudaStream_t s);
// dx (every element written) from dout; max reads x for the windows' maxima.
template <typename T>
void launch_pool_grad(bool max, const T* x, const T* dout, T* dx, const Pool2dGeometry& g,
                      bool exclusive, cudaStream_t s);
// The same over bf16 / f16 bits (dt), computed in f32 and rounded once:
// the f32 kernels' results rounded, bit for bit.
void launch_pool_half(DataType dt, bool max, const void* x, void* out, const Pool2dGeometry& g, bool exclusive,
                      cudaStream_t s);
void launch_pool_grad_half(DataType dt, bool max, const void* x, const void* dout, void* dx,
                           const Pool2dGeometry& g, bool exclusive, cudaStream_t s);
// adaptive_avg_pool2d over g's n, c, h, w, ho, wo, and its gradient (every
// element of dx written). f32, f64.
template <typename T>
void launch_adaptive_avg_pool(const T* x, T* out, const Pool2dGeometry& g, cudaStream_t s);
template <typename T>
void launch_adaptive_avg_pool_grad(const T* dout, T* dx, const Pool2dGeometry& g, cudaStream_t s);

// ---- layer_norm / rms_norm (reduce.cu) ----

// x as [m, n] rows; b and mean null for rms_norm.
template <typename T>
void launch_norm(bool rms, const T* x, const T* w, const T* b, T* y, T* mean, T* rstd,
                 std::int64_t m, std::int64_t n, T eps, T inv_n, cudaStream_t s);
// dx, dw and db (db and mean null for rms_norm); `scratch` holds
// 2 · norm_grad_chunks(m) · n elements (the column sums' partials).
template <typename T>
void launch_norm_grad(bool rms, const T* x, const T* dy, const T* w, const T* mean, const T* rstd,
                      T* dx, T* dw, T* db, T* scratch, std::int64_t m, std::int64_t n, T inv_n,
                      cudaStream_t s);
std::int64_t norm_grad_chunks(std::int64_t m);

// ---- batch_norm (reduce.cu): x as [n, c, s] ----

// The activation the batch_norm kernels apply to y (fused_batch_norm's):
// none (batch_norm), kiln.relu, or kiln.clip to [0, 6] ("relu6").
enum class BatchNormAct { None, Relu, Relu6 };

// x, y, dy and dx are stored as `xd`: T's own dtype, or bf16 / f16 with T
// f32 (each element widened to f32 where it is read, each result rounded
// once where it is written); the per-channel operands, statistics and
// every sum are T.
//
// Training: the batch's mean (smean), inverse std (sinv) and the running
// statistics updated in place; is_test: smean and sinv from the running
// statistics. Then y = act(x · k + off) per channel, k = sinv · scale,
// off = bias - smean · k. scratch: batch_norm_scratch(n, c, s) elements.
template <typename T>
void launch_batch_norm(DataType xd, const void* x, const T* scale, const T* bias, T* run_mean, T* run_var,
                       T* smean, T* sinv, void* y, T* scratch, std::int64_t n, std::int64_t c, std::int64_t s,
                       T eps, T momentum, bool is_test, BatchNormAct act, cudaStream_t st);
// dx, dscale, dbias of g, what the activation's gradient passes of dy at
// the pre-activation x · k + off (recomputed from scale, bias and the saved
// statistics, as the forward computes it; act None: g = dy, bias unread).
// scratch: batch_norm_scratch(n, c, s) elements.
template <typename T>
void launch_batch_norm_grad(DataType xd, const void* x, const T* scale, const T* bias, const T* mean,
                            const T* invstd, const void* dy, void* dx, T* dscale, T* dbias, T* scratch,
                            std::int64_t n, std::int64_t c, std::int64_t s, bool is_test,
                            BatchNormAct act, cudaStream_t st);
// The elements (of T) of scratch both batch norms take: per-channel
// constants and each channel's partials, 2 per 4096 of its n · s elements.
std::int64_t batch_norm_scratch(std::int64_t n, std::int64_t c, std::int64_t s);

// ---- indices: gather, embedding, their gradients (train.cu) ----

// *pos = the first k in [0, count) with ids[k] outside [0, n) and not
// `skip` (pos untouched when none: set it to ~0 first). I: i32, i64.
template <typename I>
void launch_find_bad_index(const I* ids, std::int64_t count, std::int64_t n, std::int64_t skip,
                           unsigned long long* pos, cudaStream_t s);
// dst[o, k, :] = src[o, ids[k], :] for o < outer, k < count, rows of
// row_bytes, n rows per outer index of src; zero rows where ids[k] ==
// zero_id. I: i32, i64.
template <typename I>
void launch_take_rows(const I* ids, std::int64_t count, const void* src, void* dst,
                      std::int64_t outer, std::int64_t n, std::int64_t row_bytes,
                      std::int64_t zero_id, cudaStream_t s);
// dst[o, ids[k], :] += src[o, k, :] (atomics; ids[k] == skip adds nothing).
template <typename T, typename I>
void launch_scatter_add(const I* ids, std::int64_t count, const T* src, T* dst, std::int64_t outer,
                        std::int64_t n, std::int64_t row, std::int64_t skip, cudaStream_t s);

// ---- optimizers (train.cu); the learning rate and beta powers stay on the device ----
// `skip`: the update's skip flag on the device, or null; when it holds true
// the kernels write nothing.

// The gradient an update reads: of the parameter's type T or, for an f32
// parameter, bf16 or f16 bits that the kernels widen (exactly) as they read
// them (kiln/dialect/optimizer_ops.h's accepts_gradient).
enum class GradientType : std::uint8_t { Param, BFloat16, Float16 };
struct GradientIn {
  const void* data = nullptr;
  GradientType type = GradientType::Param;
};

template <typename T>
void launch_sgd(T* p, GradientIn g, const T* lr, const bool* skip, std::int64_t n, cudaStream_t s);
template <typename T>
void launch_momentum(T* p, T* v, GradientIn g, const T* lr, const bool* skip, T mu, bool nesterov,
                     std::int64_t n, cudaStream_t s);
// adam_ (decay false) or adamw_ (p *= 1 - lr · coeff first); reads the
// beta powers from b1p / b2p and then writes b1p · beta1, b2p · beta2 to
// b1p_out / b2p_out (which may be the same buffers).
template <typename T>
void launch_adam(T* p, T* m1, T* m2, GradientIn g, const T* lr, const bool* skip, const T* b1p,
                 const T* b2p, T* b1p_out, T* b2p_out, T beta1, T beta2, T eps, T coeff, bool decay,
                 std::int64_t n, cudaStream_t s);

// ---- merged optimizer updates (merged_optimizer.cu): many parameters per launch ----

// One parameter of a merged update: its element count, the buffers the
// update writes (already holding the operands' values: in place, or
// copies) and the ones it reads. Fields the update kind has no use for stay
// null.
template <typename T>
struct ParameterUpdate {
  std::int64_t n = 0;
  T* p = nullptr;
  T* state[2] = {};  // momentum_: velocity; adam_: moment1, moment2
  GradientIn g;
  const T* beta_pow[2] = {};  // adam_: beta1_pow, beta2_pow as read
  T* beta_pow_out[2] = {};    // adam_: where they go times beta (may be the same buffers)
};

// launch_sgd / launch_momentum / launch_adam over `count` parameters whose
// buffers do not overlap, in as few launches as the kernels' argument
// tables allow (adam: then one more per 96 parameters for the beta
// powers); every element gets the single launcher's bits.
template <typename T>
void launch_merged_sgd(const ParameterUpdate<T>* u, int count, const T* lr, const bool* skip,
                       cudaStream_t s);
template <typename T>
void launch_merged_momentum(const ParameterUpdate<T>* u, int count, const T* lr, const bool* skip,
                            T mu, bool nesterov, cudaStream_t s);
template <typename T>
void launch_merged_adam(const ParameterUpdate<T>* u, int count, const T* lr, const bool* skip,
                        T beta1, T beta2, T eps, T coeff, bool decay, cudaStream_t s);

// ---- loss scaling (train.cu) ----

// y = x · (1 / *scale); *found = true when some x is an inf or a nan (never
// cleared here). The 16-bit form works on raw bf16 or f16 bits.
template <typename T>
void launch_unscale(const T* x, T* y, std::int64_t n, const float* scale, bool* found, cudaStream_t s);
void launch_unscale16(const std::uint16_t* x, std::uint16_t* y, std::int64_t n, const float* scale,
                      bool* found, bool bf16, cudaStream_t s);
// kiln.update_loss_scaling_'s step on the device state.
void launch_update_loss_scaling(const bool* found, float* scale, std::int32_t* good, std::int32_t* bad,
                                const LossScaleRule& rule, cudaStream_t s);

// ---- random (train.cu): kiln/kernel/random.h's generator, element by element ----

// uniform_value(lo, span, u) rounded to T, values >= hi (when span > 0) as below_hi.
template <typename T>
void launch_uniform(T* out, std::int64_t n, std::uint64_t key, double lo, double span, T hi,
                    T below_hi, cudaStream_t s);
template <typename T>
void launch_gaussian(T* out, std::int64_t n, std::uint64_t key, double mean, double std,
                     cudaStream_t s);
// mask[i] = uniform01(key, i) >= p; out[i] = mask ? x[i] · scale : 0.
template <typename T>
void launch_dropout(const T* x, T* out, bool* mask, std::int64_t n, std::uint64_t key, double p,
                    T scale, cudaStream_t s);
template <typename T>
void launch_dropout_grad(const T* d, const bool* mask, T* out, std::int64_t n, T scale,
                         cudaStream_t s);

// ---- kiln.fused_matmul's epilogue (matmul_epilogue.cu) ----

// The activations the epilogue applies.
enum class EpilogueAct : std::uint8_t { None, Relu, GeluErf, GeluTanh };

// Over the `total` elements of a product x whose last dim is n: the sum
// s = x[i] + bias[i mod n] (bias[0] when one_bias; x[i] when bias is
// null), stored into pre[i] when pre is not null, then y[i] = act(s). y
// may be x. dt: f32, f64, bf16, f16 (16-bit: the bits; each step in f32,
// rounded after the sum where an activation follows, as kiln.add's and the
// activation's kernels store them, and after the activation).
void launch_bias_activation(DataType dt, const void* x, void* y, void* pre, const void* bias, std::int64_t total,
                            std::int64_t n, bool one_bias, EpilogueAct act, cudaStream_t s);

// ---- data movement (shape.cu) ----

// out[0, n) = the `width`-byte word `bits` (width 1, 2, 4 or 8).
void launch_fill(void* out, std::int64_t n, int width, std::uint64_t bits, cudaStream_t s);

// A copy of `n` words as a walk over dims (row-major): the word at index
// (i_0, …) goes from src[Σ i_k · src[k]] to dst[Σ i_k · dst[k]] (strides in
// words; one dim more than a tensor's: the words of an element).
struct CopyWalk {
  static constexpr int kMaxRank = Dims::kMaxRank + 1;
  int rank = 0;
  std::int64_t dims[kMaxRank] = {}, src[kMaxRank] = {}, dst[kMaxRank] = {};
  std::int64_t n = 1;
};
// Words of `width` bytes (1, 2, 4 or 8).
void launch_strided_copy(const void* src, void* dst, int width, const CopyWalk& walk,
                         cudaStream_t s);

// n elements from → to with the CPU cast's rules; false (nothing launched)
// unless both are among f32, f64, i32, i64, bool, u8, i8, or one is f32 and
// the other bf16 or f16.
bool launch_cast(DataType from, DataType to, const void* in, void* out, std::int64_t n,
                 cudaStream_t s);

// out = min(max(x, lo), hi) as the CPU orders it. T: f32, f64, the integers.
template <typename T>
void launch_clip(const T* x, T* out, std::int64_t n, T lo, T hi, cudaStream_t s);
// dx = dout where lo <= x <= hi (both ends included), else +0 (NaN x too),
// as the CPU's kiln.clip_grad. T: f32, f64.
template <typename T>
void launch_clip_grad(const T* x, const T* dout, T* dx, std::int64_t n, T lo, T hi,
                      cudaStream_t s);
// Both on bf16 / f16 elements (dt), compared widened to f32 against the f32
// kernels' bounds lo and hi: half_via_f32's bits (each result an element of
// x or dout, a bound rounded once, or +0) in one pass.
void launch_clip_half(DataType dt, const void* x, void* out, std::int64_t n, float lo, float hi, cudaStream_t s);
void launch_clip_grad_half(DataType dt, const void* x, const void* dout, void* dx, std::int64_t n, float lo,
                           float hi, cudaStream_t s);
// out = scale · x + bias (floats: in T, the product rounded first; integers:
// in f64, then converted). T: f32, f64, i32, i64.
template <typename T>
void launch_scale(const T* x, T* out, std::int64_t n, double scale, double bias, cudaStream_t s);

}  // namespace kiln::cuda
