// Opsets 18 to 22 (ONNX 1.13 to 1.17, what PyTorch's newer exporters
// write): the ops whose behaviour changed there import with their new
// inputs and attributes (reductions' axes input, Split's num_outputs, Pad's
// axes, Resize's axes and half_pixel_symmetric, DFT's axis input,
// GridSample's mode names, QuantizeLinear's output_dtype, RoiAlign's
// coordinate_transformation_mode of opset 16) and the ops new
// there that kiln composes (Mish, Gelu, GroupNormalization); each against
// the same computation at an older opset or against values worked out by
// hand. What kiln does not take (antialias, keep_aspect_ratio_policy,
// blocked quantization, composed reductions with noop_with_empty_axes) is a
// kiln::Error naming it.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/executor.h"
#include "kiln/frontend/backward.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/support/half.h"
#include "kiln/onnx/import.h"
#include "kiln/support/error.h"
#include "onnxruntime_runner.h"

namespace {

// A model of one node at one opset: its inputs fed (f32) or initializers,
// its attributes, its outputs y0, y1, …
class OneNode {
 public:
  OneNode(std::int64_t opset, const std::string& op) {
    m_.set_ir_version(8);
    m_.add_opset_import()->set_version(opset);
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(op);
  }
  OneNode& fed(const std::string& name, const std::vector<std::int64_t>& dims, std::vector<float> data) {
    return fed(name, dims, dims, std::move(data));
  }
  // An input declared with `declared` dims (-1: a named dim), fed as `dims`.
  OneNode& fed(const std::string& name, const std::vector<std::int64_t>& declared,
               const std::vector<std::int64_t>& dims, std::vector<float> data) {
    auto* in = m_.mutable_graph()->add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto_DataType_FLOAT);
    for (std::size_t i = 0; i < declared.size(); ++i) {
      auto* d = tt->mutable_shape()->add_dim();
      if (declared[i] < 0) d->set_dim_param(name + std::to_string(i));
      else d->set_dim_value(declared[i]);
    }
    feeds_[name] = kiln::Tensor::from_vector<float>(kiln::Dims(dims), data);
    node()->add_input(name);
    return *this;
  }
  // An initializer of any element type, its bytes as they are.
  OneNode& raw(const std::string& name, ::onnx::TensorProto_DataType type, const std::vector<std::int64_t>& dims,
               const std::string& bytes) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (auto d : dims) t->add_dims(d);
    t->set_raw_data(bytes);
    node()->add_input(name);
    return *this;
  }
  OneNode& ints(const std::string& name, const std::vector<std::int64_t>& v, bool scalar = false) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto_DataType_INT64);
    if (!scalar) t->add_dims(static_cast<std::int64_t>(v.size()));
    for (auto x : v) t->add_int64_data(x);
    node()->add_input(name);
    return *this;
  }
  // A float initializer of dims `dims` (default: 1-D).
  OneNode& floats(const std::string& name, const std::vector<float>& v, std::vector<std::int64_t> dims = {}) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto_DataType_FLOAT);
    if (dims.empty()) dims = {static_cast<std::int64_t>(v.size())};
    for (auto d : dims) t->add_dims(d);
    for (auto x : v) t->add_float_data(x);
    node()->add_input(name);
    return *this;
  }
  OneNode& omitted() {
    node()->add_input("");
    return *this;
  }
  OneNode& attr(const std::string& name, std::int64_t v) {
    auto* a = add_attr(name, ::onnx::AttributeProto_AttributeType_INT);
    a->set_i(v);
    return *this;
  }
  OneNode& attr(const std::string& name, int v) { return attr(name, std::int64_t{v}); }
  OneNode& attr(const std::string& name, float v) {
    add_attr(name, ::onnx::AttributeProto_AttributeType_FLOAT)->set_f(v);
    return *this;
  }
  OneNode& attr(const std::string& name, const char* v) {
    add_attr(name, ::onnx::AttributeProto_AttributeType_STRING)->set_s(v);
    return *this;
  }
  OneNode& attr(const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = add_attr(name, ::onnx::AttributeProto_AttributeType_INTS);
    for (auto x : v) a->add_ints(x);
    return *this;
  }
  // Imports the model and runs it: its outputs.
  std::vector<kiln::Tensor> tensors(int outputs = 1) {
    auto m = kiln::onnx::import_model_from_bytes(bytes(outputs));
    kiln::Executor exe;
    exe.run(m.startup);
    std::vector<kiln::FetchTarget> names;
    for (int i = 0; i < outputs; ++i) names.emplace_back("y" + std::to_string(i));
    return exe.run(m.main, feeds_, names);
  }
  // The same, each output's values (f32).
  std::vector<std::vector<float>> run(int outputs = 1) {
    std::vector<std::vector<float>> out;
    for (const auto& t : tensors(outputs)) out.push_back(t.to_vector<float>());
    return out;
  }
  // Each output of kiln's run against ONNX Runtime's (skipped without it).
  void check_against_onnxruntime(int outputs = 1) {
    if (!kiln_test::have_onnxruntime()) return;
    std::vector<std::pair<std::string, kiln::Tensor>> inputs;
    for (const auto& in : m_.graph().input()) inputs.emplace_back(in.name(), feeds_.at(in.name()));
    const auto want = kiln_test::run_in_onnxruntime(bytes(outputs), inputs);
    const auto got = run(outputs);
    REQUIRE(want.size() == got.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
      const auto w = want[k].to_vector<float>();
      REQUIRE(w.size() == got[k].size());
      for (std::size_t i = 0; i < w.size(); ++i) CHECK(got[k][i] == Approx(w[i]).margin(1e-5).epsilon(1e-5));
    }
  }
  // The imported model (its main and startup programs).
  kiln::onnx::ImportedModel imported(int outputs = 1) { return kiln::onnx::import_model_from_bytes(bytes(outputs)); }
  const kiln::FeedMap& feeds() const { return feeds_; }
  // The import's error message; "" when the model imports.
  std::string error(int outputs = 1) {
    try {
      kiln::onnx::import_model_from_bytes(bytes(outputs));
    } catch (const kiln::Error& e) {
      return e.message();
    }
    return "";
  }

 private:
  ::onnx::AttributeProto* add_attr(const std::string& name, ::onnx::AttributeProto_AttributeType type) {
    auto* a = node()->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
  }
  std::string bytes(int outputs) {
    ::onnx::ModelProto m = m_;
    for (int i = 0; i < outputs; ++i) {
      m.mutable_graph()->mutable_node(0)->add_output("y" + std::to_string(i));
      m.mutable_graph()->add_output()->set_name("y" + std::to_string(i));
    }
    std::string b;
    REQUIRE(m.SerializeToString(&b));
    return b;
  }
  ::onnx::NodeProto* node() { return m_.mutable_graph()->mutable_node(0); }
  ::onnx::ModelProto m_;
  kiln::FeedMap feeds_;
};

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

