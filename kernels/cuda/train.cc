// Host halves of the CUDA kernels in train.cu — gather / embedding and their
// gradients, the optimizer updates, loss scaling's two ops, the random ops —
// and the host pieces of cuda_host.h. Each reads its op's attributes, checks
// shapes and indices with the CPU kernels' messages, allocates outputs and launches (launch.h);
// registered for PlaceKind::Cuda with the dtypes the CPU registers.
//
// Indices are checked before anything is written, as on the CPU: a device
// pass finds the first bad one and its position comes back to the host, so
// gather, embedding and their gradients wait for their stream once per run.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "cuda_host.h"
#include "launch.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/loss_scaling_ops.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/dialect/random_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/kernel/random.h"
#include "kiln/runtime/cuda_allocator.h"

namespace kiln::cuda {

BufferRef scratch_buffer(const KernelContext& ctx, std::size_t bytes) {
  Allocator* a = &ctx.allocator();
  auto* cuda = dynamic_cast<CudaAllocator*>(a);
  auto* stream = dynamic_cast<CudaStream*>(ctx.stream());
  const Allocation block = cuda && stream ? cuda->allocate(bytes, *stream) : a->allocate(bytes);
  return BufferRef::adopt(Buffer::create(block, a));
}

BadIndex find_bad_index(const KernelContext& ctx, const Tensor& ids, std::int64_t n,
                        std::int64_t skip) {
  BadIndex bad;
  const std::int64_t count = ids.numel();
  if (count == 0) return bad;
  const cudaStream_t s = stream_of(ctx);
  const BufferRef scratch = scratch_buffer(ctx, sizeof(unsigned long long));
  auto* pos = static_cast<unsigned long long*>(scratch->data());
  check_cuda(cudaMemsetAsync(pos, 0xff, sizeof *pos, s), "clearing an index check");
  const bool wide = ids.dtype() == DataType::Int64;
  if (wide)
    launch_find_bad_index(ids.data<std::int64_t>(), count, n, skip, pos, s);
  else
    launch_find_bad_index(ids.data<std::int32_t>(), count, n, skip, pos, s);
  check_launch(ctx);
  unsigned long long first = 0;
  check_cuda(cudaMemcpyAsync(&first, pos, sizeof first, cudaMemcpyDeviceToHost, s),
             "reading an index check");
  check_cuda(cudaStreamSynchronize(s), "waiting for an index check");
  if (first == ~0ULL) return bad;
  bad.pos = static_cast<std::int64_t>(first);
  const std::size_t width = wide ? 8 : 4;
  const char* at = static_cast<const char*>(ids.raw_data()) + first * width;
  std::int64_t id64 = 0;
  std::int32_t id32 = 0;
  check_cuda(cudaMemcpy(wide ? static_cast<void*>(&id64) : static_cast<void*>(&id32), at, width,
                        cudaMemcpyDeviceToHost),
             "reading a bad index");
  bad.id = wide ? id64 : id32;
  return bad;
}

namespace {

// ---- gather / embedding ----

void check_index_dtype(const KernelContext& ctx, const Tensor& ids, const char* what) {
  if (ids.dtype() != DataType::Int64 && ids.dtype() != DataType::Int32)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what,
                " must be i64 or i32, got ", ids.type_string());
}

void check_in_range(const KernelContext& ctx, const Tensor& ids, std::int64_t n, const char* what) {
  const BadIndex bad = find_bad_index(ctx, ids, n, /*skip=*/-1);
  if (bad.pos >= 0)
    throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' ", what, " ", bad.id,
                " (at position ", bad.pos, ") is out of range [0, ", n, ")");
}

void take(const KernelContext& ctx, const Tensor& ids, const void* src, void* dst,
          std::int64_t outer, std::int64_t n, std::int64_t row, std::int64_t zero_id) {
  const cudaStream_t s = stream_of(ctx);
  if (ids.dtype() == DataType::Int64)
    launch_take_rows(ids.data<std::int64_t>(), ids.numel(), src, dst, outer, n, row, zero_id, s);
  else
    launch_take_rows(ids.data<std::int32_t>(), ids.numel(), src, dst, outer, n, row, zero_id, s);
  check_launch(ctx);
}

