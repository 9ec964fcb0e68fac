// InferMeta, Vjp and error tests of the ops of kiln/dialect/attention_ops.h:
// result types (static and -1 dims, vtensors), the build-time errors naming
// the op (rank, head dims, batch / head counts, key / value lengths, dtypes,
// the gradient op's out / lse / dout), and the Vjp against central finite
// differences in f64 (causal and not, Lq != Lk, several query tiles).
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "catch.hpp"
#include "dialect/grad_check.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/io/json.h"
#include "kiln/ir/parser.h"
#include <nlohmann/json.hpp>
#include "test_util.h"
#include "dialect/dialect_test_util.h"

using namespace kiln;
using namespace kiln_dialect_test;
using namespace kiln_vjp_test;

namespace {
using Shape = std::vector<std::int64_t>;


DictionaryAttribute attrs(bool causal = false, double scale = 0, std::string layout = "BHLD") {
  return DictionaryAttribute::get(to_named_attributes(
      ScaledDotProductAttentionOp::Attributes{causal, scale, std::move(layout)}));
}

std::vector<Type> sdpa(Type q, Type k, Type v, bool causal = false, double scale = 0) {
  return ScaledDotProductAttentionOp::infer_meta({q, k, v}, attrs(causal, scale));
}

std::vector<Type> sdpa_layout(std::string layout) {
  return ScaledDotProductAttentionOp::infer_meta({tf({1, 1, 2, 2}), tf({1, 1, 2, 2}), tf({1, 1, 2, 2})},
                                                 attrs(false, 0, std::move(layout)));
}

std::vector<Type> sdpa_grad(std::vector<Type> in) {
  return GradOf<ScaledDotProductAttentionOp>::infer_meta(in, attrs());
}

// The text of a kiln.data op %<id> of f32 `dims` ("1, 2, 3") and type
// `type` ("1x2x3"), as kiln prints it.
std::string data_line(int id, const char* name, const char* dims, const char* type) {
  return "  %" + std::to_string(id) + " = kiln.data() {dtype = dtype<f32>, name = \"" + name +
         "\", place = place<cpu>, shape = [" + dims + "], stop_gradient = [true]} : () -> tensor<" +
         type + "xf32>\n";
}

// The first op of class OpT in p's block (REQUIREd).
template <typename OpT>
Operation* first_op(const Program& p) {
  for (Operation* op : p.block())
    if (op->isa<OpT>()) return op;
  FAIL("no " << OpT::name << " in the program");
  return nullptr;
}

constexpr const char* kOp = "'kiln.scaled_dot_product_attention'";
constexpr const char* kGradOp = "'kiln.scaled_dot_product_attention_grad'";
}  // namespace

TEST_CASE("scaled_dot_product_attention gives out [B, H, Lq, Dv] and lse [B, H, Lq]",
          "[dialect][attention]") {
  auto r = sdpa(tf({2, 4, 5, 8}), tf({2, 4, 7, 8}), tf({2, 4, 7, 3}));
  REQUIRE(r.size() == 2);
  CHECK(r[0] == tf({2, 4, 5, 3}));
  CHECK(r[1] == tf({2, 4, 5}));
  // Dims known only at run time come from whichever operand knows them.
  r = sdpa(tf({-1, 4, -1, 8}), tf({2, -1, 7, -1}), tf({-1, 4, -1, 3}), true);
  CHECK(r[0] == tf({2, 4, -1, 3}));
  CHECK(r[1] == tf({2, 4, -1}));
  r = sdpa(vf({1, 1, 2, 2}), vf({1, 1, 2, 2}), vf({1, 1, 2, 2}));
  CHECK(r[0] == vf({1, 1, 2, 2}));
  r = sdpa(tf({1, 1, 2, 2}, DataType::Float64), tf({1, 1, 2, 2}, DataType::Float64),
           tf({1, 1, 2, 2}, DataType::Float64));
  CHECK(r[1] == tf({1, 1, 2}, DataType::Float64));
}

TEST_CASE("a bf16 or f16 attention keeps its lse in f32, and its gradient wants it so",
          "[dialect][attention]") {
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    const Type q = tf({2, 4, 5, 8}, dt), k = tf({2, 4, 7, 8}, dt), v = tf({2, 4, 7, 3}, dt);
    auto r = sdpa(q, k, v);
    CHECK(r[0] == tf({2, 4, 5, 3}, dt));
    CHECK(r[1] == tf({2, 4, 5}, DataType::Float32));
    CHECK(sdpa_grad({q, k, v, r[0], r[1], r[0]}).size() == 3);
    KILN_CHECK_ERROR(sdpa_grad({q, k, v, r[0], tf({2, 4, 5}, dt), r[0]}), InvalidArgument,
                     {kGradOp, "lse (operand #4)", "expected f32"});
  }
}