const std::vector<float> kX{0.5f, -1.f, 2.f, 3.f, -0.25f, 1.5f};  // [2, 3]

void check_near(const std::vector<float>& got, const std::vector<double>& want, double margin = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(margin));
  }
}

}  // namespace

TEST_CASE("opset-18 reductions read their axes from an input, as opset 13 read the attribute",
          "[onnx][opset18]") {
  for (const char* op : {"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                         "ReduceMin", "ReduceProd", "ReduceSumSquare"}) {
    INFO(op);
    const std::vector<float> positive{0.5f, 1.f, 2.f, 3.f, 0.25f, 1.5f};  // ReduceLogSum's log needs > 0
    for (std::int64_t axis : {0, 1, -1}) {
      const auto old = OneNode(13, op).fed("x", {2, 3}, positive).attr("axes", std::vector<std::int64_t>{axis})
                           .attr("keepdims", 0).run();
      const auto now = OneNode(18, op).fed("x", {2, 3}, positive).ints("axes", {axis}).attr("keepdims", 0).run();
      REQUIRE(now[0].size() == old[0].size());
      for (std::size_t i = 0; i < now[0].size(); ++i) CHECK(now[0][i] == old[0][i]);
    }
    // No axes input: every axis.
    CHECK(OneNode(18, op).fed("x", {2, 3}, positive).run()[0] == OneNode(13, op).fed("x", {2, 3}, positive).run()[0]);
  }
}

TEST_CASE("an opset-18 reduction with noop_with_empty_axes and no axes gives its input where kiln has the op, "
          "else is an error naming the attribute",
          "[onnx][opset18]") {
  CHECK(OneNode(18, "ReduceMax").fed("x", {2, 3}, kX).attr("noop_with_empty_axes", 1).run()[0] == kX);
  CHECK(OneNode(18, "ReduceMean").fed("x", {2, 3}, kX).omitted().attr("noop_with_empty_axes", 1).run()[0] == kX);
  CHECK_THAT(OneNode(18, "ReduceL2").fed("x", {2, 3}, kX).attr("noop_with_empty_axes", 1).error(),
             Catch::Contains("ReduceL2") && Catch::Contains("noop_with_empty_axes"));
}

TEST_CASE("opset-18 Split cuts num_outputs parts of the dim's share rounded up, the last one smaller",
          "[onnx][opset18]") {
  const std::vector<float> x{0, 1, 2, 3, 4, 5, 6};
  const auto parts = OneNode(18, "Split").fed("x", {7}, x).attr("num_outputs", 3).run(3);
  CHECK(parts[0] == std::vector<float>{0, 1, 2});
  CHECK(parts[1] == std::vector<float>{3, 4, 5});
  CHECK(parts[2] == std::vector<float>{6});
  CHECK_THAT(OneNode(18, "Split").fed("x", {7}, x).attr("num_outputs", 2).error(3),
             Catch::Contains("num_outputs 2") && Catch::Contains("3 outputs"));
  CHECK_THAT(OneNode(18, "Split").fed("x", {7}, x).ints("split", {3, 4}).attr("num_outputs", 2).error(2),
             Catch::Contains("both num_outputs and the split sizes"));
  // 5 in 4 parts of 2 leaves -1 for the last
  CHECK_THAT(OneNode(18, "Split").fed("x", {5}, {0, 1, 2, 3, 4}).attr("num_outputs", 4).error(4),
             Catch::Contains("a dim of 5 in num_outputs 4 parts"));
}

TEST_CASE("opset-18 Pad pads only the axes its axes input names", "[onnx][opset18]") {
  for (std::int64_t axis : {1, -1}) {
    const auto y = OneNode(18, "Pad").fed("x", {2, 3}, kX).ints("pads", {1, 2}).floats("value", {9.f})
                       .ints("axes", {axis}).run();
    check_near(y[0], {9, 0.5, -1, 2, 9, 9, 9, 3, -0.25, 1.5, 9, 9});
  }
  const auto rows = OneNode(18, "Pad").fed("x", {2, 3}, kX).ints("pads", {0, 1}).omitted().ints("axes", {0}).run();
  check_near(rows[0], {0.5, -1, 2, 3, -0.25, 1.5, 0, 0, 0});
  CHECK_THAT(OneNode(18, "Pad").fed("x", {2, 3}, kX).ints("pads", {1, 2}).omitted().ints("axes", {1, 1}).error(),
             Catch::Contains("pads of length 2 for 2 axes"));
  CHECK_THAT(OneNode(18, "Pad").fed("x", {2, 3}, kX).ints("pads", {1, 2, 0, 0}).omitted().ints("axes", {1, 1}).error(),
             Catch::Contains("repeated"));
}

TEST_CASE("opset-18 Resize takes scales and sizes for the axes it names; antialias and aspect policies are "
          "errors naming them",
          "[onnx][opset18]") {
  const std::vector<float> x{1, 2, 3, 4};  // [1, 1, 2, 2]
  const auto whole = OneNode(13, "Resize").fed("x", {1, 1, 2, 2}, x).omitted().floats("scales", {1, 1, 2, 2})
                         .attr("mode", "linear").run();
  const auto named = OneNode(18, "Resize").fed("x", {1, 1, 2, 2}, x).omitted().floats("scales", {2, 2})
                         .attr("mode", "linear").attr("axes", std::vector<std::int64_t>{2, -1}).run();
  CHECK(named[0] == whole[0]);
  const auto sized = OneNode(18, "Resize").fed("x", {1, 1, 2, 2}, x).omitted().omitted().ints("sizes", {3})
                         .attr("axes", std::vector<std::int64_t>{3}).run();
  CHECK(sized[0].size() == 6);
  CHECK_THAT(OneNode(18, "Resize").fed("x", {1, 1, 2, 2}, x).omitted().floats("scales", {1, 1, 2, 2})
                 .attr("mode", "linear").attr("antialias", 1).error(),
             Catch::Contains("antialias"));
  CHECK_THAT(OneNode(18, "Resize").fed("x", {1, 1, 2, 2}, x).omitted().omitted().ints("sizes", {1, 1, 3, 4})
                 .attr("keep_aspect_ratio_policy", "not_larger").error(),
             Catch::Contains("keep_aspect_ratio_policy 'not_larger'"));
  CHECK_THAT(OneNode(18, "Resize").fed("x", {1, 1, 2, 2}, x).omitted().floats("scales", {2, 2, 2})
                 .attr("axes", std::vector<std::int64_t>{2, 3}).error(),
             Catch::Contains("2 axes"));
}

TEST_CASE("Resize's half_pixel_symmetric coordinates (opset 19) centre a floored output on the input",
          "[onnx][opset18]") {
  // in 4, scale 0.6: out 2 of length 2.4; offset 2 · (1 - 2 / 2.4) = 1/3; sources
  // 1/3 + 0.5 / 0.6 - 0.5 = 2/3 and 1/3 + 1.5 / 0.6 - 0.5 = 7/3, read linearly from x = 0 1 2 3.
  const auto y = OneNode(19, "Resize").fed("x", {1, 1, 1, 4}, {0, 1, 2, 3}).omitted().floats("scales", {1, 1, 1, 0.6f})
                     .attr("mode", "linear").attr("coordinate_transformation_mode", "half_pixel_symmetric").run();
  check_near(y[0], {2.0 / 3, 7.0 / 3});
  // with sizes (scale = out / in) it is half_pixel's
  const auto sized = OneNode(19, "Resize").fed("x", {1, 1, 1, 4}, {0, 1, 2, 3}).omitted().omitted()
                         .ints("sizes", {1, 1, 1, 2}).attr("mode", "linear")
                         .attr("coordinate_transformation_mode", "half_pixel_symmetric").run();
  check_near(sized[0], {0.5, 2.5});
  CHECK_THAT(OneNode(18, "Resize").fed("x", {1, 1, 1, 4}, {0, 1, 2, 3}).omitted().floats("scales", {1, 1, 1, 0.6f})
                 .attr("coordinate_transformation_mode", "half_pixel_symmetric").error(),
             Catch::Contains("coordinate_transformation_mode 'half_pixel_symmetric'"));
  CHECK_THAT(OneNode(13, "Resize").fed("x", {1, 1, 1, 4}, {0, 1, 2, 3}).omitted().floats("scales", {1, 1, 1, 2})
                 .attr("coordinate_transformation_mode", "half_pixle").error(),
             Catch::Contains("coordinate_transformation_mode 'half_pixle'"));
}

TEST_CASE("Gelu (opset 20) is kiln's gelu, exact or tanh", "[onnx][opset18]") {
  const std::vector<float> x{-3.f, -0.5f, 0.f, 0.7f, 2.5f};
  std::vector<double> exact, tanh_form;
  for (float v : x) {
    exact.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    tanh_form.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  }
  check_near(OneNode(20, "Gelu").fed("x", {5}, x).run()[0], exact);
  check_near(OneNode(20, "Gelu").fed("x", {5}, x).attr("approximate", "tanh").run()[0], tanh_form);
  CHECK_THAT(OneNode(20, "Gelu").fed("x", {5}, x).attr("approximate", "sigmoid").error(),
             Catch::Contains("approximate 'sigmoid'"));
  CHECK_THAT(OneNode(19, "Gelu").fed("x", {5}, x).error(), Catch::Contains("opsets 20 to 24"));
}

TEST_CASE("Mish (opset 18) and Softplus stay finite where exp(x) overflows", "[onnx][opset18]") {
  const std::vector<float> x{-100.f, -1.f, 0.f, 1.f, 100.f};
  std::vector<double> softplus, mish;
  for (float v : x) {
    softplus.push_back(std::log1p(std::exp(-std::abs(double(v)))) + std::max(0.0, double(v)));
    mish.push_back(v * std::tanh(softplus.back()));
  }
  check_near(OneNode(13, "Softplus").fed("x", {5}, x).run()[0], softplus);
  check_near(OneNode(18, "Mish").fed("x", {5}, x).run()[0], mish);
}

TEST_CASE("GroupNormalization normalizes each group of channels, with scale and bias per group at opset 18 "
          "and per channel at 21",
          "[onnx][opset18]") {
  // x [1, 4, 2]: groups {channels 0, 1} and {2, 3} of 4 values each
  const std::vector<float> x{1, 2, 3, 4, -1, 0, 5, 8};
  std::vector<double> normed(8);
  for (int g = 0; g < 2; ++g) {
    double mean = 0, var = 0;
    for (int i = 0; i < 4; ++i) mean += x[static_cast<std::size_t>(g * 4 + i)] / 4.0;
    for (int i = 0; i < 4; ++i) var += std::pow(x[static_cast<std::size_t>(g * 4 + i)] - mean, 2) / 4.0;
    for (int i = 0; i < 4; ++i)
      normed[static_cast<std::size_t>(g * 4 + i)] = (x[static_cast<std::size_t>(g * 4 + i)] - mean) / std::sqrt(var + 1e-5);
  }
  std::vector<double> per_group(8), per_channel(8);
  const double gs[2] = {2, -1}, gb[2] = {0.5, 3}, cs[4] = {1, 2, 3, 4}, cb[4] = {0, 1, 0, -1};
  for (int i = 0; i < 8; ++i) {
    per_group[static_cast<std::size_t>(i)] = normed[static_cast<std::size_t>(i)] * gs[i / 4] + gb[i / 4];
    per_channel[static_cast<std::size_t>(i)] = normed[static_cast<std::size_t>(i)] * cs[i / 2] + cb[i / 2];
  }
  check_near(OneNode(18, "GroupNormalization").fed("x", {1, 4, 2}, x).floats("scale", {2, -1}).floats("bias", {0.5f, 3})
                 .attr("num_groups", 2).run()[0],
             per_group, 1e-4);
  check_near(OneNode(21, "GroupNormalization").fed("x", {1, 4, 2}, x).floats("scale", {1, 2, 3, 4})
                 .floats("bias", {0, 1, 0, -1}).attr("num_groups", 2).run()[0],
             per_channel, 1e-4);
  CHECK_THAT(OneNode(21, "GroupNormalization").fed("x", {1, 4, 2}, x).floats("scale", {1, 2, 3, 4})
                 .floats("bias", {0, 1, 0, -1}).attr("num_groups", 3).error(),
             Catch::Contains("num_groups 3 for 4 channels"));
}

TEST_CASE("DFT of opset 20 reads its axis from an input, by default the second last", "[onnx][opset18]") {
  const std::vector<float> x{1, 0, 2, 0, 0, 0, -1, 0};  // [1, 4, 2]: complex 1, 2, 0, -1
  const auto old = OneNode(17, "DFT").fed("x", {1, 4, 2}, x).attr("axis", 1).run();
  CHECK(OneNode(20, "DFT").fed("x", {1, 4, 2}, x).run()[0] == old[0]);
  CHECK(OneNode(20, "DFT").fed("x", {1, 4, 2}, x).omitted().ints("axis", {1}, true).run()[0] == old[0]);
  // X[k] = Σ x[n] e^{-iπkn/2}: X[0] = 2, X[1] = 1 - 2i - i, X[2] = 1 - 2 + 1, X[3] = 1 + 2i + i
  check_near(old[0], {2, 0, 1, -3, 0, 0, 1, 3});
}

TEST_CASE("GridSample of opset 20 names its modes linear and cubic", "[onnx][opset18]") {
  const std::vector<float> x{1, 2, 3, 4}, grid{-0.5f, -0.5f, 0.25f, 0.75f};  // X [1,1,2,2], grid [1,1,2,2]
  for (auto [old_mode, new_mode] : {std::pair{"bilinear", "linear"}, {"bicubic", "cubic"}, {"nearest", "nearest"}}) {
    INFO(new_mode);
    const auto old = OneNode(16, "GridSample").fed("x", {1, 1, 2, 2}, x).fed("grid", {1, 1, 2, 2}, grid)
                         .attr("mode", old_mode).run();
    CHECK(OneNode(20, "GridSample").fed("x", {1, 1, 2, 2}, x).fed("grid", {1, 1, 2, 2}, grid)
              .attr("mode", new_mode).run()[0] == old[0]);
  }
  CHECK(OneNode(20, "GridSample").fed("x", {1, 1, 2, 2}, x).fed("grid", {1, 1, 2, 2}, grid).run()[0] ==
        OneNode(16, "GridSample").fed("x", {1, 1, 2, 2}, x).fed("grid", {1, 1, 2, 2}, grid).run()[0]);
  CHECK_THAT(OneNode(20, "GridSample").fed("x", {1, 1, 2, 2}, x).fed("grid", {1, 1, 2, 2}, grid)
                 .attr("mode", "bilinear").error(),
             Catch::Contains("mode 'bilinear'"));
}

TEST_CASE("QuantizeLinear of opset 21 takes output_dtype for its type; blocked quantization is an error",
          "[onnx][opset18]") {
  const std::vector<float> x{-1.f, 0.f, 0.26f, 2.f};
  // output_dtype 3: int8, round(x / 0.01) saturated to [-128, 127] (u8 without it)
  const auto y = OneNode(21, "QuantizeLinear").fed("x", {4}, x).floats("scale", {0.01f}).attr("output_dtype", 3)
                     .tensors()[0];
  REQUIRE(y.dtype() == kiln::DataType::Int8);
  CHECK(y.to_vector<std::int8_t>() == std::vector<std::int8_t>{-100, 0, 26, 127});
  CHECK_THAT(OneNode(21, "QuantizeLinear").fed("x", {4}, x).floats("scale", {0.01f}).attr("output_dtype", 5).error(),
             Catch::Contains("quantized type i16"));
  CHECK_THAT(OneNode(21, "QuantizeLinear").fed("x", {4}, x).floats("scale", {0.01f}).attr("block_size", 2).error(),
             Catch::Contains("block_size 2"));
  CHECK_THAT(OneNode(21, "DequantizeLinear").fed("x", {4}, x).floats("scale", {0.01f}).attr("block_size", 2).error(),
             Catch::Contains("block_size 2"));
}

TEST_CASE("a model of opset 24 imports its unchanged ops; opset 25 is an error naming the range",
          "[onnx][opset18]") {
  CHECK(OneNode(24, "Relu").fed("x", {2, 3}, kX).run()[0] == std::vector<float>{0.5f, 0, 2, 3, 0, 1.5f});
  CHECK_THAT(OneNode(25, "Relu").fed("x", {2, 3}, kX).error(), Catch::Contains("opsets 1 to 24"));
}

TEST_CASE("the opset 18 to 22 forms kiln imports give ONNX Runtime's outputs", "[onnx][opset18][onnxruntime]") {
  const std::vector<float> x{1, 2, 3, 4, -1, 0, 5, 8};
  OneNode(18, "ReduceLogSumExp").fed("x", {2, 4}, x).ints("axes", {-1}).check_against_onnxruntime();
  OneNode(18, "Split").fed("x", {8}, x).attr("num_outputs", 3).check_against_onnxruntime(3);
  OneNode(18, "Pad").fed("x", {2, 4}, x).ints("pads", {1, 2}).floats("value", {9.f}).ints("axes", {0})
      .check_against_onnxruntime();
  OneNode(19, "Pad").fed("x", {2, 4}, x).ints("pads", {0, 1, 0, 1}).attr("mode", "reflect").check_against_onnxruntime();
  OneNode(18, "Resize").fed("x", {1, 1, 2, 4}, x).omitted().floats("scales", {1.5f, 0.5f}).attr("mode", "linear")
      .attr("axes", std::vector<std::int64_t>{2, 3}).check_against_onnxruntime();
  OneNode(19, "Resize").fed("x", {1, 1, 2, 4}, x).omitted().floats("scales", {1, 1, 1.7f, 0.6f})
      .attr("mode", "linear").attr("coordinate_transformation_mode", "half_pixel_symmetric")
      .check_against_onnxruntime();
  OneNode(20, "Gelu").fed("x", {8}, x).attr("approximate", "tanh").check_against_onnxruntime();
  OneNode(18, "Mish").fed("x", {8}, x).check_against_onnxruntime();
  OneNode(21, "GroupNormalization").fed("x", {1, 4, 2}, x).floats("scale", {1, 2, 3, 4})
      .floats("bias", {0, 1, 0, -1}).attr("num_groups", 2).check_against_onnxruntime();
  OneNode(20, "DFT").fed("x", {1, 4, 2}, x).check_against_onnxruntime();
  OneNode(20, "GridSample").fed("x", {1, 1, 2, 4}, x).fed("grid", {1, 1, 2, 2}, {-0.5f, -0.5f, 0.25f, 0.75f})
      .attr("mode", "cubic").check_against_onnxruntime();
  OneNode(22, "Softplus").fed("x", {8}, x).check_against_onnxruntime();
}

TEST_CASE("an opset-18 Resize with sizes and an aspect policy is an error also where its dims are known only "
          "at run time",
          "[onnx][opset18]") {
  CHECK_THAT(OneNode(18, "Resize").fed("x", {-1, -1}, {4, 8}, std::vector<float>(32, 1.f)).omitted().omitted()
                 .ints("sizes", {4, 4}).attr("keep_aspect_ratio_policy", "not_larger").error(),
             Catch::Contains("keep_aspect_ratio_policy 'not_larger'"));
  // antialias does nothing to nearest sampling
  CHECK(OneNode(18, "Resize").fed("x", {1, 1, 1, 2}, {1, 2}).omitted().floats("scales", {1, 1, 1, 2})
            .attr("antialias", 1).run()[0] == std::vector<float>{1, 1, 2, 2});
}

TEST_CASE("opset-18 Split into num_outputs parts of a dim known only at run time cuts them as ONNX does",
          "[onnx][opset18]") {
  std::vector<float> x(10);
  for (int i = 0; i < 10; ++i) x[static_cast<std::size_t>(i)] = float(i);
  const auto parts = OneNode(18, "Split").fed("x", {-1}, {10}, x).attr("num_outputs", 3).run(3);
  CHECK(parts[0] == std::vector<float>{0, 1, 2, 3});
  CHECK(parts[1] == std::vector<float>{4, 5, 6, 7});
  CHECK(parts[2] == std::vector<float>{8, 9});
}

TEST_CASE("DequantizeLinear gives the scale's type from opset 19 on, f32 before", "[onnx][opset18]") {
  const std::string x{"\x02\x00\xfe", 3};  // u8 2, 0, 254
  std::string half(2, '\0');
  const std::uint16_t bits = kiln::double_to_half(0.5);
  std::memcpy(half.data(), &bits, 2);
  const auto m19 = OneNode(19, "DequantizeLinear").raw("x", ::onnx::TensorProto_DataType_UINT8, {3}, x)
                       .raw("scale", ::onnx::TensorProto_DataType_FLOAT16, {}, half).tensors()[0];
  REQUIRE(m19.dtype() == kiln::DataType::Float16);
  const auto* h = static_cast<const std::uint16_t*>(m19.raw_data());
  CHECK(std::vector<float>{kiln::half_to_float(h[0]), kiln::half_to_float(h[1]), kiln::half_to_float(h[2])} ==
        std::vector<float>{1, 0, 127});
  std::string f32(4, '\0');
  const float quarter = 0.25f;
  std::memcpy(f32.data(), &quarter, 4);
  const auto m13 = OneNode(13, "DequantizeLinear").raw("x", ::onnx::TensorProto_DataType_UINT8, {3}, x)
                       .raw("scale", ::onnx::TensorProto_DataType_FLOAT, {}, f32).tensors()[0];
  REQUIRE(m13.dtype() == kiln::DataType::Float32);
  CHECK(m13.to_vector<float>() == std::vector<float>{0.5f, 0, 63.5f});
}

TEST_CASE("ReduceMin of unsigned integers is their least element, not a wrapped negation", "[onnx][opset18]") {
  const auto y = OneNode(13, "ReduceMin").raw("x", ::onnx::TensorProto_DataType_UINT8, {2}, std::string{"\x00\x05", 2})
                     .attr("keepdims", 0).tensors()[0];
  REQUIRE(y.dtype() == kiln::DataType::UInt8);
  CHECK(y.to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0});
}

