// Elementwise and linear-algebra ops of the first op set: add (numpy
// broadcasting), matmul (transpose flags, batched), relu and its in-place
// twin relu_ (Inplace: output 0 aliases input 0, seed 002 §2.5.2).
#pragma once

#include "kiln/dialect/builtin.h"

namespace kiln {

// Broadcast two shapes numpy-style; -1 (unknown) broadcasts against anything
// but 1. Throws kiln::Error naming `op` when the shapes cannot broadcast.
std::vector<std::int64_t> broadcast_shapes(std::string_view op, const std::vector<std::int64_t>& a,
                                           const std::vector<std::int64_t>& b);

struct AddOp : Op<AddOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.add";
  static constexpr int num_operands = 2, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x, Value y);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

struct MatmulOp : Op<MatmulOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.matmul";
  static constexpr int num_operands = 2, num_results = 1;
  struct Attributes {
    BOOST_HANA_DEFINE_STRUCT(Attributes, (bool, transpose_x), (bool, transpose_y));
  };
  static void build(Builder& b, OperationArgument& arg, Value x, Value y, bool transpose_x = false,
                    bool transpose_y = false);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

struct ReluOp : Op<ReluOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.relu";
  static constexpr int num_operands = 1, num_results = 1;
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

struct Relu_Op : Op<Relu_Op, Inplace, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.relu_";
  static constexpr int num_operands = 1, num_results = 1;
  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> inplace_map{{{0, 0}}};
  static void build(Builder& b, OperationArgument& arg, Value x);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
