// kiln's own CPU kernels split across the threads the executor's plan gives
// them (kernels/cpu/intra_op.h): every split kernel gives the same bits at
// 1, 2 and 3 threads, on shapes large enough to be split.
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../kernels/cpu/intra_op.h"
#include "../../kernels/cpu/onednn.h"
#include "catch.hpp"
#include "kernel_test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/merged_optimizer_ops.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/kernel/blas.h"

using namespace kiln;
using namespace kiln_test;

namespace {

using Axes = std::vector<std::int64_t>;

// Sets the kernels' thread count for a scope.
class KernelThreads {
 public:
  explicit KernelThreads(int n) : before_(blas_num_threads()) { blas_set_num_threads(n); }
  ~KernelThreads() { blas_set_num_threads(before_); }
  KernelThreads(const KernelThreads&) = delete;
  KernelThreads& operator=(const KernelThreads&) = delete;

 private:
  int before_;
};

// run() at 1 thread, then at 2 and 3: each output the same bits.
template <typename Run>
void same_bits_at_any_thread_count(Run run) {
  std::vector<Tensor> want;
  {
    KernelThreads one(1);
    want = run().results;
  }
  for (int threads : {2, 3}) {
    INFO(threads << " threads");
    KernelThreads t(threads);
    const auto got = run().results;
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("output #" << i);
      REQUIRE(got[i].dims() == want[i].dims());
      CHECK(same_bits(got[i], want[i]));
    }
  }
}

}  // namespace

TEST_CASE("parallel_for covers every item once, in ranges that depend only on the count",
          "[kernel][intra_op]") {
  KernelThreads two(2);
  for (std::int64_t n : {0, 1, 7, 100, 1001}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    std::mutex m;
    std::set<std::pair<std::int64_t, std::int64_t>> ranges;
    cpu::parallel_for(n, 10, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i)];
      const std::lock_guard lock(m);
      ranges.emplace(b, e);
    });
    for (auto& h : hits) CHECK(h == 1);
    if (n >= 20 && cpu::onednn::available())
      CHECK(ranges == std::set<std::pair<std::int64_t, std::int64_t>>{{0, (n + 1) / 2}, {(n + 1) / 2, n}});
    if (n < 20 && n > 0) CHECK(ranges.size() == 1);  // too few items to split
  }
}

TEST_CASE("parallel_for runs on two threads when the plan gives the kernels two",
          "[kernel][intra_op]") {
  if (!cpu::onednn::available()) {
    WARN("kiln built without oneDNN's OpenMP runtime: kernels run on one thread");
    return;
  }
  for (int threads : {1, 2}) {
    KernelThreads t(threads);
    CHECK(cpu::intra_op_threads() == threads);
    std::mutex m;
    std::set<std::thread::id> seen;
    cpu::parallel_for(1000, 100, [&](std::int64_t, std::int64_t) {
      const std::lock_guard lock(m);
      seen.insert(std::this_thread::get_id());
    });
    CHECK(seen.size() == static_cast<std::size_t>(threads));
  }
}

TEST_CASE("an exception thrown in one range of parallel_for reaches the caller",
          "[kernel][intra_op]") {
  KernelThreads two(2);
  CHECK_THROWS_WITH(cpu::parallel_for(1000, 10,
                                      [](std::int64_t b, std::int64_t) {
                                        if (b > 0) throw std::runtime_error("second range");
                                      }),
                    "second range");
}

TEST_CASE("elementwise kernels give the same bits at any thread count", "[kernel][intra_op]") {
  const Tensor x = filled<float>(Dims{8, 28, 28, 40}, -4, 4, 1);
  const Tensor y = filled<float>(Dims{8, 28, 28, 40}, -4, 4, 2);
  const Tensor s = filled<float>(Dims{8, 1, 1, 40}, -2, 2, 3);
  same_bits_at_any_thread_count([&] { return run_op<SigmoidOp>({x}); });
  same_bits_at_any_thread_count([&] { return run_op<GeluOp>({x}); });
  same_bits_at_any_thread_count([&] { return run_op<AddOp>({x, y}); });
  same_bits_at_any_thread_count([&] { return run_op<MulOp>({x, s}); });
  same_bits_at_any_thread_count([&] { return run_op<DivOp>({s, x}); });
  same_bits_at_any_thread_count([&] { return run_op<LessThanOp>({x, y}); });
  same_bits_at_any_thread_count(
      [&] { return run_op<SubOp>({x, Tensor::from_vector<float>({}, {0.5f})}); });
}

TEST_CASE("reductions split by output give the same bits at any thread count",
          "[kernel][intra_op]") {
  const Tensor nhwc = filled<float>(Dims{8, 28, 28, 40}, -4, 4, 1);
  same_bits_at_any_thread_count([&] { return run_op<MeanOp>({nhwc}, Axes{1, 2}, true); });
  same_bits_at_any_thread_count([&] { return run_op<SumOp>({nhwc}, Axes{0}, false); });
  same_bits_at_any_thread_count([&] { return run_op<MaxOp>({nhwc}, Axes{3}, false); });
  same_bits_at_any_thread_count([&] { return run_op<SumOp>({nhwc}, Axes{0, 2}, false); });
}

TEST_CASE("cross_entropy and its gradient give the same bits at any thread count",
          "[kernel][intra_op]") {
  const Tensor x = filled<float>({64, 3000}, -8, 8, 3);
  std::vector<std::int64_t> y(64);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i * 37 % 3000);
  const Tensor label = Tensor::from_vector<std::int64_t>({64}, y);
  const Tensor lse = run_op<CrossEntropyOp>({x, label}).out(1);
  const Tensor dloss = filled<float>({64, 1}, 0.5, 2, 4);
  same_bits_at_any_thread_count([&] { return run_op<CrossEntropyOp>({x, label}); });
  same_bits_at_any_thread_count(
      [&] { return run_op<GradOf<CrossEntropyOp>>({x, lse, label, dloss}, std::int64_t{-100}); });
}

