// kiln.send and kiln.recv through a LocalRendezvous (TensorFlow's executor
// tests, in kiln): an add fed and fetched through the rendezvous, an op
// reading one received value twice, a random tree of adds, an abort while a
// recv waits, a dtype or shape that does not match, a program that sends
// to itself; and the errors of bad attributes and of a run without a
// rendezvous; a switch's untaken output sent as a dead value, and received
// by a dataflow program (which passes it on) or a structured one (which
// fails). Tagged [exec]: they run under ThreadSanitizer too.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "exec/exec_test_util.h"
#include "exec/run_test_util.h"
#include "kiln/dialect/dataflow_ops.h"
#include "kiln/dialect/send_recv_ops.h"
#include "kiln/io/json.h"
#include "kiln/ir/parser.h"
#include "kiln/runtime/cancellation.h"
#include "kiln/runtime/rendezvous.h"
#include <nlohmann/json.hpp>

using namespace kiln;
using namespace kiln_exec_test;
using namespace std::chrono_literals;

namespace {

RendezvousKey key_of(const std::string& name) { return RendezvousKey(Place::cpu(), Place::cpu(), name); }

Value recv_f32(Builder& b, const std::string& name, std::vector<std::int64_t> shape = {1}) {
  return b.create<RecvOp>(name, DataType::Float32, shape).result();
}

RunOptions through(LocalRendezvous& r) {
  RunOptions o;
  o.rendezvous = &r;
  return o;
}

// through(r), and a run that still waits after 10 s fails (DeadlineExceeded)
// instead of hanging the test.
RunOptions bounded(LocalRendezvous& r) {
  RunOptions o = through(r);
  o.timeout = 10s;
  return o;
}

// A receive on `name` started now, for the test to wait on with a limit: a
// receive that never ends fails the test instead of hanging it. Shared with
// the rendezvous's callback, which may come after the test gave up.
class Receipt {
 public:
  static std::shared_ptr<Receipt> start(LocalRendezvous& r, const std::string& name) {
    auto receipt = std::make_shared<Receipt>();
    r.recv_async(key_of(name), [receipt](const Error* error, RendezvousValue&& value) {
      std::lock_guard lock(receipt->mutex_);
      if (error) receipt->error_.emplace(*error);
      else receipt->value_ = std::move(value);
      receipt->done_ = true;
      receipt->cv_.notify_all();
    });
    return receipt;
  }
  // The receive's error once it ended within `limit`; a failure when it did
  // not end, or got a value.
  Error error_within(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, limit, [this] { return done_; })) FAIL("the receive still waits after the limit");
    if (!error_) FAIL("the receive got a value");
    return *error_;
  }
  // The value received within `limit`; a failure when the receive did not
  // end, or failed.
  RendezvousValue value_within(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, limit, [this] { return done_; })) FAIL("the receive still waits after the limit");
    if (error_) FAIL("the receive failed: " << error_->message());
    return value_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::optional<Error> error_;
  RendezvousValue value_;
};

FeedMap switch_feeds(float x, bool pred) {
  return {{"x", scalar_f32(x)}, {"pred", Tensor::from_vector<bool>(Dims(), {pred})}};
}

}  // namespace

TEST_CASE("a simple add fed and fetched through the rendezvous", "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value a = recv_f32(b, "a");
  Value c = recv_f32(b, "b");
  b.create<SendOp>(b.create<AddOp>(a, c).result(), "sum");
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), threads(n));
    for (int step = 0; step < 3; ++step) {
      LocalRendezvous r;
      r.send(key_of("a"), scalar_f32(1.f + float(step)));
      r.send(key_of("b"), scalar_f32(2.f));
      exe.run(p, {}, {}, through(r));
      CHECK(value_f32(r.recv(key_of("sum"), DataType::Float32).tensor) == 3.f + float(step));
    }
    // Asynchronously, the values sent after the run started.
    LocalRendezvous r;
    DoneRecord rec;
    exe.run_async(p, {}, {}, through(r), rec.callback());
    r.send(key_of("b"), scalar_f32(20.f));
    r.send(key_of("a"), scalar_f32(10.f));
    CHECK(value_f32(r.recv(key_of("sum")).tensor) == 30.f);
    REQUIRE(rec.wait());
    CHECK_FALSE(rec.error());
  }
}

