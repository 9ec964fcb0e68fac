// The weights file: round trips (f32, f64, i64, rank 0, empty), atomic saves
// (a failed save leaves the old file and no temporary), and a clear kiln::Error
// naming the file and tensor for each bad input — missing file, bad magic,
// another version, every truncated prefix, every corrupted byte, a missing
// parameter, shapes and dtypes that do not match the program — with the scope
// unchanged; tensors the program lacks are skipped with a warning.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "catch.hpp"
#include "io/io_test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/io/weights.h"
#include "kiln/support/warning.h"

using namespace kiln;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using kiln_io_test::read_all;
using kiln_io_test::TempDir;

namespace {

void write_all(const std::string& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(),
                                                             static_cast<std::streamsize>(bytes.size()));
}

Type tt(DataType dt, std::vector<std::int64_t> dims) { return TensorType::get(dt, std::move(dims)); }

// A program declaring these parameters (no ops needed).
Program program_with(const std::vector<std::pair<std::string, Type>>& params) {
  Program p;
  for (const auto& [name, type] : params) p.set_parameter(name, Parameter{type});
  return p;
}

// The test model's parameters: f32 [3, 4], f64 [5], i64 [2, 2], f32 rank 0.
Program model_program() {
  return program_with({{"linear.w", tt(DataType::Float32, {3, 4})},
                       {"linear.b", tt(DataType::Float64, {5})},
                       {"ids", tt(DataType::Int64, {2, 2})},
                       {"scale", tt(DataType::Float32, {})}});
}

void fill_model(Scope& s) {
  std::vector<float> w(12);
  for (int i = 0; i < 12; ++i) w[i] = 0.25f * i - 1.f;
  s.var("linear.w").set(Tensor::from_vector<float>(Dims{3, 4}, w));
  s.var("linear.b").set(Tensor::from_vector<double>(Dims{5}, {1e-300, -2.5, 3.0, 1e300, 0.1}));
  s.var("ids").set(Tensor::from_vector<std::int64_t>(Dims{2, 2}, {-1, 0, INT64_MAX, INT64_MIN}));
  s.var("scale").set(Tensor::from_vector<float>(Dims{}, {7.5f}));
}

// What the scope holds, as comparable text.
std::string snapshot(const Scope& s) {
  std::ostringstream os;
  for (const auto& n : s.local_var_names()) {
    const Variable* v = s.find_local_var(n);
    os << n << ':';
    if (!v->is<Tensor>() || !v->get<Tensor>().is_initialized()) {
      os << "empty;";
      continue;
    }
    const Tensor& t = v->get<Tensor>();
    os << t.to_string() << '=';
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    for (std::size_t i = 0; i < t.bytes(); ++i) os << int{p[i]} << ',';
    os << ';';
  }
  return os.str();
}

// A scope the failed loads must leave alone: sentinel values of the right shapes.
void fill_sentinels(Scope& s) {
  s.var("linear.w").set(Tensor::from_vector<float>(Dims{3, 4}, std::vector<float>(12, 42.f)));
  s.var("ids").set(Tensor::from_vector<std::int64_t>(Dims{2, 2}, {9, 9, 9, 9}));
}

// `f` throws kiln::Error of `kind` with each of `parts` in its message.
void expect_error(const std::function<void()>& f, ErrorKind kind,
                  const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    INFO("message: " << e.message());
    CHECK(to_string(e.kind()) == to_string(kind));
    for (const auto& p : parts) CHECK_THAT(e.message(), Contains(p));
    return;
  }
  FAIL_CHECK("no kiln::Error was thrown");
}

}  // namespace

