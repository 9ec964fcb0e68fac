// Feeding and fetching (seed 001 §1, "data" / fetch): `kiln.data` names an
// input the executor feeds by name; `kiln.fetch` marks a value the caller
// reads back (a SideEffect, so it keeps program order and is never pruned).
#pragma once

#include "kiln/dialect/builtin.h"

namespace kiln {

// %x = kiln.data() {name = "x", shape = [-1, 16], dtype = dtype<f32>, place = place<cpu>}
struct DataOp : Op<DataOp, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.data";
  static constexpr int num_operands = 0, num_results = 1;
  KILN_ATTRIBUTES((std::string, name), (std::vector<std::int64_t>, shape), (DataType, dtype), (Place, place));
  static void build(Builder& b, OperationArgument& arg, const std::string& name,
                    const std::vector<std::int64_t>& shape, DataType dtype = DataType::Float32,
                    Place place = Place::cpu());
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.fetch(%loss) {name = "loss", col = 0}
struct FetchOp : Op<FetchOp, SideEffect> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.fetch";
  static constexpr int num_operands = 1, num_results = 0;
  KILN_ATTRIBUTES((std::string, name), (std::int32_t, col));
  static void build(Builder& b, OperationArgument& arg, Value v, const std::string& name,
                    std::int32_t col = 0);
};

}  // namespace kiln