TEST_CASE("scaled_dot_product_attention in layout BLHD reads [B, L, H, D] and gives out "
          "[B, Lq, H, Dv], lse [B, H, Lq]",
          "[dialect][attention]") {
  auto r = ScaledDotProductAttentionOp::infer_meta({tf({2, 5, 4, 8}), tf({2, 7, 4, 8}), tf({2, 7, 4, 3})},
                                                   attrs(true, 0, "BLHD"));
  REQUIRE(r.size() == 2);
  CHECK(r[0] == tf({2, 5, 4, 3}));
  CHECK(r[1] == tf({2, 4, 5}));
  // The gradient's out and dout are in the layout too.
  const Type q = tf({2, 5, 4, 8}), k = tf({2, 7, 4, 8}), v = tf({2, 7, 4, 3});
  auto g = GradOf<ScaledDotProductAttentionOp>::infer_meta(
      {q, k, v, tf({2, 5, 4, 3}), tf({2, 4, 5}), tf({2, 5, 4, 3})}, attrs(false, 0, "BLHD"));
  CHECK(g[0] == q);
  CHECK(g[2] == v);
  KILN_CHECK_ERROR(GradOf<ScaledDotProductAttentionOp>::infer_meta(
                       {q, k, v, tf({2, 4, 5, 3}), tf({2, 4, 5}), tf({2, 5, 4, 3})},
                       attrs(false, 0, "BLHD")),
                   InvalidArgument, {kGradOp, "out (operand #3)", "expected [2, 5, 4, 3]"});
  // Heads are dim 2 and lengths dim 1 in this layout.
  KILN_CHECK_ERROR(ScaledDotProductAttentionOp::infer_meta(
                       {tf({2, 5, 4, 8}), tf({2, 7, 3, 8}), tf({2, 7, 3, 3})}, attrs(false, 0, "BLHD")),
                   InvalidArgument, {kOp, "one head count (dim 2) that divides q's", "BLHD"});
  KILN_CHECK_ERROR(ScaledDotProductAttentionOp::infer_meta(
                       {tf({2, 5, 4, 8}), tf({2, 7, 4, 8}), tf({2, 6, 4, 3})}, attrs(false, 0, "BLHD")),
                   InvalidArgument, {kOp, "one sequence length (dim 1)"});
}

TEST_CASE("scaled_dot_product_attention refuses a layout other than BHLD or BLHD, naming it",
          "[dialect][attention]") {
  KILN_CHECK_ERROR(sdpa_layout("BSHD"), InvalidArgument, {kOp, "layout", "\"BSHD\""});
  KILN_CHECK_ERROR(sdpa_layout(""), InvalidArgument, {kOp, "layout"});
  KILN_CHECK_ERROR(GradOf<ScaledDotProductAttentionOp>::infer_meta(
                       {tf({1, 1, 2, 2}), tf({1, 1, 2, 2}), tf({1, 1, 2, 2}), tf({1, 1, 2, 2}),
                        tf({1, 1, 2}), tf({1, 1, 2, 2})},
                       attrs(false, 0, "bhld")),
                   InvalidArgument, {kGradOp, "layout"});
}

