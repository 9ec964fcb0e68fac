// CUDA graph mode (ExecutionOptions::cuda_graph): what it refuses and how it
// says so, and that replays give what launches give. The refusals that need
// no device run everywhere; the rest are [cuda] and skip without one.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "exec/exec_test_util.h"
#include "kiln/runtime/cuda_context.h"

using namespace kiln;
using namespace kiln_exec_test;

TEST_CASE("asking for CUDA graph mode on the CPU runs the program as usual and says why once",
          "[exec][graph]") {
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{3});
  auto r = b.create<ReluOp>(x.result());
  ExecutionOptions o;
  o.num_threads = 1;
  o.cuda_graph = true;
  kiln_test::CapturedWarnings warnings;
  Executor exe(Place::cpu(), o);
  for (int run = 0; run < 4; ++run) {
    FeedMap feed{{"x", Tensor::from_vector<float>(Dims({3}), {-1.f, 2.f, float(run)})}};
    CHECK(exe.run(p, feed, {r.result()})[0].to_vector<float>() ==
          std::vector<float>{0.f, 2.f, float(run)});
  }
  REQUIRE(warnings.seen.size() == 1);
  CHECK_THAT(warnings.seen[0], Catch::Contains("CUDA graph mode is off") &&
                                   Catch::Contains("runs on cpu, not on a CUDA device"));
}

TEST_CASE("a device program with an op on the host is not captured, and the warning names the op",
          "[cuda][graph]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the [cuda] graph checks are skipped");
    return;
  }
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{3});
  auto r = b.create<ReluOp>(x.result());
  auto id = b.create<IdentityOp>(r.result());  // CPU kernel alone
  ExecutionOptions o;
  o.num_threads = 1;
  o.cuda_graph = true;
  kiln_test::CapturedWarnings warnings;
  Executor exe(Place::cuda(0), o);
  for (int run = 0; run < 3; ++run) {
    FeedMap feed{{"x", Tensor::from_vector<float>(Dims({3}), {-1.f, 2.f, float(run)})}};
    CHECK(exe.run(p, feed, {id.result()})[0].to_vector<float>() ==
          std::vector<float>{0.f, 2.f, float(run)});
  }
  bool named = false;
  for (const std::string& w : warnings.seen)
    named = named || (w.find("CUDA graph mode is off") != std::string::npos &&
                      w.find("runs on the host") != std::string::npos);
  CHECK(named);
}

TEST_CASE("a captured program replays with each run's feeds and recaptures for a new shape",
          "[cuda][graph]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the [cuda] graph checks are skipped");
    return;
  }
  // Fed from the host, and from the device (a data op placed there).
  for (Place feed_place : {Place::cpu(), Place::cuda(0)}) {
    INFO("feeds on " << feed_place.to_string());
    Program p;
    Builder b(p);
    auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1}, DataType::Float32, feed_place);
    auto r = b.create<ReluOp>(x.result());
    auto e = b.create<ExpOp>(r.result());
    ExecutionOptions o;
    o.num_threads = 1;
    o.cuda_graph = true;
    kiln_test::CapturedWarnings warnings;
    Executor exe(Place::cuda(0), o);
    for (int run = 0; run < 6; ++run) {
      const std::int64_t n = run < 4 ? 3 : 5;
      std::vector<float> v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = float(run) - float(i);
      FeedMap feed{{"x", copy_to_place(Tensor::from_vector<float>(Dims({n}), v), feed_place)}};
      auto got = exe.run(p, feed, {e.result()})[0].to_vector<float>();
      REQUIRE(got.size() == v.size());
      for (std::size_t i = 0; i < v.size(); ++i) CHECK(got[i] == Approx(std::exp(std::max(0.f, v[i]))));
    }
    CHECK(warnings.seen.empty());
  }
}

TEST_CASE("a kernel that waits for the host fails the capture, and the run falls back to launches",
          "[cuda][graph]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the [cuda] graph checks are skipped");
    return;
  }
  // The CUDA embedding checks its indices on the host before it writes: a
  // synchronisation that a capture refuses.
  Program p;
  Builder b(p);
  auto ids = b.create<DataOp>("ids", std::vector<std::int64_t>{4}, DataType::Int64);
  auto w = b.create<DataOp>("w", std::vector<std::int64_t>{5, 2});
  auto e = b.create<EmbeddingOp>(w.result(), ids.result());
  auto r = b.create<ReluOp>(e.result());
  ExecutionOptions o;
  o.num_threads = 1;
  o.cuda_graph = true;
  kiln_test::CapturedWarnings warnings;
  Executor exe(Place::cuda(0), o);
  const Tensor table =
      Tensor::from_vector<float>(Dims({5, 2}), {0, 1, -2, 3, 4, -5, 6, 7, -8, 9});
  for (int run = 0; run < 5; ++run) {
    const std::int64_t k = run % 5;
    FeedMap feed{{"ids", Tensor::from_vector<std::int64_t>(Dims({4}), {k, 0, 4, 2})}, {"w", table}};
    const auto got = exe.run(p, feed, {r.result()})[0].to_vector<float>();
    const auto t = table.to_vector<float>();
    const std::vector<float> want{std::max(0.f, t[2 * k]), std::max(0.f, t[2 * k + 1]), 0, 1,
                                  0, 9, 4, 0};
    CHECK(got == want);
  }
  bool said = false;
  for (const std::string& m : warnings.seen)
    said = said || (m.find("CUDA graph mode is off") != std::string::npos &&
                    m.find("kiln.embedding") != std::string::npos);
  CHECK(said);
}

TEST_CASE("a replay reads a device feed fed again in place, with the values it holds now",
          "[cuda][graph]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the [cuda] graph checks are skipped");
    return;
  }
  Program p;
  Builder b(p);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{3}, DataType::Float32, Place::cuda(0));
  auto r = b.create<ReluOp>(x.result());
  ExecutionOptions o;
  o.num_threads = 1;
  o.cuda_graph = true;
  kiln_test::CapturedWarnings warnings;
  Executor exe(Place::cuda(0), o);
  // One device tensor, fed every run; the caller writes new values into it
  // between runs (as a data loader filling a fixed device buffer does).
  Tensor dev = copy_to_place(Tensor::zeros(Dims({3}), DataType::Float32), Place::cuda(0));
  for (int run = 0; run < 6; ++run) {
    const Tensor host = Tensor::from_vector<float>(Dims({3}), {-1.f, float(run), 2.f - float(run)});
    copy_between_places(dev.raw_data(), dev.place(), host.raw_data(), host.place(), host.bytes());
    const auto got = exe.run(p, {{"x", dev}}, {r.result()})[0].to_vector<float>();
    CHECK(got == std::vector<float>{0.f, float(run), std::max(0.f, 2.f - float(run))});
  }
  // Another buffer: one recapture, with the graph's own copy of the feed.
  for (int run = 0; run < 3; ++run) {
    const Tensor other = copy_to_place(
        Tensor::from_vector<float>(Dims({3}), {float(run), -2.f, 5.f}), Place::cuda(0));
    CHECK(exe.run(p, {{"x", other}}, {r.result()})[0].to_vector<float>() ==
          std::vector<float>{float(run), 0.f, 5.f});
  }
  CHECK(warnings.seen.empty());
}
