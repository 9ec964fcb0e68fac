// Kernel tests of kiln.print (kiln/dialect/debug_ops.h): the line it writes
// per run, summarize, and its result being its operand's buffer.
#include <sstream>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using namespace kiln_test;

namespace {
// Sends kiln.print's output to `os` for the scope.
struct CapturePrint {
  explicit CapturePrint(std::ostream* os) : old(set_print_stream(os)) {}
  ~CapturePrint() { set_print_stream(old); }
  std::ostream* old;
};
}  // namespace

TEST_CASE("print writes its message, the step and the tensor, and returns the tensor itself",
          "[kernel][debug]") {
  std::ostringstream os;
  CapturePrint capture(&os);
  Tensor x = Tensor::from_vector<float>({2, 2}, {1, 0.5f, -2, 3});
  auto r = run_op<PrintOp>({x}, std::string("x"), std::int64_t{-1});
  CHECK(os.str() == "x step 1: " + x.to_string() + "\n");
  CHECK(r.out().shares_buffer_with(x));
  CHECK(r.out().to_vector<float>() == x.to_vector<float>());
}

TEST_CASE("print with summarize shows the first values only", "[kernel][debug]") {
  std::ostringstream os;
  CapturePrint capture(&os);
  Tensor x = Tensor::from_vector<std::int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  // Each run builds its own op; the runs are kept so no op reuses another's
  // address (the step counters are per op).
  auto r1 = run_op<PrintOp>({x}, std::string("ids"), std::int64_t{4});
  CHECK(os.str() == "ids step 1: " + x.type_string() + " [1, 2, 3, 4, ...]\n");
  os.str("");
  auto r2 = run_op<PrintOp>({x}, std::string("ids"), std::int64_t{10});  // more than there are: all
  CHECK(os.str() == "ids step 1: " + x.type_string() + " [1, 2, 3, 4, 5, 6]\n");
  os.str("");
  auto r3 = run_op<PrintOp>({Tensor::from_vector<bool>({3}, {true, false, true})}, std::string("m"),
                  std::int64_t{0});
  CHECK(os.str() == "m step 1: tensor<3xbool>@cpu [...]\n");
}
