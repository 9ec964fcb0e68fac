// CUDA kernels of kiln.conv2d and its gradient through cuDNN (NCHW). f32 and
// f64 at full precision by default (f32 takes CUDNN_FMA_MATH algorithms
// only, as cuBLAS here; under float32_conv_precision() High also TF32's
// default math); bf16 and f16 with tensor-core math allowed (the
// descriptor's CUDNN_TENSOR_OP_MATH, or the math of the algorithm chosen),
// their sums in f32 and each result rounded once, as the CPU's bf16 convolutions (the
// weight gradient too: cuDNN accumulates it in f32 before it writes dw).
// cuDNN runs bf16 convolutions on compute capability 8.0 and up only; on an
// older GPU a bf16 one is an error from cuDNN's algorithm choice naming the
// op. The CPU's geometry and checks (conv_ops.h). `pick` chooses an
// algorithm per shape (cached per thread and device, with the settings of
// kiln/runtime/conv_options.h in the key: conv_key.h): from cuDNN's
// heuristic ranking the first deterministic one in an allowed math type,
// or, under ConvAlgorithmSearch::Benchmark, the fastest cudnnFind timed
// (a failed timing falls back to the heuristic's, asked once); the choice's
// math type is set on the descriptor; its workspace comes from the stream's
// cache. cuDNN pads symmetrically: a conv with other paddings runs on a
// zero-padded copy of x (its dx cropped back out of the padded one).
// conv2d_transpose and fused_conv2d have no CUDA kernel (CPU between copies).
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <string>

#include "conv_key.h"
#include "cuda_host.h"
#include "launch.h"
#include "kiln/dialect/conv_ops.h"
#include "kiln/dialect/data_format.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/conv_options.h"
#include "kiln/runtime/cuda_context.h"

namespace kiln::cuda {
namespace {

void check_cudnn(const KernelContext& ctx, cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw_error(ErrorKind::Internal, "op '", ctx.op()->name(), "': cuDNN ", what, " failed: ",
                cudnnGetErrorString(status));
}

// This thread's cuDNN handle for ctx's device, bound to ctx's stream.
cudnnHandle_t cudnn_of(const KernelContext& ctx) {
  struct Handles {
    std::map<int, cudnnHandle_t> by_device;
    ~Handles() {
      for (auto& [d, h] : by_device) cudnnDestroy(h);
    }
  };
  thread_local Handles handles;
  auto* stream = dynamic_cast<CudaStream*>(ctx.stream());
  if (!stream)
    throw_error(ErrorKind::PreconditionNotMet, "op '", ctx.op()->name(),
                "' runs a CUDA kernel but was given no CUDA stream");
  cudnnHandle_t& h = handles.by_device[stream->device()];
  if (!h) {
    check_cuda(cudaSetDevice(stream->device()), "selecting the device for cuDNN");
    check_cudnn(ctx, cudnnCreate(&h), "handle creation");
  }
  check_cudnn(ctx, cudnnSetStream(h, stream->handle()), "binding the stream");
  return h;
}

int to_int(const KernelContext& ctx, std::int64_t v) {
  if (v > INT32_MAX)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' has a dim of ", v,
                ", beyond what cuDNN takes");
  return static_cast<int>(v);
}

// What a kiln dtype is to cuDNN: its element, cuDNN's name for it, the
// type its sums run in, the math that runs them, and the type of the alpha
// and beta scalars (the compute type's).
template <DataType D>
struct CudnnType;
template <>
struct CudnnType<DataType::Float32> {
  using T = float;
  using Scale = float;
  static constexpr cudnnDataType_t data = CUDNN_DATA_FLOAT, compute = CUDNN_DATA_FLOAT;
  static constexpr cudnnMathType_t math = CUDNN_FMA_MATH;
};
template <>
struct CudnnType<DataType::Float64> {
  using T = double;
  using Scale = double;
  static constexpr cudnnDataType_t data = CUDNN_DATA_DOUBLE, compute = CUDNN_DATA_DOUBLE;
  static constexpr cudnnMathType_t math = CUDNN_FMA_MATH;
};
// bf16 and f16: 16-bit data on tensor cores, sums and scalars in f32.
template <cudnnDataType_t Data>
struct CudnnHalfType {
  using T = std::uint16_t;
  using Scale = float;
  static constexpr cudnnDataType_t data = Data, compute = CUDNN_DATA_FLOAT;
  static constexpr cudnnMathType_t math = CUDNN_TENSOR_OP_MATH;
};
template <>
struct CudnnType<DataType::BFloat16> : CudnnHalfType<CUDNN_DATA_BFLOAT16> {};
template <>
struct CudnnType<DataType::Float16> : CudnnHalfType<CUDNN_DATA_HALF> {};

// Input i, of dtype D; kiln::Error naming the op otherwise.
template <DataType D>
const Tensor& dtype_input(const KernelContext& ctx, std::uint32_t i) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != D) throw_input_dtype(ctx, i, D);
  return t;
}