TEST_CASE("scaled_dot_product_attention rejects bad shapes and dtypes at build time",
          "[dialect][attention]") {
  SECTION("an operand not of rank 4") {
    KILN_CHECK_ERROR(sdpa(tf({4, 5, 8}), tf({2, 4, 7, 8}), tf({2, 4, 7, 3})), InvalidArgument,
                     {kOp, "q (operand #0) must have rank 4", "[4, 5, 8]"});
    KILN_CHECK_ERROR(sdpa(tf({2, 4, 5, 8}), tf({2, 4, 7, 8, 1}), tf({2, 4, 7, 3})),
                     InvalidArgument, {kOp, "k (operand #1) must have rank 4"});
    KILN_CHECK_ERROR(sdpa(tf({2, 4, 5, 8}), tf({2, 4, 7, 8}), tf({7, 3})), InvalidArgument,
                     {kOp, "v (operand #2) must have rank 4"});
  }
  SECTION("q and k with different head dims") {
    KILN_CHECK_ERROR(sdpa(tf({2, 4, 5, 8}), tf({2, 4, 7, 6}), tf({2, 4, 7, 3})), InvalidArgument,
                     {kOp, "one head dim", "q is [2, 4, 5, 8]", "k is [2, 4, 7, 6]"});
  }
  SECTION("different batch or head counts") {
    KILN_CHECK_ERROR(sdpa(tf({2, 4, 5, 8}), tf({3, 4, 7, 8}), tf({2, 4, 7, 3})), InvalidArgument,
                     {kOp, "one batch (dim 0)"});
    KILN_CHECK_ERROR(sdpa(tf({2, 4, 5, 8}), tf({2, 4, 7, 8}), tf({2, 2, 7, 3})), InvalidArgument,
                     {kOp, "k and v with one head count (dim 1)", "v is [2, 2, 7, 3]"});
  }
  SECTION("k and v heads that do not divide q's") {
    KILN_CHECK_ERROR(sdpa(tf({2, 4, 5, 8}), tf({2, 3, 7, 8}), tf({2, 3, 7, 3})), InvalidArgument,
                     {kOp, "divides q's (grouped-query attention)", "k is [2, 3, 7, 8]"});
    KILN_CHECK_ERROR(sdpa(tf({2, 2, 5, 8}), tf({2, 4, 7, 8}), tf({2, 4, 7, 3})), InvalidArgument,
                     {kOp, "divides q's"});
    // k's head count known only at run time: v's is checked.
    KILN_CHECK_ERROR(sdpa(tf({2, 4, 5, 8}), tf({2, -1, 7, 8}), tf({2, 3, 7, 3})), InvalidArgument,
                     {kOp, "divides q's"});
  }
  SECTION("k and v with different lengths") {
    KILN_CHECK_ERROR(sdpa(tf({2, 4, 5, 8}), tf({2, 4, 7, 8}), tf({2, 4, 6, 3})), InvalidArgument,
                     {kOp, "one sequence length"});
  }
  SECTION("mixed or integer dtypes") {
    KILN_CHECK_ERROR(sdpa(tf({1, 1, 2, 2}), tf({1, 1, 2, 2}, DataType::Float64), tf({1, 1, 2, 2})),
                     InvalidArgument, {kOp});
    KILN_CHECK_ERROR(sdpa(tf({1, 1, 2, 2}, DataType::Int64), tf({1, 1, 2, 2}, DataType::Int64),
                          tf({1, 1, 2, 2}, DataType::Int64)),
                     InvalidArgument, {kOp});
  }
  SECTION("a scale that is not finite") {
    KILN_CHECK_ERROR(sdpa(tf({1, 1, 2, 2}), tf({1, 1, 2, 2}), tf({1, 1, 2, 2}), false,
                          std::numeric_limits<double>::infinity()),
                     InvalidArgument, {kOp, "scale"});
  }
}

TEST_CASE("grouped-query attention takes k and v whose head count divides q's, in either layout",
          "[dialect][attention][gqa]") {
  auto r = sdpa(tf({2, 8, 5, 4}), tf({2, 2, 7, 4}), tf({2, 2, 7, 3}));
  CHECK(r[0] == tf({2, 8, 5, 3}));
  CHECK(r[1] == tf({2, 8, 5}));
  CHECK(sdpa(tf({2, 8, 5, 4}), tf({2, 1, 7, 4}), tf({2, 1, 7, 3}))[0] == tf({2, 8, 5, 3}));  // multi-query
  CHECK(sdpa(tf({2, -1, 5, 4}), tf({2, 2, 7, 4}), tf({2, 2, 7, 3}))[0] == tf({2, -1, 5, 3}));
  auto blhd = ScaledDotProductAttentionOp::infer_meta({tf({2, 5, 8, 4}), tf({2, 7, 2, 4}), tf({2, 7, 2, 3})},
                                                      attrs(false, 0, "BLHD"));
  CHECK(blhd[0] == tf({2, 5, 8, 3}));
  CHECK(blhd[1] == tf({2, 8, 5}));
  const Type q = tf({2, 8, 5, 4}), k = tf({2, 2, 7, 4}), v = tf({2, 2, 7, 3}), out = tf({2, 8, 5, 3});
  auto g = sdpa_grad({q, k, v, out, tf({2, 8, 5}), out});
  CHECK(g[1] == k);
  CHECK(g[2] == v);
}

TEST_CASE("scaled_dot_product_attention_grad types dq, dk, dv like q, k, v and checks its operands",
          "[dialect][attention]") {
  const Type q = tf({2, 4, 5, 8}), k = tf({2, 4, 7, 8}), v = tf({2, 4, 7, 3});
  const Type out = tf({2, 4, 5, 3}), lse = tf({2, 4, 5});
  auto r = sdpa_grad({q, k, v, out, lse, out});
  REQUIRE(r.size() == 3);
  CHECK(r[0] == q);
  CHECK(r[1] == k);
  CHECK(r[2] == v);
  KILN_CHECK_ERROR(sdpa_grad({q, k, v, out, lse}), InvalidArgument, {kGradOp});
  KILN_CHECK_ERROR(sdpa_grad({q, tf({2, 4, 7, 6}), v, out, lse, out}), InvalidArgument,
                   {kGradOp, "one head dim"});
  KILN_CHECK_ERROR(sdpa_grad({q, k, v, tf({2, 4, 5, 8}), lse, out}), InvalidArgument,
                   {kGradOp, "out (operand #3)", "expected [2, 4, 5, 3]"});
  KILN_CHECK_ERROR(sdpa_grad({q, k, v, out, tf({2, 4, 7}), out}), InvalidArgument,
                   {kGradOp, "lse (operand #4)", "expected [2, 4, 5]"});
  KILN_CHECK_ERROR(sdpa_grad({q, k, v, out, lse, tf({2, 4, 5, 3}, DataType::Float64)}),
                   InvalidArgument, {kGradOp});
}

