// Tensor-making and shape ops of the first op set: full (a constant-filled
// tensor), reshape (ViewLike: the output views its input's buffer) and
// uniform_random (Random: random ops keep program order, seed 001 §3.3.1).
#pragma once

#include "kiln/dialect/builtin.h"

namespace kiln {

struct FullOp : Op<FullOp, ReadOnly, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.full";
  static constexpr int num_operands = 0, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::vector<std::int64_t>, shape), (double, value),
                             (DataType, dtype), (Place, place));
  };
  static void build(Builder& b, OperationArgument& arg, const std::vector<std::int64_t>& shape,
                    double value, DataType dtype = DataType::Float32, Place place = Place::cpu());
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// shape: 0 copies the input dim, one -1 is inferred from the element count.
struct ReshapeOp : Op<ReshapeOp, ViewLike, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.reshape";
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> view_map{{{0, 0}}};
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::vector<std::int64_t>, shape));
  };
  static void build(Builder& b, OperationArgument& arg, Value x, const std::vector<std::int64_t>& shape);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

struct UniformRandomOp : Op<UniformRandomOp, Random, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.uniform_random";
  static constexpr int num_operands = 0, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (std::vector<std::int64_t>, shape), (double, min),
                             (double, max), (std::int64_t, seed), (DataType, dtype),
                             (Place, place));
  };
  static void build(Builder& b, OperationArgument& arg, const std::vector<std::int64_t>& shape,
                    double min = -1.0, double max = 1.0, std::int64_t seed = 0,
                    DataType dtype = DataType::Float32, Place place = Place::cpu());
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  void verify() const;
};

}  // namespace kiln