// A tensor's elements as T (for bf16 and f16, their bits), its dtype
// checked by the caller.
template <typename T>
const T* elements(const Tensor& t) {
  return static_cast<const T*>(t.raw_data());
}
template <typename T>
T* elements(Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

// Whether f32 convolutions may run in TF32 (kiln/runtime/conv_options.h).
bool tf32_allowed() { return float32_conv_precision() == MatmulPrecision::High; }

// The descriptor's math before an algorithm is chosen: f32's default math
// (TF32 on Ampere and newer) where TF32 is allowed, else the dtype's.
template <DataType D>
cudnnMathType_t initial_math() {
  if constexpr (D == DataType::Float32) return tf32_allowed() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  else return CudnnType<D>::math;
}

// The descriptors of one conv2d (x possibly the zero-padded copy): RAII.
template <DataType D>
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  ConvDescriptors(const KernelContext& ctx, const Conv2dGeometry& g, std::int64_t xh,
                  std::int64_t xw, int ph, int pw) {
    check_cudnn(ctx, cudnnCreateTensorDescriptor(&x), "descriptor creation");
    check_cudnn(ctx, cudnnCreateTensorDescriptor(&y), "descriptor creation");
    check_cudnn(ctx, cudnnCreateFilterDescriptor(&w), "descriptor creation");
    check_cudnn(ctx, cudnnCreateConvolutionDescriptor(&conv), "descriptor creation");
    const cudnnDataType_t dt = CudnnType<D>::data;
    check_cudnn(ctx,
                cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, dt, to_int(ctx, g.n),
                                           to_int(ctx, g.c), to_int(ctx, xh), to_int(ctx, xw)),
                "describing x");
    check_cudnn(ctx,
                cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, dt, to_int(ctx, g.n),
                                           to_int(ctx, g.o), to_int(ctx, g.ho), to_int(ctx, g.wo)),
                "describing the output");
    check_cudnn(ctx,
                cudnnSetFilter4dDescriptor(w, dt, CUDNN_TENSOR_NCHW, to_int(ctx, g.o),
                                           to_int(ctx, g.c / g.groups), to_int(ctx, g.kh),
                                           to_int(ctx, g.kw)),
                "describing w");
    check_cudnn(ctx,
                cudnnSetConvolution2dDescriptor(conv, ph, pw, to_int(ctx, g.sh), to_int(ctx, g.sw),
                                                to_int(ctx, g.dh), to_int(ctx, g.dw),
                                                CUDNN_CROSS_CORRELATION, CudnnType<D>::compute),
                "describing the convolution");
    check_cudnn(ctx, cudnnSetConvolutionGroupCount(conv, to_int(ctx, g.groups)), "setting groups");
    check_cudnn(ctx, cudnnSetConvolutionMathType(conv, initial_math<D>()), "setting the math type");
  }
  ~ConvDescriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;
};