TEST_CASE("scaled_dot_product_attention's vjp matches finite differences",
          "[dialect][vjp][attention]") {
  GradCheckOptions o;
  o.result_grads = {true, false};  // lse carries no gradient
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    check_vjp({random_f64({2, 2, 3, 4}, -1, 1, 1), random_f64({2, 2, 3, 4}, -1, 1, 2),
               random_f64({2, 2, 3, 5}, -1, 1, 3)},
              make_op<ScaledDotProductAttentionOp>(causal, 0.0), o);
    // Lq != Lk (causal: the mask is aligned at the top-left) and a given scale.
    check_vjp({random_f64({1, 2, 4, 3}, -1, 1, 4), random_f64({1, 2, 6, 3}, -1, 1, 5),
               random_f64({1, 2, 6, 2}, -1, 1, 6)},
              make_op<ScaledDotProductAttentionOp>(causal, 0.7), o);
    check_vjp({random_f64({1, 1, 5, 2}, -1, 1, 7), random_f64({1, 1, 3, 2}, -1, 1, 8),
               random_f64({1, 1, 3, 3}, -1, 1, 9)},
              make_op<ScaledDotProductAttentionOp>(causal, 0.0), o);
    // More query rows than one tile.
    check_vjp({random_f64({1, 1, 67, 2}, -1, 1, 10), random_f64({1, 1, 67, 2}, -1, 1, 11),
               random_f64({1, 1, 67, 2}, -1, 1, 12)},
              make_op<ScaledDotProductAttentionOp>(causal, 0.0), o);
  }
  SECTION("batch dims known only at run time") {
    GradCheckOptions u = o;
    u.unknown_batch = true;
    check_vjp({random_f64({2, 1, 3, 2}, -1, 1, 13), random_f64({2, 1, 4, 2}, -1, 1, 14),
               random_f64({2, 1, 4, 2}, -1, 1, 15)},
              make_op<ScaledDotProductAttentionOp>(false, 0.0), u);
  }
}

TEST_CASE("scaled_dot_product_attention's vjp gives no grads without out's grad and refuses "
          "one through lse",
          "[dialect][vjp][attention]") {
  Program p;
  Builder b(p);
  auto mk = [&](const char* n) {
    return b.create<DataOp>(n, Shape{1, 1, 2, 2}, DataType::Float64).result();
  };
  Value q = mk("q"), k = mk("k"), v = mk("v");
  auto op = b.create<ScaledDotProductAttentionOp>(q, k, v, true);
  auto w = b.create<DataOp>("w", Shape{1, 1, 2}, DataType::Float64).result();
  auto g = call_vjp(b, op.operation(), {Value(), Value()});
  REQUIRE(g.size() == 3);
  CHECK(!g[0]);
  CHECK(!g[1]);
  CHECK(!g[2]);
  KILN_CHECK_ERROR(call_vjp(b, op.operation(), {Value(), w}), Unimplemented, {kOp, "lse"});
}

TEST_CASE("a program saved before attention had a layout loads as layout BHLD, as text or JSON",
          "[dialect][attention][io]") {
  // The text form of an attention op as kiln printed it before `layout`.
  const std::string old_text =
      "program {\n" + data_line(0, "q", "1, 2, 3, 4", "1x2x3x4") +
      "  %1, %2 = kiln.scaled_dot_product_attention(%0, %0, %0) {causal = true, scale = 0.0} : "
      "(tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> (tensor<1x2x3x4xf32>, "
      "tensor<1x2x3xf32>)\n"
      "}\n";
  Program p = parse_program(old_text);
  Operation* att = first_op<ScaledDotProductAttentionOp>(p);
  CHECK(att->attributes().find("layout") == Attribute(StrAttribute::get("BHLD")));
  p.verify();
  CHECK(att->attributes().find("dropout_p") == Attribute(Float64Attribute::get(0.0)));
  CHECK(att->attributes().find("is_test") == Attribute(BoolAttribute::get(false)));
  // The same through JSON: drop the attributes added since from the saved form.
  nlohmann::json j = program_to_json(p);
  std::size_t dropped = 0;
  std::function<void(nlohmann::json&)> drop = [&](nlohmann::json& x) {
    if (x.is_object()) {
      for (const char* key : {"layout", "dropout_p", "is_test"}) dropped += x.erase(key);
      for (auto& [k, v] : x.items()) drop(v);
    } else if (x.is_array()) {
      for (auto& v : x) drop(v);
    }
  };
  drop(j);
  REQUIRE(dropped == 3);
  const std::string old_json = j.dump();
  Program q = load_program_json(old_json);
  CHECK(q.to_string() == p.to_string());
}

