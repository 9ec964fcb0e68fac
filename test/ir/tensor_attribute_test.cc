// TensorAttribute (kiln/ir/tensor_attribute.h): uniqued by content, printed
// summarized, saved and loaded exactly for every dtype, its errors;
// builtin.constant holding one, checked by the verifier and run by its
// kernel; held attributes, whose bytes the ops carrying them own; and the
// large constants of a loaded or parsed program, which are held.
#include "kiln/ir/tensor_attribute.h"

#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/io/json.h"
#include "kiln/ir/parser.h"
#include "test_util.h"

using namespace kiln;

namespace {

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

TensorAttribute f32s(std::vector<std::int64_t> dims, const std::vector<float>& v) {
  return TensorAttribute::get(DataType::Float32, std::move(dims), bytes_of(v));
}

TensorAttribute held_f32s(std::vector<std::int64_t> dims, const std::vector<float>& v) {
  return TensorAttribute::get_held(DataType::Float32, std::move(dims), bytes_of(v));
}

Operation* constant_op(Program& p, TensorAttribute v) {
  Builder b(p);
  return b.create<ConstantOp>(v, TensorType::get(v.dtype(), v.dims())).operation();
}

}  // namespace

TEST_CASE("tensor attributes with equal contents are one attribute", "[ir][attribute]") {
  TensorAttribute a = f32s({2, 2}, {1, 2, 3, 4});
  CHECK(a == f32s({2, 2}, {1, 2, 3, 4}));
  CHECK(a != f32s({4}, {1, 2, 3, 4}));
  CHECK(a != f32s({2, 2}, {1, 2, 3, 5}));
  CHECK(a.dtype() == DataType::Float32);
  CHECK(a.dims() == std::vector<std::int64_t>{2, 2});
  CHECK(a.numel() == 4);
}