TEST_CASE("softmax, log_softmax and their gradients, rows or columns, give the same bits at any thread count",
          "[kernel][intra_op]") {
  const Tensor rows = filled<float>(Dims{300, 1000}, -8, 8, 1), columns = filled<float>(Dims{40, 200, 64}, -8, 8, 2);
  for (const std::int64_t axis : {std::int64_t{-1}, std::int64_t{1}}) {
    INFO("axis " << axis);
    const Tensor& x = axis == -1 ? rows : columns;
    same_bits_at_any_thread_count([&] { return run_op<SoftmaxOp>({x}, axis); });
    same_bits_at_any_thread_count([&] { return run_op<LogSoftmaxOp>({x}, axis); });
    const Tensor y = run_op<SoftmaxOp>({x}, axis).out(), dy = filled<float>(x.dims(), -1, 1, 3);
    same_bits_at_any_thread_count([&] { return run_op<GradOf<SoftmaxOp>>({y, dy}, axis); });
    same_bits_at_any_thread_count([&] { return run_op<GradOf<LogSoftmaxOp>>({y, dy}, axis); });
  }
}

TEST_CASE("transposes, slices and concats give the same bits at any thread count",
          "[kernel][intra_op]") {
  const Tensor x = iota<float>({8, 2, 58, 28, 28});
  same_bits_at_any_thread_count([&] { return run_op<TransposeOp>({x}, Axes{0, 2, 1, 3, 4}); });
  same_bits_at_any_thread_count([&] { return run_op<TransposeOp>({x}, Axes{0, 3, 4, 1, 2}); });
  same_bits_at_any_thread_count([&] { return run_op<TransposeOp>({x}, Axes{4, 2, 0, 3, 1}); });
  const Tensor img = iota<float>({8, 3, 224, 224});
  same_bits_at_any_thread_count([&] { return run_op<TransposeOp>({img}, Axes{0, 2, 3, 1}); });
  const Tensor nhwc = iota<float>({8, 28, 28, 116});
  same_bits_at_any_thread_count(
      [&] { return run_op<StridedSliceOp>({nhwc}, Axes{3}, Axes{58}, Axes{116}, Axes{1}); });
  same_bits_at_any_thread_count(
      [&] { return run_op<StridedSliceOp>({nhwc}, Axes{1, 3}, Axes{1, 0}, Axes{27, 116}, Axes{2, 3}); });
  same_bits_at_any_thread_count([&] { return run_op<SliceOp>({nhwc}, Axes{3}, Axes{58}, Axes{116}); });
  const Tensor half = iota<float>({8, 28, 28, 58});
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<StridedSliceOp>>({nhwc, half}, Axes{3}, Axes{58}, Axes{116}, Axes{1});
  });
  same_bits_at_any_thread_count([&] { return run_op<ConcatOp>({half, half, nhwc}, std::int64_t{3}); });
}

TEST_CASE("pooling and a convolution's SiLU give the same bits at any thread count",
          "[kernel][intra_op]") {
  const Tensor nchw = filled<float>(Dims{8, 24, 56, 56}, -4, 4, 1);
  const Tensor nhwc = filled<float>(Dims{8, 56, 56, 24}, -4, 4, 2);
  same_bits_at_any_thread_count([&] { return run_op<MaxPool2dOp>({nchw}, Axes{3, 3}, Axes{2, 2}, Axes{1, 1}); });
  same_bits_at_any_thread_count([&] { return run_op<MaxPool2dOp>({nchw}, Axes{2, 2}); });
  same_bits_at_any_thread_count([&] {
    return run_op<MaxPool2dOp>({nhwc}, Axes{3, 3}, Axes{2, 2}, Axes{1, 1}, false, std::string("NHWC"));
  });
  same_bits_at_any_thread_count([&] { return run_op<AvgPool2dOp>({nchw}, Axes{3, 3}, Axes{1, 1}, Axes{1, 1}); });
  const Tensor w = filled<float>(Dims{32, 24, 3, 3}, -1, 1, 3), b = filled<float>(Dims{32}, -1, 1, 4);
  for (const std::string layout : {"NCHW", "NHWC"})
    same_bits_at_any_thread_count([&] {
      return run_op<FusedConv2dOp>({layout == "NCHW" ? nchw : nhwc, w, b}, Axes{1, 1}, Axes{1, 1},
                                   Axes{1, 1}, std::int64_t{1}, std::string("silu"), layout);
    });
}

TEST_CASE("a convolution's gradient gives the same bits at any thread count, batches of any size",
          "[kernel][intra_op]") {
  // Batches of 16, 5 and 3: four equal slices, unequal ones, three of one image.
  for (const std::int64_t batch : {16, 5, 3}) {
    INFO("batch " << batch);
    const Tensor x = filled<float>(Dims{batch, 32, 14, 14}, -1, 1, 1), w = filled<float>(Dims{48, 32, 3, 3}, -1, 1, 2);
    const Tensor dout = filled<float>(Dims{batch, 48, 7, 7}, -1, 1, 3);
    same_bits_at_any_thread_count([&] {
      return run_op<GradOf<Conv2dOp>>({x, w, dout}, Axes{2, 2}, Axes{1, 1}, Axes{1, 1}, std::int64_t{1});
    });
  }
}