TEST_CASE("a saved attention gradient op without a layout loads as BHLD, as the forward op does",
          "[dialect][attention][io]") {
  const std::string old_text =
      "program {\n" + data_line(0, "q", "1, 2, 3, 4", "1x2x3x4") +
      data_line(1, "lse", "1, 2, 3", "1x2x3") +
      "  %2, %3, %4 = kiln.scaled_dot_product_attention_grad(%0, %0, %0, %0, %1, %0) {causal = false, "
      "scale = 0.0} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, "
      "tensor<1x2x3x4xf32>, tensor<1x2x3xf32>, tensor<1x2x3x4xf32>) -> (tensor<1x2x3x4xf32>, "
      "tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>)\n"
      "}\n";
  Program p = parse_program(old_text);
  Operation* grad = first_op<GradOf<ScaledDotProductAttentionOp>>(p);
  CHECK(grad->attributes().find("layout") == Attribute(StrAttribute::get("BHLD")));
  CHECK(grad->attributes().find("dropout_p") == Attribute(Float64Attribute::get(0.0)));  // saved before dropout
  CHECK(grad->attributes().find("is_test") == Attribute(BoolAttribute::get(false)));
  // A layout of another kind is still an error naming the op and the attribute.
  std::string bad = old_text;
  bad.replace(bad.find("causal = false,"), 15, "causal = false, layout = 3 : i64,");
  KILN_CHECK_ERROR(parse_program(bad), InvalidArgument,
                   {"'kiln.scaled_dot_product_attention_grad'", "layout"});
}

TEST_CASE("scaled_dot_product_attention takes int32 or int64 key_lengths [B] and its gradient op carries them",
          "[dialect][attention]") {
  const Type q = tf({2, 4, 5, 8}), k = tf({2, 4, 7, 8}), v = tf({2, 4, 7, 3});
  for (DataType dt : {DataType::Int32, DataType::Int64}) {
    const auto r = ScaledDotProductAttentionOp::infer_meta({q, k, v, tf({2}, dt)}, attrs(true));
    REQUIRE(r.size() == 2);
    CHECK(r[0] == tf({2, 4, 5, 3}));
    CHECK(sdpa_grad({q, k, v, r[0], r[1], r[0], tf({2}, dt)}).size() == 3);
  }
  // A batch size known only at run time fits any count.
  CHECK(ScaledDotProductAttentionOp::infer_meta({tf({-1, 4, 5, 8}), k, v, tf({2}, DataType::Int64)}, attrs())
            .size() == 2);
}

TEST_CASE("scaled_dot_product_attention refuses key_lengths that are not one integer per batch",
          "[dialect][attention]") {
  const Type q = tf({2, 4, 5, 8}), k = tf({2, 4, 7, 8}), v = tf({2, 4, 7, 3});
  auto fwd = [&](Type lengths) { return ScaledDotProductAttentionOp::infer_meta({q, k, v, lengths}, attrs()); };
  // A float operand past v is a mask: a float [B] is refused as one, naming key_lengths' dtypes.
  KILN_CHECK_ERROR(fwd(tf({2})), InvalidArgument, {kOp, "mask (operand #3)", "key_lengths are int32 or int64 [B]"});
  KILN_CHECK_ERROR(fwd(tf({3}, DataType::Int64)), InvalidArgument, {kOp, "key_lengths", "[3]"});
  KILN_CHECK_ERROR(fwd(tf({2, 1}, DataType::Int32)), InvalidArgument, {kOp, "key_lengths"});
  KILN_CHECK_ERROR(ScaledDotProductAttentionOp::infer_meta(
                       {q, k, v, tf({2}, DataType::Int32), tf({5, 7}), tf({2}, DataType::Int32)}, attrs()),
                   InvalidArgument, {kOp, "got 6 operands", "operand #5 being i32"});
  const Type out = tf({2, 4, 5, 3}), lse = tf({2, 4, 5});
  KILN_CHECK_ERROR(sdpa_grad({q, k, v, out, lse, out, tf({2}, DataType::Float32)}), InvalidArgument,
                   {kGradOp, "mask (operand #6)"});
  KILN_CHECK_ERROR(sdpa_grad({q, k, v, out, lse, out, tf({3}, DataType::Int32)}), InvalidArgument,
                   {kGradOp, "key_lengths (operand #6)", "int32 or int64 [2]"});
  KILN_CHECK_ERROR(sdpa_grad({q, k, v, out, lse}), InvalidArgument, {kGradOp, "got 5 operands"});
}