TEST_CASE("a DFT whose dft_length holds no value is an error naming it", "[onnx][opset18]") {
  CHECK_THAT(OneNode(17, "DFT").fed("x", {1, 4, 2}, std::vector<float>(8, 1.f)).ints("dft_length", {}).error(),
             Catch::Contains("dft_length") && Catch::Contains("holds 0 values"));
}

namespace {

// d(Σ y)/dx of a one-input node's imported model at its fed x.
std::vector<float> input_gradient(OneNode& n) {
  auto m = n.imported();
  kiln::Value x, y;
  for (kiln::Operation* op : m.main.block()) {
    if (auto d = kiln::DataOp::dyn_cast(op); d && d.attrs().name == "x") x = op->result(0);
    if (auto f = kiln::FetchOp::dyn_cast(op); f && f.attrs().name == "y0") y = op->operand_source(0);
  }
  REQUIRE((x && y));
  kiln::Value dx;
  {
    kiln::ProgramGuard guard(m.main, m.startup);
    kiln::Value loss = kiln::main_builder().create<kiln::SumOp>(y, std::vector<std::int64_t>{}, false).result();
    dx = kiln::append_backward(loss, {x}).at(0).second;
  }
  kiln::Executor exe;
  exe.run(m.startup);
  return exe.run(m.main, n.feeds(), {dx})[0].to_vector<float>();
}

}  // namespace

