// CUDA kernel of kiln.fused_matmul: the product and its bias in one
// cublasLtMatmul (the BIAS epilogue: the bias is added to the f32
// accumulator before the result is rounded) where the product is one GEMM —
// y one matrix and x not transposed, so x's batch dims fold into its rows —
// with a bias of the last dim's size; otherwise kiln.matmul's product and
// one pass adding the bias (launch_bias_activation), as the unfused ops
// compute them (16-bit results: rounded after the product and again after
// the bias, where the first route rounds once).
//
// Activations: none, kiln.relu, kiln.gelu and kiln.gelu_tanh, applied by
// launch_bias_activation after either route (from the kept pre-activation
// where the op keeps it), with the activation's own CUDA math. cuBLASLt's
// RELU_BIAS epilogue was seen to keep a NaN (on an H200), where kiln.relu
// gives 0 for it, so relu is not left to it. Gelu's tanh form on the first
// route goes to cuBLASLt's GELU_BIAS epilogue (GELU_AUX_BIAS where the
// pre-activation is kept: its "aux" output) where cuBLASLt has an
// algorithm for it: there the activation reads the f32 sum, not the sum
// rounded to a 16-bit output, with cuBLASLt's own tanh (likely the
// hardware's approximate one), so its results differ from the other
// routes' in the last bits, and which route runs depends on the shape (the
// kept sum's leading dim a multiple of 8) and the operands' alignment. The
// fuse pass makes no other activation for a CUDA target.
//
// f32 (TF32 under MatmulPrecision::High, as kiln.matmul), bf16 and f16 (f32
// accumulation) on cuBLASLt; f64 by the second route.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "cublas_util.h"
#include "cuda_host.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/kernel/matmul_shape.h"
#include "launch.h"
#include "matmul_product.h"

