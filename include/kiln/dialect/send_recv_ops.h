// Rendezvous send and receive (seed 003's _Send / _Recv, through which the
// pieces of a partitioned program exchange tensors): kiln.send hands its
// operand to the run's rendezvous (RunOptions::rendezvous) under the key
// (src_place, dst_place, tensor_name); kiln.recv waits for the value sent
// under that key — an asynchronous kernel, which holds no thread while it
// waits — and checks its dtype and shape against its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dialect/builtin.h"

namespace kiln {

// kiln.send(%x) {tensor_name = "x", src_place = place<cpu>, dst_place = place<cpu>}
// Never blocks. SideEffect: kept, and in program order with other sends.
struct SendOp : Op<SendOp, SideEffect, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.send";
  static constexpr int num_operands = 1, num_results = 0;
  KILN_ATTRIBUTES((std::string, tensor_name), (Place, src_place), (Place, dst_place));
  static void build(Builder& b, OperationArgument& arg, Value x, const std::string& tensor_name,
                    Place src_place = Place::cpu(), Place dst_place = Place::cpu());
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// %y = kiln.recv() {tensor_name = "x", src_place = place<cpu>, dst_place = place<cpu>,
//                   dtype = dtype<f32>, shape = [-1, 3], passes_dead = false}
// The value received must have this dtype and shape (-1: any extent).
// A dead value (a sender's untaken kiln.switch output) is passed on dead
// when the recv's block holds dataflow ops or `passes_dead` is set (a part
// of a partitioned dataflow program: its block then runs as a dataflow
// program too); any other recv fails on one.
struct RecvOp : Op<RecvOp, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.recv";
  static constexpr int num_operands = 0, num_results = 1;
  KILN_ATTRIBUTES((std::string, tensor_name), (Place, src_place), (Place, dst_place), (DataType, dtype),
                  (std::vector<std::int64_t>, shape), (bool, passes_dead));
  // A program saved before `passes_dead` existed loads without it.
  static std::vector<NamedAttribute> attribute_defaults() { return {{"passes_dead", BoolAttribute::get(false)}}; }
  static void build(Builder& b, OperationArgument& arg, const std::string& tensor_name, DataType dtype,
                    const std::vector<std::int64_t>& shape, Place src_place = Place::cpu(),
                    Place dst_place = Place::cpu(), bool passes_dead = false);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