TEST_CASE("a tensor attribute prints its type and every value, floats in their shortest "
          "round-trip form",
          "[ir][attribute]") {
  CHECK(f32s({2, 3}, {1, 2, 3, 4, 5, 6}).to_string() == "tensor<2x3xf32> [1, 2, 3, 4, 5, 6]");
  std::vector<std::int64_t> ten{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(TensorAttribute::get(DataType::Int64, {10}, bytes_of(ten)).to_string() ==
        "tensor<10xi64> [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]");
  // %g-style output (6 significant digits) would print 0.1f + 1e-7 as 0.1.
  CHECK(f32s({3}, {0.1f, 0.1f + 1e-7f, 1e-8f}).to_string() ==
        "tensor<3xf32> [0.1, 0.1000001, 1e-08]");
  std::vector<bool> flags{true, false};
  std::string fb{char(1), char(0)};
  CHECK(TensorAttribute::get(DataType::Bool, {2}, fb).to_string() == "tensor<2xbool> [true, false]");
  CHECK(TensorAttribute::get(DataType::Float32, {0, 3}, "").to_string() == "tensor<0x3xf32> []");
}

TEST_CASE("a tensor attribute survives a JSON round trip exactly, for every dtype",
          "[ir][attribute]") {
  std::vector<TensorAttribute> all{
      f32s({3}, {0.1f, -2.5e-30f, 3e38f}),
      TensorAttribute::get(DataType::Float64, {2}, bytes_of(std::vector<double>{0.1, -1e300})),
      TensorAttribute::get(DataType::Int64, {2},
                           bytes_of(std::vector<std::int64_t>{INT64_MIN, INT64_MAX})),
      TensorAttribute::get(DataType::Int32, {1}, bytes_of(std::vector<std::int32_t>{-7})),
      TensorAttribute::get(DataType::Int8, {2}, bytes_of(std::vector<std::int8_t>{-128, 127})),
      TensorAttribute::get(DataType::Bool, {3}, std::string{char(1), char(0), char(1)}),
      TensorAttribute::get(DataType::Float16, {1}, bytes_of(std::vector<std::uint16_t>{0x3c00})),
      TensorAttribute::get(DataType::Float32, {0}, ""),
      // JSON has no NaN or infinity: they were written as null and not read back.
      f32s({4}, {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                 -std::numeric_limits<float>::infinity(),
                 std::bit_cast<float>(std::uint32_t{0xffc00123})}),
      TensorAttribute::get(DataType::Float64, {1},
                           bytes_of(std::vector<double>{-std::numeric_limits<double>::quiet_NaN()}))};
  for (TensorAttribute a : all) {
    INFO(a.to_string());
    CHECK(attribute_from_json(attribute_to_json(a)) == Attribute(a));
  }
}

TEST_CASE("bad tensor attributes are clear errors", "[ir][attribute]") {
  KILN_CHECK_ERROR(TensorAttribute::get(DataType::Float32, {2}, "abc"), InvalidArgument,
                   {"2 f32 elements", "8 bytes", "got 3"});
  KILN_CHECK_ERROR(TensorAttribute::get(DataType::Float32, {-1}, ""), InvalidArgument, {"dim -1"});
  KILN_CHECK_ERROR(TensorAttribute::get(DataType::Undefined, {}, ""), InvalidArgument,
                   {"undefined dtype"});
  auto load = [](const char* text) { return attribute_from_json(nlohmann::json::parse(text)); };
  KILN_CHECK_ERROR(load(R"({"tensor": {"dtype": "f32", "dims": [2], "values": [1]}})"),
                   InvalidArgument, {"needs 2 values, got 1"});
  KILN_CHECK_ERROR(load(R"({"tensor": {"dtype": "i64", "dims": [1], "values": [1.5]}})"),
                   InvalidArgument, {"value #0", "i64"});
  KILN_CHECK_ERROR(load(R"({"tensor": {"dtype": "q8", "dims": [1], "values": [1]}})"),
                   InvalidArgument, {"unknown dtype"});
  KILN_CHECK_ERROR(load(R"({"tensor": [1, 2]})"), InvalidArgument, {"tensor attribute needs"});
}

TEST_CASE("builtin.constant returns its tensor each run; the verifier checks it against the "
          "result type",
          "[ir][attribute][exec]") {
  Program p;
  Builder b(p);
  TensorAttribute v = f32s({2, 2}, {1, 2, 3, 4});
  Value c = b.create<ConstantOp>(v, TensorType::get(DataType::Float32, {2, 2})).result();
  Value d = b.create<ScaleOp>(c, 2.0, 0.0).result();
  CHECK_NOTHROW(p.verify());
  Executor exe;
  for (int run = 0; run < 2; ++run) {
    auto got = exe.run(p, {}, {c, d});
    CHECK(got[0].to_vector<float>() == std::vector<float>{1, 2, 3, 4});
    CHECK(got[1].to_vector<float>() == std::vector<float>{2, 4, 6, 8});
    got[0].data<float>()[0] = 100;  // the caller's copy: the constant stays
  }
  Program bad;
  Builder bb(bad);
  bb.create<ConstantOp>(v, TensorType::get(DataType::Float32, {4}));
  KILN_CHECK_ERROR(bad.verify(), InvalidArgument, {"builtin.constant", "[2, 2]", "tensor<4xf32>"});
}

TEST_CASE("a held tensor attribute is a new attribute on every call, with the same checks",
          "[ir][attribute]") {
  TensorAttribute a = held_f32s({2}, {1, 2});
  CHECK(a.held());
  CHECK_FALSE(f32s({2}, {1, 2}).held());
  CHECK(a != held_f32s({2}, {1, 2}));
  CHECK(a != f32s({2}, {1, 2}));
  CHECK(a.bytes() == f32s({2}, {1, 2}).bytes());
  KILN_CHECK_ERROR(TensorAttribute::get_held(DataType::Float32, {3}, bytes_of<float>({1, 2})),
                   InvalidArgument, {"needs 12 bytes, got 8"});
  KILN_CHECK_ERROR(TensorAttribute::get_held(DataType::Float32, {-1}, ""), InvalidArgument,
                   {"dim -1"});
}

TEST_CASE("a held tensor attribute's bytes are freed when the last op carrying it is destroyed",
          "[ir][attribute]") {
  TensorAttribute v = held_f32s({2, 2}, {1, 2, 3, 4});
  auto p = std::make_unique<Program>();
  constant_op(*p, v);
  constant_op(*p, v);
  {
    Program copy = p->clone();
    p.reset();
    CHECK_FALSE(v.released());  // the clone's op still carries it
    Executor exe;
    const Value c = copy.block().front()->result(0);
    auto got = exe.run(copy, {}, {c});
    CHECK(got[0].to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  }
  CHECK(v.released());
  CHECK(v.dims() == std::vector<std::int64_t>{2, 2});
  CHECK(v.to_string() == "tensor<2x2xf32> <released>");
  KILN_CHECK_ERROR(v.bytes(), PreconditionNotMet, {"tensor<2x2xf32>", "freed", "last op"});
  nlohmann::json j;
  KILN_CHECK_ERROR(v.save(j), PreconditionNotMet, {"freed"});
}

TEST_CASE("a held tensor attribute no op has carried yet keeps its bytes", "[ir][attribute]") {
  TensorAttribute v = held_f32s({1}, {7});
  { Program p; }
  CHECK_FALSE(v.released());
  Program p;
  constant_op(p, v);
  CHECK(p.block().front()->attribute<TensorAttribute>("value").bytes() == v.bytes());
}

TEST_CASE("replacing or erasing an op's held tensor attribute frees its bytes; setting the same "
          "one again keeps them",
          "[ir][attribute]") {
  TensorAttribute v = held_f32s({1}, {1});
  TensorAttribute w = held_f32s({1}, {2});
  Program p;
  Operation* op = constant_op(p, v);
  op->set_attribute("value", v);
  op->set_attributes(op->attributes());
  CHECK_FALSE(v.released());
  op->set_attribute("value", w);
  CHECK(v.released());
  op->set_attribute("extra", w);
  op->erase_attribute("value");
  CHECK_FALSE(w.released());  // "extra" still carries it
  op->erase_attribute("extra");
  CHECK(w.released());
}

TEST_CASE("an op given a held tensor attribute whose bytes were freed is a clear error that "
          "changes nothing",
          "[ir][attribute]") {
  TensorAttribute gone = held_f32s({1}, {1});
  { Program p; constant_op(p, gone); }
  REQUIRE(gone.released());
  Program p;
  KILN_CHECK_ERROR(constant_op(p, gone), PreconditionNotMet,
                   {"builtin.constant", "tensor<1xf32> <released>", "freed"});
  CHECK(p.block().empty());
  TensorAttribute kept = held_f32s({1}, {2});
  Operation* op = constant_op(p, kept);
  KILN_CHECK_ERROR(op->set_attribute("z_other", gone), PreconditionNotMet, {"builtin.constant"});
  CHECK(op->attribute("value") == kept);
  CHECK_FALSE(op->attributes().contains("z_other"));
  op->erase();
  CHECK(kept.released());  // the failed set took no extra hold
  TensorAttribute fresh = held_f32s({1}, {3});
  op = constant_op(p, held_f32s({1}, {4}));
  KILN_CHECK_ERROR(op->set_attributes(DictionaryAttribute::get({{"a_fresh", fresh}, {"z_other", gone}})),
                   PreconditionNotMet, {"builtin.constant"});
  CHECK_FALSE(fresh.released());  // never carried: it keeps its bytes
  CHECK(fresh.bytes() == f32s({1}, {3}).bytes());
}

TEST_CASE("ops carrying one held tensor attribute are created and destroyed on many threads "
          "without freeing its bytes early",
          "[ir][attribute]") {
  TensorAttribute v = held_f32s({3}, {1, 2, 3});
  Program p;
  constant_op(p, v);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&p] {
      for (int i = 0; i < 500; ++i) Program copy = p.clone();
    });
  for (auto& t : threads) t.join();
  REQUIRE_FALSE(v.released());
  CHECK(v.bytes() == f32s({3}, {1, 2, 3}).bytes());
}