TEST_CASE("an op reading the same received value twice", "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value a = recv_f32(b, "a", {2});
  Value twice = b.create<AddOp>(a, a).result();
  b.create<SendOp>(twice, "twice");
  Executor exe(Place::cpu(), threads(2));
  LocalRendezvous r;
  const Tensor sent = Tensor::from_vector<float>(Dims({2}), {1.5f, -4.f});
  r.send(key_of("a"), sent);
  auto out = exe.run(p, {}, {twice}, through(r));
  CHECK(out[0].to_vector<float>() == std::vector<float>{3.f, -8.f});
  CHECK(r.recv(key_of("twice")).tensor.to_vector<float>() == std::vector<float>{3.f, -8.f});
  // The receiver got the sender's buffer, unchanged.
  CHECK(sent.to_vector<float>() == std::vector<float>{1.5f, -4.f});
}

TEST_CASE("a random tree of adds over 200 received values gives their sum", "[exec][send_recv]") {
  Program p;
  Builder b(p);
  std::vector<Value> pool;
  constexpr int kValues = 200;
  for (int k = 0; k < kValues; ++k) pool.push_back(recv_f32(b, "v" + std::to_string(k)));
  std::mt19937 rng(2024);
  while (pool.size() > 1) {
    std::size_t i = std::uniform_int_distribution<std::size_t>(0, pool.size() - 1)(rng);
    std::swap(pool[i], pool.back());
    Value l = pool.back();
    pool.pop_back();
    std::size_t j = std::uniform_int_distribution<std::size_t>(0, pool.size() - 1)(rng);
    std::swap(pool[j], pool.back());
    Value r = pool.back();
    pool.pop_back();
    pool.push_back(b.create<AddOp>(l, r).result());
  }
  b.create<SendOp>(pool[0], "total");
  for (unsigned n : {1u, 2u, 4u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), threads(n));
    for (int step = 0; step < 2; ++step) {
      LocalRendezvous r;
      DoneRecord rec;
      exe.run_async(p, {}, {}, through(r), rec.callback());
      // Sent from another thread, in a shuffled order, while the run waits.
      std::vector<int> order(kValues);
      for (int k = 0; k < kValues; ++k) order[k] = k;
      std::shuffle(order.begin(), order.end(), rng);
      std::thread sender([&] {
        for (int k : order) r.send(key_of("v" + std::to_string(k)), scalar_f32(float(k)));
      });
      CHECK(value_f32(r.recv(key_of("total")).tensor) == float(kValues * (kValues - 1) / 2));
      sender.join();
      REQUIRE(rec.wait());
      CHECK_FALSE(rec.error());
    }
  }
}

TEST_CASE("a recv waiting while the rendezvous is aborted fails with the abort's error",
          "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value a = recv_f32(b, "a");
  Value one = b.create<FullOp>(std::vector<std::int64_t>{1}, 1.0).result();
  Value s = b.create<AddOp>(a, one).result();
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), threads(n));
    LocalRendezvous r;
    DoneRecord rec;
    exe.run_async(p, {}, {s}, through(r), rec.callback());
    CHECK_FALSE(rec.wait(20ms));
    r.abort(Error(ErrorKind::Unavailable, "the peer executor failed"));
    REQUIRE(rec.wait());
    REQUIRE(rec.error());
    CHECK(rec.error()->kind() == ErrorKind::Unavailable);
    CHECK_THAT(rec.error()->message(), Catch::Contains("the peer executor failed"));
    CHECK_THAT(rec.error()->message(), Catch::Contains("kiln.recv"));
    // Later runs over the aborted rendezvous fail at once with the same error.
    KILN_CHECK_ERROR(exe.run(p, {}, {s}, through(r)), Unavailable, {"the peer executor failed"});
    // The executor itself is fine.
    LocalRendezvous fresh;
    fresh.send(key_of("a"), scalar_f32(2.f));
    CHECK(value_f32(exe.run(p, {}, {s}, through(fresh))[0]) == 3.f);
  }
}

TEST_CASE("a send into an aborted rendezvous fails naming kiln.send and the abort", "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value one = b.create<FullOp>(std::vector<std::int64_t>{1}, 1.0).result();
  b.create<SendOp>(one, "out");
  Executor exe(Place::cpu(), threads(1));
  LocalRendezvous r;
  r.abort(Error(ErrorKind::Cancelled, "step aborted by the group"));
  KILN_CHECK_ERROR(exe.run(p, {}, {}, through(r)), Cancelled, {"kiln.send", "step aborted by the group"});
}