TEST_CASE("weights saved from a scope load back bit-exact (f32, f64, i64, rank 0)",
          "[io][weights]") {
  TempDir dir;
  const std::string path = dir.file("model.kw");
  Program p = model_program();
  Scope src;
  fill_model(src);
  save_weights(path, src, p);
  CHECK(dir.entries() == std::vector<std::string>{"model.kw"});  // no temporary left
  const std::string bytes = read_all(path);
  CHECK(bytes.substr(0, 8) == std::string("KILNWTS\0", 8));
  CHECK(bytes == save_weights_bytes(src, p));

  Scope dst;
  load_weights(path, dst, p);
  CHECK(snapshot(dst) == snapshot(src));
  CHECK(dst.find_var("linear.b")->get<Tensor>().to_vector<double>()[3] == 1e300);
  CHECK(dst.find_var("ids")->get<Tensor>().to_vector<std::int64_t>()[2] == INT64_MAX);
  CHECK(dst.find_var("scale")->get<Tensor>().rank() == 0);
  // The loaded tensors are the scope's own, not views of the file's bytes or the source's.
  CHECK_FALSE(dst.find_var("linear.w")->get<Tensor>().shares_buffer_with(
      src.find_var("linear.w")->get<Tensor>()));
  // Loading again over existing tensors replaces them.
  dst.var("linear.w").set(Tensor::from_vector<float>(Dims{3, 4}, std::vector<float>(12, 0.f)));
  load_weights(path, dst, p);
  CHECK(snapshot(dst) == snapshot(src));
}

TEST_CASE("weights of the storage dtypes (u8, i16, u16, u32, u64) load back bit-exact",
          "[io][weights]") {
  Program p = program_with({{"q", tt(DataType::UInt8, {4})},
                            {"s", tt(DataType::Int16, {2})},
                            {"h", tt(DataType::UInt16, {2})},
                            {"c", tt(DataType::UInt32, {1})},
                            {"big", tt(DataType::UInt64, {2})}});
  Scope src;
  src.var("q").set(Tensor::from_vector<std::uint8_t>(Dims{4}, {0, 1, 128, 255}));
  src.var("s").set(Tensor::from_vector<std::int16_t>(Dims{2}, {-32768, 32767}));
  src.var("h").set(Tensor::from_vector<std::uint16_t>(Dims{2}, {0, 65535}));
  src.var("c").set(Tensor::from_vector<std::uint32_t>(Dims{1}, {4000000000u}));
  src.var("big").set(Tensor::from_vector<std::uint64_t>(Dims{2}, {UINT64_MAX, 1}));
  Scope dst;
  load_weights_bytes(save_weights_bytes(src, p), dst, p);
  CHECK(snapshot(dst) == snapshot(src));
  CHECK(dst.find_var("big")->get<Tensor>().to_vector<std::uint64_t>()[0] == UINT64_MAX);
  CHECK(dst.find_var("q")->get<Tensor>().dtype() == DataType::UInt8);
}