void gather_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<GatherOp>();
  const Tensor x = ctx.input(0), index = ctx.input(1);
  check_index_dtype(ctx, index, "index");
  const int r = x.rank();
  if (r == 0 || a.axis < -r || a.axis >= r)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' axis ", a.axis,
                " is out of range for ", x.type_string());
  const int axis = static_cast<int>(a.axis < 0 ? a.axis + r : a.axis);
  const Dims& xs = x.dims();
  if (r - 1 + index.rank() > Dims::kMaxRank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' result rank ",
                r - 1 + index.rank(), " exceeds the maximum ", Dims::kMaxRank);
  std::int64_t od[Dims::kMaxRank];
  int q = 0;
  std::int64_t outer = 1, row = static_cast<std::int64_t>(size_of(x.dtype()));
  for (int k = 0; k < axis; ++k) outer *= (od[q++] = xs[k]);
  for (int k = 0; k < index.rank(); ++k) od[q++] = index.dims()[k];
  for (int k = axis + 1; k < r; ++k) row *= (od[q++] = xs[k]);
  Tensor& out = ctx.alloc_output(0, Dims(std::span<const std::int64_t>(od, q)), x.dtype());
  if (index.numel() == 0) return;
  check_in_range(ctx, index, xs[axis], "index");
  if (out.numel() == 0) return;
  take(ctx, index, x.raw_data(), out.raw_data(), outer, xs[axis], row, -1);
}

void embedding_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<EmbeddingOp>();
  const Tensor w = ctx.input(0), ids = ctx.input(1);
  check_index_dtype(ctx, ids, "ids");
  if (w.rank() != 2)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' weight must be [vocab, dim], got ", w.type_string());
  const std::int64_t vocab = w.dims()[0], dim = w.dims()[1];
  if (a.padding_idx < -1 || a.padding_idx >= vocab)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' padding_idx ",
                a.padding_idx, " must be -1 (none) or in [0, ", vocab, ")");
  if (ids.rank() + 1 > Dims::kMaxRank)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ids of rank ", ids.rank(),
                " give a result beyond the maximum rank ", Dims::kMaxRank);
  std::int64_t od[Dims::kMaxRank];
  for (int k = 0; k < ids.rank(); ++k) od[k] = ids.dims()[k];
  od[ids.rank()] = dim;
  Tensor& out =
      ctx.alloc_output(0, Dims(std::span<const std::int64_t>(od, ids.rank() + 1)), w.dtype());
  if (ids.numel() == 0) return;
  check_in_range(ctx, ids, vocab, "id");
  if (out.numel() == 0) return;
  take(ctx, ids, w.raw_data(), out.raw_data(), 1, vocab,
       dim * static_cast<std::int64_t>(size_of(w.dtype())), a.padding_idx);
}

// dst[o, ids[k], :] += src[o, k, :], dst zeroed first; ids checked first.
template <typename T>
void scatter(const KernelContext& ctx, const Tensor& ids, const T* src, Tensor& dst,
             std::int64_t outer, std::int64_t n, std::int64_t row, std::int64_t skip,
             const char* what) {
  const cudaStream_t s = stream_of(ctx);
  if (ids.dtype() != DataType::Int64 && ids.dtype() != DataType::Int32)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' ", what,
                " must be i64 or i32, got ", to_string(ids.dtype()));
  if (dst.bytes())
    check_cuda(cudaMemsetAsync(dst.raw_data(), 0, dst.bytes(), s), "zeroing a gradient");
  check_in_range(ctx, ids, n, what);
  if (ids.dtype() == DataType::Int64)
    launch_scatter_add(ids.data<std::int64_t>(), ids.numel(), src, dst.data<T>(), outer, n, row,
                       skip, s);
  else
    launch_scatter_add(ids.data<std::int32_t>(), ids.numel(), src, dst.data<T>(), outer, n, row,
                       skip, s);
  check_launch(ctx);
}