TEST_CASE("a recv expecting f32 that receives i32 is an InvalidArgument naming the op, key and dtypes",
          "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value a = recv_f32(b, "a", {2});
  Executor exe(Place::cpu(), threads(2));
  // A failed step aborts its rendezvous: each step here has its own.
  LocalRendezvous r;
  r.send(key_of("a"), Tensor::from_vector<std::int32_t>(Dims({2}), {1, 2}));
  auto msg = KILN_CHECK_ERROR(exe.run(p, {}, {a}, through(r)), InvalidArgument,
                              {"kiln.recv", "cpu;cpu;a;0:0", "expected dtype f32", "received i32"});
  // And a shape that does not fit [2]: both named.
  LocalRendezvous r2;
  r2.send(key_of("a"), Tensor::from_vector<float>(Dims({3}), {1, 2, 3}));
  KILN_CHECK_ERROR(exe.run(p, {}, {a}, through(r2)), InvalidArgument, {"kiln.recv", "[2]", "3xf32"});
  // -1 matches any extent.
  Program any;
  Builder ba(any);
  Value v = recv_f32(ba, "v", {-1, 2});
  LocalRendezvous r3;
  r3.send(key_of("v"), Tensor::from_vector<float>(Dims({3, 2}), {1, 2, 3, 4, 5, 6}));
  CHECK(exe.run(any, {}, {v}, through(r3))[0].dims().to_vector() == std::vector<std::int64_t>{3, 2});
}

TEST_CASE("a run whose recv gets the wrong dtype aborts the step's rendezvous: pending and later "
          "receives of the step fail at once with Aborted naming the failure",
          "[exec][send_recv]") {
  // TensorFlow's RecvInvalidDtype: recv "one" -> send "two", "one" sent as f64.
  Program p;
  Builder b(p);
  b.create<SendOp>(recv_f32(b, "one"), "two");
  Program consumer;  // another executor's part of the step
  Builder bc(consumer);
  const Value two = recv_f32(bc, "two");
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), threads(n)), other(Place::cpu(), threads(n));
    LocalRendezvous r;
    DoneRecord other_run;
    other.run_async(consumer, {}, {two}, through(r), other_run.callback());
    auto pending = Receipt::start(r, "three");
    r.send(key_of("one"), Tensor::from_vector<double>(Dims({1}), {1.0}));
    KILN_CHECK_ERROR(exe.run(p, {}, {}, through(r)), InvalidArgument,
                     {"kiln.recv", "cpu;cpu;one;0:0", "expected dtype f32", "received f64"});
    const Error waited = pending->error_within(5000ms);
    CHECK(waited.kind() == ErrorKind::Aborted);
    CHECK_THAT(waited.message(), Catch::Contains("kiln.recv") && Catch::Contains("received f64"));
    REQUIRE(other_run.wait(5000ms));
    REQUIRE(other_run.error());
    CHECK(other_run.error()->kind() == ErrorKind::Aborted);
    CHECK_THAT(other_run.error()->message(), Catch::Contains("kiln.recv") && Catch::Contains("received f64"));
    // Later receives and sends of the step fail at once too.
    CHECK(Receipt::start(r, "four")->error_within(0ms).kind() == ErrorKind::Aborted);
    KILN_CHECK_ERROR(r.send(key_of("five"), scalar_f32(1.f)), Aborted, {"expected dtype f32"});
  }
}

TEST_CASE("send and recv run without a rendezvous are errors naming the op and saying what to pass",
          "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value a = recv_f32(b, "a");
  Executor exe(Place::cpu(), threads(2));
  KILN_CHECK_ERROR(exe.run(p, {}, {a}), InvalidArgument, {"kiln.recv", "RunOptions::rendezvous"});
  DoneRecord rec;
  exe.run_async(p, {}, {a}, {}, rec.callback());
  REQUIRE(rec.wait());
  REQUIRE(rec.error());
  CHECK_THAT(rec.error()->message(), Catch::Contains("RunOptions::rendezvous"));
  Program q;
  Builder bq(q);
  bq.create<SendOp>(bq.create<FullOp>(std::vector<std::int64_t>{1}, 1.0).result(), "x");
  KILN_CHECK_ERROR(exe.run(q), InvalidArgument, {"kiln.send", "RunOptions::rendezvous"});
}