TEST_CASE("weights load into a parameter whose program shape has unknown dims, and empty "
          "tensors round-trip", "[io][weights]") {
  Program saved = program_with({{"emb", tt(DataType::Float32, {0, 3})},
                                {"v", tt(DataType::Float32, {4})}});
  Scope src;
  src.var("emb").set(Tensor::empty(Dims{0, 3}, DataType::Float32));
  src.var("v").set(Tensor::from_vector<float>(Dims{4}, {1, 2, 3, 4}));
  std::string bytes = save_weights_bytes(src, saved);
  Program loose = program_with({{"emb", tt(DataType::Float32, {-1, 3})},
                                {"v", tt(DataType::Float32, {-1})}});
  Scope dst;
  load_weights_bytes(bytes, dst, loose);
  CHECK(dst.find_var("emb")->get<Tensor>().dims() == Dims{0, 3});
  CHECK(dst.find_var("v")->get<Tensor>().to_vector<float>() == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("weights saved after training load into a fresh executor and give the same outputs",
          "[io][weights]") {
  // main: out = w * x (w a parameter); startup sets w; a second program updates it.
  Program startup, main;
  startup.set_parameter("w", Parameter{tt(DataType::Float32, {3})});
  main.set_parameter("w", Parameter{tt(DataType::Float32, {3})});
  {
    Builder b(startup);
    auto init = b.create<FullOp>(std::vector<std::int64_t>{3}, 1.5);
    b.create<SetParameterOp>(init.result(), "w");
  }
  Value out;
  {
    Builder b(main);
    auto x = b.create<DataOp>("x", std::vector<std::int64_t>{3});
    auto w = b.create<ParameterOp>("w", tt(DataType::Float32, {3}));
    auto y = b.create<MulOp>(w.result(), x.result());
    auto w2 = b.create<Sqrt_Op>(w.result());  // changes the weights each run
    (void)w2;
    out = y.result();
  }
  TempDir dir;
  const std::string path = dir.file("w.kw");
  FeedMap feed{{"x", Tensor::from_vector<float>(Dims{3}, {1.f, 2.f, 3.f})}};
  Executor a;
  a.run(startup);
  a.run(main, feed, {out});
  a.run(main, feed, {out});
  save_weights(path, a.scope(), main);
  auto expected = a.run(main, feed, {out})[0].to_vector<float>();

  Executor b;
  load_weights(path, b.scope(), main);
  CHECK(b.run(main, feed, {out})[0].to_vector<float>() == expected);
}

TEST_CASE("loading a missing weights file is a NotFound error naming the file", "[io][weights]") {
  TempDir dir;
  Scope s;
  const std::string path = dir.file("missing.kw");
  expect_error([&] { load_weights(path, s, model_program()); }, ErrorKind::NotFound, {path});
  expect_error([&] { load_weights(dir.path.string(), s, model_program()); },
               ErrorKind::InvalidArgument, {dir.path.string(), "directory"});
  CHECK(s.local_var_count() == 0);
}

TEST_CASE("a file that is not a weights file, or another version, is rejected by name",
          "[io][weights]") {
  TempDir dir;
  Program p = model_program();
  Scope src;
  fill_model(src);
  const std::string good = save_weights_bytes(src, p);
  const std::string path = dir.file("x.kw");
  Scope dst;
  fill_sentinels(dst);
  const std::string before = snapshot(dst);

  write_all(path, "{\"format\":\"kiln.program\"}");
  expect_error([&] { load_weights(path, dst, p); }, ErrorKind::InvalidArgument,
               {path, "not a kiln weights file"});
  std::string bad = good;
  bad[3] = 'X';
  write_all(path, bad);
  expect_error([&] { load_weights(path, dst, p); }, ErrorKind::InvalidArgument, {path, "magic"});

  bad = good;
  bad[8] = 2;  // version 2
  write_all(path, bad);
  expect_error([&] { load_weights(path, dst, p); }, ErrorKind::Unimplemented,
               {path, "version 2", "version 1"});
  CHECK(snapshot(dst) == before);
}

TEST_CASE("every truncated prefix of a weights file is a clear error and changes nothing",
          "[io][weights]") {
  TempDir dir;
  Program p = model_program();
  Scope src;
  fill_model(src);
  const std::string good = save_weights_bytes(src, p);
  const std::string path = dir.file("t.kw");
  Scope dst;
  fill_sentinels(dst);
  const std::string before = snapshot(dst);
  for (std::size_t len = 0; len < good.size(); ++len) {
    INFO("prefix of " << len << " of " << good.size() << " bytes");
    write_all(path, good.substr(0, len));
    expect_error([&] { load_weights(path, dst, p); }, ErrorKind::DataLoss, {path, "truncated"});
  }
  CHECK(snapshot(dst) == before);
  // A cut inside a tensor's data names that tensor.
  const std::size_t at = good.find("linear.w") + 8 + 1 + 1 + 2 * 8 + 8 + 5;
  write_all(path, good.substr(0, at));
  expect_error([&] { load_weights(path, dst, p); }, ErrorKind::DataLoss,
               {path, "'linear.w'", "the data"});
  // Bytes after the last tensor are an error too.
  write_all(path, good + "x");
  expect_error([&] { load_weights(path, dst, p); }, ErrorKind::DataLoss, {path, "1 unexpected"});
  CHECK(snapshot(dst) == before);
}

TEST_CASE("every corrupted byte of a weights file is an error and changes nothing",
          "[io][weights]") {
  Program p = model_program();
  Scope src;
  fill_model(src);
  const std::string good = save_weights_bytes(src, p);
  Scope dst;
  fill_sentinels(dst);
  const std::string before = snapshot(dst);
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (unsigned char flip : {0x01, 0x80}) {
      std::string bad = good;
      bad[i] = static_cast<char>(static_cast<unsigned char>(bad[i]) ^ flip);
      INFO("byte " << i << " ^ " << int{flip});
      CHECK_THROWS_AS(load_weights_bytes(bad, dst, p, "corrupt.kw"), Error);
    }
  }
  CHECK(snapshot(dst) == before);
  // A flipped data byte is a checksum error naming the file and the tensor.
  std::string bad = good;
  const std::size_t data = good.find("ids") + 3 + 1 + 1 + 2 * 8 + 8;
  bad[data + 3] ^= 0x10;
  expect_error([&] { load_weights_bytes(bad, dst, p, "corrupt.kw"); }, ErrorKind::DataLoss,
               {"corrupt.kw", "'ids'", "checksum"});
}

TEST_CASE("weights missing a program parameter, or of another shape or dtype, are rejected",
          "[io][weights]") {
  TempDir dir;
  const std::string path = dir.file("m.kw");
  Program p = model_program();
  Scope src;
  fill_model(src);
  save_weights(path, src, p);
  Scope dst;
  fill_sentinels(dst);
  const std::string before = snapshot(dst);

  // A program parameter the file lacks.
  Program more = model_program();
  more.set_parameter("extra", Parameter{tt(DataType::Float32, {1})});
  expect_error([&] { load_weights(path, dst, more); }, ErrorKind::NotFound,
               {path, "'extra'"});
  // Shape mismatch.
  Program reshaped = model_program();
  reshaped.set_parameter("linear.w", Parameter{tt(DataType::Float32, {4, 3})});
  expect_error([&] { load_weights(path, dst, reshaped); }, ErrorKind::InvalidArgument,
               {path, "'linear.w'", "[3, 4]", "[4, 3]"});
  reshaped.set_parameter("linear.w", Parameter{tt(DataType::Float32, {12})});
  expect_error([&] { load_weights(path, dst, reshaped); }, ErrorKind::InvalidArgument,
               {path, "'linear.w'", "[3, 4]", "[12]"});
  // Dtype mismatch.
  Program retyped = model_program();
  retyped.set_parameter("linear.b", Parameter{tt(DataType::Float32, {5})});
  expect_error([&] { load_weights(path, dst, retyped); }, ErrorKind::InvalidArgument,
               {path, "'linear.b'", "f64", "f32"});
  // A scope variable that holds something other than a tensor.
  Scope odd;
  odd.var("scale").set(Scalar(1.0));
  expect_error([&] { load_weights(path, odd, p); }, ErrorKind::PreconditionNotMet,
               {path, "'scale'", "scalar"});
  CHECK_FALSE(odd.find_var("linear.w"));
  CHECK(snapshot(dst) == before);
}

TEST_CASE("a weights file holding tensors the program lacks loads the rest and warns naming them",
          "[io][weights]") {
  TempDir dir;
  const std::string path = dir.file("m.kw");
  Scope src;
  fill_model(src);
  save_weights(path, src, model_program());
  Program fewer = program_with({{"linear.w", tt(DataType::Float32, {3, 4})},
                                {"scale", tt(DataType::Float32, {})}});
  std::vector<std::string> warnings;
  WarningHandler previous =
      set_warning_handler([&](std::string_view m) { warnings.emplace_back(m); });
  Scope dst;
  load_weights(path, dst, fewer);
  set_warning_handler(previous);

  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains(path));
  CHECK_THAT(warnings[0], Contains("'ids'"));
  CHECK_THAT(warnings[0], Contains("'linear.b'"));
  CHECK_THAT(warnings[0], !Contains("'linear.w'"));
  CHECK(dst.local_var_names() == std::vector<std::string>{"linear.w", "scale"});
  CHECK(dst.find_var("linear.w")->get<Tensor>().to_vector<float>() ==
        src.find_var("linear.w")->get<Tensor>().to_vector<float>());
  CHECK(dst.find_var("scale")->get<Tensor>().to_vector<float>() == std::vector<float>{7.5f});

  // A failed load does not warn: the extras are named only when it succeeds.
  warnings.clear();
  previous = set_warning_handler([&](std::string_view m) { warnings.emplace_back(m); });
  Program wrong = program_with({{"linear.w", tt(DataType::Float32, {4, 3})}});
  Scope untouched;
  expect_error([&] { load_weights(path, untouched, wrong); }, ErrorKind::InvalidArgument,
               {path, "'linear.w'"});
  set_warning_handler(previous);
  CHECK(warnings.empty());
  CHECK(untouched.local_var_names().empty());
}