TEST_CASE("an NHWC 3x3 convolution (oneDNN's Winograd where the CPU has it) gives the same bits at any "
          "thread count", "[kernel][intra_op]") {
  for (const std::int64_t batch : {1, 5}) {
    INFO("batch " << batch);
    const Tensor x = filled<float>(Dims{batch, 28, 28, 64}, -1, 1, 1), w = filled<float>(Dims{96, 64, 3, 3}, -1, 1, 2);
    const Tensor b = filled<float>(Dims{96}, -1, 1, 3);
    same_bits_at_any_thread_count([&] {
      return run_op<FusedConv2dOp>({x, w, b}, Axes{1, 1}, Axes{1, 1}, Axes{1, 1}, std::int64_t{1},
                                   std::string("relu"), std::string("NHWC"));
    });
  }
}

TEST_CASE("a large pointwise NHWC convolution adding a residual (row blocks of one GEMM each) gives the "
          "same bits at any thread count",
          "[kernel][intra_op]") {
  // 1 x 130 x 130 pixels: over the 16 Ki where the GEMM route starts, in
  // blocks of 3264 rows and a partial last one.
  const Tensor x = filled<float>(Dims{1, 130, 130, 6}, -1, 1, 1), w = filled<float>(Dims{20, 6, 1, 1}, -1, 1, 2);
  const Tensor b = filled<float>(Dims{20}, -1, 1, 3), r = filled<float>(Dims{1, 130, 130, 20}, -2, 2, 4);
  for (const std::string act : {"none", "relu6", "silu"}) {
    INFO(act);
    same_bits_at_any_thread_count([&] {
      return run_kernel({x, w, b, r}, [&](Builder& bb, const std::vector<Value>& v) {
        return bb.create<FusedConv2dOp>(v[0], v[1], v[2], Axes{1, 1}, Axes{0, 0}, Axes{1, 1}, std::int64_t{1}, act,
                                        std::string("NHWC"), v[3])
            .operation();
      });
    });
  }
}

TEST_CASE("an NHWC conv2d and its gradient (a training program's, direct, no Winograd) give the same bits "
          "at any thread count, batches of any size",
          "[kernel][intra_op]") {
  for (const std::int64_t batch : {16, 5, 1}) {
    INFO("batch " << batch);
    const Tensor x = filled<float>(Dims{batch, 14, 14, 32}, -1, 1, 1), w = filled<float>(Dims{48, 32, 3, 3}, -1, 1, 2);
    const Tensor dout = filled<float>(Dims{batch, 14, 14, 48}, -1, 1, 3);
    same_bits_at_any_thread_count([&] {
      return run_op<Conv2dOp>({x, w}, Axes{1, 1}, Axes{1, 1}, Axes{1, 1}, std::int64_t{1}, std::string("NHWC"));
    });
    same_bits_at_any_thread_count([&] {
      return run_op<GradOf<Conv2dOp>>({x, w, dout}, Axes{1, 1}, Axes{1, 1}, Axes{1, 1}, std::int64_t{1},
                                      std::string("NHWC"));
    });
    // A fused_conv2d whose weights are trained: also direct.
    const Tensor b = filled<float>(Dims{48}, -1, 1, 4);
    same_bits_at_any_thread_count([&] {
      return run_op<FusedConv2dOp>({x, w, b}, Axes{1, 1}, Axes{1, 1}, Axes{1, 1}, std::int64_t{1},
                                   std::string("relu"), std::string("NHWC"), Value(), true);
    });
  }
}

TEST_CASE("conv2d_transpose and its gradient give the same bits at any thread count",
          "[kernel][intra_op]") {
  // A DCGAN-style upsampling (kernel 4, stride 2, padding 1) and a grouped one.
  for (const std::int64_t groups : {1, 4}) {
    INFO("groups " << groups);
    const Tensor x = filled<float>(Dims{6, 64, 14, 14}, -1, 1, 1);
    const Tensor w = filled<float>(Dims{64, 32 / groups, 4, 4}, -1, 1, 2);
    const auto fwd = run_op<Conv2dTransposeOp>({x, w}, Axes{2, 2}, Axes{1, 1}, Axes{0, 0}, Axes{1, 1}, groups);
    REQUIRE(fwd.out().dims() == Dims{6, 32, 28, 28});
    const Tensor dout = filled<float>(fwd.out().dims(), -1, 1, 3);
    same_bits_at_any_thread_count([&] {
      return run_op<Conv2dTransposeOp>({x, w}, Axes{2, 2}, Axes{1, 1}, Axes{0, 0}, Axes{1, 1}, groups);
    });
    same_bits_at_any_thread_count([&] {
      return run_op<GradOf<Conv2dTransposeOp>>({x, w, dout}, Axes{2, 2}, Axes{1, 1}, Axes{0, 0}, Axes{1, 1},
                                                groups);
    });
  }
}

TEST_CASE("attention and its gradient, split by head and query tile, give the same bits at any thread count",
          "[kernel][intra_op]") {
  // 130 query rows: two full tiles of 64 and a partial one; 4 heads of 64,
  // and k and v of 4 heads or of 2 (grouped-query attention: dK and dV
  // summed from each query head's share).
  for (const std::string layout : {"BHLD", "BLHD"}) {
    for (const std::int64_t hk : {4, 2}) {
      const bool bhld = layout == "BHLD";
      const Dims shape = bhld ? Dims{2, 4, 130, 64} : Dims{2, 130, 4, 64};
      const Dims kv_shape = bhld ? Dims{2, hk, 130, 64} : Dims{2, 130, hk, 64};
      const Tensor q = filled<float>(shape, -1, 1, 1), k = filled<float>(kv_shape, -1, 1, 2),
                   v = filled<float>(kv_shape, -1, 1, 3), dout = filled<float>(shape, -1, 1, 4);
      for (const bool causal : {false, true}) {
        INFO(layout << " Hk " << hk << (causal ? ", causal" : ""));
        const auto fwd = run_op<ScaledDotProductAttentionOp>({q, k, v}, causal, 0.0, layout);
        same_bits_at_any_thread_count(
            [&] { return run_op<ScaledDotProductAttentionOp>({q, k, v}, causal, 0.0, layout); });
        same_bits_at_any_thread_count([&] {
          return run_op<GradOf<ScaledDotProductAttentionOp>>({q, k, v, fwd.out(0), fwd.out(1), dout}, causal,
                                                             0.0, layout);
        });
      }
    }
  }
}

