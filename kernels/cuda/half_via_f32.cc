// bf16 and f16 kernels on CUDA computed through the f32 CUDA kernels
// (kiln/kernel/half_via_f32.h): each 16-bit input widened on the device,
// the op's f32 CUDA kernel run on it, each output rounded on the device to
// the dtype its result type names, all on the kernel's stream; the f32
// tensors in between come from that stream's cache of device memory. The
// ops: the CPU's list, but those without an f32 CUDA kernel (whose 16-bit
// forms run on the CPU) and those with 16-bit CUDA kernels of their own
// (the unary and binary families and gelu: elementwise_half.cu; reduce_as:
// reduce.cc; conv2d and its gradient: conv.cc; max / avg pooling:
// pool.cc; clip and its gradient: shape.cc). Results
// are the CPU's half_via_f32 results where the two f32 kernels agree; elsewhere they differ as those do, by
// the rounding of one 16-bit unit at most in practice.
#include <cstdint>
#include <type_traits>

#include "cuda_host.h"
#include "launch.h"
#include "kiln/kernel/half_via_f32.h"
#include "kiln/runtime/cuda_allocator.h"

namespace kiln::cuda {
namespace {

// The device's memory for work on one stream: blocks from (and back to)
// that stream's list in the CudaAllocator, so that the f32 tensors may die
// while the stream's kernels that read them are still queued.
class StreamAllocator final : public Allocator {
 public:
  StreamAllocator(CudaAllocator& device, const CudaStream& stream) : device_(device), stream_(stream) {}
  Allocation allocate(std::size_t bytes) override { return device_.allocate(bytes, stream_); }
  void deallocate(const Allocation& allocation) noexcept override { device_.deallocate(allocation); }
  Place place() const noexcept override { return device_.place(); }
  AllocatorStats stats() const override { return device_.stats(); }
  void reset_peak() override { device_.reset_peak(); }
  std::size_t release_cache() override { return 0; }

 private:
  CudaAllocator& device_;
  const CudaStream& stream_;
};

Tensor widened(const KernelContext& ctx, const Tensor& half, Allocator& allocator) {
  Tensor f = Tensor::empty(half.dims(), DataType::Float32, ctx.place(), &allocator);
  if (half.numel())
    launch_cast(half.dtype(), DataType::Float32, half.raw_data(), f.raw_data(), half.numel(), stream_of(ctx));
  check_launch(ctx);
  return f;
}

void store_rounded(KernelContext& ctx, std::uint32_t o, const Tensor& f, DataType dt) {
  const Tensor src = f;  // alive while the output is (re)allocated
  Tensor& out = ctx.alloc_output(o, src.dims(), dt);
  if (src.numel())
    launch_cast(DataType::Float32, dt, src.raw_data(), out.raw_data(), src.numel(), stream_of(ctx));
  check_launch(ctx);
}

// A copy: the f32 kernel's output lives in memory that goes back on return.
void store_copy(KernelContext& ctx, std::uint32_t o, const Tensor& t) {
  const Tensor src = t;
  Tensor& out = ctx.alloc_output(o, src.dims(), src.dtype());
  if (src.bytes())
    check_cuda(cudaMemcpyAsync(out.raw_data(), src.raw_data(), src.bytes(), cudaMemcpyDeviceToDevice,
                               stream_of(ctx)),
               "copying an output computed in f32");
}

constexpr HalfConversions kConversions{&widened, &store_rounded, &store_copy};

template <typename OpT>
struct HalfViaF32 {
  static void run(KernelContext& ctx) {
    static const KernelFn f32 = [] {
      const KernelInfo* k = KernelRegistry::instance().find(TypeId::get<OpT>(), PlaceKind::Cuda, DataType::Float32);
      return k ? k->fn : nullptr;
    }();
    auto* device = dynamic_cast<CudaAllocator*>(&ctx.allocator());
    auto* stream = dynamic_cast<CudaStream*>(ctx.stream());
    if (!device || !stream) {
      run_half_via_f32(ctx, f32, kConversions, ctx.allocator());
      return;
    }
    StreamAllocator on_stream(*device, *stream);
    run_half_via_f32(ctx, f32, kConversions, on_stream);
  }
};

// The listed ops that have no f32 CUDA kernel, and those whose CUDA kernels
// compute in bf16 / f16 themselves (the fused attention,
// flash_attention.cu; gelu, elementwise_half.cu; reduce_as, reduce.cc;
// conv2d and its gradient, cuDNN on tensor cores: conv.cc; max_pool2d,
// avg_pool2d and their gradients: pool.cc; clip and its gradient:
// shape.cc).
template <typename OpT>
constexpr bool skipped_on_cuda =
    std::is_same_v<OpT, GradOf<MaximumOp>> || std::is_same_v<OpT, GradOf<MinimumOp>> ||
    std::is_same_v<OpT, GeluOp> || std::is_same_v<OpT, GradOf<GeluOp>> || std::is_same_v<OpT, ReduceAsOp> ||
    std::is_same_v<OpT, ScaledDotProductAttentionOp> || std::is_same_v<OpT, GradOf<ScaledDotProductAttentionOp>> ||
    std::is_same_v<OpT, Conv2dOp> || std::is_same_v<OpT, GradOf<Conv2dOp>> ||
    std::is_same_v<OpT, FusedConv2dOp> || std::is_same_v<OpT, Conv2dTransposeOp> ||
    std::is_same_v<OpT, GradOf<Conv2dTransposeOp>> || std::is_same_v<OpT, MaxPool2dOp> ||
    std::is_same_v<OpT, GradOf<MaxPool2dOp>> || std::is_same_v<OpT, AvgPool2dOp> ||
    std::is_same_v<OpT, GradOf<AvgPool2dOp>> || std::is_same_v<OpT, ClipOp> || std::is_same_v<OpT, GradOf<ClipOp>>;

template <typename OpT>
void register_half() {
  if constexpr (!skipped_on_cuda<OpT>) {
    KernelRegistrar<OpT>(PlaceKind::Cuda, DataType::BFloat16, &HalfViaF32<OpT>::run, OpT::name);
    KernelRegistrar<OpT>(PlaceKind::Cuda, DataType::Float16, &HalfViaF32<OpT>::run, OpT::name);
  }
}

template <typename... OpTs>
void register_halves(OpTypeList<OpTs...>) {
  (register_half<OpTs>(), ...);
}

[[maybe_unused]] const bool registered = [] {
  register_halves(HalfViaF32Ops{});
  return true;
}();

}  // namespace
}  // namespace kiln::cuda
