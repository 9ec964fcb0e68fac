// ONNX RNN / GRU / LSTM unrolled at import: a bidirectional RNN with
// sequences of different lengths (sequence_lens), built here with ONNX's
// protobuf classes, checked against the recurrence written out as loops —
// the paths the backend suite's models leave out (its sequences all run
// to full length, one direction) — and the errors for what is not
// imported.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/executor.h"
#include "kiln/onnx/import.h"

using namespace kiln;

namespace {

constexpr int kF = ::onnx::TensorProto_DataType_FLOAT, kI32 = ::onnx::TensorProto_DataType_INT32;

void set_type(::onnx::ValueInfoProto* v, const std::string& name, int elem,
              const std::vector<std::int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  for (auto d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

constexpr std::int64_t kSteps = 3, kBatch = 2, kIn = 2, kHidden = 2;

// RNN(X [3, 2, 2], W [2, 2, 2], R [2, 2, 2], B, sequence_lens [2]) with
// hidden_size 2 in `direction` (and `activation` for both directions).
std::string rnn_model(const std::string& direction, const std::string& activation) {
  const std::int64_t dirs = direction == "bidirectional" ? 2 : 1;
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(14);
  auto* g = m.mutable_graph();
  g->set_name("rnn");
  set_type(g->add_input(), "X", kF, {kSteps, kBatch, kIn});
  set_type(g->add_input(), "W", kF, {dirs, kHidden, kIn});
  set_type(g->add_input(), "R", kF, {dirs, kHidden, kHidden});
  set_type(g->add_input(), "B", kF, {dirs, 2 * kHidden});
  set_type(g->add_input(), "lens", kI32, {kBatch});
  auto* n = g->add_node();
  n->set_op_type("RNN");
  for (const char* i : {"X", "W", "R", "B", "lens"}) n->add_input(i);
  n->add_output("Y");
  n->add_output("Y_h");
  auto* a = n->add_attribute();
  a->set_name("hidden_size");
  a->set_type(::onnx::AttributeProto_AttributeType_INT);
  a->set_i(kHidden);
  a = n->add_attribute();
  a->set_name("direction");
  a->set_type(::onnx::AttributeProto_AttributeType_STRING);
  a->set_s(direction);
  a = n->add_attribute();
  a->set_name("activations");
  a->set_type(::onnx::AttributeProto_AttributeType_STRINGS);
  for (std::int64_t d = 0; d < dirs; ++d) a->add_strings(activation);
  set_type(g->add_output(), "Y", kF, {kSteps, dirs, kBatch, kHidden});
  set_type(g->add_output(), "Y_h", kF, {dirs, kBatch, kHidden});
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  return bytes;
}

std::vector<float> ramp(std::size_t n, float from, float step) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = from + step * static_cast<float>(i);
  return v;
}

}  // namespace

TEST_CASE(
    "a bidirectional ONNX RNN with sequences of different lengths matches the recurrence "
    "written out: each direction stops at its sequence's end, Y is zero past it",
    "[onnx]") {
  const std::vector<std::int32_t> lens{3, 1};
  const auto x = ramp(kSteps * kBatch * kIn, -0.5f, 0.1f),
             w = ramp(2 * kHidden * kIn, 0.3f, -0.07f),
             r = ramp(2 * kHidden * kHidden, -0.2f, 0.09f), b = ramp(2 * 2 * kHidden, 0.05f, 0.02f);
  kiln::onnx::ImportedModel m =
      kiln::onnx::import_model_from_bytes(rnn_model("bidirectional", "Tanh"), "rnn");
  Executor exe;
  exe.run(m.startup);
  FeedMap feed{{"X", Tensor::from_vector<float>(Dims{kSteps, kBatch, kIn}, x)},
               {"W", Tensor::from_vector<float>(Dims{2, kHidden, kIn}, w)},
               {"R", Tensor::from_vector<float>(Dims{2, kHidden, kHidden}, r)},
               {"B", Tensor::from_vector<float>(Dims{2, 2 * kHidden}, b)},
               {"lens", Tensor::from_vector<std::int32_t>(Dims{kBatch}, lens)}};
  std::vector<Tensor> got = exe.run(m.main, feed, {"Y", "Y_h"});
  REQUIRE(got[0].dims() == Dims{kSteps, 2, kBatch, kHidden});
  REQUIRE(got[1].dims() == Dims{2, kBatch, kHidden});
  // H_t = tanh(X_t·Wᵀ + H_{t-1}·Rᵀ + Wb + Rb) per direction and batch row,
  // over t < lens[batch] (forward: up, reverse: down from lens - 1).
  std::vector<float> y(static_cast<std::size_t>(kSteps * 2 * kBatch * kHidden), 0.0f),
      yh(static_cast<std::size_t>(2 * kBatch * kHidden), 0.0f);
  for (std::int64_t d = 0; d < 2; ++d)
    for (std::int64_t n = 0; n < kBatch; ++n) {
      std::vector<double> h(kHidden, 0.0);
      const std::int64_t len = lens[static_cast<std::size_t>(n)];
      for (std::int64_t k = 0; k < len; ++k) {
        const std::int64_t t = d == 0 ? k : len - 1 - k;
        std::vector<double> next(kHidden);
        for (std::int64_t j = 0; j < kHidden; ++j) {
          double s = b[static_cast<std::size_t>(d * 2 * kHidden + j)] +
                     b[static_cast<std::size_t>(d * 2 * kHidden + kHidden + j)];
          for (std::int64_t i = 0; i < kIn; ++i)
            s += x[static_cast<std::size_t>((t * kBatch + n) * kIn + i)] *
                 w[static_cast<std::size_t>((d * kHidden + j) * kIn + i)];
          for (std::int64_t i = 0; i < kHidden; ++i)
            s += h[static_cast<std::size_t>(i)] *
                 r[static_cast<std::size_t>((d * kHidden + j) * kHidden + i)];
          next[static_cast<std::size_t>(j)] = std::tanh(s);
        }
        h = next;
        for (std::int64_t j = 0; j < kHidden; ++j)
          y[static_cast<std::size_t>(((t * 2 + d) * kBatch + n) * kHidden + j)] =
              static_cast<float>(h[static_cast<std::size_t>(j)]);
      }
      for (std::int64_t j = 0; j < kHidden; ++j)
        yh[static_cast<std::size_t>((d * kBatch + n) * kHidden + j)] =
            static_cast<float>(h[static_cast<std::size_t>(j)]);
    }
  const auto gy = got[0].to_vector<float>(), gh = got[1].to_vector<float>();
  for (std::size_t i = 0; i < y.size(); ++i) {
    INFO("Y element " << i);
    CHECK(gy[i] == Approx(y[i]).margin(1e-6));
  }
  for (std::size_t i = 0; i < yh.size(); ++i) {
    INFO("Y_h element " << i);
    CHECK(gh[i] == Approx(yh[i]).margin(1e-6));
  }
}

TEST_CASE("an ONNX RNN with an activation kiln does not compose is a clear error naming the node",
          "[onnx]") {
  try {
    kiln::onnx::import_model_from_bytes(rnn_model("forward", "Softsign"), "rnn");
    FAIL("no kiln::Error");
  } catch (const kiln::Error& e) {
    CHECK(e.kind() == ErrorKind::Unimplemented);
    CHECK_THAT(e.message(), Catch::Contains("(RNN)"));
    CHECK_THAT(e.message(), Catch::Contains("activation 'Softsign'"));
  }
}