template <typename T>
struct GatherGradK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Dims xd = ctx.input(0).dims();
    const Tensor index = ctx.input(1), dout = typed_input<T>(ctx, 2);
    const int r = xd.rank();
    if (r == 0) throw_error(ErrorKind::InvalidArgument, "op '", op, "' x must have rank >= 1");
    std::int64_t axis = ctx.attrs<GradOf<GatherOp>>().axis;
    if (axis < -r || axis >= r)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' axis ", axis,
                  " is out of range for an input of rank ", r);
    if (axis < 0) axis += r;
    if (r - 1 + index.rank() > Dims::kMaxRank)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' gather's rank ", r - 1 + index.rank(),
                  " exceeds the maximum ", Dims::kMaxRank);
    std::int64_t buf[Dims::kMaxRank];
    int q = 0;
    std::int64_t outer = 1, row = 1;
    for (int k = 0; k < axis; ++k) outer *= (buf[q++] = xd[k]);
    for (int k = 0; k < index.rank(); ++k) buf[q++] = index.dims()[k];
    for (int k = static_cast<int>(axis) + 1; k < r; ++k) row *= (buf[q++] = xd[k]);
    const Dims want(std::span<const std::int64_t>(buf, q));
    if (dout.dims() != want)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout [", dout.dims().to_string(),
                  "] must have the gather's shape [", want.to_string(), "]");
    Tensor& dx = ctx.alloc_output(0, xd, dout.dtype());
    scatter(ctx, index, dout.data<T>(), dx, xd.numel() ? outer : 0, xd[static_cast<int>(axis)], row,
            -1, "index");
  }
};

template <typename T>
struct EmbeddingGradK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Dims wd = ctx.input(0).dims();
    const Tensor ids = ctx.input(1), dout = typed_input<T>(ctx, 2);
    if (wd.rank() != 2)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' weight must be [vocab, dim], got [",
                  wd.to_string(), "]");
    const std::int64_t vocab = wd[0], dim = wd[1];
    const std::int64_t pad = ctx.attrs<GradOf<EmbeddingOp>>().padding_idx;
    if (pad < -1 || pad >= vocab)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' padding_idx ", pad,
                  " must be -1 (none) or in [0, ", vocab, ")");
    if (ids.rank() + 1 > Dims::kMaxRank)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' ids of rank ", ids.rank(),
                  " give a lookup beyond the maximum rank ", Dims::kMaxRank);
    std::int64_t buf[Dims::kMaxRank];
    for (int k = 0; k < ids.rank(); ++k) buf[k] = ids.dims()[k];
    buf[ids.rank()] = dim;
    const Dims want(std::span<const std::int64_t>(buf, ids.rank() + 1));
    if (dout.dims() != want)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' dout [", dout.dims().to_string(),
                  "] must have the lookup's shape [", want.to_string(), "]");
    Tensor& dw = ctx.alloc_output(0, wd, dout.dtype());
    scatter(ctx, ids, dout.data<T>(), dw, 1, vocab, dim, pad, "id");
  }
};

// ---- optimizers ----

// The operand's name as the op declares it ("'moment1' (#3)").
template <typename OpT>
std::string label(std::uint32_t i) {
  return "'" + std::string(OpT::operand_names[i]) + "' (#" + std::to_string(i) + ")";
}

template <typename OpT, typename T>
const Tensor& checked_input(const KernelContext& ctx, std::uint32_t i, std::int64_t numel) {
  const Tensor& t = typed_input<T>(ctx, i);
  if (t.numel() != numel)
    throw_error(ErrorKind::InvalidArgument, "op '", OpT::name, "' operand ", label<OpT>(i), " has ",
                t.numel(), " elements (shape [", t.dims().to_string(), "]), expected ", numel);
  return t;
}

}  // namespace

GradientIn gradient_input(const KernelContext& ctx, std::uint32_t i, DataType param, std::int64_t numel,
                          std::string_view op, const std::string& operand) {
  const Tensor& t = ctx.input(i);
  if (!accepts_gradient(param, t.dtype())) throw_gradient_dtype(op, operand, param, t.dtype());
  if (t.numel() != numel)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' operand ", operand, " has ", t.numel(),
                " elements (shape [", t.dims().to_string(), "]), expected ", numel);
  const GradientType type = t.dtype() == param                  ? GradientType::Param
                            : t.dtype() == DataType::BFloat16 ? GradientType::BFloat16
                                                              : GradientType::Float16;
  return {t.raw_data(), type};
}