TEST_CASE("Softplus's gradient is the sigmoid, 0.5 at 0 and finite where exp(x) overflows", "[onnx][opset18]") {
  const std::vector<float> x{-100.f, -1.f, 0.f, 1.f, 100.f};
  OneNode n(13, "Softplus");
  n.fed("x", {5}, x);
  std::vector<double> sigmoid;
  for (float v : x) sigmoid.push_back(1 / (1 + std::exp(-double(v))));
  check_near(input_gradient(n), sigmoid, 1e-6);
}

TEST_CASE("GroupNormalization's imported form is differentiable: its gradient matches finite differences",
          "[onnx][opset18]") {
  const std::vector<float> x{1, 2, 3, 4, -1, 0, 5, 8};
  auto model = [&](const std::vector<float>& at) {
    OneNode n(21, "GroupNormalization");
    n.fed("x", {-1, 4, 2}, {1, 4, 2}, at).floats("scale", {1, 2, 3, 4}).floats("bias", {0, 1, 0, -1}).attr("num_groups", 2);
    return n;
  };
  OneNode n = model(x);
  const auto grad = input_gradient(n);
  REQUIRE(grad.size() == x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto up = x, down = x;
    up[i] += 1e-2f, down[i] -= 1e-2f;
    double fu = 0, fd = 0;
    const auto yu = model(up).run(), yd = model(down).run();
    for (float v : yu[0]) fu += v;
    for (float v : yd[0]) fd += v;
    CHECK(grad[i] == Approx((fu - fd) / 2e-2).margin(2e-3));
  }
}