// Shapes where oneDNN's threaded sgemm cut k (m 1; b transposed beside a
// long k) or its one-thread sgemm summed in another order for half of C.
TEST_CASE("f32 matmuls give the same bits at any thread count, transposed or not", "[kernel][intra_op]") {
  // {1, 1000, 1280}: a classifier at batch 1, split by columns though it
  // has only 1.3 M multiply-adds.
  for (const auto& [m, n, k] : {std::tuple{1, 512, 256}, {1, 1000, 1280}, {2, 3072, 1000}, {16, 512, 1000},
                               {33, 16, 4096}, {64, 3072, 1000}, {128, 1000, 1000}, {512, 1000, 16}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        INFO(m << "x" << n << "x" << k << (ta ? ", a transposed" : "") << (tb ? ", b transposed" : ""));
        const Tensor a = filled<float>(ta ? Dims{k, m} : Dims{m, k}, -1, 1, 1);
        const Tensor b = filled<float>(tb ? Dims{n, k} : Dims{k, n}, -1, 1, 2);
        same_bits_at_any_thread_count([&] { return run_op<MatmulOp>({a, b}, ta, tb); });
      }
}

TEST_CASE("bf16 matmuls (oneDNN's bf16 products where the CPU has them) give the same bits at any thread "
          "count, transposed or not, batched or not",
          "[kernel][intra_op][half]") {
  const auto bf16 = [](const Tensor& t) { return run_op<CastOp>({t}, DataType::BFloat16).out(); };
  for (const auto& [m, n, k] : {std::tuple{1, 1000, 1280}, {16, 512, 1000}, {33, 16, 4096}, {256, 768, 300}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        INFO(m << "x" << n << "x" << k << (ta ? ", a transposed" : "") << (tb ? ", b transposed" : ""));
        const Tensor a = bf16(filled<float>(ta ? Dims{k, m} : Dims{m, k}, -1, 1, 1));
        const Tensor b = bf16(filled<float>(tb ? Dims{n, k} : Dims{k, n}, -1, 1, 2));
        same_bits_at_any_thread_count([&] { return run_op<MatmulOp>({a, b}, ta, tb); });
      }
  const Tensor a = bf16(filled<float>(Dims{3, 64, 200}, -1, 1, 3)), b = bf16(filled<float>(Dims{3, 200, 96}, -1, 1, 4));
  same_bits_at_any_thread_count([&] { return run_op<MatmulOp>({a, b}, false, false); });
}

TEST_CASE("bf16 adds of a row, NHWC max pools and their gradients, and reduce_as (through the thread's f32 "
          "chunks) give the same bits at any thread count",
          "[kernel][intra_op][half]") {
  const auto bf16 = [](const Tensor& t) { return run_op<CastOp>({t}, DataType::BFloat16).out(); };
  const Tensor x = bf16(filled<float>(Dims{64, 1000}, -1, 1, 1)), row = bf16(filled<float>(Dims{1000}, -1, 1, 2));
  same_bits_at_any_thread_count([&] { return run_op<AddOp>({x, row}); });
  same_bits_at_any_thread_count([&] { return run_op<ReduceAsOp>({x, row}); });
  const Tensor image = bf16(filled<float>(Dims{3, 57, 56, 24}, -4, 4, 3));
  const Tensor dout = bf16(filled<float>(Dims{3, 29, 28, 24}, -1, 1, 4));
  same_bits_at_any_thread_count([&] {
    return run_op<MaxPool2dOp>({image}, Axes{3, 3}, Axes{2, 2}, Axes{1, 1}, false, std::string("NHWC"));
  });
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<MaxPool2dOp>>({image, dout}, Axes{3, 3}, Axes{2, 2}, Axes{1, 1}, false, std::string("NHWC"));
  });
}

TEST_CASE("bf16 convolutions and their gradients (oneDNN's bf16 kernels where the CPU has them) give the "
          "same bits at any thread count, NHWC and NCHW",
          "[kernel][intra_op][half]") {
  const auto bf16 = [](const Tensor& t) { return run_op<CastOp>({t}, DataType::BFloat16).out(); };
  for (const char* layout : {"NHWC", "NCHW"}) {
    INFO(layout);
    const bool nhwc = std::string(layout) == "NHWC";
    const Tensor x = bf16(filled<float>(nhwc ? Dims{5, 14, 14, 32} : Dims{5, 32, 14, 14}, -1, 1, 1));
    const Tensor w = bf16(filled<float>(Dims{48, 32, 3, 3}, -1, 1, 2)), b = bf16(filled<float>(Dims{48}, -1, 1, 4));
    const Tensor dout = bf16(filled<float>(nhwc ? Dims{5, 14, 14, 48} : Dims{5, 48, 14, 14}, -1, 1, 3));
    same_bits_at_any_thread_count([&] {
      return run_op<FusedConv2dOp>({x, w, b}, Axes{1, 1}, Axes{1, 1}, Axes{1, 1}, std::int64_t{1},
                                   std::string("silu"), std::string(layout));
    });
    same_bits_at_any_thread_count([&] {
      return run_op<GradOf<Conv2dOp>>({x, w, dout}, Axes{1, 1}, Axes{1, 1}, Axes{1, 1}, std::int64_t{1},
                                      std::string(layout));
    });
  }
}