TEST_CASE("bad send / recv attributes are errors naming the op when it is built", "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value one = b.create<FullOp>(std::vector<std::int64_t>{1}, 1.0).result();
  KILN_CHECK_ERROR(b.create<SendOp>(one, ""), InvalidArgument, {"kiln.send"});
  KILN_CHECK_ERROR(b.create<SendOp>(one, "a;b"), InvalidArgument, {"kiln.send", "a;b"});
  KILN_CHECK_ERROR(b.create<RecvOp>("", DataType::Float32, std::vector<std::int64_t>{1}), InvalidArgument,
                   {"kiln.recv"});
  KILN_CHECK_ERROR(b.create<RecvOp>("x", DataType::Undefined, std::vector<std::int64_t>{1}),
                   InvalidArgument, {"kiln.recv", "dtype"});
  KILN_CHECK_ERROR(b.create<RecvOp>("x", DataType::Float32, std::vector<std::int64_t>{-2}),
                   InvalidArgument, {"kiln.recv"});
}

TEST_CASE("a program that receives what it sends later in program order runs at 1 and 2 threads",
          "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value got = recv_f32(b, "loop");
  Value doubled = b.create<AddOp>(got, got).result();
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{1}).result();
  b.create<SendOp>(x, "loop");
  for (unsigned n : {1u, 2u}) {
    Executor exe(Place::cpu(), threads(n));
    LocalRendezvous r;
    CHECK(value_f32(exe.run(p, {{"x", scalar_f32(5.f)}}, {doubled}, through(r))[0]) == 10.f);
  }
}

TEST_CASE("send / recv programs round-trip through the printer's text", "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value a = b.create<RecvOp>("a", DataType::Int64, std::vector<std::int64_t>{-1}, Place::cpu(),
                             Place::host_stream(1))
                .result();
  b.create<SendOp>(a, "b", Place::host_stream(1), Place::cpu());
  const std::string text = p.to_string();
  CHECK_THAT(text, Catch::Contains("kiln.recv"));
  CHECK_THAT(text, Catch::Contains("kiln.send"));
  CHECK_THAT(text, Catch::Contains("host_stream:1"));
}

TEST_CASE("a send / recv program saved as JSON loads and runs the same", "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value a = b.create<RecvOp>("a", DataType::Float32, std::vector<std::int64_t>{-1}, Place::cpu(),
                             Place::host_stream(1))
                .result();
  b.create<SendOp>(b.create<AddOp>(a, a).result(), "b", Place::host_stream(1), Place::cpu());
  Program loaded = load_program_json(save_program_json(p));
  Executor exe(Place::cpu(), threads(2));
  LocalRendezvous r;
  r.send(RendezvousKey(Place::cpu(), Place::host_stream(1), "a"), Tensor::from_vector<float>(Dims({2}), {1, 2}));
  exe.run(loaded, {}, {}, through(r));
  CHECK(r.recv(RendezvousKey(Place::host_stream(1), Place::cpu(), "b")).tensor.to_vector<float>() ==
        std::vector<float>{2, 4});
}

TEST_CASE("a recv saved before passes_dead existed loads without it, as text or JSON", "[exec][send_recv]") {
  Program p;
  Builder b(p);
  b.create<SendOp>(recv_f32(b, "a"), "b");
  const std::string text = p.to_string();
  const std::string attr = " passes_dead = false,";
  const std::size_t at = text.find(attr);
  REQUIRE(at != std::string::npos);
  const std::string old_text = text.substr(0, at) + text.substr(at + attr.size());
  Program from_text = parse_program(old_text);
  CHECK(from_text.to_string() == text);
  nlohmann::json j = program_to_json(p);
  std::size_t dropped = 0;
  std::function<void(nlohmann::json&)> drop = [&](nlohmann::json& x) {
    if (x.is_object()) dropped += x.erase("passes_dead");
    if (x.is_structured())
      for (auto& v : x) drop(v);
  };
  drop(j);
  REQUIRE(dropped == 1);
  CHECK(load_program_json(j.dump()).to_string() == text);
}

