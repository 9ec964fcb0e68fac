// The CUDA kernels of train.cu — gather / embedding and their scatter-add
// gradients, the optimizer updates, the random ops — against the CPU kernels
// on the same inputs ([cuda]: skipped without a device). Tolerances:
// gathers, optimizer updates (one shared formula, no FMA) and random
// numbers (one shared generator) are bit-identical; scatter-add gradients
// sum in the order their atomics land, so they are compared to 1e-6
// relative and absolute (f32; 1e-12 for f64).
#include <cstdint>
#include <vector>

#include "kernel/cuda_test_util.h"
#include "kiln/kernel/random.h"

using namespace kiln;
using kiln_test::filled;
using kiln_test::have_cuda;
using kiln_test::run_cuda_op;
using kiln_test::run_op;

namespace {

template <typename T>
void check_identical(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  REQUIRE(got.dtype() == want.dtype());
  CHECK(got.to_vector<T>() == want.to_vector<T>());
}

template <typename T>
Tensor scalar(double v) {
  return Tensor::from_vector<T>({1}, {static_cast<T>(v)});
}

// Copies, so a CPU run of an in-place op leaves the caller's tensors as they were.
std::vector<Tensor> clones(const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(t.clone());
  return out;
}

}  // namespace

TEST_CASE("CUDA gather and embedding copy the CPU's rows, any dtype", "[cuda][kernel]") {
  if (!have_cuda()) return;
  const Tensor x = filled<float>({5, 4, 3}, -1, 1, 1);
  const Tensor idx = Tensor::from_vector<std::int64_t>({2, 2}, {4, 0, 2, 2});
  const Tensor idx32 = Tensor::from_vector<std::int32_t>({3}, {1, 2, 0});  // in range on every axis
  for (std::int64_t axis : {0, 1, 2, -1}) {
    INFO("axis " << axis);
    check_identical<float>(run_cuda_op<GatherOp>({x, idx32}, axis).out(),
                           run_op<GatherOp>({x, idx32}, axis).out());
  }
  check_identical<float>(run_cuda_op<GatherOp>({x, idx}, std::int64_t{0}).out(),
                         run_op<GatherOp>({x, idx}, std::int64_t{0}).out());
  const Tensor xi = Tensor::from_vector<std::int16_t>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  check_identical<std::int16_t>(
      run_cuda_op<GatherOp>({xi, idx32.slice(0, 1)}, std::int64_t{1}).out(),
      run_op<GatherOp>({xi, idx32.slice(0, 1)}, std::int64_t{1}).out());
  const Tensor w = filled<double>({6, 5}, -1, 1, 2);
  const Tensor ids = Tensor::from_vector<std::int64_t>({2, 3}, {5, 0, 2, 2, 1, 5});
  for (std::int64_t pad : {-1, 2})
    check_identical<double>(run_cuda_op<EmbeddingOp>({w, ids}, pad).out(),
                            run_op<EmbeddingOp>({w, ids}, pad).out());
  // An id out of range: the CPU's error, with the id and its position.
  const Tensor bad = Tensor::from_vector<std::int32_t>({3}, {1, 6, 9});
  KILN_CHECK_ERROR(run_cuda_op<EmbeddingOp>({w, bad}), OutOfRange,
                   {"kiln.embedding", "id 6 (at position 1)", "[0, 6)"});
  KILN_CHECK_ERROR(run_cuda_op<GatherOp>({x, bad}, std::int64_t{1}), OutOfRange,
                   {"index 6 (at position 1)", "[0, 4)"});
}

TEST_CASE("CUDA gather_grad and embedding_grad scatter-add like the CPU", "[cuda][kernel]") {
  if (!have_cuda()) return;
  const Tensor x = filled<float>({5, 4, 3}, -1, 1, 1);
  const Tensor idx = Tensor::from_vector<std::int64_t>({6}, {3, 0, 3, 3, 1, 0});
  for (std::int64_t axis : {0, 1}) {
    INFO("axis " << axis);
    const Tensor out = run_op<GatherOp>({x, idx}, axis).out();
    const Tensor d = filled<float>(out.dims(), -1, 1, 3);
    kiln_test::check_close<float>(
        run_cuda_op<GradOf<GatherOp>>({x, idx, d}, axis).out(),
        run_op<GradOf<GatherOp>>({x, idx, d}, axis).out().to_vector<float>(), 1e-6, 1e-6);
  }
  const Tensor w = filled<double>({7, 33}, -1, 1, 2);
  const Tensor ids = Tensor::from_vector<std::int32_t>(
      {4, 5}, {1, 2, 1, 6, 0, 1, 1, 1, 3, 2, 6, 6, 0, 1, 2, 3, 4, 5, 1, 1});
  const Tensor d = filled<double>({4, 5, 33}, -1, 1, 4);
  for (std::int64_t pad : {-1, 1})
    kiln_test::check_close<double>(
        run_cuda_op<GradOf<EmbeddingOp>>({w, ids, d}, pad).out(),
        run_op<GradOf<EmbeddingOp>>({w, ids, d}, pad).out().to_vector<double>(), 1e-12, 1e-12);
  const Tensor bad = Tensor::from_vector<std::int32_t>({4, 5}, std::vector<std::int32_t>(20, 7));
  KILN_CHECK_ERROR(run_cuda_op<GradOf<EmbeddingOp>>({w, bad, d}, std::int64_t{-1}), OutOfRange,
                   {"id 7 (at position 0)"});
}

