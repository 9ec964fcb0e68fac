#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/cuda_context.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "test_util.h"

using kiln::DataType;
using kiln::Dims;
using kiln::ErrorKind;
using kiln::Tensor;
using kiln_test::error_of;

TEST_CASE("dims hold up to nine extents and print as AxB", "[runtime][tensor]") {
  Dims d{2, 3, 4};
  CHECK(d.rank() == 3);
  CHECK(d.numel() == 24);
  CHECK(d.row_numel() == 12);
  CHECK(d.to_string() == "2x3x4");
  CHECK(Dims{}.numel() == 1);
  CHECK(Dims(std::vector<std::int64_t>{2, 3}) == Dims{2, 3});
  CHECK(Dims{2, 3} != Dims{3, 2});
  auto e = error_of([] { Dims{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}; });
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Catch::Contains("rank 10") && Catch::Contains("maximum rank 9"));
  auto e2 = error_of([&] { (void)d.at(3); });
  CHECK(e2.kind() == ErrorKind::OutOfRange);
}

TEST_CASE("an empty tensor has the requested dims, dtype and place", "[runtime][tensor]") {
  Tensor t = Tensor::empty({2, 3}, DataType::Float32);
  CHECK(t.is_initialized());
  CHECK(t.dims() == Dims{2, 3});
  CHECK(t.rank() == 2);
  CHECK(t.dim(1) == 3);
  CHECK(t.numel() == 6);
  CHECK(t.bytes() == 24);
  CHECK(t.dtype() == DataType::Float32);
  CHECK(t.place() == kiln::Place::cpu());
  CHECK(t.offset() == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(t.data<float>()) % 64 == 0);
  CHECK(t.type_string() == "tensor<2x3xf32>@cpu");
  CHECK(Tensor::empty({}, DataType::Int64).type_string() == "tensor<i64>@cpu");
  CHECK(Tensor::empty({4}, DataType::Float64, kiln::Place::host_stream(1)).type_string() ==
        "tensor<4xf64>@host_stream:1");
}

TEST_CASE("a default tensor is uninitialized and has no data", "[runtime][tensor]") {
  Tensor t;
  CHECK_FALSE(t.is_initialized());
  CHECK(t.type_string() == "tensor<uninitialized>");
  CHECK(t.to_string() == "tensor<uninitialized>");
  CHECK(t.use_count() == 0);
  auto e = error_of([&] { (void)t.data<float>(); });
  CHECK(e.kind() == ErrorKind::PreconditionNotMet);
  CHECK_THAT(e.message(), Catch::Contains("uninitialized"));
  CHECK(error_of([&] { (void)t.raw_data(); }).kind() == ErrorKind::PreconditionNotMet);
  CHECK(error_of([&] { (void)t.reshape({1}); }).kind() == ErrorKind::PreconditionNotMet);
  CHECK(error_of([&] { (void)t.clone(); }).kind() == ErrorKind::PreconditionNotMet);
  CHECK(error_of([&] { (void)t.slice(0, 0); }).kind() == ErrorKind::PreconditionNotMet);
  CHECK(error_of([&] { (void)t.dim(0); }).kind() == ErrorKind::OutOfRange);
}

TEST_CASE("a tensor with a zero extent is initialized and empty", "[runtime][tensor]") {
  Tensor t = Tensor::empty({0, 3}, DataType::Float32);
  CHECK(t.is_initialized());
  CHECK(t.numel() == 0);
  CHECK(t.to_vector<float>().empty());
  CHECK(t.clone().numel() == 0);
}

TEST_CASE("from_vector and to_vector round-trip the values", "[runtime][tensor]") {
  Tensor f = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  CHECK(f.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  Tensor i = Tensor::from_vector<std::int64_t>({3}, {-1, 0, 7});
  CHECK(i.dtype() == DataType::Int64);
  CHECK(i.to_vector<std::int64_t>() == std::vector<std::int64_t>{-1, 0, 7});
  Tensor b = Tensor::from_vector<bool>({3}, {true, false, true});
  CHECK(b.dtype() == DataType::Bool);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, true});
  Tensor s = Tensor::from_vector<double>({}, {2.5});
  CHECK(s.to_vector<double>() == std::vector<double>{2.5});
}

TEST_CASE("from_vector with the wrong number of values is an InvalidArgument error", "[runtime][tensor]") {
  auto e = error_of([] { Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5}); });
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Catch::Contains("[2x3]") && Catch::Contains("6 elements") &&
                              Catch::Contains("given 5 values"));
}

