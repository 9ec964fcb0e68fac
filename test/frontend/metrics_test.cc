// Metrics in the program (kiln/frontend/metrics.h): top-k accuracy run by
// the executor on hand-made scores, with [N] and [N, 1] labels, ties, and
// the errors naming the function.
#include <cstdint>
#include <vector>

#include "frontend_test_util.h"

using namespace kiln;

namespace {

// Scores [4, 3]: row 0's best is its label, row 1's label is its worst,
// row 2's label is its second best, row 3's best is its label.
const std::vector<float> kScores{0.1f, 0.7f, 0.2f,  //
                                 0.5f, 0.3f, 0.2f,  //
                                 0.2f, 0.3f, 0.5f,  //
                                 0.9f, 0.05f, 0.05f};
const std::vector<std::int64_t> kLabels{1, 2, 1, 0};

// accuracy(scores, label, k) for label dims `label_dims` of `label_dtype`,
// run once by the executor.
float run_accuracy(const std::vector<float>& scores, const std::vector<std::int64_t>& labels,
                   std::vector<std::int64_t> label_dims, DataType label_dtype, std::int64_t k) {
  Program main, startup;
  Value acc;
  const auto n = static_cast<std::int64_t>(labels.size());
  {
    ProgramGuard guard(main, startup);
    auto x = data("x", {n, static_cast<std::int64_t>(scores.size()) / n});
    auto label = data("label", label_dims, label_dtype);
    acc = nn::functional::accuracy(x, label, k);
  }
  REQUIRE(acc.type().to_string() == "tensor<f32>");
  Tensor lt = label_dtype == DataType::Int64
                  ? Tensor::from_vector<std::int64_t>(Dims(label_dims), labels)
                  : Tensor::from_vector<std::int32_t>(
                        Dims(label_dims), std::vector<std::int32_t>(labels.begin(), labels.end()));
  Executor exe(Place::cpu(), {.num_threads = 1});
  auto out = exe.run(main,
                     {{"x", kiln_frontend_test::f32({n, static_cast<std::int64_t>(scores.size()) / n},
                                                    scores)},
                      {"label", lt}},
                     {acc});
  return out.at(0).to_vector<float>().at(0);
}

}  // namespace

TEST_CASE("accuracy with k = 1 is the fraction of rows whose largest score is the label",
          "[frontend][metrics]") {
  CHECK(run_accuracy(kScores, kLabels, {4}, DataType::Int64, 1) == 0.5f);
  CHECK(run_accuracy(kScores, kLabels, {4, 1}, DataType::Int32, 1) == 0.5f);
  CHECK(run_accuracy(kScores, {1, 0, 2, 0}, {4, 1}, DataType::Int64, 1) == 1.0f);
  CHECK(run_accuracy(kScores, {0, 1, 0, 2}, {4}, DataType::Int32, 1) == 0.0f);
}

TEST_CASE("accuracy with k = 2 counts a row when the label is among its two largest scores",
          "[frontend][metrics]") {
  CHECK(run_accuracy(kScores, kLabels, {4}, DataType::Int64, 2) == 0.75f);
  CHECK(run_accuracy(kScores, kLabels, {4, 1}, DataType::Int32, 2) == 0.75f);
  CHECK(run_accuracy(kScores, kLabels, {4}, DataType::Int64, 3) == 1.0f);
}

TEST_CASE("accuracy breaks ties toward the lower class index", "[frontend][metrics]") {
  const std::vector<float> tied{0.4f, 0.4f, 0.2f,  //
                                0.1f, 0.3f, 0.3f};
  CHECK(run_accuracy(tied, {0, 1}, {2}, DataType::Int64, 1) == 1.0f);
  CHECK(run_accuracy(tied, {1, 2}, {2}, DataType::Int64, 1) == 0.0f);
  CHECK(run_accuracy(tied, {1, 2}, {2}, DataType::Int64, 2) == 1.0f);
}

TEST_CASE("accuracy is fetched beside the loss of a training program", "[frontend][metrics]") {
  Program main, startup;
  Value loss, acc;
  {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    auto x = data("x", {4, 3});
    auto label = data("label", {4, 1}, DataType::Int64);
    nn::Linear fc(3, 3, true, std::make_shared<init::Constant>(0.0),
                  std::make_shared<init::Constant>(0.0));
    auto logits = nn::functional::linear(x, fc.weight(), fc.bias());
    auto scores = main_builder().create<AddOp>(logits, x).result();
    loss = nn::functional::cross_entropy(scores, label);
    acc = nn::functional::accuracy(scores, label);
    optim::SGD(0.1).minimize(loss);
  }
  Executor exe(Place::cpu(), {.num_threads = 1});
  exe.run(startup);
  auto out = exe.run(main,
                     {{"x", kiln_frontend_test::f32({4, 3}, kScores)},
                      {"label", Tensor::from_vector<std::int64_t>(Dims{4, 1}, kLabels)}},
                     {loss, acc});
  CHECK(out.at(1).to_vector<float>().at(0) == 0.5f);  // zero weights: the scores are x
}

TEST_CASE("accuracy rejects bad shapes, label dtypes and k with kiln::Error naming it",
          "[frontend][metrics]") {
  Program main, startup;
  ProgramGuard guard(main, startup);
  auto x = data("x", {4, 3});
  auto label = data("label", {4}, DataType::Int64);
  using nn::functional::accuracy;
  KILN_CHECK_ERROR(accuracy(data("flat", {12}), label), InvalidArgument, {"accuracy", "[N, C]"});
  KILN_CHECK_ERROR(accuracy(x, data("short", {3}, DataType::Int64)), InvalidArgument,
                   {"accuracy", "label", "[3]"});
  KILN_CHECK_ERROR(accuracy(x, data("wide", {4, 2}, DataType::Int64)), InvalidArgument,
                   {"accuracy", "label", "[4, 2]"});
  KILN_CHECK_ERROR(accuracy(x, data("fl", {4}, DataType::Float32)), InvalidArgument,
                   {"accuracy", "label", "i32 or i64", "f32"});
  KILN_CHECK_ERROR(accuracy(x, label, 0), InvalidArgument, {"accuracy", "k", "got 0"});
  KILN_CHECK_ERROR(accuracy(x, label, 4), InvalidArgument, {"accuracy", "k", "C = 3", "got 4"});
  KILN_CHECK_ERROR(accuracy(x, Value{}), InvalidArgument, {"accuracy", "label", "null"});
}