TEST_CASE("a convolution's gradients give the same bits at any thread count", "[kernel][intra_op]") {
  const Tensor x = filled<float>(Dims{8, 16, 28, 28}, -1, 1, 1);
  const Tensor w = filled<float>(Dims{32, 16, 3, 3}, -1, 1, 2);
  const Tensor dout = filled<float>(Dims{8, 32, 14, 14}, -1, 1, 3);
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<Conv2dOp>>({x, w, dout}, Axes{2, 2}, Axes{1, 1}, Axes{1, 1}, std::int64_t{1});
  });
  const Tensor dw_out = filled<float>(Dims{8, 16, 28, 28}, -1, 1, 4);
  const Tensor dw = filled<float>(Dims{16, 1, 3, 3}, -1, 1, 5);
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<Conv2dOp>>({x, dw, dw_out}, Axes{1, 1}, Axes{1, 1}, Axes{1, 1}, std::int64_t{16});
  });
  // depthwise with stride 2: the forward (through relu6) and both gradients
  const Tensor b = filled<float>(Dims{16}, -1, 1, 6);
  same_bits_at_any_thread_count([&] {
    return run_op<FusedConv2dOp>({x, dw, b}, Axes{2, 2}, Axes{1, 1}, Axes{1, 1}, std::int64_t{16},
                                 std::string("relu6"), std::string("NCHW"));
  });
  const Tensor dw_out2 = filled<float>(Dims{8, 16, 14, 14}, -1, 1, 7);
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<Conv2dOp>>({x, dw, dw_out2}, Axes{2, 2}, Axes{1, 1}, Axes{1, 1}, std::int64_t{16});
  });
}

TEST_CASE("a max pool's gradient gives the same bits at any thread count", "[kernel][intra_op]") {
  const Tensor x = filled<float>(Dims{8, 24, 56, 56}, -4, 4, 1);
  const Tensor dout = filled<float>(Dims{8, 24, 28, 28}, -1, 1, 2);
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<MaxPool2dOp>>({x, dout}, Axes{3, 3}, Axes{2, 2}, Axes{1, 1}, false);
  });
}

TEST_CASE("an average pool's gradient gives the same bits at any thread count", "[kernel][intra_op]") {
  const Tensor x = filled<float>(Dims{8, 24, 56, 56}, -4, 4, 1);
  const Tensor dout = filled<float>(Dims{8, 24, 28, 28}, -1, 1, 2);
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<AvgPool2dOp>>({x, dout}, Axes{3, 3}, Axes{2, 2}, Axes{1, 1}, false, true);
  });
}

TEST_CASE("batch norm and its gradient give the same bits at any thread count", "[kernel][intra_op]") {
  const Tensor x = filled<float>(Dims{8, 32, 28, 28}, -2, 2, 1);
  const Tensor scale = filled<float>(Dims{32}, 0.5, 1.5, 2), bias = filled<float>(Dims{32}, -1, 1, 3);
  // Fresh running statistics per run: the op updates them in place.
  auto forward = [&] {
    return run_op<BatchNormOp>({x, scale, bias, filled<float>(Dims{32}, -0.1, 0.1, 4),
                                filled<float>(Dims{32}, 0.5, 1.5, 5)});
  };
  same_bits_at_any_thread_count(forward);
  const auto fwd = forward();
  const Tensor dy = filled<float>(Dims{8, 32, 28, 28}, -1, 1, 6);
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<BatchNormOp>>({x, scale, fwd.out(3), fwd.out(4), dy}, 0.9, 1e-5, false);
  });
}

TEST_CASE("NHWC batch norm and its gradient, their statistics split by image and the rest by row, give "
          "the same bits at any thread count",
          "[kernel][intra_op]") {
  const Tensor x = filled<float>(Dims{8, 28, 28, 64}, -2, 2, 1);
  const Tensor scale = filled<float>(Dims{64}, 0.5, 1.5, 2), bias = filled<float>(Dims{64}, -1, 1, 3);
  for (const bool is_test : {false, true}) {
    INFO("is_test " << is_test);
    auto forward = [&] {
      return run_op<BatchNormOp>({x, scale, bias, filled<float>(Dims{64}, -0.1, 0.1, 4),
                                  filled<float>(Dims{64}, 0.5, 1.5, 5)},
                                 0.9, 1e-5, is_test, std::string("NHWC"));
    };
    same_bits_at_any_thread_count(forward);
    const auto fwd = forward();
    const Tensor dy = filled<float>(Dims{8, 28, 28, 64}, -1, 1, 6);
    same_bits_at_any_thread_count([&] {
      return run_op<GradOf<BatchNormOp>>({x, scale, fwd.out(3), fwd.out(4), dy}, 0.9, 1e-5, is_test,
                                         std::string("NHWC"));
    });
  }
}