namespace {

// The gradient of OpT's update of T with `numel` elements.
template <typename OpT, typename T>
GradientIn checked_gradient(const KernelContext& ctx, std::int64_t numel) {
  return gradient_input(ctx, kGradOperand, data_type_of<T>, numel, OpT::name, label<OpT>(kGradOperand));
}

// The optional skip flag after OpT's operands (on the device), or null.
template <typename OpT>
const bool* skip_flag(const KernelContext& ctx) {
  if (ctx.num_inputs() <= OpT::num_operands) return nullptr;
  const Tensor& flag = ctx.input(ctx.num_inputs() - 1);
  if (flag.dtype() != DataType::Bool || flag.numel() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", OpT::name, "' operand '", kSkipOperandName, "' (#",
                ctx.num_inputs() - 1, ") must be a bool of one element, got ", flag.type_string());
  return flag.data<bool>();
}

template <typename T>
struct SgdK {
  static void run(KernelContext& ctx) {
    const Tensor p = typed_input<T>(ctx, 0);
    const std::int64_t n = p.numel();
    const GradientIn g = checked_gradient<Sgd_Op, T>(ctx, n);
    const Tensor lr = checked_input<Sgd_Op, T>(ctx, 2, 1);
    T* po = updated<T>(ctx, 0, 0, p);
    launch_sgd(po, g, lr.data<T>(), skip_flag<Sgd_Op>(ctx), n, stream_of(ctx));
    check_launch(ctx);
  }
};

template <typename T>
struct MomentumK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<Momentum_Op>();
    const Tensor p = typed_input<T>(ctx, 0);
    const std::int64_t n = p.numel();
    const GradientIn g = checked_gradient<Momentum_Op, T>(ctx, n);
    const Tensor v = checked_input<Momentum_Op, T>(ctx, 2, n);
    const Tensor lr = checked_input<Momentum_Op, T>(ctx, 3, 1);
    T* po = updated<T>(ctx, 0, 0, p);
    T* vo = updated<T>(ctx, 1, 2, v);
    launch_momentum(po, vo, g, lr.data<T>(), skip_flag<Momentum_Op>(ctx),
                    static_cast<T>(a.mu), a.use_nesterov, n, stream_of(ctx));
    check_launch(ctx);
  }
};

template <typename OpT, typename T>
void adam_update(KernelContext& ctx, double beta1, double beta2, double eps, double coeff,
                 bool decay) {
  const Tensor p = typed_input<T>(ctx, 0);
  const std::int64_t n = p.numel();
  const GradientIn g = checked_gradient<OpT, T>(ctx, n);
  const Tensor lr = checked_input<OpT, T>(ctx, 2, 1);
  const Tensor m1 = checked_input<OpT, T>(ctx, 3, n);
  const Tensor m2 = checked_input<OpT, T>(ctx, 4, n);
  const Tensor b1p = checked_input<OpT, T>(ctx, 5, 1);
  const Tensor b2p = checked_input<OpT, T>(ctx, 6, 1);
  T* po = updated<T>(ctx, 0, 0, p);
  T* m1o = updated<T>(ctx, 1, 3, m1);
  T* m2o = updated<T>(ctx, 2, 4, m2);
  T* b1po = updated<T>(ctx, 3, 5, b1p);
  T* b2po = updated<T>(ctx, 4, 6, b2p);
  launch_adam(po, m1o, m2o, g, lr.data<T>(), skip_flag<OpT>(ctx), b1p.data<T>(),
              b2p.data<T>(), b1po, b2po,
              static_cast<T>(beta1), static_cast<T>(beta2), static_cast<T>(eps),
              static_cast<T>(coeff), decay, n, stream_of(ctx));
  check_launch(ctx);
}

template <typename T>
struct AdamK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<Adam_Op>();
    adam_update<Adam_Op, T>(ctx, a.beta1, a.beta2, a.epsilon, 0.0, false);
  }
};
template <typename T>
struct AdamWK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<AdamW_Op>();
    adam_update<AdamW_Op, T>(ctx, a.beta1, a.beta2, a.epsilon, a.coeff, true);
  }
};

// ---- loss scaling ----

template <typename T>
T* one_element(const KernelContext& ctx, std::uint32_t i, std::string_view what) {
  const Tensor& t = typed_input<T>(ctx, i);
  if (t.numel() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' operand '", what, "' (#", i,
                ") must hold one element, got shape [", t.dims().to_string(), "]");
  return const_cast<T*>(t.data<T>());
}

