// kiln demo: builds the seed's small program with the IR API (nothing runs
// yet) and prints it as text and as JSON.
#include <iostream>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/io/json.h"

int main() {
  using namespace kiln;
  Program prog;
  prog.set_parameter("linear_0.w_0", {TensorType::get(DataType::Float32, {16, 1})});
  prog.set_parameter("linear_0.b_0", {TensorType::get(DataType::Float32, {1})});

  Builder b(prog);
  auto x = b.create<DataOp>("x", std::vector<std::int64_t>{-1, 16});
  auto label = b.create<DataOp>("label", std::vector<std::int64_t>{-1, 1});
  auto w = b.create<ParameterOp>("linear_0.w_0", prog.parameter("linear_0.w_0").type);
  auto bias = b.create<ParameterOp>("linear_0.b_0", prog.parameter("linear_0.b_0").type);
  auto xw = b.create<MatmulOp>(x.result(), w.result());
  auto out = b.create<AddOp>(xw.result(), bias.result());
  auto act = b.create<ReluOp>(out.result());
  auto noise = b.create<UniformRandomOp>(std::vector<std::int64_t>{16, 1}, -0.01, 0.01, 42);
  auto sum = b.create<AddOp>(act.result(), noise.result());
  auto flat = b.create<ReshapeOp>(sum.result(), std::vector<std::int64_t>{-1});
  b.create<FetchOp>(flat.result(), "out");
  b.create<FetchOp>(label.result(), "label", 1);
  prog.verify();

  std::cout << "== text ==\n" << prog << "\n== json ==\n" << save_program_json(prog, 2) << "\n";
  std::cout << "content hash: " << std::hex << content_hash(prog) << std::dec << "\n";
  return 0;
}