TEST_CASE("the opset 23 and 24 ops kiln imports give ONNX Runtime's outputs", "[onnx][opset18][onnxruntime]") {
  auto pattern = [](std::size_t n, int a, int b) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = float(int(i * a) % b) / float(b) - 0.5f;
    return v;
  };
  SECTION("grouped-query attention, 4-D") {
    OneNode(23, "Attention").fed("q", {2, 4, 3, 8}, pattern(192, 5, 13)).fed("k", {2, 2, 5, 8}, pattern(160, 7, 11))
        .fed("v", {2, 2, 5, 8}, pattern(160, 3, 7)).check_against_onnxruntime();
  }
  SECTION("3-D, causal with fewer queries than keys, scaled") {
    OneNode(23, "Attention").fed("q", {2, 3, 32}, pattern(192, 5, 13)).fed("k", {2, 5, 16}, pattern(160, 7, 11))
        .fed("v", {2, 5, 16}, pattern(160, 3, 7)).attr("q_num_heads", 4).attr("kv_num_heads", 2).attr("is_causal", 1)
        .attr("scale", 0.3f).check_against_onnxruntime();
  }
  SECTION("a bool mask and a float mask") {
    std::string keep(15, '\1');
    keep[4] = keep[13] = '\0';
    OneNode(23, "Attention").fed("q", {2, 2, 3, 4}, pattern(48, 5, 13)).fed("k", {2, 2, 5, 4}, pattern(80, 7, 11))
        .fed("v", {2, 2, 5, 4}, pattern(80, 3, 7)).raw("mask", ::onnx::TensorProto_DataType_BOOL, {3, 5}, keep)
        .check_against_onnxruntime();
    OneNode(23, "Attention").fed("q", {2, 2, 3, 4}, pattern(48, 5, 13)).fed("k", {2, 2, 5, 4}, pattern(80, 7, 11))
        .fed("v", {2, 2, 5, 4}, pattern(80, 3, 7)).fed("mask", {2, 1, 3, 5}, pattern(30, 11, 17))
        .check_against_onnxruntime();
  }
  SECTION("a past key and value, one new causal query, the presents") {
    OneNode(23, "Attention").fed("q", {2, 4, 1, 8}, pattern(64, 5, 13)).fed("k", {2, 2, 1, 8}, pattern(32, 7, 11))
        .fed("v", {2, 2, 1, 8}, pattern(32, 3, 7)).omitted().fed("past_key", {2, 2, 4, 8}, pattern(128, 9, 19))
        .fed("past_value", {2, 2, 4, 8}, pattern(128, 13, 23)).attr("is_causal", 1).check_against_onnxruntime(3);
  }
  SECTION("is_causal over a past with three new queries (j <= i + P), and with a mask at opset 23") {
    OneNode(23, "Attention").fed("q", {1, 2, 3, 4}, pattern(24, 5, 13)).fed("k", {1, 2, 3, 4}, pattern(24, 7, 11))
        .fed("v", {1, 2, 3, 4}, pattern(24, 3, 7)).omitted().fed("past_key", {1, 2, 2, 4}, pattern(16, 9, 19))
        .fed("past_value", {1, 2, 2, 4}, pattern(16, 13, 23)).attr("is_causal", 1).check_against_onnxruntime(3);
    OneNode(23, "Attention").fed("q", {2, 2, 3, 4}, pattern(48, 5, 13)).fed("k", {2, 2, 3, 4}, pattern(48, 7, 11))
        .fed("v", {2, 2, 3, 4}, pattern(48, 3, 7)).fed("mask", {3, 3}, pattern(9, 11, 17)).attr("is_causal", 1)
        .check_against_onnxruntime();
  }
  SECTION("softcap (composed of kiln ops), grouped-query and causal, 3-D; the qk_matmul_output output") {
    OneNode(23, "Attention").fed("q", {2, 3, 32}, pattern(192, 5, 13)).fed("k", {2, 5, 16}, pattern(160, 7, 11))
        .fed("v", {2, 5, 16}, pattern(160, 3, 7)).attr("q_num_heads", 4).attr("kv_num_heads", 2).attr("is_causal", 1)
        .attr("softcap", 0.2f).check_against_onnxruntime();
    OneNode(23, "Attention").fed("q", {1, 2, 2, 4}, pattern(16, 5, 13)).fed("k", {1, 2, 3, 4}, pattern(24, 7, 11))
        .fed("v", {1, 2, 3, 4}, pattern(24, 3, 7)).fed("mask", {2, 3}, pattern(6, 11, 17)).omitted()
        .omitted().attr("softcap", 0.3f).check_against_onnxruntime(4);
  }
  SECTION("is_causal over a past with a bool and with a float mask") {
    std::string keep(15, '\1');
    keep[1] = keep[7] = '\0';
    OneNode(24, "Attention").fed("q", {1, 2, 3, 4}, pattern(24, 5, 13)).fed("k", {1, 2, 3, 4}, pattern(24, 7, 11))
        .fed("v", {1, 2, 3, 4}, pattern(24, 3, 7)).raw("mask", ::onnx::TensorProto_DataType_BOOL, {3, 5}, keep)
        .fed("past_key", {1, 2, 2, 4}, pattern(16, 9, 19)).fed("past_value", {1, 2, 2, 4}, pattern(16, 13, 23))
        .attr("is_causal", 1).check_against_onnxruntime(3);
    OneNode(24, "Attention").fed("q", {1, 2, 3, 4}, pattern(24, 5, 13)).fed("k", {1, 2, 3, 4}, pattern(24, 7, 11))
        .fed("v", {1, 2, 3, 4}, pattern(24, 3, 7)).fed("mask", {3, 5}, pattern(15, 11, 17))
        .fed("past_key", {1, 2, 2, 4}, pattern(16, 9, 19)).fed("past_value", {1, 2, 2, 4}, pattern(16, 13, 23))
        .attr("is_causal", 1).check_against_onnxruntime(3);
  }
  SECTION("opset 24's nonpad_kv_seqlen") {
    OneNode(24, "Attention").fed("q", {2, 2, 3, 4}, pattern(48, 5, 13)).fed("k", {2, 2, 5, 4}, pattern(80, 7, 11))
        .fed("v", {2, 2, 5, 4}, pattern(80, 3, 7)).omitted().omitted().omitted().ints("nonpad", {5, 2})
        .check_against_onnxruntime();
  }
  SECTION("RMSNormalization over the last axis, over two, with a broadcast scale") {
    OneNode(23, "RMSNormalization").fed("x", {2, 3, 4}, pattern(24, 5, 13)).floats("scale", {1, 2, 3, 4})
        .check_against_onnxruntime();
    OneNode(23, "RMSNormalization").fed("x", {2, 3, 4}, pattern(24, 5, 13))
        .floats("scale", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4}).attr("axis", 1).check_against_onnxruntime();
    OneNode(23, "RMSNormalization").fed("x", {2, 3, 4}, pattern(24, 5, 13)).floats("scale", {2})
        .attr("epsilon", 1e-3f).check_against_onnxruntime();
  }
  SECTION("RotaryEmbedding: half-split and interleaved, 4-D with positions and 3-D, a partial rotation") {
    for (std::int64_t interleaved : {0, 1}) {
      OneNode(23, "RotaryEmbedding").fed("x", {1, 2, 3, 4}, pattern(24, 5, 13)).fed("cos", {5, 2}, pattern(10, 3, 7))
          .fed("sin", {5, 2}, pattern(10, 7, 11))
          .raw("pos", ::onnx::TensorProto_DataType_INT64, {1, 3}, bytes_of(std::vector<std::int64_t>{4, 0, 2}))
          .attr("interleaved", interleaved)
          .check_against_onnxruntime();
      OneNode(23, "RotaryEmbedding").fed("x", {1, 3, 16}, pattern(48, 5, 13)).fed("cos", {1, 3, 2}, pattern(6, 3, 7))
          .fed("sin", {1, 3, 2}, pattern(6, 7, 11)).attr("num_heads", 2).attr("rotary_embedding_dim", 4)
          .attr("interleaved", interleaved).check_against_onnxruntime();
    }
  }
  SECTION("Swish") { OneNode(24, "Swish").fed("x", {6}, kX).attr("alpha", 1.5f).check_against_onnxruntime(); }
}