TEST_CASE("reading a tensor as another dtype is an InvalidArgument error naming both", "[runtime][tensor]") {
  Tensor t = Tensor::empty({2, 3}, DataType::Float32);
  auto e = error_of([&] { (void)t.data<std::int64_t>(); });
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Catch::Contains("tensor<2x3xf32>@cpu") && Catch::Contains("expected f32") &&
                              Catch::Contains("given i64"));
  const Tensor& c = t;
  CHECK(error_of([&] { (void)c.data<double>(); }).kind() == ErrorKind::InvalidArgument);
  CHECK(error_of([&] { (void)c.to_vector<std::int32_t>(); }).kind() == ErrorKind::InvalidArgument);
}

TEST_CASE("bad dims, dtype or place for a new tensor are errors", "[runtime][tensor]") {
  auto neg = error_of([] { Tensor::empty({2, -3}, DataType::Float32); });
  CHECK(neg.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(neg.message(), Catch::Contains("[2x-3]") && Catch::Contains("given -3"));
  auto undef = error_of([] { Tensor::empty({2}, DataType::Undefined); });
  CHECK(undef.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(undef.message(), Catch::Contains("undefined"));
  auto huge = error_of([] { Tensor::empty({1 << 30, 1 << 30, 1 << 30}, DataType::Float32); });
  CHECK(huge.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(huge.message(), Catch::Contains("exceed the maximum"));
  // A CUDA place without CUDA built, or with no such device.
  auto cuda = error_of([] { Tensor::empty({2}, DataType::Float32, kiln::Place::cuda(63)); });
  CHECK(cuda.kind() == (kiln::built_with_cuda() ? ErrorKind::InvalidArgument : ErrorKind::Unimplemented));
  CHECK_THAT(cuda.message(), Catch::Contains("cuda:63"));
  auto undef_place = error_of([] { Tensor::empty({2}, DataType::Float32, kiln::Place{kiln::PlaceKind::Undefined, 0}); });
  CHECK(undef_place.kind() == ErrorKind::InvalidArgument);
}

TEST_CASE("a copy and a reshape share their tensor's buffer", "[runtime][tensor]") {
  Tensor t = Tensor::from_vector<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor copy = t;
  CHECK(copy.shares_buffer_with(t));
  Tensor r = t.reshape({3, 2});
  CHECK(r.shares_buffer_with(t));
  CHECK(r.dims() == Dims{3, 2});
  CHECK(t.use_count() == 3);
  r.data<float>()[0] = 42;
  CHECK(t.to_vector<float>()[0] == 42);
  CHECK(t.reshape({-1}).dims() == Dims{6});
  CHECK(t.reshape({2, -1, 1}).dims() == Dims{2, 3, 1});
  CHECK_FALSE(t.shares_buffer_with(Tensor::empty({2, 3}, DataType::Float32)));
  CHECK_FALSE(Tensor().shares_buffer_with(Tensor()));
}

TEST_CASE("a reshape to another element count is an InvalidArgument error", "[runtime][tensor]") {
  Tensor t = Tensor::empty({2, 3}, DataType::Float32);
  auto e = error_of([&] { (void)t.reshape({4, 2}); });
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Catch::Contains("[4x2]") && Catch::Contains("expected 6, given 8"));
  CHECK(error_of([&] { (void)t.reshape({-1, -1}); }).kind() == ErrorKind::InvalidArgument);
  CHECK(error_of([&] { (void)t.reshape({-1, 4}); }).kind() == ErrorKind::InvalidArgument);
  CHECK(error_of([&] { (void)t.reshape({-2, -3}); }).kind() == ErrorKind::InvalidArgument);
}

TEST_CASE("a view reinterprets the same bytes and may not read past the buffer", "[runtime][tensor]") {
  Tensor t = Tensor::from_vector<std::int32_t>({4}, {1, 2, 3, 4});
  Tensor v = t.view({2}, DataType::Int64);
  CHECK(v.shares_buffer_with(t));
  CHECK(v.dtype() == DataType::Int64);
  CHECK(v.to_vector<std::int64_t>()[0] == (std::int64_t{2} << 32 | 1));
  Tensor prefix = t.view({2});
  CHECK(prefix.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2});
  // The buffer is one 64-byte block: 16 floats fit, 17 do not.
  CHECK(t.view({16}).numel() == 16);
  auto e = error_of([&] { (void)t.view({17}); });
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Catch::Contains("needs 68 bytes") && Catch::Contains("64 bytes"));
}

