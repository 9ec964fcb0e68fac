#include "kiln/runtime/variable.h"

#include "catch.hpp"
#include "test_util.h"

using kiln::ErrorKind;
using kiln::Scalar;
using kiln::Tensor;
using kiln::TensorArray;
using kiln::Variable;
using kiln::VariableKind;
using kiln_test::error_of;

TEST_CASE("a new variable is empty and named", "[runtime][variable]") {
  Variable v("x");
  CHECK(v.name() == "x");
  CHECK(v.kind() == VariableKind::Empty);
  CHECK_FALSE(v.is_initialized());
  CHECK_FALSE(v.is<Tensor>());
}

TEST_CASE("get_mutable creates the requested kind in an empty variable", "[runtime][variable]") {
  Variable v("x");
  Tensor& t = v.get_mutable<Tensor>();
  CHECK_FALSE(t.is_initialized());
  CHECK(v.is<Tensor>());
  CHECK(v.kind() == VariableKind::Tensor);
  t = Tensor::from_vector<float>({2}, {1, 2});
  CHECK(&v.get_mutable<Tensor>() == &t);
  CHECK(v.get<Tensor>().to_vector<float>() == std::vector<float>{1, 2});

  Variable arr("a");
  arr.get_mutable<TensorArray>().push_back(Tensor::empty({1}, kiln::DataType::Int64));
  CHECK(arr.kind() == VariableKind::TensorArray);
  CHECK(arr.get<TensorArray>().size() == 1);

  Variable s("s");
  s.get_mutable<Scalar>() = Scalar(std::int64_t{3});
  CHECK(s.get<Scalar>().to<int>() == 3);
}

TEST_CASE("getting another kind than the variable holds is an error naming it", "[runtime][variable]") {
  Variable v("hidden_1");
  v.set(Tensor::empty({2}, kiln::DataType::Float32));
  auto e = error_of([&] { (void)v.get<Scalar>(); });
  CHECK(e.kind() == ErrorKind::PreconditionNotMet);
  CHECK_THAT(e.message(), Catch::Contains("'hidden_1'") && Catch::Contains("expected scalar") &&
                              Catch::Contains("given tensor"));
  CHECK(error_of([&] { (void)v.get_mutable<TensorArray>(); }).kind() == ErrorKind::PreconditionNotMet);
  CHECK(error_of([&] { v.set(Scalar(1.0)); }).kind() == ErrorKind::PreconditionNotMet);
  const Variable& c = v;
  CHECK(error_of([&] { (void)c.get<TensorArray>(); }).kind() == ErrorKind::PreconditionNotMet);
  CHECK(v.is<Tensor>());  // unchanged by the failed calls
}

TEST_CASE("getting from an empty variable is an error naming it", "[runtime][variable]") {
  Variable v("w");
  auto e = error_of([&] { (void)v.get<Tensor>(); });
  CHECK(e.kind() == ErrorKind::PreconditionNotMet);
  CHECK_THAT(e.message(), Catch::Contains("'w'") && Catch::Contains("given empty"));
}

TEST_CASE("set replaces a value of the same kind and clear empties the variable", "[runtime][variable]") {
  Variable v("lr");
  v.set(Scalar(0.1));
  v.set(Scalar(0.2));
  CHECK(v.get<Scalar>().to<double>() == 0.2);
  v.clear();
  CHECK(v.kind() == VariableKind::Empty);
  v.set(Tensor::empty({1}, kiln::DataType::Float32));
  CHECK(v.is<Tensor>());
}

TEST_CASE("clearing a variable releases its tensor's buffer", "[runtime][variable]") {
  Tensor t = Tensor::empty({4}, kiln::DataType::Float32);
  Variable v("x");
  v.set(t);
  CHECK(t.use_count() == 2);
  v.clear();
  CHECK(t.use_count() == 1);
}

TEST_CASE("scalars hold f64, i64 or bool and convert on request", "[runtime][variable]") {
  CHECK(Scalar(1.5).dtype() == kiln::DataType::Float64);
  CHECK(Scalar(2).dtype() == kiln::DataType::Int64);
  CHECK(Scalar(true).dtype() == kiln::DataType::Bool);
  CHECK(Scalar(1.5).to<int>() == 1);
  CHECK(Scalar(std::int64_t{7}).to<double>() == 7.0);
  CHECK(Scalar(true).to<float>() == 1.0f);
  CHECK(Scalar(2) == Scalar(std::int64_t{2}));
  CHECK_FALSE(Scalar(2) == Scalar(2.0));
  CHECK(Scalar(2).to_string() == "2 : i64");
  CHECK(Scalar(false).to_string() == "false : bool");
  CHECK(kiln::to_string(VariableKind::TensorArray) == "tensor_array");
}

TEST_CASE("recycle keeps a small unshared tensor buffer as the variable's spare", "[runtime][variable]") {
  using namespace kiln;
  Variable v("tmp");
  v.set(Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
  const void* data = v.get<Tensor>().raw_data();
  v.recycle(4096);
  CHECK_FALSE(v.is_initialized());
  REQUIRE(v.has_spare());
  // The next output of this variable reuses the same memory.
  BufferRef spare = v.take_spare();
  CHECK_FALSE(v.has_spare());
  Tensor t;
  REQUIRE(t.adopt_buffer(spare, Dims{2, 2}, DataType::Float32, Place::cpu()));
  CHECK(t.raw_data() == data);
  CHECK(t.dims() == Dims{2, 2});
  // More bytes than the buffer holds, or a negative extent: refused, untouched.
  BufferRef again = t.release_buffer();
  CHECK_FALSE(t.is_initialized());
  Tensor u;
  CHECK_FALSE(u.adopt_buffer(again, Dims{1 << 20}, DataType::Float32, Place::cpu()));
  CHECK_FALSE(u.adopt_buffer(again, Dims{-1}, DataType::Float32, Place::cpu()));
  CHECK_FALSE(u.adopt_buffer(again, Dims{std::int64_t{1} << 62, 8}, DataType::Float32, Place::cpu()));
  CHECK(again);
  CHECK_FALSE(u.is_initialized());
}

TEST_CASE("recycle drops a buffer that is shared or bigger than the limit", "[runtime][variable]") {
  using namespace kiln;
  Variable v("tmp");
  v.set(Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
  Tensor other = v.get<Tensor>();  // a second owner (e.g. a fetched result)
  v.recycle(4096);
  CHECK_FALSE(v.is_initialized());
  CHECK_FALSE(v.has_spare());
  CHECK(other.to_vector<float>() == std::vector<float>{1, 2, 3, 4});

  v.set(Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
  v.recycle(8);  // 16 bytes > 8
  CHECK_FALSE(v.has_spare());
}
