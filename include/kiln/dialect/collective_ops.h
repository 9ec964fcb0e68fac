// Collective ops: allreduce, broadcast, allgather, reduce-scatter and
// barrier over the ranks of ExecutionOptions::communicator
// (kiln/runtime/communicator.h). Each carries the Communication trait: the
// dependency builder keeps collectives in program order, so every rank
// issues them in the same order (seed 001 §3.3.1.1). Their kernels are
// asynchronous: the work runs on the communicator's thread while the
// executor's workers run the ops that do not wait for it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dialect/builtin.h"

namespace kiln {

// %y0, %y1, … = kiln.allreduce(%x0, %x1, …) {reduce = "sum" | "mean"}
// Each yi: the element-wise sum (or mean) over the ranks of xi. The
// operands share one dtype and travel as one message (a gradient bucket).
struct AllReduceOp : Op<AllReduceOp, Communication, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.allreduce";
  static constexpr int num_operands = -1, num_results = -1;
  KILN_ATTRIBUTES((std::string, reduce));
  static void build(Builder& b, OperationArgument& arg, const std::vector<Value>& xs,
                    const std::string& reduce = "sum");
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// %y = kiln.broadcast(%x) {root = 0}: rank root's x on every rank.
struct BroadcastOp : Op<BroadcastOp, Communication, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.broadcast";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, root));
  static void build(Builder& b, OperationArgument& arg, Value x, std::int64_t root = 0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// %y = kiln.allgather(%x) {num_ranks = 2}: the ranks' x concatenated along
// dim 0 in rank order (a scalar x gathers into [num_ranks]). num_ranks is
// the job size the program was built for; a run over another is an error.
struct AllGatherOp : Op<AllGatherOp, Communication, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.allgather";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, num_ranks));
  static void build(Builder& b, OperationArgument& arg, Value x, std::int64_t num_ranks);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// %y = kiln.reduce_scatter(%x) {reduce = "sum", num_ranks = 2}: the sum (or
// mean) over the ranks of x, of which rank r keeps the r-th of num_ranks
// equal slices along dim 0 (dim 0 must divide by num_ranks).
struct ReduceScatterOp : Op<ReduceScatterOp, Communication, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.reduce_scatter";
  static constexpr int num_operands = 1, num_results = 1;
  KILN_ATTRIBUTES((std::string, reduce), (std::int64_t, num_ranks));
  static void build(Builder& b, OperationArgument& arg, Value x, std::int64_t num_ranks,
                    const std::string& reduce = "sum");
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.barrier(): returns on every rank once every rank reached it.
struct BarrierOp : Op<BarrierOp, Communication, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.barrier";
  static constexpr int num_operands = 0, num_results = 0;
  static void build(Builder& b, OperationArgument& arg);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