TEST_CASE("a slice along dim 0 shares the buffer at an offset", "[runtime][tensor]") {
  Tensor t = Tensor::from_vector<float>({3, 2}, {0, 1, 2, 3, 4, 5});
  Tensor s = t.slice(1, 3);
  CHECK(s.shares_buffer_with(t));
  CHECK(s.dims() == Dims{2, 2});
  CHECK(s.offset() == 2 * sizeof(float));
  CHECK(s.to_vector<float>() == std::vector<float>{2, 3, 4, 5});
  Tensor ss = s.slice(1, 2);
  CHECK(ss.offset() == 4 * sizeof(float));
  CHECK(ss.to_vector<float>() == std::vector<float>{4, 5});
  s.data<float>()[0] = -1;
  CHECK(t.to_vector<float>()[2] == -1);
  CHECK(t.slice(3, 3).numel() == 0);
}

TEST_CASE("a slice out of bounds or of a rank-0 tensor is an error", "[runtime][tensor]") {
  Tensor t = Tensor::empty({3, 2}, DataType::Float32);
  auto e = error_of([&] { (void)t.slice(1, 4); });
  CHECK(e.kind() == ErrorKind::OutOfRange);
  CHECK_THAT(e.message(), Catch::Contains("[1, 4)") && Catch::Contains("<= 3"));
  CHECK(error_of([&] { (void)t.slice(-1, 2); }).kind() == ErrorKind::OutOfRange);
  CHECK(error_of([&] { (void)t.slice(2, 1); }).kind() == ErrorKind::OutOfRange);
  CHECK(error_of([] { (void)Tensor::empty({}, DataType::Float32).slice(0, 0); }).kind() ==
        ErrorKind::InvalidArgument);
}

TEST_CASE("a clone copies the values into a buffer of its own", "[runtime][tensor]") {
  Tensor t = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Tensor s = t.slice(1, 2);
  Tensor c = s.clone();
  CHECK_FALSE(c.shares_buffer_with(t));
  CHECK(c.offset() == 0);
  CHECK(c.to_vector<float>() == std::vector<float>{3, 4});
  c.data<float>()[0] = 9;
  CHECK(t.to_vector<float>()[2] == 3);
}

TEST_CASE("the buffer goes back to its allocator when the last view drops", "[runtime][tensor]") {
  kiln::CpuAllocator alloc;
  {
    Tensor t = Tensor::empty({16}, DataType::Float32, kiln::Place::cpu(), &alloc);
    Tensor v = t.reshape({4, 4});
    CHECK(alloc.bytes_in_use() == 64);
    t.reset();
    CHECK_FALSE(t.is_initialized());
    CHECK(alloc.bytes_in_use() == 64);
    Tensor c = v.clone();  // clones use the source's allocator
    CHECK(alloc.bytes_in_use() == 128);
  }
  CHECK(alloc.bytes_in_use() == 0);
  CHECK(alloc.cached_bytes() == 128);
}

TEST_CASE("a tensor over external memory calls its deleter once, at the end", "[runtime][tensor]") {
  std::vector<float> storage{1, 2, 3, 4, 5, 6};
  int deleted = 0;
  {
    Tensor t = Tensor::from_external(storage.data(), storage.size() * sizeof(float), {2, 3},
                                     DataType::Float32, kiln::Place::cpu(), [&](void* p) {
                                       CHECK(p == storage.data());
                                       ++deleted;
                                     });
    Tensor s = t.slice(1, 2);
    t.reset();
    CHECK(deleted == 0);
    CHECK(s.to_vector<float>() == std::vector<float>{4, 5, 6});
  }
  CHECK(deleted == 1);
}

TEST_CASE("external memory too small for the dims is an InvalidArgument error", "[runtime][tensor]") {
  float storage[4];
  auto e = error_of([&] { Tensor::from_external(storage, sizeof(storage), {2, 3}, DataType::Float32); });
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Catch::Contains("need 24 bytes") && Catch::Contains("16 bytes"));
  CHECK(error_of([] { Tensor::from_external(nullptr, 16, {2}, DataType::Float32); }).kind() ==
        ErrorKind::InvalidArgument);
}