TEST_CASE("a batch norm fused with relu6 and its gradient give the same bits at any thread count, in "
          "either layout",
          "[kernel][intra_op]") {
  for (const std::string format : {"NCHW", "NHWC"}) {
    INFO(format);
    const Dims d = format == "NHWC" ? Dims{8, 28, 28, 64} : Dims{8, 64, 28, 28};
    const Tensor x = filled<float>(d, -2, 2, 1), dy = filled<float>(d, -1, 1, 6);
    const Tensor scale = filled<float>(Dims{64}, 0.5, 1.5, 2), bias = filled<float>(Dims{64}, -1, 1, 3);
    auto forward = [&] {
      return run_op<FusedBatchNormOp>({x, scale, bias, filled<float>(Dims{64}, -0.1, 0.1, 4),
                                       filled<float>(Dims{64}, 0.5, 1.5, 5)},
                                      0.9, 1e-5, false, format, std::string("relu6"));
    };
    same_bits_at_any_thread_count(forward);
    const auto fwd = forward();
    same_bits_at_any_thread_count([&] {
      return run_op<GradOf<FusedBatchNormOp>>({x, scale, bias, fwd.out(3), fwd.out(4), dy}, 0.9, 1e-5, false,
                                              format, std::string("relu6"));
    });
  }
}

TEST_CASE("an NHWC max pool's gradient gives the same bits at any thread count", "[kernel][intra_op]") {
  const Tensor x = filled<float>(Dims{8, 56, 56, 24}, -4, 4, 1);
  const Tensor dout = filled<float>(Dims{8, 28, 28, 24}, -1, 1, 2);
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<MaxPool2dOp>>({x, dout}, Axes{3, 3}, Axes{2, 2}, Axes{1, 1}, false, std::string("NHWC"));
  });
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<MaxPool2dOp>>({x, dout}, Axes{2, 2}, Axes{2, 2}, Axes{0, 0}, false, std::string("NHWC"));
  });
}

TEST_CASE("clip and its gradient give the same bits at any thread count", "[kernel][intra_op]") {
  const Tensor x = filled<float>(Dims{8, 32, 28, 28}, -8, 8, 1);
  const Tensor d = filled<float>(Dims{8, 32, 28, 28}, -1, 1, 2);
  same_bits_at_any_thread_count([&] { return run_op<ClipOp>({x}, 0.0, 6.0); });
  same_bits_at_any_thread_count([&] { return run_op<GradOf<ClipOp>>({x, d}, 0.0, 6.0); });
}

TEST_CASE("an image's few channels transposed to NHWC land in place at any thread count",
          "[kernel][intra_op]") {
  for (std::int64_t c : {1, 2, 3, 4, 5}) {
    INFO(c << " channels");
    const Tensor img = iota<float>({3, c, 61, 67});
    const auto got = run_op<TransposeOp>({img}, Axes{0, 2, 3, 1}).out().to_vector<float>();
    const auto x = img.to_vector<float>();
    bool ok = true;
    for (std::int64_t n = 0; n < 3; ++n)
      for (std::int64_t p = 0; p < 61 * 67; ++p)
        for (std::int64_t k = 0; k < c; ++k)
          ok = ok && got[static_cast<std::size_t>((n * 61 * 67 + p) * c + k)] ==
                         x[static_cast<std::size_t>((n * c + k) * 61 * 67 + p)];
    CHECK(ok);
    same_bits_at_any_thread_count([&] { return run_op<TransposeOp>({img}, Axes{0, 2, 3, 1}); });
  }
}

TEST_CASE("an NHWC channel shuffle of two groups (ShuffleNet's) puts every element in its place at any "
          "thread count",
          "[kernel][intra_op]") {
  for (std::int64_t half : {7, 16, 24, 40}) {  // a partial vector, one, one and a half, two and a half
    INFO(half << " channels a group");
    const Tensor x = iota<float>({2, 9, 11, 2, half});
    const auto got = run_op<TransposeOp>({x}, Axes{0, 1, 2, 4, 3}).out().to_vector<float>();
    const auto v = x.to_vector<float>();
    bool ok = true;
    for (std::int64_t p = 0; p < 2 * 9 * 11; ++p)
      for (std::int64_t k = 0; k < half; ++k)
        for (std::int64_t g = 0; g < 2; ++g)
          ok = ok && got[static_cast<std::size_t>((p * half + k) * 2 + g)] ==
                         v[static_cast<std::size_t>((p * 2 + g) * half + k)];
    CHECK(ok);
    same_bits_at_any_thread_count([&] { return run_op<TransposeOp>({x}, Axes{0, 1, 2, 4, 3}); });
  }
}

TEST_CASE("add_n gives the same bits at any thread count", "[kernel][intra_op]") {
  const Tensor a = filled<float>(Dims{8, 32, 28, 28}, -1, 1, 1), b = filled<float>(Dims{8, 32, 28, 28}, -1, 1, 2),
               c = filled<float>(Dims{8, 32, 28, 28}, -1, 1, 3);
  same_bits_at_any_thread_count([&] { return run_op<AddNOp>({a, b, c}); });
}

TEST_CASE("reduce_as of a bias gradient (rows summed into a row, its columns split across threads) gives the "
          "general path's bits at any thread count",
          "[kernel][intra_op]") {
  const auto bf16 = [](const Tensor& t) { return run_op<CastOp>({t}, DataType::BFloat16).out(); };
  // 6500 columns: two ranges of columns at 2 threads, three at 3.
  const Tensor f = filled<float>(Dims{2, 37, 6500}, -1, 1, 1);
  for (const Tensor& x : {f, bf16(f)}) {
    INFO(to_string(x.dtype()));
    const Tensor row = Tensor::zeros(Dims{6500}, x.dtype());
    same_bits_at_any_thread_count([&] { return run_op<ReduceAsOp>({x, row}); });
    // A target of [1, 1, 6500] goes the general way (sum_groups) over the same sums.
    const Tensor general = run_op<ReduceAsOp>({x, Tensor::zeros(Dims{1, 1, 6500}, x.dtype())}).out();
    CHECK(same_bits(run_op<ReduceAsOp>({x, row}).out().reshape(Dims{1, 1, 6500}), general));
  }
}