// The device of ctx's CUDA stream (stream_of's error without one).
int device_of(const KernelContext& ctx) {
  stream_of(ctx);
  return static_cast<CudaStream*>(ctx.stream())->device();
}

// The algorithm chosen for a conv, per thread, device and shape (the query
// costs more than a small conv; conv_key.h), and the math it runs in:
// cuDNN's heuristics list algorithms of other math types than the
// descriptor's, so the choice's is set on the descriptor before its
// workspace query and its call.
template <typename Algo>
struct ConvChoice {
  Algo algo;
  cudnnMathType_t math;
};

// Whether kiln runs an offered algorithm's math for dtype D: f32 only on
// CUDA cores (cuDNN's default math allows TF32 on Ampere and newer, which
// rounds the operands) unless TF32 is allowed, and never in a math that
// converts it to 16 bits; f64 in FMA or default math (TF32 never applies
// to it); bf16 and f16 any.
template <DataType D>
bool math_allowed(cudnnMathType_t m) {
  if constexpr (D == DataType::Float32)
    return m == CUDNN_FMA_MATH || (m == CUDNN_DEFAULT_MATH && tf32_allowed());
  else if constexpr (D == DataType::Float64) return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
  else return true;
}

// The first offer that succeeded in an allowed math, preferring (when
// asked) the first deterministic one; null when none did.
template <DataType D, typename Perf>
const Perf* first_allowed(const Perf* perf, int count, bool prefer_deterministic) {
  const Perf* best = nullptr;
  for (int i = 0; i < count; ++i) {
    const Perf& offer = perf[i];
    if (offer.status != CUDNN_STATUS_SUCCESS || !math_allowed<D>(offer.mathType)) continue;
    if (!best) best = &offer;
    if (!prefer_deterministic || offer.determinism == CUDNN_DETERMINISTIC) return &offer;
  }
  return best;
}

// Whether ctx's stream is being captured into a CUDA graph, where cudnnFind
// cannot time algorithms.
bool capturing(const KernelContext& ctx) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream_of(ctx), &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

// The algorithm for `key`: under ConvAlgorithmSearch::Benchmark the fastest
// that `timed` (cudnnFind, fastest first) measured in an allowed math;
// otherwise, or when timing fails or cannot run, the first deterministic
// one in the `ranked` heuristics (else their first) in an allowed math.
// Cached as keep_conv_choice says: a failed timing is not retried. Timing
// runs only with no CUDA error pending on the thread, since cudnnFind's own
// failed cudaMalloc is cleared after it (it is not the next launch's
// error) and would take an earlier error with it.
template <DataType D, typename Perf, typename Ranked, typename Timed>
ConvChoice<decltype(Perf{}.algo)> pick(const KernelContext& ctx, const ConvKey& key, Ranked ranked,
                                       Timed timed) {
  using Choice = ConvChoice<decltype(Perf{}.algo)>;
  thread_local std::map<ConvKey, Choice> chosen;
  if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  // Room for every algorithm once per math type (8 forward algorithms, 3
  // math types kiln may see), so that no allowed one is cut off.
  constexpr int kOffers = 32;
  Perf perf[kOffers];
  int count = 0;
  const bool benchmark = conv_algorithm_search() == ConvAlgorithmSearch::Benchmark;
  const bool timing = benchmark && !capturing(ctx) && cudaPeekAtLastError() == cudaSuccess;
  const Perf* best = nullptr;
  if (timing) {
    if (timed(perf, kOffers, &count) == CUDNN_STATUS_SUCCESS)
      best = first_allowed<D>(perf, count, /*prefer_deterministic=*/false);
    else
      (void)cudaGetLastError();  // cudnnFind's own failure: none was pending before it
  }
  if (!best) {
    check_cudnn(ctx, ranked(perf, kOffers, &count), "algorithm choice");
    best = first_allowed<D>(perf, count, /*prefer_deterministic=*/true);
  }
  if (!best)
    throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "': cuDNN offers no algorithm for this ",
                to_string(D), " convolution");
  const Choice c{best->algo, best->mathType};
  if (!keep_conv_choice(benchmark, timing)) return c;  // timed on a later run
  return chosen[key] = c;
}

