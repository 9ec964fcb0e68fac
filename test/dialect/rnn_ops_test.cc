// InferMeta and error tests of the ops of kiln/dialect/rnn_ops.h: result
// types (one and two directions, -1 dims, vtensors), the build-time errors
// that name the op and what it expected (ranks, dims, dtypes, operand
// counts, direction, activations, hidden_size, clip), the builders setting
// has_* from the operands given. Their gradients: rnn_grad_test.cc.
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "test_util.h"
#include "dialect/dialect_test_util.h"

using namespace kiln;
using namespace kiln_dialect_test;

namespace {
using Shape = std::vector<std::int64_t>;


LstmOp::Attributes lstm_attrs(std::int64_t hidden, std::string direction = "forward") {
  LstmOp::Attributes a{};
  a.hidden_size = hidden;
  a.direction = std::move(direction);
  return a;
}

std::vector<Type> lstm(const std::vector<Type>& in, const LstmOp::Attributes& a) {
  return LstmOp::infer_meta(in, DictionaryAttribute::get(to_named_attributes(a)));
}
std::vector<Type> gru(const std::vector<Type>& in, const GruOp::Attributes& a) {
  return GruOp::infer_meta(in, DictionaryAttribute::get(to_named_attributes(a)));
}
std::vector<Type> rnn_(const std::vector<Type>& in, const RnnOp::Attributes& a) {
  return RnnOp::infer_meta(in, DictionaryAttribute::get(to_named_attributes(a)));
}

constexpr const char* kLstm = "'kiln.lstm'";
}  // namespace

TEST_CASE("recurrent ops give Y [seq, dirs, batch, hidden] and the last states [dirs, batch, hidden]",
          "[dialect][rnn]") {
  auto r = lstm({tf({5, 2, 3}), tf({1, 16, 3}), tf({1, 16, 4})}, lstm_attrs(4));
  REQUIRE(r.size() == 3);
  CHECK(r[0] == tf({5, 1, 2, 4}));
  CHECK(r[1] == tf({1, 2, 4}));
  CHECK(r[2] == tf({1, 2, 4}));

  GruOp::Attributes g{};
  g.hidden_size = 3, g.direction = "bidirectional";
  g.has_bias = g.has_sequence_lens = g.has_initial_h = true;
  auto rg = gru({tf({-1, -1, 2}, DataType::Float64), tf({2, 9, 2}, DataType::Float64),
                 tf({2, 9, 3}, DataType::Float64), tf({2, 18}, DataType::Float64),
                 tf({7}, DataType::Int32), tf({2, -1, 3}, DataType::Float64)},
                g);
  REQUIRE(rg.size() == 2);
  CHECK(rg[0] == tf({-1, 2, 7, 3}, DataType::Float64));  // batch from sequence_lens
  CHECK(rg[1] == tf({2, 7, 3}, DataType::Float64));

  RnnOp::Attributes a{};
  a.hidden_size = 2, a.direction = "reverse";
  auto rr = rnn_({vf({3, 1, 2}), vf({1, 2, 2}), vf({1, 2, 2})}, a);
  CHECK(rr[0] == vf({3, 1, 1, 2}));
}

