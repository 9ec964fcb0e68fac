#include "kiln/runtime/tensor.h"

#include <cstdint>
#include <vector>

#include "catch.hpp"

using kiln::DataType;
using kiln::Dims;
using kiln::ErrorKind;
using kiln::Tensor;

namespace {

template <typename F>
kiln::Error error_of(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e;
  }
  FAIL("expected a kiln::Error");
  throw std::logic_error("unreachable");
}

}  // namespace

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
  CHECK(t.to_string() == "tensor<2x3xf32>@cpu");
  CHECK(Tensor::empty({}, DataType::Int64).to_string() == "tensor<i64>@cpu");
  CHECK(Tensor::empty({4}, DataType::Float64, kiln::Place::host_stream(1)).to_string() ==
        "tensor<4xf64>@host_stream:1");
  std::ostringstream os;
  os << t;
  CHECK(os.str() == "tensor<2x3xf32>@cpu");
}

TEST_CASE("a default tensor is uninitialized and has no data", "[runtime][tensor]") {
  Tensor t;
  CHECK_FALSE(t.is_initialized());
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
  auto cuda = error_of([] { Tensor::empty({2}, DataType::Float32, kiln::Place::cuda(0)); });
  CHECK(cuda.kind() == ErrorKind::Unimplemented);
  CHECK_THAT(cuda.message(), Catch::Contains("cuda:0"));
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