TEST_CASE("opset-23 Attention forms kiln does not import are errors naming them", "[onnx][opset18]") {
  auto q = [] { return OneNode(23, "Attention"); };
  const std::vector<float> z(32, 0.f);
  CHECK_THAT(q().fed("q", {1, 2, 2, 8}, z).fed("k", {1, 2, 2, 8}, z).fed("v", {1, 2, 2, 8}, z)
                 .attr("qk_matmul_output_mode", 1).error(4),
             Catch::Contains("qk_matmul_output_mode 1"));
  CHECK_THAT(q().fed("q", {1, 2, 16}, z).fed("k", {1, 2, 16}, z).fed("v", {1, 2, 16}, z).error(),
             Catch::Contains("q_num_heads"));
  CHECK_THAT(q().fed("q", {1, 2, 16}, z).fed("k", {1, 2, 2, 8}, z).fed("v", {1, 2, 2, 8}, z)
                 .attr("q_num_heads", 2).error(),
             Catch::Contains("different ranks"));

}

namespace {

std::string f16_bytes(const std::vector<double>& v) {
  std::vector<std::uint16_t> bits;
  for (double x : v) bits.push_back(kiln::double_to_half(x));
  return bytes_of(bits);
}

std::vector<double> f16_values(const kiln::Tensor& t) {
  REQUIRE(t.dtype() == kiln::DataType::Float16);
  const auto* h = static_cast<const std::uint16_t*>(t.raw_data());
  std::vector<double> v;
  for (std::int64_t i = 0; i < t.numel(); ++i) v.push_back(kiln::half_to_float(h[i]));
  return v;
}

}  // namespace