TEST_CASE("grouped-query attention's vjp matches finite differences", "[dialect][vjp][attention][gqa]") {
  GradCheckOptions o;
  o.result_grads = {true, false};
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    check_vjp({random_f64({2, 4, 3, 3}, -1, 1, 31), random_f64({2, 2, 4, 3}, -1, 1, 32),
               random_f64({2, 2, 4, 2}, -1, 1, 33)},
              make_op<ScaledDotProductAttentionOp>(causal, 0.0), o);
    check_vjp({random_f64({1, 5, 3, 2}, -1, 1, 34), random_f64({1, 3, 1, 2}, -1, 1, 35),  // BLHD, multi-query
               random_f64({1, 3, 1, 2}, -1, 1, 36)},
              make_op<ScaledDotProductAttentionOp>(causal, 0.0, std::string("BLHD")), o);
  }
}

TEST_CASE("scaled_dot_product_attention's vjp with key_lengths matches finite differences",
          "[dialect][vjp][attention]") {
  GradCheckOptions o;
  o.result_grads = {true, false};
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    const auto report = check_vjp({random_f64({3, 2, 4, 3}, -1, 1, 21), random_f64({3, 2, 5, 3}, -1, 1, 22),
                                   random_f64({3, 2, 5, 2}, -1, 1, 23), i64({3}, {5, 2, 0})},
                                  make_op<ScaledDotProductAttentionOp>(causal, 0.0), o);
    REQUIRE(report.grads.size() == 4);
    CHECK(!report.grads[3].is_initialized());  // the lengths get no gradient
  }
}

TEST_CASE("an attention with key_lengths prints and loads back, as text and as JSON",
          "[dialect][attention][io]") {
  Program p;
  Builder b(p);
  Value q = b.create<DataOp>("q", Shape{2, 1, 3, 4}, DataType::Float32).result();
  Value n = b.create<DataOp>("n", Shape{2}, DataType::Int32).result();
  b.create<ScaledDotProductAttentionOp>(q, q, q, true, 0.0, "BLHD", n);
  p.verify();
  const Program text = parse_program(p.to_string());
  CHECK(text.to_string() == p.to_string());
  CHECK(first_op<ScaledDotProductAttentionOp>(text)->num_operands() == 4);
  const Program json = load_program_json(program_to_json(p).dump());
  CHECK(json.to_string() == p.to_string());
}

TEST_CASE("scaled_dot_product_attention takes a bool or float mask that broadcasts to [B, H, Lq, Lk]",
          "[dialect][attention][mask]") {
  const Type q = tf({2, 4, 5, 8}), k = tf({2, 4, 7, 8}), v = tf({2, 4, 7, 3});
  const Type out = tf({2, 4, 5, 3}), lse = tf({2, 4, 5});
  for (const Type& m : {tf({5, 7}), tf({2, 4, 5, 7}), tf({1, 4, 1, 7}), tf({4, 5, 1}), tf({2, 1, 1, 7}, DataType::Bool),
                        tf({-1, 7}), tf({1, 1})}) {
    INFO(m.to_string());
    CHECK(ScaledDotProductAttentionOp::infer_meta({q, k, v, m}, attrs(true)) == std::vector<Type>{out, lse});
    CHECK(ScaledDotProductAttentionOp::infer_meta({q, k, v, tf({2}, DataType::Int64), m}, attrs()).size() == 2);
    CHECK(sdpa_grad({q, k, v, out, lse, out, m}).size() == 3);
    CHECK(sdpa_grad({q, k, v, out, lse, out, tf({2}, DataType::Int32), m}).size() == 3);
  }
  // The float mask's gradient op is typed like the mask.
  CHECK(AttentionMaskGradOp::infer_meta({q, k, v, out, lse, out, tf({1, 4, 1, 7})}, attrs()) ==
        std::vector<Type>{tf({1, 4, 1, 7})});
}

