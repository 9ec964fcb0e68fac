// Reference tests of kiln.matmul's CPU kernel (OpenBLAS, oneDNN): every transpose
// combination, unbatched and batched with broadcast batch dims, f32 and f64,
// against a triple loop written here, and det (pivoting, batches); plus
// bad-input errors at build time (InferMeta) and at run time (dims unknown
// when the program was built).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/kernel/blas.h"

using namespace kiln;
using kiln_test::run_kernel;
using kiln_test::run_op;

namespace {

// out = op(x) @ op(y) by the definition, batch dims broadcast numpy-style.
template <typename T>
std::vector<T> ref_matmul(const Tensor& x, const Tensor& y, bool tx, bool ty,
                          std::vector<std::int64_t>* out_dims) {
  auto xd = x.dims().to_vector(), yd = y.dims().to_vector();
  std::int64_t xr = xd.size(), yr = yd.size();
  std::int64_t m = tx ? xd[xr - 1] : xd[xr - 2], k = tx ? xd[xr - 2] : xd[xr - 1];
  std::int64_t n = ty ? yd[yr - 2] : yd[yr - 1];
  std::vector<std::int64_t> xb(xd.begin(), xd.end() - 2), yb(yd.begin(), yd.end() - 2);
  std::size_t br = std::max(xb.size(), yb.size());
  xb.insert(xb.begin(), br - xb.size(), 1);
  yb.insert(yb.begin(), br - yb.size(), 1);
  std::vector<std::int64_t> ob(br);
  std::int64_t batch = 1;
  for (std::size_t i = 0; i < br; ++i) batch *= (ob[i] = xb[i] == 1 ? yb[i] : xb[i]);
  auto xv = x.to_vector<T>(), yv = y.to_vector<T>();
  std::vector<T> out(static_cast<std::size_t>(batch * m * n));
  for (std::int64_t b = 0; b < batch; ++b) {
    std::int64_t rem = b, xi = 0, yi = 0, xs = 1, ys = 1;
    for (std::size_t d = br; d-- > 0;) {
      std::int64_t idx = rem % ob[d];
      rem /= ob[d];
      xi += (xb[d] == 1 ? 0 : idx) * xs;
      yi += (yb[d] == 1 ? 0 : idx) * ys;
      xs *= xb[d];
      ys *= yb[d];
    }
    const T* xm = xv.data() + xi * m * k;
    const T* ym = yv.data() + yi * k * n;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          double a = tx ? xm[p * m + i] : xm[i * k + p];
          double c = ty ? ym[j * k + p] : ym[p * n + j];
          acc += a * c;
        }
        out[static_cast<std::size_t>((b * m + i) * n + j)] = static_cast<T>(acc);
      }
  }
  *out_dims = ob;
  out_dims->push_back(m);
  out_dims->push_back(n);
  return out;
}

// [batch..., rows, cols] with rows/cols swapped when `t`.
std::vector<std::int64_t> mat_dims(std::vector<std::int64_t> batch, std::int64_t r, std::int64_t c,
                                   bool t) {
  batch.push_back(t ? c : r);
  batch.push_back(t ? r : c);
  return batch;
}

template <typename T>
void check_matmul(const std::vector<std::int64_t>& xb, const std::vector<std::int64_t>& yb,
                  std::int64_t m, std::int64_t k, std::int64_t n, bool tx, bool ty) {
  INFO("x batch " << Dims(xb) << ", y batch " << Dims(yb) << ", m k n = " << m << " " << k << " "
                  << n << ", transpose_x " << tx << ", transpose_y " << ty);
  Tensor x = kiln_test::filled<T>(Dims(mat_dims(xb, m, k, tx)), -1, 1, 3);
  Tensor y = kiln_test::filled<T>(Dims(mat_dims(yb, k, n, ty)), -1, 1, 7);
  auto run = run_op<MatmulOp>({x, y}, tx, ty);
  std::vector<std::int64_t> want_dims;
  auto want = ref_matmul<T>(x, y, tx, ty, &want_dims);
  CHECK(run.out().dims().to_vector() == want_dims);
  kiln_test::check_close<T>(run.out(), want, 1e-5, 1e-5);
}

}  // namespace

TEST_CASE("matmul matches the triple loop for every transpose combination", "[kernel]") {
  for (bool tx : {false, true})
    for (bool ty : {false, true}) {
      check_matmul<float>({}, {}, 3, 4, 5, tx, ty);
      check_matmul<float>({}, {}, 1, 7, 1, tx, ty);  // row times column
      check_matmul<float>({}, {}, 17, 33, 9, tx, ty);
      check_matmul<double>({}, {}, 6, 2, 3, tx, ty);
    }
}