void check_finite_and_unscale_kernel(KernelContext& ctx) {
  const float* scale = one_element<float>(ctx, 0, "scale");
  const std::uint32_t k = ctx.num_inputs() - 1;
  const cudaStream_t s = stream_of(ctx);
  bool* found = ctx.alloc_output(k, Dims{1}, DataType::Bool).data<bool>();
  check_cuda(cudaMemsetAsync(found, 0, 1, s), "clearing found_inf");
  for (std::uint32_t i = 0; i < k; ++i) {
    const Tensor& x = ctx.input(1 + i);
    Tensor& y = ctx.alloc_output(i, x.dims(), x.dtype());
    const std::int64_t n = x.numel();
    switch (x.dtype()) {
      case DataType::Float32: launch_unscale(x.data<float>(), y.data<float>(), n, scale, found, s); break;
      case DataType::Float64: launch_unscale(x.data<double>(), y.data<double>(), n, scale, found, s); break;
      case DataType::Float16:
      case DataType::BFloat16:
        launch_unscale16(static_cast<const std::uint16_t*>(x.raw_data()),
                         static_cast<std::uint16_t*>(y.raw_data()), n, scale, found,
                         x.dtype() == DataType::BFloat16, s);
        break;
      default:
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' operand #", 1 + i,
                    " must be a f32, f64, bf16 or f16 tensor, got ", x.type_string());
    }
    check_launch(ctx);
  }
}

void update_loss_scaling_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<UpdateLossScaling_Op>();
  const auto& names = UpdateLossScaling_Op::operand_names;
  const bool* found = one_element<bool>(ctx, 0, names[0]);
  (void)one_element<float>(ctx, 1, names[1]);
  (void)one_element<std::int32_t>(ctx, 2, names[2]);
  (void)one_element<std::int32_t>(ctx, 3, names[3]);
  float* scale = updated<float>(ctx, 0, 1, ctx.input(1));
  std::int32_t* good = updated<std::int32_t>(ctx, 1, 2, ctx.input(2));
  std::int32_t* bad = updated<std::int32_t>(ctx, 2, 3, ctx.input(3));
  launch_update_loss_scaling(found, scale, good, bad,
                             LossScaleRule{a.incr_every_n_steps, a.decr_every_n_nan_or_inf, a.incr_ratio,
                                           a.decr_ratio},
                             stream_of(ctx));
  check_launch(ctx);
}

// ---- random ----

Dims shape_dims(const KernelContext& ctx, const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' needs a fully known shape to run, got a dim of ", d);
    if (__builtin_mul_overflow(n, d, &n))
      throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(),
                  "' shape's element count overflows int64");
  }
  return Dims(shape);
}

template <typename T>
void uniform_random_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<UniformRandomOp>();
  if (!(a.min <= a.max))
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' needs min <= max, got [",
                a.min, ", ", a.max, "]");
  Tensor& out = ctx.alloc_output(0, shape_dims(ctx, a.shape), data_type_of<T>);
  const std::uint64_t key = random_key(a.seed);
  const T hi = static_cast<T>(a.max), below_hi = std::nextafter(hi, static_cast<T>(a.min));
  launch_uniform(out.data<T>(), out.numel(), key, a.min, a.max - a.min, hi, below_hi,
                 stream_of(ctx));
  check_launch(ctx);
}

template <typename T>
void gaussian_random_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<GaussianRandomOp>();
  Tensor& out = ctx.alloc_output(0, shape_dims(ctx, a.shape), data_type_of<T>);
  const std::uint64_t key = random_key(a.seed);
  launch_gaussian(out.data<T>(), out.numel(), key, a.mean, a.std, stream_of(ctx));
  check_launch(ctx);
}

void random_key_kernel(KernelContext& ctx) {
  const std::int64_t one[] = {1};
  Tensor& out = ctx.alloc_output(0, Dims(std::span<const std::int64_t>(one, 1)), DataType::UInt64);
  const auto& a = ctx.attrs<RandomKeyOp>();
  launch_fill(out.raw_data(), 1, 8, a.is_test ? 0 : random_key(a.seed), stream_of(ctx));
  check_launch(ctx);
}