// Sets the choice's math on the descriptor; then cuDNN's status for `what`
// (a query or the call), a kiln::Error naming the algorithm and math unless
// it succeeded.
template <typename Algo>
void use_math(const KernelContext& ctx, cudnnConvolutionDescriptor_t conv, const ConvChoice<Algo>& c) {
  check_cudnn(ctx, cudnnSetConvolutionMathType(conv, c.math), "math type setting");
}
template <typename Algo>
void check_conv(const KernelContext& ctx, cudnnStatus_t status, const char* what, const ConvChoice<Algo>& c) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  const std::string with = std::string(what) + " (algorithm " + std::to_string(static_cast<int>(c.algo)) +
                           ", math type " + std::to_string(static_cast<int>(c.math)) + ")";
  check_cudnn(ctx, status, with.c_str());
}

// x as cuDNN sees it: x itself (symmetric padding) or a zero-padded copy.
template <typename T>
struct ConvInput {
  const T* data;
  std::int64_t h, w;
  int ph, pw;
  BufferRef padded;  // owns the copy
};

bool symmetric(const Conv2dGeometry& g) { return g.pt == g.pb && g.pl == g.pr; }

// The [N·C, H, W] planes of `from` (row stride fw, plane stride fh·fw) to
// `to` (tw, th·tw).
void copy_planes(const void* from, void* to, int width, std::int64_t planes, std::int64_t h,
                 std::int64_t w, std::int64_t fh, std::int64_t fw, std::int64_t th,
                 std::int64_t tw, cudaStream_t s) {
  CopyWalk walk;
  walk.rank = 3;
  walk.dims[0] = planes, walk.dims[1] = h, walk.dims[2] = w;
  walk.src[0] = fh * fw, walk.src[1] = fw, walk.src[2] = 1;
  walk.dst[0] = th * tw, walk.dst[1] = tw, walk.dst[2] = 1;
  walk.n = planes * h * w;
  if (walk.n) launch_strided_copy(from, to, width, walk, s);
}

template <typename T>
ConvInput<T> conv_input(const KernelContext& ctx, const Tensor& x, const Conv2dGeometry& g) {
  if (symmetric(g))
    return {elements<T>(x), g.h, g.w, to_int(ctx, g.pt), to_int(ctx, g.pl), {}};
  const std::int64_t hp = g.h + g.pt + g.pb, wp = g.w + g.pl + g.pr;
  const std::int64_t count = g.n * g.c * hp * wp;
  BufferRef buf = scratch_buffer(ctx, sizeof(T) * count);
  T* p = static_cast<T*>(buf->data());
  const cudaStream_t s = stream_of(ctx);
  if (count) launch_fill(p, count, sizeof(T), 0, s);
  copy_planes(elements<T>(x), p + g.pt * wp + g.pl, sizeof(T), g.n * g.c, g.h, g.w, g.h, g.w, hp, wp,
              s);
  check_launch(ctx);
  return {p, hp, wp, 0, 0, std::move(buf)};
}