TEST_CASE("fused_matmul's bias and activation, split across the threads, give the same bits at any thread "
          "count and the unfused ops' bits, in f32, bf16 and f16, and f64 the unfused ops' bits",
          "[kernel][intra_op]") {
  // 16-bit: 90000 elements widened in chunks of 2048, which start and end
  // inside rows of 300. Gelu (either form) also keeping its pre-activation,
  // the add's bits.
  const DataType dt = GENERATE(DataType::Float32, DataType::Float64, DataType::BFloat16, DataType::Float16);
  const auto as_dt = [&](const Tensor& t) { return dt == t.dtype() ? t : run_op<CastOp>({t}, dt).out(); };
  const Tensor x = as_dt(filled<float>(Dims{2, 150, 64}, -1, 1, 1)), w = as_dt(filled<float>(Dims{64, 300}, -1, 1, 2));
  const Tensor bias = as_dt(filled<float>(Dims{300}, -1, 1, 3)), one = as_dt(filled<float>(Dims{1}, -1, 1, 4));
  for (const std::string act : {"", "kiln.relu", "kiln.tanh", "kiln.gelu", "kiln.gelu_tanh"})
    for (const Tensor* b : std::initializer_list<const Tensor*>{&bias, nullptr, &one})
      for (const bool keep : {false, true}) {
        if ((!b && act.empty()) || (keep && act.empty())) continue;
        INFO(to_string(dt) << ", " << (act.empty() ? "no activation" : act) << ", bias of " << (b ? b->numel() : 0)
                           << (keep ? ", keeping the pre-activation" : ""));
        const std::vector<Tensor> in = b ? std::vector<Tensor>{x, w, *b} : std::vector<Tensor>{x, w};
        auto run = [&] {
          return run_kernel(in, [&](Builder& bl, const std::vector<Value>& v) {
            const Value bv = v.size() > 2 ? v[2] : Value();
            return bl.create<FusedMatmulOp>(v[0], v[1], bv, false, false, act, keep).operation();
          });
        };
        // f64's product is OpenBLAS's dgemm, whose sums depend on its
        // thread count: its epilogue is checked against the unfused ops at
        // one thread count.
        if (dt != DataType::Float64) same_bits_at_any_thread_count(run);
        Tensor sum = run_op<MatmulOp>({x, w}, false, false).out();
        if (b) sum = run_op<AddOp>({sum, *b}).out();
        Tensor want = sum;
        if (act == "kiln.relu") want = run_op<ReluOp>({sum}).out();
        if (act == "kiln.tanh") want = run_op<TanhOp>({sum}).out();
        if (act == "kiln.gelu" || act == "kiln.gelu_tanh") want = run_op<GeluOp>({sum}, act == "kiln.gelu_tanh").out();
        const auto got = run();
        CHECK(same_bits(got.out(), want));
        if (keep) CHECK(same_bits(got.out(1), sum));
      }
}

TEST_CASE("layer_norm, rms_norm and their gradients (dw and db summed over the rows) give the same bits at "
          "any thread count",
          "[kernel][intra_op]") {
  // 4070 rows of 400: y and dx split by rows; 64 blocks of rows (the last
  // one short) whose dw and db columns, 800 in all, split at 2 and 3
  // threads, one range crossing from dw's columns into db's.
  const Dims d{2, 2035, 400};
  const Tensor x = filled<float>(d, -3, 3, 1), dy = filled<float>(d, -1, 1, 2);
  const Tensor w = filled<float>(Dims{400}, 0.5f, 1.5f, 3), b = filled<float>(Dims{400}, -1, 1, 4);
  same_bits_at_any_thread_count([&] { return run_op<LayerNormOp>({x, w, b}, std::int64_t{2}, 1e-5); });
  same_bits_at_any_thread_count([&] { return run_op<RmsNormOp>({x, w}, std::int64_t{2}, 1e-6); });
  const auto ln = run_op<LayerNormOp>({x, w, b}, std::int64_t{2}, 1e-5);
  same_bits_at_any_thread_count([&] {
    return run_op<GradOf<LayerNormOp>>({x, w, ln.out(1), ln.out(2), dy}, std::int64_t{2}, 1e-5);
  });
  const auto rms = run_op<RmsNormOp>({x, w}, std::int64_t{2}, 1e-6);
  same_bits_at_any_thread_count(
      [&] { return run_op<GradOf<RmsNormOp>>({x, w, rms.out(1), dy}, std::int64_t{2}, 1e-6); });
}