TEST_CASE("scaled_dot_product_attention refuses a mask of another dtype or shape, naming it",
          "[dialect][attention][mask]") {
  const Type q = tf({2, 4, 5, 8}), k = tf({2, 4, 7, 8}), v = tf({2, 4, 7, 3});
  auto fwd = [&](Type m) { return ScaledDotProductAttentionOp::infer_meta({q, k, v, m}, attrs()); };
  KILN_CHECK_ERROR(fwd(tf({5, 7}, DataType::Float64)), InvalidArgument,
                   {kOp, "mask (operand #3) is f64", "expected bool or f32", "[2, 4, 5, 7]"});
  KILN_CHECK_ERROR(fwd(tf({5, 6})), InvalidArgument, {kOp, "mask (operand #3)", "broadcasting"});
  KILN_CHECK_ERROR(fwd(tf({3, 4, 5, 7})), InvalidArgument, {kOp, "mask"});
  KILN_CHECK_ERROR(fwd(tf({1, 2, 4, 5, 7})), InvalidArgument, {kOp, "rank 2 to 4"});
  const Type out = tf({2, 4, 5, 3}), lse = tf({2, 4, 5});
  KILN_CHECK_ERROR(AttentionMaskGradOp::infer_meta({q, k, v, out, lse, out, tf({5, 7}, DataType::Bool)}, attrs()),
                   InvalidArgument, {"'kiln.scaled_dot_product_attention_mask_grad'", "float mask"});
  KILN_CHECK_ERROR(AttentionMaskGradOp::infer_meta({q, k, v, out, lse, out}, attrs()), InvalidArgument,
                   {"'kiln.scaled_dot_product_attention_mask_grad'", "float mask"});
}

TEST_CASE("scaled_dot_product_attention's vjp with a float mask gives the mask its gradient, matching finite "
          "differences",
          "[dialect][vjp][attention][mask]") {
  GradCheckOptions o;
  o.result_grads = {true, false};
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    auto report = check_vjp({random_f64({2, 2, 4, 3}, -1, 1, 31), random_f64({2, 2, 5, 3}, -1, 1, 32),
                             random_f64({2, 2, 5, 2}, -1, 1, 33), random_f64({2, 1, 4, 5}, -2, 2, 34)},
                            make_op<ScaledDotProductAttentionOp>(causal, 0.0), o);
    REQUIRE(report.grads.size() == 4);
    CHECK(report.grads[3].is_initialized());
    // With key_lengths before it, and broadcast over batches and rows.
    report = check_vjp({random_f64({3, 2, 4, 3}, -1, 1, 35), random_f64({3, 2, 5, 3}, -1, 1, 36),
                        random_f64({3, 2, 5, 2}, -1, 1, 37), i64({3}, {5, 2, 0}), random_f64({2, 1, 5}, -2, 2, 38)},
                       make_op<ScaledDotProductAttentionOp>(causal, 0.0), o);
    REQUIRE(report.grads.size() == 5);
    CHECK(!report.grads[3].is_initialized());
    CHECK(report.grads[4].is_initialized());
  }
}

TEST_CASE("scaled_dot_product_attention's vjp adds the mask's gradient op for a float mask only",
          "[dialect][vjp][attention][mask]") {
  Program p;
  Builder b(p);
  auto mk = [&](const char* n, Shape s, DataType dt = DataType::Float64) {
    return b.create<DataOp>(n, s, dt).result();
  };
  Value q = mk("q", {1, 2, 3, 4}), fmask = mk("f", {3, 3}), bmask = mk("m", {3, 3}, DataType::Bool);
  auto with_float = b.create<ScaledDotProductAttentionOp>(q, q, q, false, 0.0, "BHLD", Value(), fmask);
  auto g = call_vjp(b, with_float.operation(), {with_float.result(0), Value()});
  REQUIRE(g.size() == 4);
  REQUIRE(g[3]);
  CHECK(g[3].defining_op()->isa<AttentionMaskGradOp>());
  CHECK(g[3].type() == fmask.type());
  auto with_bool = b.create<ScaledDotProductAttentionOp>(q, q, q, false, 0.0, "BHLD", Value(), bmask);
  g = call_vjp(b, with_bool.operation(), {with_bool.result(0), Value()});
  REQUIRE(g.size() == 4);
  CHECK(g[0]);
  CHECK(!g[3]);
}

TEST_CASE("an attention with a mask and its gradients print and load back, as text and as JSON",
          "[dialect][attention][mask][io]") {
  Program p;
  Builder b(p);
  Value q = b.create<DataOp>("q", Shape{2, 1, 3, 4}, DataType::Float32).result();
  Value n = b.create<DataOp>("n", Shape{2}, DataType::Int32).result();
  Value m = b.create<DataOp>("m", Shape{1, 1, 3, 3}, DataType::Float32).result();
  auto op = b.create<ScaledDotProductAttentionOp>(q, q, q, true, 0.0, "BHLD", n, m);
  call_vjp(b, op.operation(), {op.result(0), Value()});
  p.verify();
  const Program text = parse_program(p.to_string());
  CHECK(text.to_string() == p.to_string());
  CHECK(first_op<ScaledDotProductAttentionOp>(text)->num_operands() == 5);
  CHECK(first_op<AttentionMaskGradOp>(text)->num_operands() == 8);
  const Program json = load_program_json(program_to_json(p).dump());
  CHECK(json.to_string() == p.to_string());
}

namespace {
Tensor dropout_key(std::uint64_t key) { return Tensor::from_vector<std::uint64_t>({1}, {key}); }
ScaledDotProductAttentionOp::Attributes dropout_attrs(bool causal, double p, bool is_test = false) {
  return {causal, 0.0, "BHLD", p, is_test};
}
}  // namespace