TEST_CASE("Softplus, Mish and a composed RMSNormalization of f16 compute in f32 and round once",
          "[onnx][opset18]") {
  const std::string x = f16_bytes({-20, 0, 1, 15, 21});
  const auto sp = f16_values(OneNode(13, "Softplus").raw("x", ::onnx::TensorProto_DataType_FLOAT16, {5}, x).tensors()[0]);
  const std::vector<double> want{2.06e-9, 0.6931, 1.3133, 15, 21};
  for (std::size_t i = 0; i < 5; ++i) CHECK(sp[i] == Approx(want[i]).epsilon(1e-3).margin(1e-6));
  const auto mish = f16_values(OneNode(18, "Mish").raw("x", ::onnx::TensorProto_DataType_FLOAT16, {5}, x).tensors()[0]);
  CHECK(mish[4] == 21);  // x · tanh(21): no inf · 0
  // rms of 300, 1, 2, 3 is 150.01: 300² overflows f16
  const auto rms = f16_values(OneNode(23, "RMSNormalization")
                                  .raw("x", ::onnx::TensorProto_DataType_FLOAT16, {4}, f16_bytes({300, 1, 2, 3}))
                                  .raw("scale", ::onnx::TensorProto_DataType_FLOAT16, {1}, f16_bytes({1}))
                                  .tensors()[0]);
  const std::vector<double> want_rms{2.0, 1 / 150.01, 2 / 150.01, 3 / 150.01};
  for (std::size_t i = 0; i < 4; ++i) CHECK(rms[i] == Approx(want_rms[i]).epsilon(2e-3));
}