TEST_CASE("saving weights checks the scope against the program, naming the parameter",
          "[io][weights]") {
  TempDir dir;
  const std::string path = dir.file("s.kw");
  Program p = model_program();
  {
    Scope s;  // startup never ran
    expect_error([&] { save_weights(path, s, p); }, ErrorKind::NotFound,
                 {path, "'ids'", "startup"});
  }
  {
    Scope s;
    fill_model(s);
    s.var("linear.w").set(Tensor::from_vector<double>(Dims{3, 4}, std::vector<double>(12, 0)));
    expect_error([&] { save_weights(path, s, p); }, ErrorKind::InvalidArgument,
                 {path, "'linear.w'", "f64", "f32"});
    fill_model(s);
    s.var("linear.b").set(Tensor::from_vector<double>(Dims{6}, std::vector<double>(6, 0)));
    expect_error([&] { save_weights(path, s, p); }, ErrorKind::InvalidArgument,
                 {path, "'linear.b'", "[6]", "[5]"});
  }
  {
    // Parameters in an ancestor scope are found (the executor's root scope).
    Scope root;
    fill_model(root);
    Scope& kid = root.new_scope();
    CHECK(save_weights_bytes(kid, p) == save_weights_bytes(root, p));
  }
  CHECK(dir.entries().empty());
}