template <DataType D>
struct Conv2dK {
  using T = typename CudnnType<D>::T;
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<Conv2dOp>();
    data_format::require_nchw_kernel(ctx.op()->name(), a.data_format, "CUDA");
    const Tensor x = dtype_input<D>(ctx, 0), w = dtype_input<D>(ctx, 1);
    const Conv2dGeometry g = conv::geometry(ctx.op()->name(), x.dims(), w.dims(), a.strides,
                                            a.paddings, a.dilations, a.groups);
    Tensor& out = ctx.alloc_output(0, Dims{g.n, g.o, g.ho, g.wo}, x.dtype());
    if (out.numel() == 0) return;
    if (x.numel() == 0 || w.numel() == 0) {
      check_cuda(cudaMemsetAsync(out.raw_data(), 0, out.bytes(), stream_of(ctx)), "zeroing");
      return;
    }
    const ConvInput<T> in = conv_input<T>(ctx, x, g);
    ConvDescriptors<D> d(ctx, g, in.h, in.w, in.ph, in.pw);
    cudnnHandle_t h = cudnn_of(ctx);
    const int device = device_of(ctx);
    const auto c = pick<D, cudnnConvolutionFwdAlgoPerf_t>(
        ctx, conv_key(device, 0, D, g, in.h, in.w, in.ph, in.pw), [&](auto* perf, int n, int* count) {
          return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, n, count, perf);
        },
        [&](auto* perf, int n, int* count) {
          return cudnnFindConvolutionForwardAlgorithm(h, d.x, d.w, d.conv, d.y, n, count, perf);
        });
    use_math(ctx, d.conv, c);
    std::size_t bytes = 0;
    check_conv(ctx, cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, c.algo, &bytes),
               "workspace query", c);
    BufferRef ws = bytes ? scratch_buffer(ctx, bytes) : BufferRef{};
    const typename CudnnType<D>::Scale one = 1, zero = 0;
    check_conv(ctx,
               cudnnConvolutionForward(h, &one, d.x, in.data, d.w, elements<T>(w), d.conv, c.algo,
                                       ws ? ws->data() : nullptr, bytes, &zero, d.y, elements<T>(out)),
               "convolution", c);
  }
};