TEST_CASE("a small matrix times one column matches the triple loop at every shape", "[kernel]") {
  // The small-matrix path (no BLAS call): rows in blocks of four and eight
  // lanes, outputs of 8/16/24/32 kept in registers, and every remainder.
  for (bool tx : {false, true})
    for (bool ty : {false, true})
      for (std::int64_t m : {1, 3, 4, 7, 8, 16, 17, 24, 32, 33})
        for (std::int64_t k : {1, 5, 8, 16, 19, 30}) {
          check_matmul<float>({}, {}, m, k, 1, tx, ty);
          check_matmul<double>({}, {}, m, k, 1, tx, ty);
        }
}

TEST_CASE("batched matmul pairs each batch's matrices, with and without transposes", "[kernel]") {
  for (bool tx : {false, true})
    for (bool ty : {false, true}) {
      check_matmul<float>({4}, {4}, 3, 5, 2, tx, ty);
      check_matmul<float>({2, 3}, {2, 3}, 2, 4, 3, tx, ty);
      check_matmul<double>({5}, {5}, 3, 3, 3, tx, ty);
    }
}

TEST_CASE("matmul broadcasts batch dims numpy-style", "[kernel]") {
  for (bool tx : {false, true})
    for (bool ty : {false, true}) {
      check_matmul<float>({4}, {}, 3, 5, 2, tx, ty);         // one y for every x (one GEMM)
      check_matmul<float>({2, 3}, {}, 3, 5, 2, tx, ty);
      check_matmul<float>({}, {4}, 3, 5, 2, tx, ty);         // one x for every y
      check_matmul<float>({2, 1}, {1, 3}, 2, 3, 4, tx, ty);  // outer product of batches
      check_matmul<float>({3, 1, 2}, {4, 1}, 2, 2, 2, tx, ty);
      check_matmul<double>({1}, {3}, 2, 3, 2, tx, ty);
      check_matmul<float>({4}, {1, 1}, 3, 2, 2, tx, ty);     // y's batch is all ones
    }
}

TEST_CASE("matmul handles empty dims: zero rows give an empty result, zero depth gives zeros", "[kernel]") {
  check_matmul<float>({}, {}, 0, 3, 4, false, false);
  check_matmul<float>({}, {}, 3, 4, 0, false, true);
  check_matmul<float>({0}, {0}, 2, 2, 2, false, false);
  Tensor x = kiln_test::filled<float>({2, 0});
  Tensor y = kiln_test::filled<float>({0, 3});
  auto run = run_op<MatmulOp>({x, y});
  CHECK(run.out().dims() == Dims{2, 3});
  CHECK(run.out().to_vector<float>() == std::vector<float>(6, 0.0f));
}

TEST_CASE("matmul rejects bad operands when the op is built, naming the op", "[kernel]") {
  Program p;
  using kiln_test::build_op;
  KILN_CHECK_ERROR(build_op<MatmulOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {4, 5}}}),
                     InvalidArgument, {"kiln.matmul", "contraction"});
  KILN_CHECK_ERROR(build_op<MatmulOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {3, 5}}},
                                        true, false),
                     InvalidArgument, {"kiln.matmul"});
  KILN_CHECK_ERROR(build_op<MatmulOp>(p, {{DataType::Float32, {3}}, {DataType::Float32, {3, 2}}}),
                     InvalidArgument, {"kiln.matmul", "rank"});
  KILN_CHECK_ERROR(
      build_op<MatmulOp>(p, {{DataType::Float32, {2, 2, 3}}, {DataType::Float32, {3, 3, 4}}}),
      InvalidArgument, {"kiln.matmul", "broadcast"});
  KILN_CHECK_ERROR(build_op<MatmulOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float64, {3, 2}}}),
                     InvalidArgument, {"kiln.matmul", "f32", "f64"});
}