TEST_CASE("an op made from a held tensor attribute while its last other holder is destroyed either "
          "fails or keeps the bytes",
          "[ir][attribute]") {
  std::atomic<int> go{0}, done{0};
  std::atomic<bool> stop{false};
  TensorAttribute current;
  std::atomic<int> bad{0};  // ops made that saw the bytes freed
  std::thread taker([&] {
    for (int seen = 1; !stop.load();) {
      if (go.load(std::memory_order_acquire) != seen) {
        std::this_thread::yield();
        continue;
      }
      try {
        Program p;
        constant_op(p, current);
        if (current.released() || current.bytes() != bytes_of<float>({1, 2, 3})) ++bad;
      } catch (const Error&) {
      }
      done.store(seen++, std::memory_order_release);
    }
  });
  for (int i = 1; i <= 5000; ++i) {  // each a race of the taker's op with the last drop
    current = held_f32s({3}, {1, 2, 3});
    auto p = std::make_unique<Program>();
    constant_op(*p, current);
    go.store(i, std::memory_order_release);
    p.reset();
    while (done.load(std::memory_order_acquire) != i) std::this_thread::yield();
    CHECK(current.released());
  }
  stop = true;
  taker.join();
  CHECK(bad == 0);
}

TEST_CASE("a large constant loaded from JSON or parsed from text is freed with its program, and "
          "a constant up to the limit stays one attribute per content",
          "[ir][attribute][json][parser]") {
  const std::int64_t limit = TensorAttribute::kMaxUniquedElements;
  std::vector<float> large(static_cast<std::size_t>(limit) + 1);
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<float>(i % 251) * 0.5f;
  const std::vector<float> at_limit(large.begin(), large.end() - 1);
  Program source;
  constant_op(source, held_f32s({limit + 1}, large));
  constant_op(source, held_f32s({limit}, at_limit));
  const std::string json = save_program_json(source);
  const std::string text = source.to_string();
  for (const bool from_json : {true, false}) {
    INFO((from_json ? "loaded from JSON" : "parsed from text"));
    auto p = std::make_unique<Program>(from_json ? load_program_json(json) : parse_program(text));
    const Operation* first = p->block().front();
    const auto held = first->attribute<TensorAttribute>("value");
    const auto uniqued = first->next_in_block()->attribute<TensorAttribute>("value");
    CHECK(held.held());
    CHECK(held.bytes() == bytes_of(large));
    CHECK_FALSE(uniqued.held());
    CHECK(uniqued == f32s({limit}, at_limit));
    CHECK((from_json ? save_program_json(*p) : p->to_string()) == (from_json ? json : text));
    p.reset();
    CHECK(held.released());
    CHECK_FALSE(uniqued.released());
  }
}