template <DataType D>
struct Conv2dGradK {
  using T = typename CudnnType<D>::T;
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<GradOf<Conv2dOp>>();
    data_format::require_nchw_kernel(ctx.op()->name(), a.data_format, "CUDA");
    const Tensor x = dtype_input<D>(ctx, 0), w = dtype_input<D>(ctx, 1), dout = dtype_input<D>(ctx, 2);
    const Conv2dGeometry g = conv::geometry(ctx.op()->name(), x.dims(), w.dims(), a.strides,
                                            a.paddings, a.dilations, a.groups);
    conv::check_dout(ctx.op()->name(), dout.dims(), Dims{g.n, g.o, g.ho, g.wo});
    const cudaStream_t s = stream_of(ctx);
    const bool want_dw = !ctx.output_unused(1), want_dx = !ctx.output_unused(0);
    Tensor* dw = want_dw ? &ctx.alloc_output(1, w.dims(), w.dtype()) : nullptr;
    Tensor* dx = want_dx ? &ctx.alloc_output(0, x.dims(), x.dtype()) : nullptr;
    if (dout.numel() == 0 || x.numel() == 0 || w.numel() == 0) {
      // An empty sum: zeros.
      for (Tensor* t : {dw, dx})
        if (t && t->bytes()) check_cuda(cudaMemsetAsync(t->raw_data(), 0, t->bytes(), s), "zeroing");
      return;
    }
    const ConvInput<T> in = want_dw || !symmetric(g) ? conv_input<T>(ctx, x, g)
                                                     : ConvInput<T>{elements<T>(x), g.h, g.w,
                                                                    to_int(ctx, g.pt),
                                                                    to_int(ctx, g.pl), {}};
    ConvDescriptors<D> d(ctx, g, in.h, in.w, in.ph, in.pw);
    cudnnHandle_t h = cudnn_of(ctx);
    const int device = device_of(ctx);
    const typename CudnnType<D>::Scale one = 1, zero = 0;
    if (dw) {
      const auto c = pick<D, cudnnConvolutionBwdFilterAlgoPerf_t>(
          ctx, conv_key(device, 1, D, g, in.h, in.w, in.ph, in.pw), [&](auto* perf, int n, int* count) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, n, count,
                                                                 perf);
          },
          [&](auto* perf, int n, int* count) {
            return cudnnFindConvolutionBackwardFilterAlgorithm(h, d.x, d.y, d.conv, d.w, n, count, perf);
          });
      use_math(ctx, d.conv, c);
      std::size_t bytes = 0;
      check_conv(ctx,
                 cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, c.algo, &bytes),
                 "workspace query", c);
      BufferRef ws = bytes ? scratch_buffer(ctx, bytes) : BufferRef{};
      check_conv(ctx,
                 cudnnConvolutionBackwardFilter(h, &one, d.x, in.data, d.y, elements<T>(dout), d.conv,
                                                c.algo, ws ? ws->data() : nullptr, bytes, &zero, d.w,
                                                elements<T>(*dw)),
                 "filter gradient", c);
    }
    if (dx) {
      // dw's choice left its math on the descriptor: dx's is chosen from the
      // dtype's, as when dw is not asked for.
      if (dw) check_cudnn(ctx, cudnnSetConvolutionMathType(d.conv, initial_math<D>()), "setting the math type");
      const auto c = pick<D, cudnnConvolutionBwdDataAlgoPerf_t>(
          ctx, conv_key(device, 2, D, g, in.h, in.w, in.ph, in.pw), [&](auto* perf, int n, int* count) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, n, count,
                                                               perf);
          },
          [&](auto* perf, int n, int* count) {
            return cudnnFindConvolutionBackwardDataAlgorithm(h, d.w, d.y, d.conv, d.x, n, count, perf);
          });
      use_math(ctx, d.conv, c);
      std::size_t bytes = 0;
      check_conv(ctx,
                 cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, c.algo, &bytes),
                 "workspace query", c);
      BufferRef ws = bytes ? scratch_buffer(ctx, bytes) : BufferRef{};
      // dx of the padded copy when cuDNN sees one, then its interior.
      BufferRef padded_dx =
          symmetric(g) ? BufferRef{} : scratch_buffer(ctx, sizeof(T) * g.n * g.c * in.h * in.w);
      T* target = padded_dx ? static_cast<T*>(padded_dx->data()) : elements<T>(*dx);
      check_conv(ctx,
                 cudnnConvolutionBackwardData(h, &one, d.w, elements<T>(w), d.y, elements<T>(dout), d.conv,
                                              c.algo, ws ? ws->data() : nullptr, bytes, &zero, d.x, target),
                 "input gradient", c);
      if (padded_dx) {
        copy_planes(target + g.pt * in.w + g.pl, elements<T>(*dx), sizeof(T), g.n * g.c, g.h, g.w,
                    in.h, in.w, g.h, g.w, s);
        check_launch(ctx);
      }
    }
  }
};

}  // namespace

KILN_REGISTER_KERNEL(Conv2dOp, Cuda, Float32, Conv2dK<DataType::Float32>::run);
KILN_REGISTER_KERNEL(Conv2dOp, Cuda, Float64, Conv2dK<DataType::Float64>::run);
KILN_REGISTER_KERNEL(Conv2dOp, Cuda, BFloat16, Conv2dK<DataType::BFloat16>::run);
KILN_REGISTER_KERNEL(Conv2dOp, Cuda, Float16, Conv2dK<DataType::Float16>::run);
KILN_REGISTER_KERNEL(GradOf<Conv2dOp>, Cuda, Float32, Conv2dGradK<DataType::Float32>::run);
KILN_REGISTER_KERNEL(GradOf<Conv2dOp>, Cuda, Float64, Conv2dGradK<DataType::Float64>::run);
KILN_REGISTER_KERNEL(GradOf<Conv2dOp>, Cuda, BFloat16, Conv2dGradK<DataType::BFloat16>::run);
KILN_REGISTER_KERNEL(GradOf<Conv2dOp>, Cuda, Float16, Conv2dGradK<DataType::Float16>::run);

}  // namespace kiln::cuda