TEST_CASE("matmul checks dims at run time when they were unknown at build time", "[kernel]") {
  // The data ops say [-1, -1]: InferMeta cannot see the mismatch; the kernel must.
  auto on_unknown = [](Builder& b, const std::vector<Value>&) {
    auto x = b.create<DataOp>("ux", std::vector<std::int64_t>{-1, -1});
    auto y = b.create<DataOp>("uy", std::vector<std::int64_t>{-1, -1});
    return b.create<MatmulOp>(x.result(), y.result()).operation();
  };
  Tensor x = kiln_test::filled<float>({2, 3}), y = kiln_test::filled<float>({4, 2});
  KILN_CHECK_ERROR(run_kernel({x, y}, on_unknown), InvalidArgument,
                     {"kiln.matmul", "contraction", "[2x3]", "[4x2]"});
  auto batched = [](Builder& b, const std::vector<Value>&) {
    auto x = b.create<DataOp>("ux", std::vector<std::int64_t>{-1, 2, 2});
    auto y = b.create<DataOp>("uy", std::vector<std::int64_t>{-1, 2, 2});
    return b.create<MatmulOp>(x.result(), y.result()).operation();
  };
  Tensor bx = kiln_test::filled<float>({2, 2, 2}), by = kiln_test::filled<float>({3, 2, 2});
  KILN_CHECK_ERROR(run_kernel({bx, by}, batched), InvalidArgument, {"kiln.matmul", "batch"});
}

TEST_CASE("matmul has f32 and f64 kernels and reports other dtypes as unimplemented", "[kernel]") {
  auto dtypes = KernelRegistry::instance().dtypes_for(TypeId::get<MatmulOp>(), PlaceKind::Cpu);
  CHECK(std::find(dtypes.begin(), dtypes.end(), DataType::Float32) != dtypes.end());
  CHECK(std::find(dtypes.begin(), dtypes.end(), DataType::Float64) != dtypes.end());
  Tensor x = Tensor::from_vector<std::int32_t>({1, 1}, {2});
  KILN_CHECK_ERROR(run_op<MatmulOp>({x, x}), Unimplemented, {"kiln.matmul", "i32"});
}

namespace {
struct RegistryOrderProbe {};  // a type of its own: kernels registered only below
}  // namespace

TEST_CASE("the kernel registry lists an op's dtypes in DataType's order, whatever order they were "
          "registered in",
          "[kernel]") {
  KernelRegistry& r = KernelRegistry::instance();
  const TypeId probe = TypeId::get<RegistryOrderProbe>();
  for (DataType dt : {DataType::Int64, DataType::Float64, DataType::BFloat16, DataType::Float32})
    r.add(probe, "test.registry_order", PlaceKind::Cpu, dt, KernelInfo{[](KernelContext&) {}});
  CHECK(r.dtypes_for(probe, PlaceKind::Cpu) ==
        std::vector<DataType>{DataType::BFloat16, DataType::Float32, DataType::Float64, DataType::Int64});
}

TEST_CASE("blas_set_num_threads sets OpenBLAS's thread count", "[kernel]") {
  int before = blas_num_threads();
  blas_set_num_threads(1);
  CHECK(blas_num_threads() == 1);
  blas_set_num_threads(0);  // taken as 1
  CHECK(blas_num_threads() == 1);
  blas_set_num_threads(before);
  CHECK(blas_num_threads() == before);
}

TEST_CASE("det gives the determinant of each square matrix, pivoting where needed", "[kernel]") {
  // [[0, 2], [3, 4]] needs a row swap: det = -6; a singular 3x3: 0; a
  // batch of two 3x3 matrices.
  auto two = run_op<DetOp>({Tensor::from_vector<double>({2, 2}, {0, 2, 3, 4})});
  CHECK(two.out().dims().to_vector() == std::vector<std::int64_t>{});
  kiln_test::check_close<double>(two.out(), {-6});
  auto batch = run_op<DetOp>({Tensor::from_vector<float>(
      {2, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 0, 1, 1, 3, 2, 1, 1, 2})});
  CHECK(batch.out().dims().to_vector() == std::vector<std::int64_t>{2});
  kiln_test::check_close<float>(batch.out(), {0, 6}, 1e-5, 1e-5);
}

TEST_CASE("det rejects non-square matrices and integer dtypes", "[kernel]") {
  Program p;
  using kiln_test::build_op;
  KILN_CHECK_ERROR((build_op<DetOp>(p, {{DataType::Float32, {2, 3}}})), InvalidArgument,
                   {"kiln.det", "square", "[2, 3]"});
  KILN_CHECK_ERROR((build_op<DetOp>(p, {{DataType::Float32, {3}}})), InvalidArgument, {"kiln.det", "square"});
  KILN_CHECK_ERROR((build_op<DetOp>(p, {{DataType::Int32, {2, 2}}})), InvalidArgument, {"kiln.det", "i32"});
}