TEST_CASE("share_buffer_from aliases another tensor's storage, keeping its own dims", "[runtime][tensor]") {
  Tensor in = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Tensor out = Tensor::empty({4}, DataType::Float32);
  out.share_buffer_from(in);
  CHECK(out.shares_buffer_with(in));
  CHECK(out.dims() == Dims{4});
  CHECK(out.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  Tensor big = Tensor::empty({64}, DataType::Float32);
  auto e = error_of([&] { big.share_buffer_from(in); });
  CHECK(e.kind() == ErrorKind::InvalidArgument);
  CHECK_THAT(e.message(), Catch::Contains("needs 256 bytes"));
  CHECK(error_of([&] { out.share_buffer_from(Tensor()); }).kind() == ErrorKind::PreconditionNotMet);
}

TEST_CASE("zeros fills every byte with zero", "[runtime][tensor]") {
  Tensor z = Tensor::zeros({5}, DataType::Int32);
  CHECK(z.to_vector<std::int32_t>() == std::vector<std::int32_t>(5, 0));
}

// --- printing values --------------------------------------------------------

namespace {

template <typename T>
Tensor iota(const Dims& dims, T start = 0) {
  std::vector<T> v(static_cast<std::size_t>(dims.numel()));
  std::iota(v.begin(), v.end(), start);
  return Tensor::from_vector(dims, v);
}

// A host tensor of `dtype` holding the raw 16-bit patterns `bits` (f16, bf16).
Tensor from_bits(DataType dtype, const std::vector<std::uint16_t>& bits) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(bits.size())}, dtype);
  std::memcpy(t.raw_data(), bits.data(), bits.size() * 2);
  return t;
}

}  // namespace

TEST_CASE("a scalar prints its type and its value on one line", "[runtime][tensor]") {
  CHECK(Tensor::from_vector<float>({}, {1.5f}).to_string() == "tensor<f32>@cpu 1.5");
  CHECK(Tensor::from_vector<double>({}, {2.0}).to_string() == "tensor<f64>@cpu 2.");
  CHECK(Tensor::from_vector<std::int64_t>({}, {-7}).to_string() == "tensor<i64>@cpu -7");
  CHECK(Tensor::from_vector<bool>({}, {true}).to_string() == "tensor<bool>@cpu true");
}

TEST_CASE("a 1-d tensor prints its entries right-aligned to one width", "[runtime][tensor]") {
  CHECK(Tensor::from_vector<std::int64_t>({3}, {1, -2, 30}).to_string() ==
        "tensor<3xi64>@cpu [ 1, -2, 30]");
  CHECK(Tensor::from_vector<float>({4}, {0.5f, 1.0f, -2.25f, 1e-7f}).to_string() ==
        "tensor<4xf32>@cpu [  0.5,    1., -2.25, 1e-07]");
  CHECK(Tensor::from_vector<double>({2}, {3.14159265, 123456789.0}).to_string() ==
        "tensor<2xf64>@cpu [    3.14159, 1.23457e+08]");
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(Tensor::from_vector<float>({3}, {std::numeric_limits<float>::quiet_NaN(), inf, -inf})
            .to_string() == "tensor<3xf32>@cpu [ nan,  inf, -inf]");
  CHECK(Tensor::from_vector<float>({0}, {}).to_string() == "tensor<0xf32>@cpu []");
}

TEST_CASE("a 2-d tensor prints one row per line", "[runtime][tensor]") {
  CHECK(iota<float>({2, 3}, 1).to_string() ==
        "tensor<2x3xf32>@cpu\n"
        "[[1., 2., 3.],\n"
        " [4., 5., 6.]]");
  CHECK(Tensor::from_vector<float>({2, 2}, {1.0f, 0.5f, -2.0f, 3.0f}).to_string() ==
        "tensor<2x2xf32>@cpu\n"
        "[[ 1., 0.5],\n"
        " [-2.,  3.]]");
  // A view prints its own window of the buffer.
  CHECK(iota<float>({2, 3}, 1).slice(1, 2).to_string() == "tensor<1x3xf32>@cpu [[4., 5., 6.]]");
}

TEST_CASE("a 3-d tensor prints a blank line between its 2-d blocks", "[runtime][tensor]") {
  CHECK(iota<std::int32_t>({2, 2, 2}).to_string() ==
        "tensor<2x2x2xi32>@cpu\n"
        "[[[0, 1],\n"
        "  [2, 3]],\n"
        "\n"
        " [[4, 5],\n"
        "  [6, 7]]]");
}