TEST_CASE("a send of a switch's untaken output delivers a dead value, which a structured recv refuses "
          "naming the key",
          "[exec][send_recv]") {
  // TensorFlow's SimpleSwitchDead, the sender's half: x -> switch(pred) ->
  // send "c" (the false output) and send "t" (the true one).
  Program p;
  Builder b(p);
  Value x = b.create<DataOp>("x", std::vector<std::int64_t>{1}).result();
  Value pred = b.create<DataOp>("pred", std::vector<std::int64_t>{}, DataType::Bool).result();
  auto sw = b.create<SwitchOp>(x, pred);
  b.create<SendOp>(sw.output_false(), "c");
  b.create<SendOp>(sw.output_true(), "t");
  Program consumer;
  Builder bc(consumer);
  const Value c = recv_f32(bc, "c");
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), threads(n)), other(Place::cpu(), threads(n));
    {
      LocalRendezvous r;
      auto dead = Receipt::start(r, "c"), live = Receipt::start(r, "t");
      exe.run(p, switch_feeds(1.5f, true), {}, through(r));
      CHECK(dead->value_within(5000ms).is_dead);
      const RendezvousValue got = live->value_within(5000ms);
      CHECK_FALSE(got.is_dead);
      CHECK(value_f32(got.tensor) == 1.5f);
    }
    {
      LocalRendezvous r;
      auto live = Receipt::start(r, "c"), dead = Receipt::start(r, "t");
      exe.run(p, switch_feeds(2.5f, false), {}, through(r));
      CHECK(dead->value_within(5000ms).is_dead);
      CHECK(value_f32(live->value_within(5000ms).tensor) == 2.5f);
    }
    // A structured receiver has no dead values: its run fails naming the key
    // (and aborts the rendezvous, which may fail the sender's later send).
    DoneRecord rec;
    LocalRendezvous r;
    other.run_async(consumer, {}, {c}, through(r), rec.callback());
    try {
      exe.run(p, switch_feeds(1.f, true), {}, through(r));
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::Aborted);
    }
    const bool ended = rec.wait(5000ms);
    if (!ended) r.abort(Error(ErrorKind::Cancelled, "the test gave up on the run"));
    REQUIRE(ended);
    REQUIRE(rec.error());
    CHECK(rec.error()->kind() == ErrorKind::InvalidArgument);
    CHECK_THAT(rec.error()->message(), Catch::Contains("kiln.recv") && Catch::Contains("cpu;cpu;c;0:0") &&
                                           Catch::Contains("dead"));
  }
}

TEST_CASE("a recv -> switch -> send program runs in one executor: the live output crosses live and the "
          "untaken one crosses dead",
          "[exec][send_recv]") {
  // TensorFlow's SimpleSwitchLive and SimpleSwitchDead: recv "a" ->
  // switch(pred) -> send "c" (the false output).
  Program p;
  Builder b(p);
  Value a = recv_f32(b, "a");
  Value pred = b.create<DataOp>("pred", std::vector<std::int64_t>{}, DataType::Bool).result();
  b.create<SendOp>(b.create<SwitchOp>(a, pred).output_false(), "c");
  auto pred_is = [](bool v) { return FeedMap{{"pred", Tensor::from_vector<bool>(Dims(), {v})}}; };
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), threads(n));
    for (bool taken : {false, true}) {
      INFO("pred " << taken);
      LocalRendezvous r;
      r.send(key_of("a"), scalar_f32(1.f));
      auto c = Receipt::start(r, "c");
      exe.run(p, pred_is(taken), {}, bounded(r));
      const RendezvousValue got = c->value_within(5000ms);
      CHECK(got.is_dead == taken);
      if (!taken) CHECK(value_f32(got.tensor) == 1.f);
    }
    // Asynchronously, the value sent after the run started.
    DoneRecord rec;
    LocalRendezvous r;
    auto c = Receipt::start(r, "c");
    exe.run_async(p, pred_is(false), {}, through(r), rec.callback());
    r.send(key_of("a"), scalar_f32(4.f));
    CHECK(value_f32(c->value_within(5000ms).tensor) == 4.f);
    const bool ended = rec.wait(5000ms);
    if (!ended) r.abort(Error(ErrorKind::Cancelled, "the test gave up on the run"));
    REQUIRE(ended);
    CHECK_FALSE(rec.error());
  }
}