TEST_CASE("GroupNormalization keeps its input's dims known at import", "[onnx][opset18]") {
  auto m = OneNode(21, "GroupNormalization").fed("x", {1, 4, 2}, std::vector<float>(8, 1.f))
               .floats("scale", {1, 2, 3, 4}).floats("bias", {0, 1, 0, -1}).attr("num_groups", 2).imported();
  for (kiln::Operation* op : m.main.block())
    if (auto f = kiln::FetchOp::dyn_cast(op))
      CHECK(kiln::shaped_dims(op->operand_source(0).type()) == std::vector<std::int64_t>{1, 4, 2});
}

TEST_CASE("ReduceMin of signed integers reaches their minimum without wrapping", "[onnx][opset18]") {
  const auto y = OneNode(13, "ReduceMin")
                     .raw("x", ::onnx::TensorProto_DataType_INT32, {2},
                          bytes_of(std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 5}))
                     .attr("keepdims", 0).tensors()[0];
  CHECK(y.to_vector<std::int32_t>() == std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min()});
}

TEST_CASE("RoiAlign of opset 10 samples regions without the half-pixel shift, of opset 16 with it unless told, "
          "as ONNX Runtime does",
          "[onnx][opset18][onnxruntime]") {
  std::vector<float> x(2 * 2 * 6 * 7);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 23) - 11.f;
  const std::vector<float> rois{0.5f, 1.f, 5.f, 4.5f, -2.f, 3.f, 9.f, 7.f, 2.f, 2.f, 2.f, 2.f};
  auto node = [&](std::int64_t opset) {
    return OneNode(opset, "RoiAlign").fed("x", {2, 2, 6, 7}, x).floats("rois", rois, {3, 4}).ints("batch_indices", {1, 0, 1})
        .attr("output_height", 2).attr("output_width", 3).attr("spatial_scale", 0.8f);
  };
  const auto old = node(10).run()[0];
  CHECK(node(16).attr("coordinate_transformation_mode", "output_half_pixel").run()[0] == old);
  CHECK(node(16).run()[0] != old);
  CHECK(node(16).attr("coordinate_transformation_mode", "half_pixel").run()[0] == node(16).run()[0]);
  node(10).check_against_onnxruntime();
  node(10).attr("mode", "max").attr("sampling_ratio", 2).check_against_onnxruntime();
  node(16).check_against_onnxruntime();
  node(16).attr("mode", "max").check_against_onnxruntime();
  CHECK_THAT(node(16).attr("coordinate_transformation_mode", "align_corners").error(),
             Catch::Contains("coordinate_transformation_mode 'align_corners'"));
  CHECK_THAT(node(16).attr("mode", "sum").error(), Catch::Contains("mode 'sum'"));
  CHECK(node(16).attr("sampling_ratio", -2).run()[0] == node(16).run()[0]);  // adaptive, as 0
}