template <typename T>
void dropout_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<DropoutOp>();
  if (!(a.p >= 0.0 && a.p < 1.0))
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                "' needs a drop probability p in [0, 1), got ", a.p);
  const Tensor x = ctx.input(0);
  Tensor& out = ctx.alloc_output(0, x.dims(), x.dtype());
  Tensor& mask = ctx.alloc_output(1, x.dims(), DataType::Bool);
  const std::int64_t n = x.numel();
  const cudaStream_t s = stream_of(ctx);
  if (a.is_test || a.p == 0.0) {  // identity; draws no key
    if (n > 0 && out.raw_data() != x.raw_data())
      check_cuda(
          cudaMemcpyAsync(out.raw_data(), x.raw_data(), x.bytes(), cudaMemcpyDeviceToDevice, s),
          "copying dropout's input");
    if (n > 0)
      check_cuda(cudaMemsetAsync(mask.raw_data(), 1, static_cast<std::size_t>(n), s),
                 "filling dropout's mask");
    return;
  }
  const std::uint64_t key = random_key(a.seed);
  launch_dropout(x.data<T>(), out.data<T>(), mask.data<bool>(), n, key, a.p,
                 static_cast<T>(1.0 / (1.0 - a.p)), s);
  check_launch(ctx);
}

template <typename T>
struct DropoutGradK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<DropoutOp>>();
    if (!(a.p >= 0.0 && a.p < 1.0))
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' needs a drop probability p in [0, 1), got ", a.p);
    const Tensor d = typed_input<T>(ctx, 0), mask = ctx.input(1);
    if (mask.dtype() != DataType::Bool)
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' mask (input #1) must be bool, got ", to_string(mask.dtype()));
    if (d.dims() != mask.dims())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' inputs #0 [",
                  d.dims().to_string(), "] and #1 [", mask.dims().to_string(),
                  "] must have one shape");
    Tensor& out = ctx.alloc_output(0, d.dims(), d.dtype());
    const std::int64_t n = d.numel();
    const cudaStream_t s = stream_of(ctx);
    if (a.is_test || a.p == 0.0) {
      if (n)
        check_cuda(
            cudaMemcpyAsync(out.raw_data(), d.raw_data(), d.bytes(), cudaMemcpyDeviceToDevice, s),
            "copying dropout_grad's input");
      return;
    }
    launch_dropout_grad(d.data<T>(), mask.data<bool>(), out.data<T>(), n,
                        static_cast<T>(1.0 / (1.0 - a.p)), s);
    check_launch(ctx);
  }
};

}  // namespace

KILN_REGISTER_KERNEL(GatherOp, Cuda, Undefined, gather_kernel);
KILN_REGISTER_KERNEL(EmbeddingOp, Cuda, Undefined, embedding_kernel);
KILN_REGISTER_KERNELS(GradOf<GatherOp>, Cuda, GatherGradK, float, double);
KILN_REGISTER_KERNELS(GradOf<EmbeddingOp>, Cuda, EmbeddingGradK, float, double);
KILN_REGISTER_KERNELS(Sgd_Op, Cuda, SgdK, float, double);
KILN_REGISTER_KERNELS(Momentum_Op, Cuda, MomentumK, float, double);
KILN_REGISTER_KERNELS(Adam_Op, Cuda, AdamK, float, double);
KILN_REGISTER_KERNELS(AdamW_Op, Cuda, AdamWK, float, double);
KILN_REGISTER_KERNEL(CheckFiniteAndUnscaleOp, Cuda, Float32, check_finite_and_unscale_kernel);
KILN_REGISTER_KERNEL(UpdateLossScaling_Op, Cuda, Bool, update_loss_scaling_kernel);
KILN_REGISTER_KERNEL(RandomKeyOp, Cuda, UInt64, random_key_kernel);
KILN_REGISTER_KERNEL(UniformRandomOp, Cuda, Float32, uniform_random_kernel<float>);
KILN_REGISTER_KERNEL(UniformRandomOp, Cuda, Float64, uniform_random_kernel<double>);
KILN_REGISTER_KERNEL(GaussianRandomOp, Cuda, Float32, gaussian_random_kernel<float>);
KILN_REGISTER_KERNEL(GaussianRandomOp, Cuda, Float64, gaussian_random_kernel<double>);
KILN_REGISTER_KERNEL(DropoutOp, Cuda, Float32, dropout_kernel<float>);
KILN_REGISTER_KERNEL(DropoutOp, Cuda, Float64, dropout_kernel<double>);
KILN_REGISTER_KERNELS(GradOf<DropoutOp>, Cuda, DropoutGradK, float, double);

}  // namespace kiln::cuda
