// The examples' --device / --amp flags (examples/common/train_options.h):
// what a command line selects, the positional arguments kept in order, and
// a clear kiln::Error for a flag without a value or with one not listed.
#include <string>
#include <vector>

#include "../examples/common/train_options.h"
#include "catch.hpp"
#include "test_util.h"

namespace {

kiln_examples::TrainOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "example");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return kiln_examples::parse_train_options(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("an example trains on the CPU in f32 unless its flags say otherwise, and keeps its other "
          "arguments in order",
          "[examples]") {
  const auto o = parse({"300", "text.txt"});
  CHECK(o.place == kiln::Place::cpu());
  CHECK_FALSE(o.amp);
  CHECK(o.positional == std::vector<std::string>{"300", "text.txt"});
  CHECK(o.describe() == "cpu, f32");
}

TEST_CASE("--device picks the executor's place and --amp the mixed-precision level in bf16, with its "
          "kernels looked up at that place",
          "[examples]") {
  const auto o = parse({"20", "--device", "cuda", "data.csv", "--amp", "o2"});
  CHECK(o.place == kiln::Place::cuda(0));
  REQUIRE(o.amp);
  CHECK(o.amp->level == kiln::amp::Level::O2);
  CHECK(o.amp->dtype == kiln::DataType::BFloat16);
  CHECK(o.amp->place == kiln::Place::cuda(0));
  CHECK(o.positional == std::vector<std::string>{"20", "data.csv"});
  CHECK(o.describe() == "cuda:0, amp O2 bf16");
  CHECK(parse({"--device", "cuda:1", "--amp", "o1"}).amp->level == kiln::amp::Level::O1);
  CHECK(parse({"--device", "cuda:1"}).place == kiln::Place::cuda(1));
  CHECK_FALSE(parse({"--amp", "o1", "--amp", "off"}).amp);
}

TEST_CASE("an example's flag without a value, with a value it does not take, or unknown, is an error "
          "naming the flag and what it takes",
          "[examples]") {
  KILN_CHECK_ERROR(parse({"--amp", "o3"}), InvalidArgument, {"--amp 'o3'", "off, o1 or o2"});
  KILN_CHECK_ERROR(parse({"--amp"}), InvalidArgument, {"--amp needs a value"});
  KILN_CHECK_ERROR(parse({"--device", "tpu"}), InvalidArgument, {"--device 'tpu'", "cpu, cuda or cuda:N"});
  KILN_CHECK_ERROR(parse({"--device", "host_stream:1"}), InvalidArgument, {"--device 'host_stream:1'"});
  KILN_CHECK_ERROR(parse({"300", "--device"}), InvalidArgument, {"--device needs a value"});
  KILN_CHECK_ERROR(parse({"--amp=o2"}), InvalidArgument, {"unknown flag '--amp=o2'", "--device or --amp"});
}