TEST_CASE("a failed weights save leaves the existing file untouched and no temporary",
          "[io][weights]") {
  TempDir dir;
  const std::string path = dir.file("keep.kw");
  Program p = model_program();
  Scope s;
  fill_model(s);
  save_weights(path, s, p);
  const std::string before = read_all(path);

  Scope missing;  // a parameter cannot be found: fails before writing
  CHECK_THROWS_AS(save_weights(path, missing, p), Error);
  CHECK(read_all(path) == before);
  CHECK(dir.entries() == std::vector<std::string>{"keep.kw"});

  // A write that fails at the file system (a directory in the way).
  fs::create_directories(dir.path / "taken");
  expect_error([&] { save_weights((dir.path / "taken").string(), s, p); },
               ErrorKind::Unavailable, {(dir.path / "taken").string()});
  CHECK(fs::is_empty(dir.path / "taken"));
  // Into a missing directory.
  const std::string nowhere = (dir.path / "no_such_dir" / "w.kw").string();
  expect_error([&] { save_weights(nowhere, s, p); }, ErrorKind::Unavailable, {nowhere});
  CHECK(dir.entries() == std::vector<std::string>{"keep.kw", "taken"});

  // A successful save replaces the file.
  s.var("scale").set(Tensor::from_vector<float>(Dims{}, {-1.f}));
  save_weights(path, s, p);
  CHECK(read_all(path) != before);
  Scope back;
  load_weights(path, back, p);
  CHECK(back.find_var("scale")->get<Tensor>().to_vector<float>()[0] == -1.f);
}