TEST_CASE("sgd_, momentum_, adamw_ and merged_adamw_ give the same bits at any thread count",
          "[kernel][intra_op]") {
  // Each run updates fresh copies (the ops write their operands in place).
  const Dims d{3001, 7};
  const Tensor p0 = filled<float>(d, -1, 1, 1), g = filled<float>(d, -1, 1, 2);
  const Tensor m0 = filled<float>(d, -0.1f, 0.1f, 3), v0 = filled<float>(d, 0, 0.01f, 4);
  const Tensor lr = Tensor::from_vector<float>(Dims{1}, {0.01f});
  const Tensor b1p = Tensor::from_vector<float>(Dims{1}, {0.81f});
  const Tensor b2p = Tensor::from_vector<float>(Dims{1}, {0.9f});
  auto copy = [](const Tensor& t) { return t.clone(); };
  same_bits_at_any_thread_count([&] { return run_op<Sgd_Op>({copy(p0), g, lr}); });
  same_bits_at_any_thread_count([&] { return run_op<Momentum_Op>({copy(p0), g, copy(m0), lr}, 0.9, true); });
  same_bits_at_any_thread_count([&] {
    return run_op<AdamW_Op>({copy(p0), g, lr, copy(m0), copy(v0), copy(b1p), copy(b2p)}, 0.9, 0.999, 1e-8,
                            0.01);
  });
  const Tensor small = filled<float>(Dims{5}, -1, 1, 5);
  same_bits_at_any_thread_count([&] {
    // The learning rate, then each parameter's p, g, m1, m2, beta1^t, beta2^t.
    const Tensor z = Tensor::zeros(Dims{5}, DataType::Float32);
    return run_kernel({lr, copy(p0), g, copy(m0), copy(v0), copy(b1p), copy(b2p), copy(small), small, z.clone(),
                       z.clone(), copy(b1p), copy(b2p)},
                      [](Builder& b, const std::vector<Value>& x) {
                        const std::vector<Value> members(x.begin() + 1, x.end());
                        return b.create<MergedAdamW_Op>(x[0], members, AdamW_Op::Attributes{0.9, 0.999, 1e-8, 0.01})
                            .operation();
                      });
  });
}

TEST_CASE("a pointwise NHWC convolution of channel-scaled x, its factors folded into the weights per image, "
          "gives the same bits at any thread count",
          "[kernel][intra_op]") {
  // 3 images of 40 x 30 pixels: two blocks an image (640 rows and 560);
  // factors per image and shared.
  const Tensor x = filled<float>(Dims{3, 40, 30, 24}, -1, 1, 1), w = filled<float>(Dims{16, 24, 1, 1}, -1, 1, 2);
  const Tensor b = filled<float>(Dims{16}, -1, 1, 3), r = filled<float>(Dims{3, 40, 30, 16}, -2, 2, 4);
  for (const std::int64_t n : {3, 1})
    for (const std::string act : {"none", "silu"}) {
      INFO(act << (n == 1 ? ", shared factors" : ", factors per image"));
      const Tensor s = filled<float>(Dims{n, 1, 1, 24}, 0, 2, 5);
      const FusedConv2dOp::Attributes a{Axes{1, 1}, Axes{0, 0}, Axes{1, 1}, 1, act, "NHWC", false};
      same_bits_at_any_thread_count([&] {
        return run_kernel({x, s, w, b, r}, [&](Builder& bb, const std::vector<Value>& v) {
          return bb.create<ChannelScaledConv2dOp>(v[0], v[1], v[2], v[3], a, v[4]).operation();
        });
      });
    }
}

TEST_CASE("an NHWC convolution's SiLU summed into its mean over the pixels gives the same bits at any thread "
          "count",
          "[kernel][intra_op]") {
  for (const std::int64_t batch : {3, 1}) {
    INFO("batch " << batch);
    const Tensor x = filled<float>(Dims{batch, 28, 28, 24}, -1, 1, 1), w = filled<float>(Dims{24, 1, 3, 3}, -1, 1, 2);
    const Tensor b = filled<float>(Dims{24}, -1, 1, 3);
    const FusedConv2dOp::Attributes a{Axes{1, 1}, Axes{1, 1}, Axes{1, 1}, 24, "silu", "NHWC", false};
    same_bits_at_any_thread_count([&] {
      return run_kernel({x, w, b}, [&](Builder& bb, const std::vector<Value>& v) {
        return bb.create<FusedConv2dMeanOp>(v[0], v[1], v[2], a).operation();
      });
    });
  }
}

TEST_CASE("an expansion and depthwise convolution computed in one pass give the same bits at any thread count",
          "[kernel][intra_op]") {
  // 40 x 48 x 96 expanded: a ring of rows; 14 x 14 x 96: whole images. A
  // batch of one is split into bands of rows, which expand their first
  // rows again.
  for (const Axes& hw : {Axes{40, 48}, Axes{14, 14}})
    for (const std::int64_t batch : {3, 1})
      for (const std::int64_t stride : {1, 2}) {
        INFO(hw[0] << "x" << hw[1] << ", batch " << batch << ", stride " << stride);
        const Tensor x = filled<float>(Dims{batch, hw[0], hw[1], 8}, -1, 1, 1);
        const Tensor pw = filled<float>(Dims{96, 8, 1, 1}, -1, 1, 2), pb = filled<float>(Dims{96}, -1, 1, 3);
        const Tensor dw = filled<float>(Dims{96, 1, 3, 3}, -1, 1, 4), db = filled<float>(Dims{96}, -1, 1, 5);
        const PointwiseDepthwiseConv2dOp::Attributes a{Axes{stride, stride}, Axes{1, 1}, Axes{1, 1}, "relu6", "silu"};
        same_bits_at_any_thread_count([&] {
          return run_kernel({x, pw, pb, dw, db}, [&](Builder& bb, const std::vector<Value>& v) {
            return bb.create<PointwiseDepthwiseConv2dOp>(v[0], v[1], v[2], v[3], v[4], a).operation();
          });
        });
      }
}

TEST_CASE("an NHWC convolution of one input channel, run by kiln's direct kernel, gives the same bits at any "
          "thread count",
          "[kernel][intra_op]") {
  const Tensor x = filled<float>(Dims{5, 28, 28, 1}, -1, 1, 1), w = filled<float>(Dims{6, 1, 5, 5}, -1, 1, 2);
  const Tensor b = filled<float>(Dims{6}, -1, 1, 3);
  same_bits_at_any_thread_count([&] {
    return run_op<FusedConv2dOp>({x, w, b}, Axes{1, 1}, Axes{2, 2}, Axes{1, 1}, std::int64_t{1}, std::string("relu"),
                                 std::string("NHWC"));
  });
}