TEST_CASE("CUDA optimizer updates give the CPU's bits, in place and out of place",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  const Dims dims{1000};
  const Tensor p = filled<float>(dims, -1, 1, 1), g = filled<float>(dims, -1, 1, 2);
  const Tensor v = filled<float>(dims, -0.1, 0.1, 3);
  const Tensor m1 = filled<float>(dims, -0.1, 0.1, 4), m2 = filled<float>(dims, 0, 0.01, 5);
  const std::vector<Tensor> sgd{p, g, scalar<float>(0.1)};
  auto gs = run_cuda_op<Sgd_Op>(clones(sgd));
  check_identical<float>(gs.out(), run_op<Sgd_Op>(clones(sgd)).out());
  CHECK(gs.outputs[0] == gs.inputs[0]);  // in place: one variable
  for (bool nesterov : {false, true}) {
    const std::vector<Tensor> in{p, g, v, scalar<float>(0.05)};
    auto got = run_cuda_op<Momentum_Op>(clones(in), 0.9, nesterov);
    auto want = run_op<Momentum_Op>(clones(in), 0.9, nesterov);
    for (int k = 0; k < 2; ++k) check_identical<float>(got.out(k), want.out(k));
  }
  const std::vector<Tensor> adam{
      p, g, scalar<float>(1e-3), m1, m2, scalar<float>(0.9 * 0.9), scalar<float>(0.999 * 0.999)};
  auto ga = run_cuda_op<Adam_Op>(clones(adam), 0.9, 0.999, 1e-8);
  auto wa = run_op<Adam_Op>(clones(adam), 0.9, 0.999, 1e-8);
  for (int k = 0; k < 5; ++k) check_identical<float>(ga.out(k), wa.out(k));
  auto gw = run_cuda_op<AdamW_Op>(clones(adam), 0.9, 0.999, 1e-8, 0.01);
  auto ww = run_op<AdamW_Op>(clones(adam), 0.9, 0.999, 1e-8, 0.01);
  for (int k = 0; k < 5; ++k) check_identical<float>(gw.out(k), ww.out(k));
  const Tensor pd = filled<double>(dims, -1, 1, 6), gd = filled<double>(dims, -1, 1, 7);
  const std::vector<Tensor> adam64{pd,
                                   gd,
                                   scalar<double>(1e-3),
                                   filled<double>(dims, -0.1, 0.1, 8),
                                   filled<double>(dims, 0, 0.01, 9),
                                   scalar<double>(0.9),
                                   scalar<double>(0.999)};
  auto gd64 = run_cuda_op<AdamW_Op>(clones(adam64), 0.9, 0.999, 1e-8, 0.1);
  auto wd64 = run_op<AdamW_Op>(clones(adam64), 0.9, 0.999, 1e-8, 0.1);
  for (int k = 0; k < 5; ++k) check_identical<double>(gd64.out(k), wd64.out(k));
  KILN_CHECK_ERROR(run_cuda_op<Sgd_Op>({p, filled<float>({999}), scalar<float>(0.1)}),
                   InvalidArgument, {"kiln.sgd_"});
}

TEST_CASE("CUDA random ops draw the CPU's numbers bit for bit", "[cuda][kernel]") {
  if (!have_cuda()) return;
  using I64s = std::vector<std::int64_t>;
  for (std::int64_t seed : {std::int64_t{7}, std::int64_t{-3}}) {
    INFO("seed " << seed);
    for (const I64s& shape : {I64s{1}, I64s{65}, I64s{33, 31}, I64s{0, 2}}) {
      check_identical<float>(
          run_cuda_op<UniformRandomOp>({}, shape, -2.0, 3.0, seed, DataType::Float32).out(),
          run_op<UniformRandomOp>({}, shape, -2.0, 3.0, seed, DataType::Float32).out());
      check_identical<double>(
          run_cuda_op<UniformRandomOp>({}, shape, 0.0, 1.0, seed, DataType::Float64).out(),
          run_op<UniformRandomOp>({}, shape, 0.0, 1.0, seed, DataType::Float64).out());
      check_identical<float>(
          run_cuda_op<GaussianRandomOp>({}, shape, 0.5, 2.0, seed, DataType::Float32).out(),
          run_op<GaussianRandomOp>({}, shape, 0.5, 2.0, seed, DataType::Float32).out());
      check_identical<double>(
          run_cuda_op<GaussianRandomOp>({}, shape, 0.0, 1.0, seed, DataType::Float64).out(),
          run_op<GaussianRandomOp>({}, shape, 0.0, 1.0, seed, DataType::Float64).out());
    }
  }
  // seed 0: the process-wide generator, reset to one seed before each device.
  set_random_seed(123);
  const Tensor cpu =
      run_op<GaussianRandomOp>({}, I64s{4097}, 0.0, 1.0, std::int64_t{0}, DataType::Float64).out();
  set_random_seed(123);
  check_identical<double>(
      run_cuda_op<GaussianRandomOp>({}, I64s{4097}, 0.0, 1.0, std::int64_t{0}, DataType::Float64)
          .out(),
      cpu);
  const Tensor x = filled<float>({40, 50}, -1, 1, 3);
  for (bool is_test : {false, true}) {
    auto got = run_cuda_op<DropoutOp>({x}, 0.3, is_test, std::int64_t{9});
    auto want = run_op<DropoutOp>({x}, 0.3, is_test, std::int64_t{9});
    check_identical<float>(got.out(0), want.out(0));
    check_identical<bool>(got.out(1), want.out(1));
    const Tensor d = filled<float>({40, 50}, -1, 1, 4);
    check_identical<float>(
        run_cuda_op<GradOf<DropoutOp>>({d, want.out(1)}, 0.3, is_test, std::int64_t{9}).out(),
        run_op<GradOf<DropoutOp>>({d, want.out(1)}, 0.3, is_test, std::int64_t{9}).out());
  }
}