TEST_CASE("scaled_dot_product_attention's vjp with dropout matches finite differences under its fixed key",
          "[dialect][vjp][attention][dropout]") {
  GradCheckOptions o;
  o.result_grads = {true, false};
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    auto report = check_vjp({random_f64({2, 2, 4, 3}, -1, 1, 41), random_f64({2, 2, 6, 3}, -1, 1, 42),
                             random_f64({2, 2, 6, 2}, -1, 1, 43), dropout_key(5)},
                            make_op<ScaledDotProductAttentionOp>(dropout_attrs(causal, 0.4)), o);
    REQUIRE(report.grads.size() == 4);
    CHECK(!report.grads[3].is_initialized());  // the key gets no gradient
    // With key_lengths and a float mask before the key (the mask's gradient drops too).
    report = check_vjp({random_f64({3, 2, 4, 3}, -1, 1, 44), random_f64({3, 2, 5, 3}, -1, 1, 45),
                        random_f64({3, 2, 5, 2}, -1, 1, 46), i64({3}, {5, 2, 0}), random_f64({2, 1, 5}, -2, 2, 47),
                        dropout_key(6)},
                       make_op<ScaledDotProductAttentionOp>(dropout_attrs(causal, 0.3)), o);
    REQUIRE(report.grads.size() == 6);
    CHECK(report.grads[4].is_initialized());
    CHECK(!report.grads[5].is_initialized());
  }
}

TEST_CASE("attention's gradient ops read the forward's dropout key and attributes",
          "[dialect][vjp][attention][dropout]") {
  Program p;
  Builder b(p);
  Value q = b.create<DataOp>("q", Shape{1, 2, 3, 4}, DataType::Float64).result();
  Value m = b.create<DataOp>("m", Shape{3, 3}, DataType::Float64).result();
  Value key = b.create<RandomKeyOp>(std::int64_t{9}).result();
  CHECK(key.type() == Type(TensorType::get(DataType::UInt64, {1})));
  auto op = b.create<ScaledDotProductAttentionOp>(q, q, q, true, 0.0, "BHLD", Value(), m, 0.25, key);
  const auto g = call_vjp(b, op.operation(), {op.result(0), Value()});
  REQUIRE(g.size() == 5);
  CHECK(!g[4]);
  for (Operation* grad : {g[0].defining_op(), g[3].defining_op()}) {
    INFO(grad->name());
    CHECK(grad->operand_source(grad->num_operands() - 1) == key);
    CHECK(grad->attributes().find("dropout_p") == Attribute(Float64Attribute::get(0.25)));
    CHECK(grad->attributes().find("is_test") == Attribute(BoolAttribute::get(false)));
  }
  CHECK(g[3].defining_op()->isa<AttentionMaskGradOp>());
  p.verify();
}

TEST_CASE("an attention with dropout prints and loads back as text and JSON; one saved before dropout loads "
          "without it",
          "[dialect][attention][dropout][io]") {
  Program p;
  Builder b(p);
  Value q = b.create<DataOp>("q", Shape{2, 1, 3, 4}, DataType::Float32).result();
  Value key = b.create<RandomKeyOp>().result();
  auto op = b.create<ScaledDotProductAttentionOp>(q, q, q, true, 0.0, "BHLD", Value(), Value(), 0.1, key);
  call_vjp(b, op.operation(), {op.result(0), Value()});
  p.verify();
  const Program text = parse_program(p.to_string());
  CHECK(text.to_string() == p.to_string());
  const Program json = load_program_json(program_to_json(p).dump());
  CHECK(json.to_string() == p.to_string());
  // A program printed before the dropout attributes existed.
  Program plain;
  Builder pb(plain);
  Value x = pb.create<DataOp>("q", Shape{2, 1, 3, 4}, DataType::Float32).result();
  pb.create<ScaledDotProductAttentionOp>(x, x, x, true, 0.0);
  std::string old = plain.to_string();
  for (const std::string cut : {"dropout_p = 0.0, ", ", is_test = false"}) {
    const std::size_t at = old.find(cut);
    REQUIRE(at != std::string::npos);
    old.erase(at, cut.size());
  }
  const Program loaded = parse_program(old);
  CHECK(loaded.to_string() == plain.to_string());
}

TEST_CASE("random_key gives a u64 [1] key and is a random op", "[dialect][random][dropout]") {
  Program p;
  Builder b(p);
  auto key = b.create<RandomKeyOp>(std::int64_t{3});
  CHECK(key.result().type() == Type(TensorType::get(DataType::UInt64, {1})));
  CHECK(key.operation()->has_trait<Random>());
  CHECK(key.attrs().seed == 3);
}