TEST_CASE("a dataflow program passes a received dead value on: its readers do not run, its send sends "
          "it dead and a merge takes the live input",
          "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value c = recv_f32(b, "c");
  Value s = b.create<AddOp>(c, b.create<FullOp>(std::vector<std::int64_t>{1}, 1.0).result()).result();
  b.create<SendOp>(s, "d");
  Value y = b.create<DataOp>("y", std::vector<std::int64_t>{1}).result();
  auto m = b.create<MergeOp>(std::vector<Value>{s, y});
  const FeedMap feeds{{"y", scalar_f32(7.f)}};
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), threads(n));
    {
      LocalRendezvous r;
      r.send(key_of("c"), Tensor(), /*is_dead=*/true);
      auto d = Receipt::start(r, "d");
      CHECK(value_f32(exe.run(p, feeds, {m.output()}, bounded(r))[0]) == 7.f);
      CHECK(d->value_within(5000ms).is_dead);
    }
    LocalRendezvous r;
    r.send(key_of("c"), scalar_f32(2.f));
    auto d = Receipt::start(r, "d");
    CHECK(value_f32(exe.run(p, feeds, {s}, bounded(r))[0]) == 3.f);
    CHECK(value_f32(d->value_within(5000ms).tensor) == 3.f);
  }
}

TEST_CASE("a recv in a dataflow program fails its run when it gets the wrong dtype, is cancelled, or "
          "waits past the deadline",
          "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value a = recv_f32(b, "a");
  Value pred = b.create<DataOp>("pred", std::vector<std::int64_t>{}, DataType::Bool).result();
  b.create<SendOp>(b.create<SwitchOp>(a, pred).output_false(), "c");
  const FeedMap feeds{{"pred", Tensor::from_vector<bool>(Dims(), {false})}};
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), threads(n));
    {
      LocalRendezvous r;
      auto c = Receipt::start(r, "c");
      r.send(key_of("a"), Tensor::from_vector<double>(Dims({1}), {1.0}));
      KILN_CHECK_ERROR(exe.run(p, feeds, {}, bounded(r)), InvalidArgument,
                       {"kiln.recv", "cpu;cpu;a;0:0", "received f64"});
      // The failed step aborted its rendezvous.
      CHECK(c->error_within(5000ms).kind() == ErrorKind::Aborted);
    }
    {
      LocalRendezvous r;
      RunOptions late = through(r);
      late.timeout = 30ms;
      KILN_CHECK_ERROR(exe.run(p, feeds, {}, late), DeadlineExceeded, {});
      DoneRecord rec;
      exe.run_async(p, feeds, {}, late, rec.callback());
      REQUIRE(rec.wait(5000ms));
      REQUIRE(rec.error());
      CHECK(rec.error()->kind() == ErrorKind::DeadlineExceeded);
    }
    {
      // Cancelled while only the receive is left.
      CancellationManager cancel;
      LocalRendezvous r;
      RunOptions options = through(r);
      options.cancellation = &cancel;
      DoneRecord rec;
      exe.run_async(p, feeds, {}, options, rec.callback());
      CHECK_FALSE(rec.wait(20ms));
      cancel.start_cancel();
      REQUIRE(rec.wait(5000ms));
      REQUIRE(rec.error());
      CHECK(rec.error()->kind() == ErrorKind::Cancelled);
    }
    DoneRecord rec;
    LocalRendezvous r;
    exe.run_async(p, feeds, {}, through(r), rec.callback());
    CHECK_FALSE(rec.wait(20ms));
    r.abort(Error(ErrorKind::Unavailable, "the peer executor failed"));
    REQUIRE(rec.wait(5000ms));
    REQUIRE(rec.error());
    CHECK_THAT(rec.error()->message(), Catch::Contains("the peer executor failed"));
    // The executor runs the program again.
    LocalRendezvous fresh;
    fresh.send(key_of("a"), scalar_f32(9.f));
    auto c = Receipt::start(fresh, "c");
    exe.run(p, feeds, {}, bounded(fresh));
    CHECK(value_f32(c->value_within(5000ms).tensor) == 9.f);
  }
}