TEST_CASE("recurrent ops reject bad shapes and dtypes at build time, naming the operand",
          "[dialect][rnn]") {
  const auto a = lstm_attrs(4);
  SECTION("X not of rank 3") {
    KILN_CHECK_ERROR(lstm({tf({2, 3}), tf({1, 16, 3}), tf({1, 16, 4})}, a), InvalidArgument,
                     {kLstm, "X (operand #0) must have rank 3", "[seq, batch, input]", "[2, 3]"});
  }
  SECTION("W with the wrong gate rows or input size") {
    KILN_CHECK_ERROR(lstm({tf({5, 2, 3}), tf({1, 12, 3}), tf({1, 16, 4})}, a), InvalidArgument,
                     {kLstm, "W (operand #1) must be [dirs, gates·hidden, input] = [1, 16, 3]",
                      "got [1, 12, 3]"});
    KILN_CHECK_ERROR(lstm({tf({5, 2, 3}), tf({1, 16, 2}), tf({1, 16, 4})}, a), InvalidArgument,
                     {kLstm, "W (operand #1)"});
  }
  SECTION("R not [dirs, gates·hidden, hidden]") {
    KILN_CHECK_ERROR(lstm({tf({5, 2, 3}), tf({1, 16, 3}), tf({1, 16, 5})}, a), InvalidArgument,
                     {kLstm, "R (operand #2) must be [dirs, gates·hidden, hidden] = [1, 16, 4]"});
  }
  SECTION("one direction's weights for a bidirectional op") {
    KILN_CHECK_ERROR(lstm({tf({5, 2, 3}), tf({1, 16, 3}), tf({1, 16, 4})},
                          lstm_attrs(4, "bidirectional")),
                     InvalidArgument, {kLstm, "W (operand #1)", "[2, 16, 3]"});
  }
  SECTION("B, initial states and peepholes of the wrong shape") {
    auto b = lstm_attrs(4);
    b.has_bias = b.has_initial_h = b.has_initial_c = b.has_peepholes = true;
    const Type x = tf({5, 2, 3}), w = tf({1, 16, 3}), r = tf({1, 16, 4});
    KILN_CHECK_ERROR(lstm({x, w, r, tf({1, 16}), tf({1, 2, 4}), tf({1, 2, 4}), tf({1, 12})}, b),
                     InvalidArgument, {kLstm, "B (operand #3) must be [dirs, 2·gates·hidden]"});
    KILN_CHECK_ERROR(lstm({x, w, r, tf({1, 32}), tf({1, 3, 4}), tf({1, 2, 4}), tf({1, 12})}, b),
                     InvalidArgument, {kLstm, "initial_h (operand #4)", "[dirs, batch, hidden]"});
    KILN_CHECK_ERROR(lstm({x, w, r, tf({1, 32}), tf({1, 2, 4}), tf({2, 4}), tf({1, 12})}, b),
                     InvalidArgument, {kLstm, "initial_c (operand #5)"});
    KILN_CHECK_ERROR(lstm({x, w, r, tf({1, 32}), tf({1, 2, 4}), tf({1, 2, 4}), tf({1, 16})}, b),
                     InvalidArgument, {kLstm, "P (operand #6) must be [dirs, 3·hidden]"});
  }
  SECTION("operands of mixed dtypes, integer X, float sequence_lens") {
    KILN_CHECK_ERROR(lstm({tf({5, 2, 3}), tf({1, 16, 3}, DataType::Float64), tf({1, 16, 4})}, a),
                     InvalidArgument, {kLstm});
    KILN_CHECK_ERROR(lstm({tf({5, 2, 3}, DataType::Int32), tf({1, 16, 3}), tf({1, 16, 4})}, a),
                     InvalidArgument, {kLstm});
    auto s = lstm_attrs(4);
    s.has_sequence_lens = true;
    KILN_CHECK_ERROR(lstm({tf({5, 2, 3}), tf({1, 16, 3}), tf({1, 16, 4}), tf({2})}, s),
                     InvalidArgument, {kLstm, "sequence_lens (operand #3) must be int32 or int64"});
  }
  SECTION("an operand count that disagrees with the has_* attributes") {
    auto s = lstm_attrs(4);
    s.has_bias = true;
    KILN_CHECK_ERROR(lstm({tf({5, 2, 3}), tf({1, 16, 3}), tf({1, 16, 4})}, s), InvalidArgument,
                     {kLstm, "needs 4 operands (X, W, R, B", "got 3"});
  }
}