namespace kiln::cuda {
namespace {

constexpr std::size_t kLtWorkspace = std::size_t(8) << 20;

void check_lt(const KernelContext& ctx, cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw_error(ErrorKind::Internal, "op '", ctx.op()->name(), "': cuBLASLt ", what, ": ",
                cublasGetStatusName(status));
}

// One cuBLASLt handle per device, made on first use, kept for the process.
cublasLtHandle_t lt_handle(const KernelContext& ctx, int device) {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  cublasLtHandle_t& h = handles[device];
  if (!h) {
    use_cuda_device(device);  // the handle takes the current device's properties
    check_lt(ctx, cublasLtCreate(&h), "handle");
  }
  return h;
}

// The largest power of two up to 256 dividing p's address (cuBLASLt picks
// algorithms for the alignment it is told).
std::uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

struct LtTypes {
  cudaDataType data;
  cublasComputeType_t compute;
};
LtTypes lt_types(DataType dt) {
  if (dt == DataType::BFloat16) return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
  if (dt == DataType::Float16) return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
  const bool tf32 = float32_matmul_precision() == MatmulPrecision::High;
  return {CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
}

// Row-major out[rows, n] = x[rows, k] · op(y) + bias[n] as the
// column-major outᵀ = op(y)ᵀ · xᵀ: cuBLASLt's A is y, B is x, D is outᵀ,
// whose rows (n) the bias runs along.
struct LtGemm {
  DataType dtype;
  LtTypes types;  // read once: the precision setting may change meanwhile
  std::int64_t rows, n, k;
  bool transpose_y;
  const void *x, *y, *bias;
  void* out;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  void* aux = nullptr;  // GELU_AUX_BIAS: the pre-activation, laid out as out
};

// The descriptors of one call, destroyed with it.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename V>
void set_desc(const KernelContext& ctx, cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  check_lt(ctx, cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v), "descriptor");
}
template <typename V>
void set_pref(const KernelContext& ctx, cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
              const V& v) {
  check_lt(ctx, cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof v), "preference");
}

void describe(const KernelContext& ctx, const LtGemm& g, LtDescs& ds) {
  const LtTypes& t = g.types;
  check_lt(ctx, cublasLtMatmulDescCreate(&ds.op, t.compute, CUDA_R_32F), "descriptor");
  set_desc(ctx, ds.op, CUBLASLT_MATMUL_DESC_TRANSA, g.transpose_y ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(ctx, ds.op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_desc(ctx, ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue);
  set_desc(ctx, ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  set_desc(ctx, ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, t.data);
  if (g.aux) {
    set_desc(ctx, ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    set_desc(ctx, ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(g.n));
  }
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  // y: [k, n] row-major is n × k column-major (ld n); transposed, [n, k] is k × n (ld k).
  check_lt(ctx,
           g.transpose_y ? cublasLtMatrixLayoutCreate(&ds.a, t.data, u(g.k), u(g.n), g.k)
                         : cublasLtMatrixLayoutCreate(&ds.a, t.data, u(g.n), u(g.k), g.n),
           "layout");
  check_lt(ctx, cublasLtMatrixLayoutCreate(&ds.b, t.data, u(g.k), u(g.rows), g.k), "layout");
  check_lt(ctx, cublasLtMatrixLayoutCreate(&ds.d, t.data, u(g.n), u(g.rows), g.n), "layout");
  check_lt(ctx, cublasLtMatmulPreferenceCreate(&ds.pref), "preference");
  set_pref(ctx, ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{kLtWorkspace});
  set_pref(ctx, ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(g.y));
  set_pref(ctx, ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(g.x));
  set_pref(ctx, ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(g.out));
  set_pref(ctx, ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(g.out));
}

// The heuristic's first algorithm for this problem (its shapes, dtypes,
// epilogue and the operands' alignments) and the workspace it needs,
// looked up once per process and device; found false when cuBLASLt has
// none (any failed query) or refused the one it gave (refuse_algo).
struct LtAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
};
using AlgoKey = std::tuple<int, DataType, int, std::int64_t, std::int64_t, std::int64_t, bool, std::uint32_t,
                           std::uint32_t, std::uint32_t, std::uint32_t, int, std::uint32_t>;
AlgoKey algo_key(int device, const LtGemm& g) {
  return {device, g.dtype, static_cast<int>(g.types.compute), g.rows, g.n, g.k,
          g.transpose_y, alignment(g.x), alignment(g.y), alignment(g.out), alignment(g.bias),
          static_cast<int>(g.epilogue), g.aux ? alignment(g.aux) : 0u};
}
struct AlgoCache {
  std::mutex mu;
  std::map<AlgoKey, LtAlgo> by_key;
};
AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}
LtAlgo find_algo(cublasLtHandle_t h, const AlgoKey& key, const LtDescs& ds) {
  AlgoCache& cache = algo_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  auto it = cache.by_key.find(key);
  if (it == cache.by_key.end()) {
    cublasLtMatmulHeuristicResult_t result;
    std::memset(&result, 0, sizeof result);
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(h, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &result, &found);
    const bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.workspaceSize <= kLtWorkspace;
    it = cache.by_key.emplace(key, LtAlgo{ok, result.algo, result.workspaceSize}).first;
  }
  return it->second;
}
// Later launches of `key` take the fallback without asking cuBLASLt again.
void refuse_algo(const AlgoKey& key) {
  AlgoCache& cache = algo_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  cache.by_key[key].found = false;
}

// Whether cuBLASLt turned a call down before running it (the operation,
// its parameters or the device not supported by the algorithm), as opposed
// to failing while it ran (EXECUTION_FAILED and the like, errors).
bool refused(cublasStatus_t st) {
  return st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ||
         st == CUBLAS_STATUS_ARCH_MISMATCH;
}

// The fused GEMM through cuBLASLt; false (nothing enqueued) when it has no
// algorithm for it, or, for a GELU epilogue, refuses the one its heuristic
// gave (the caller falls back to the BIAS epilogue; the refusal is kept).
bool lt_matmul(const KernelContext& ctx, const LtGemm& g) {
  auto* stream = dynamic_cast<CudaStream*>(ctx.stream());
  if (!stream) stream_of(ctx);  // the error naming the op
  const int device = stream->device();
  const cublasLtHandle_t h = lt_handle(ctx, device);
  LtDescs ds;
  describe(ctx, g, ds);
  const AlgoKey key = algo_key(device, g);
  const LtAlgo algo = find_algo(h, key, ds);
  if (!algo.found) return false;
  const BufferRef workspace = algo.workspace ? scratch_buffer(ctx, algo.workspace) : BufferRef();
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(h, ds.op, &one, g.y, ds.a, g.x, ds.b, &zero, g.out, ds.d, g.out, ds.d, &algo.algo,
                     workspace ? workspace->data() : nullptr, algo.workspace, stream->handle());
  if (refused(st) && g.epilogue != CUBLASLT_EPILOGUE_BIAS) {
    refuse_algo(key);
    return false;
  }
  check_lt(ctx, st, "matmul");
  return true;
}

// The activation the epilogue applies; kiln::Error(Unimplemented) for one
// of the unary family other than relu.
EpilogueAct epilogue_act(const KernelContext& ctx, const EpilogueActivation& act) {
  if (act.gelu != EpilogueActivation::Gelu::None)
    return act.gelu == EpilogueActivation::Gelu::Tanh ? EpilogueAct::GeluTanh : EpilogueAct::GeluErf;
  if (act.index < 0) return EpilogueAct::None;
  if (act.name != "kiln.relu")
    throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' on CUDA applies no activation, kiln.relu, ",
                "kiln.gelu or kiln.gelu_tanh, not '", act.name, "'");
  return EpilogueAct::Relu;
}

// What the cuBLASLt route did: nothing (none enqueued), the product and
// bias (into output 1 where the pre-activation is kept, else output 0),
// or those and the activation too (gelu's tanh form: output 0, and
// output 1 where kept).
enum class LtRoute : std::uint8_t { None, Bias, BiasActivation };

// The product through cuBLASLt with the epilogue when it is one GEMM with a
// row bias (see the file comment).
LtRoute try_lt(KernelContext& ctx, DataType dt, const FusedMatmulOp::Attributes& a, const Tensor& x,
               const Tensor& y, const Tensor* bias, EpilogueAct act) {
  if (dt == DataType::Float64 || !bias || a.transpose_x || alignment(bias->raw_data()) < 16) return LtRoute::None;
  if (x.dtype() != dt || y.dtype() != dt || y.dims().rank() != 2 || x.dims().rank() < 2) return LtRoute::None;
  const MatmulShape s = matmul_shape(ctx.op()->name(), x.dims(), y.dims(), false, a.transpose_y);
  check_matmul_bias(ctx.op()->name(), bias->dtype(), bias->numel(), dt, s.n);
  const std::int64_t rows = s.batch * s.m;
  if (bias->numel() != s.n || rows == 0 || s.n == 0 || s.k == 0 || rows > INT_MAX || s.n > INT_MAX ||
      s.k > INT_MAX)
    return LtRoute::None;
  const bool keep = a.keep_pre_activation;
  LtGemm g{dt, lt_types(dt), rows, s.n, s.k, a.transpose_y, x.raw_data(), y.raw_data(), bias->raw_data(), nullptr};
  if (act == EpilogueAct::GeluTanh) {
    g.out = ctx.alloc_output(0, s.out_dims, dt).raw_data();
    g.aux = keep ? ctx.alloc_output(1, s.out_dims, dt).raw_data() : nullptr;
    g.epilogue = keep ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
    // The aux matrix's leading dim must be a multiple of 8.
    if ((!keep || (s.n % 8 == 0 && alignment(g.aux) >= 16)) && lt_matmul(ctx, g)) return LtRoute::BiasActivation;
  }
  g.epilogue = CUBLASLT_EPILOGUE_BIAS;
  g.aux = nullptr;
  g.out = ctx.alloc_output(keep ? 1 : 0, s.out_dims, dt).raw_data();
  return lt_matmul(ctx, g) ? LtRoute::Bias : LtRoute::None;
}

template <DataType D>
void fused_matmul_kernel(KernelContext& ctx) {
  const auto& a = ctx.attrs<FusedMatmulOp>();
  const EpilogueAct act = epilogue_act(ctx, a.activation);
  // Copies: the operands outlive the outputs' allocations should a
  // variable of theirs be one of them.
  const Tensor x = ctx.input(0), y = ctx.input(1);
  Tensor bias;
  if (ctx.num_inputs() > 2) bias = ctx.input(2);
  const Tensor* b = ctx.num_inputs() > 2 ? &bias : nullptr;
  const bool keep = a.keep_pre_activation;
  const LtRoute lt = try_lt(ctx, D, a, x, y, b, act);
  if (lt == LtRoute::BiasActivation || (lt == LtRoute::Bias && act == EpilogueAct::None)) return;
  if (lt == LtRoute::Bias) {  // the activation from the sum cuBLASLt made
    const Tensor& sum = ctx.output(keep ? 1 : 0);
    Tensor& out = keep ? ctx.alloc_output(0, sum.dims(), D) : ctx.output(0);
    launch_bias_activation(D, sum.raw_data(), out.raw_data(), nullptr, nullptr, sum.numel(), 1, false, act,
                           stream_of(ctx));
    check_launch(ctx);
    return;
  }
  Tensor& out = matmul_product(ctx, x, y, D, a.transpose_x, a.transpose_y);
  const std::int64_t n = out.dims().rank() ? out.dims()[out.dims().rank() - 1] : 1;
  if (b) check_matmul_bias(ctx.op()->name(), b->dtype(), b->numel(), D, n);
  if (!b && act == EpilogueAct::None) return;
  void* pre = keep ? ctx.alloc_output(1, out.dims(), D).raw_data() : nullptr;
  launch_bias_activation(D, out.raw_data(), out.raw_data(), pre, b ? b->raw_data() : nullptr, out.numel(), n,
                         b && b->numel() == 1, act, stream_of(ctx));
  check_launch(ctx);
}

}  // namespace

KILN_REGISTER_KERNEL(FusedMatmulOp, Cuda, Float32, fused_matmul_kernel<DataType::Float32>);
KILN_REGISTER_KERNEL(FusedMatmulOp, Cuda, Float64, fused_matmul_kernel<DataType::Float64>);
KILN_REGISTER_KERNEL(FusedMatmulOp, Cuda, BFloat16, fused_matmul_kernel<DataType::BFloat16>);
KILN_REGISTER_KERNEL(FusedMatmulOp, Cuda, Float16, fused_matmul_kernel<DataType::Float16>);

}  // namespace kiln::cuda