TEST_CASE("run_async of a dataflow program waiting on a recv holds no thread: two one-thread executors "
          "exchange values through the shared queue",
          "[exec][send_recv]") {
  // A waits for "a" (recv -> switch -> send "b"); B, queued after A on the
  // one-thread queue both share, sends "a" and waits for "b". Were A's wait
  // to hold the queue's thread, B would never start.
  Program a;
  Builder ba(a);
  Value pred = ba.create<DataOp>("pred", std::vector<std::int64_t>{}, DataType::Bool).result();
  ba.create<SendOp>(ba.create<SwitchOp>(recv_f32(ba, "a"), pred).output_false(), "b");
  Program b;
  Builder bb(b);
  bb.create<SendOp>(bb.create<DataOp>("x", std::vector<std::int64_t>{1}).result(), "a");
  const Value got = recv_f32(bb, "b");
  Executor ea(Place::cpu(), threads(1)), eb(Place::cpu(), threads(1));
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    DoneRecord ra, rb;
    LocalRendezvous r;
    ea.run_async(a, {{"pred", Tensor::from_vector<bool>(Dims(), {false})}}, {}, through(r), ra.callback());
    eb.run_async(b, {{"x", scalar_f32(float(step))}}, {got}, through(r), rb.callback());
    const bool ended = ra.wait(5000ms) && rb.wait(5000ms);
    if (!ended) {
      r.abort(Error(ErrorKind::Cancelled, "the test gave up on the runs"));
      ra.wait();
      rb.wait();
    }
    REQUIRE(ended);
    CHECK_FALSE(ra.error());
    REQUIRE_FALSE(rb.error());
    CHECK(value_f32(rb.fetched().at(0)) == float(step));
  }
}

TEST_CASE("an op of a dataflow program that fails while a recv waits ends the run with its error",
          "[exec][send_recv]") {
  Program p;
  Builder b(p);
  Value pred = b.create<DataOp>("pred", std::vector<std::int64_t>{}, DataType::Bool).result();
  b.create<SendOp>(b.create<SwitchOp>(recv_f32(b, "a"), pred).output_false(), "c");
  const Value boom = b.create<ThrowOp>(b.create<DataOp>("y", std::vector<std::int64_t>{1}).result()).result();
  const FeedMap feeds{{"pred", Tensor::from_vector<bool>(Dims(), {false})}, {"y", scalar_f32(1.f)}};
  for (unsigned n : {1u, 2u}) {
    INFO("threads " << n);
    Executor exe(Place::cpu(), threads(n));
    {
      LocalRendezvous r;
      KILN_CHECK_ERROR(exe.run(p, feeds, {boom}, bounded(r)), OutOfRange, {"exec_test.throw", "boom (kiln)"});
      CHECK(r.is_aborted());
    }
    DoneRecord rec;
    LocalRendezvous r;
    exe.run_async(p, feeds, {boom}, through(r), rec.callback());
    const bool ended = rec.wait(5000ms);
    if (!ended) r.abort(Error(ErrorKind::Cancelled, "the test gave up on the run"));
    REQUIRE(ended);
    REQUIRE(rec.error());
    CHECK(rec.error()->kind() == ErrorKind::OutOfRange);
    CHECK_THAT(rec.error()->message(), Catch::Contains("boom (kiln)"));
  }
}

TEST_CASE("a run whose feeds are rejected aborts the step's rendezvous: the step's other receivers fail "
          "with Aborted naming the feed",
          "[exec][send_recv]") {
  Program p;
  Builder b(p);
  b.create<SendOp>(b.create<DataOp>("x", std::vector<std::int64_t>{2}).result(), "out");
  Executor exe(Place::cpu(), threads(1));
  const Tensor bad = Tensor::from_vector<std::int32_t>(Dims({2}), {1, 2});
  for (bool async : {false, true}) {
    for (const char* name : {"x", "nope"}) {
      INFO((async ? "run_async, feed " : "run, feed ") << name);
      LocalRendezvous r;
      auto waiting = Receipt::start(r, "out");
      const FeedMap feed{{name, name == std::string("x") ? bad : scalar_f32(1.f)}};
      std::string why;
      if (async) {
        DoneRecord rec;
        exe.run_async(p, feed, {}, through(r), rec.callback());
        REQUIRE(rec.wait(5000ms));
        REQUIRE(rec.error());
        why = rec.error()->message();
      } else {
        try {
          exe.run(p, feed, {}, through(r));
          FAIL("the run took a bad feed");
        } catch (const Error& e) {
          why = e.what();
        }
      }
      // x of the wrong dtype, or x missing.
      CHECK_THAT(why, Catch::Contains("feed 'x'"));
      const Error aborted = waiting->error_within(5000ms);
      CHECK(aborted.kind() == ErrorKind::Aborted);
      CHECK_THAT(aborted.message(), Catch::Contains("feed 'x'"));
    }
  }
}