TEST_CASE("recurrent ops reject bad attributes at build time", "[dialect][rnn]") {
  const std::vector<Type> in{tf({5, 2, 3}), tf({1, 16, 3}), tf({1, 16, 4})};
  KILN_CHECK_ERROR(lstm(in, lstm_attrs(4, "sideways")), InvalidArgument,
                   {kLstm, "direction must be", "\"bidirectional\"", "\"sideways\""});
  KILN_CHECK_ERROR(lstm(in, lstm_attrs(0)), InvalidArgument, {kLstm, "hidden_size must be > 0"});
  auto a = lstm_attrs(4);
  a.activations = "Sigmoid,Tanh,Swish";
  KILN_CHECK_ERROR(lstm(in, a), InvalidArgument, {kLstm, "unknown activation 'Swish'"});
  a.activations = "Sigmoid,Tanh";
  KILN_CHECK_ERROR(lstm(in, a), InvalidArgument,
                   {kLstm, "name 2 functions", "3 per direction (f, g, h)"});
  a.activations = "Sigmoid,Tanh,LeakyRelu(0.1,2)";
  KILN_CHECK_ERROR(lstm(in, a), InvalidArgument, {kLstm, "LeakyRelu takes 1 parameter"});
  a.activations = "Sigmoid,Tanh,LeakyRelu(x)";
  KILN_CHECK_ERROR(lstm(in, a), InvalidArgument, {kLstm, "'x' is not a number"});
  a.activations = "";
  a.clip = -1;
  KILN_CHECK_ERROR(lstm(in, a), InvalidArgument, {kLstm, "clip must be finite and >= 0"});
}

TEST_CASE("activation lists parse and print ONNX's names with their parameters",
          "[dialect][rnn]") {
  auto acts = rnn::parse_activations("op", "Sigmoid, HardSigmoid , LeakyRelu(0.5),Affine(2,3)");
  REQUIRE(acts.size() == 4);
  CHECK(acts[1].kind == rnn::Activation::Kind::HardSigmoid);
  CHECK(acts[1].alpha == Approx(0.2));  // ONNX's defaults
  CHECK(acts[1].beta == Approx(0.5));
  CHECK(acts[2].alpha == Approx(0.5));
  CHECK(acts[3].beta == Approx(3));
  CHECK(rnn::activation_string(acts[2]) == "LeakyRelu(0.5)");
  CHECK(rnn::activation_string(acts[0]) == "Sigmoid");
  // A bidirectional op given one list uses it for both directions.
  auto a = lstm_attrs(4, "bidirectional");
  CHECK(rnn::config_of("kiln.lstm", a).activations.size() == 6);
}

TEST_CASE("recurrent op builders record which optional operands they were given",
          "[dialect][rnn]") {
  Program p;
  Builder b(p);
  auto data = [&](const char* n, Shape d, DataType dt = DataType::Float32) {
    return b.create<DataOp>(n, d, dt).result();
  };
  Value x = data("x", {5, 2, 3}), w = data("w", {1, 16, 3}), r = data("r", {1, 16, 4});
  Value h0 = data("h0", {1, 2, 4}), p_ = data("p", {1, 12});
  auto op = b.create<LstmOp>(RecurrentInputs{x, w, r, {}, {}, h0, {}, p_}, lstm_attrs(4));
  const auto at = op.attrs();
  CHECK(at.has_initial_h);
  CHECK(at.has_peepholes);
  CHECK_FALSE(at.has_bias);
  CHECK_FALSE(at.has_initial_c);
  CHECK(op.operation()->num_operands() == 5);
  CHECK(op.operation()->num_results() == 3);
  RnnOp::Attributes ra{};
  ra.hidden_size = 4, ra.direction = "forward";
  Value w1 = data("w1", {1, 4, 3}), r1 = data("r1", {1, 4, 4});
  KILN_CHECK_ERROR(b.create<RnnOp>(RecurrentInputs{x, w1, r1, {}, {}, {}, h0, {}}, ra),
                   InvalidArgument, {"'kiln.rnn' takes no initial_c or P"});
}