TEST_CASE("integer and bool tensors print as integers and true / false", "[runtime][tensor]") {
  CHECK(Tensor::from_vector<std::int8_t>({2}, {-128, 127}).to_string() == "tensor<2xi8>@cpu [-128,  127]");
  CHECK(Tensor::from_vector<std::int32_t>({2, 2}, {7, -10, 100, 0}).to_string() ==
        "tensor<2x2xi32>@cpu\n"
        "[[  7, -10],\n"
        " [100,   0]]");
  CHECK(Tensor::from_vector<bool>({3}, {true, false, true}).to_string() ==
        "tensor<3xbool>@cpu [ true, false,  true]");
}

TEST_CASE("f16 and bf16 tensors print their float values", "[runtime][tensor]") {
  // 1.5, -2, 2^-24 (the smallest subnormal), inf
  CHECK(from_bits(DataType::Float16, {0x3e00, 0xc000, 0x0001, 0x7c00}).to_string() ==
        "tensor<4xf16>@cpu [        1.5,         -2., 5.96046e-08,         inf]");
  // 1.5, -2
  CHECK(from_bits(DataType::BFloat16, {0x3fc0, 0xc000}).to_string() == "tensor<2xbf16>@cpu [1.5, -2.]");
}

TEST_CASE("a long row wraps at 80 columns", "[runtime][tensor]") {
  CHECK(iota<std::int64_t>({30}).to_string() ==
        "tensor<30xi64>@cpu\n"
        "[ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,\n"
        " 20, 21, 22, 23, 24, 25, 26, 27, 28, 29]");
}

TEST_CASE("a tensor of more than 1000 elements prints the first and last 3 of each dim",
          "[runtime][tensor]") {
  CHECK(iota<std::int64_t>({1000}).to_string().find("...") == std::string::npos);
  CHECK(iota<std::int64_t>({1001}).to_string() ==
        "tensor<1001xi64>@cpu [   0,    1,    2, ...,  998,  999, 1000]");
  CHECK(iota<std::int32_t>({100, 100}).to_string() ==
        "tensor<100x100xi32>@cpu\n"
        "[[   0,    1,    2, ...,   97,   98,   99],\n"
        " [ 100,  101,  102, ...,  197,  198,  199],\n"
        " [ 200,  201,  202, ...,  297,  298,  299],\n"
        " ...,\n"
        " [9700, 9701, 9702, ..., 9797, 9798, 9799],\n"
        " [9800, 9801, 9802, ..., 9897, 9898, 9899],\n"
        " [9900, 9901, 9902, ..., 9997, 9998, 9999]]");
  // Dims of 6 or fewer print whole.
  CHECK(iota<float>({2, 1000}).to_string() ==
        "tensor<2x1000xf32>@cpu\n"
        "[[   0.,    1.,    2., ...,  997.,  998.,  999.],\n"
        " [1000., 1001., 1002., ..., 1997., 1998., 1999.]]");
}

TEST_CASE("tensors without readable values say so instead of reading memory", "[runtime][tensor]") {
  CHECK(Tensor().to_string() == "tensor<uninitialized>");
  float device_memory[2] = {};  // stands in for device memory; never read
  Tensor on_gpu = Tensor::from_external(device_memory, sizeof device_memory, {2}, DataType::Float32,
                                        kiln::Place::cuda(0));
  CHECK(on_gpu.to_string() == "tensor<2xf32>@cuda:0 (values on cuda:0 are not shown)");
  CHECK(on_gpu.type_string() == "tensor<2xf32>@cuda:0");
}

TEST_CASE("operator<< writes the type and the values", "[runtime][tensor]") {
  std::ostringstream os;
  os << Tensor::from_vector<std::int64_t>({2}, {4, 5});
  CHECK(os.str() == "tensor<2xi64>@cpu [4, 5]");
}

TEST_CASE("error messages name a tensor by its type, not its values", "[runtime][tensor]") {
  Tensor t = Tensor::from_vector<float>({2}, {12345.0f, 67890.0f});
  for (const std::string& message :
       {error_of([&] { (void)t.data<double>(); }).message(),
        error_of([&] { (void)t.dim(3); }).message(),
        error_of([&] { (void)t.reshape({3}); }).message(),
        error_of([&] { (void)t.slice(0, 5); }).message()}) {
    INFO(message);
    CHECK_THAT(message, Catch::Contains("tensor<2xf32>@cpu"));
    CHECK_THAT(message, !Catch::Contains("12345"));
  }
}
