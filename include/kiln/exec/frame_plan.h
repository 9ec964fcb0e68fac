// FramePlan: the static half of running a program that holds dataflow ops
// (seed 003: TensorFlow's FrameInfo and the graph view of its propagator).
// Every op of the top block is a node assigned to a static frame — the top
// level, or a frame a kiln.enter names, nested in the frame its operand
// lives in — with a frame-local index and the offset of its inputs in its
// frame's per-iteration input table. Edges carry values from a node's
// output to a consumer's input; a kiln.next_iteration's edge goes to a back
// input of the merge it names. PlanBuilder makes it once per plan (and
// rejects ill-formed frames there); FramePropagator runs it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/dialect/rendezvous_key.h"
#include "kiln/exec/execution_plan.h"

namespace kiln {

struct FrameNode {
  enum class Kind : std::uint8_t {
    Source,         // a data or parameter op: its slot's variable, at the top level
    Kernel,         // an instruction of the plan
    Switch,
    Merge,
    Enter,
    Exit,
    NextIteration,
  };
  Kind kind = Kind::Kernel;
  bool constant_enter = false;  // Enter: is_constant
  bool async = false;           // Kernel: an asynchronous kernel (a receive)
  // Kernel: a kiln.recv, whose kernel leaves its output without a tensor
  // when it received a dead value: the output is dead.
  bool recv = false;
  std::uint32_t instruction = kNoIndex;  // Kernel: its plan instruction
  std::uint32_t slot = kNoIndex;         // Source: the variable it reads
  Operation* op = nullptr;
  std::uint32_t op_index = 0;      // its position in the block
  std::uint32_t frame = 0;         // the static frame it runs in
  std::uint32_t target_frame = 0;  // Enter: the frame it enters
  std::uint32_t local = 0;         // its index among its frame's nodes
  std::uint32_t input_base = 0;    // its first input in its frame's input table
  std::uint32_t num_inputs = 0;    // inputs that arrive (a merge: operands, then back edges)
  std::uint32_t num_forward = 0;   // Merge: inputs from its operands
  std::uint32_t num_outputs = 0;   // outputs propagated (next_iteration: 1)
  std::uint32_t edge_begin = 0, edge_end = 0;  // its out edges, by output
  // Kernel: per output, the slot whose variable receives it (a parameter, a
  // kiln.fetch op's result) or keeps a share of it (a fetched value);
  // kNoIndex for a value that lives only in the iteration's input table.
  std::vector<std::uint32_t> out_slots;
  // Bit o: output o's kernel writes out_slots[o]'s variable itself (a
  // parameter, a kiln.fetch op's result) rather than an iteration's.
  std::uint64_t direct_outputs = 0;
  // Bit o: output o is read by nothing (a kernel may skip it).
  std::uint64_t unused_outputs = 0;
  // Kernel: output o is updated in place from input i (the op's inplace map).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> inplace;
  // A kiln.send: its key. A dead input is sent as a dead value (TensorFlow's
  // transfer nodes run dead), so that the receiver learns of it.
  std::shared_ptr<const RendezvousKey> send_key;
  std::uint32_t exit_index = 0;    // Exit: its index among its frame's exits
  std::uint32_t constant_index = 0;  // constant Enter: its index among its target's constants
};

struct FrameEdge {
  std::uint32_t dst = 0;         // node
  std::uint32_t dst_input = 0;   // index among dst's inputs
  std::uint32_t src_output = 0;  // output of the source node
};

struct StaticFrame {
  std::string name;  // "" for the top level
  std::uint32_t parent = 0;
  std::uint32_t depth = 0;
  std::int64_t parallel_iterations = 1;
  std::uint32_t num_nodes = 0;
  std::uint32_t num_inputs = 0;   // size of one iteration's input table
  std::uint32_t num_enters = 0;   // enters into this frame (each fires once per frame)
  std::vector<std::uint32_t> exits;          // exit nodes leaving this frame, by exit_index
  std::vector<std::uint32_t> constants;      // constant enter nodes, by constant_index
  // Per local node: inputs still to arrive when an iteration starts
  // (iteration 0, and any later one: a loop's merge waits for its back
  // edges there, for its operands in iteration 0).
  std::vector<std::int32_t> pending_first, pending_next;
};

struct FramePlan {
  std::vector<FrameNode> nodes;
  std::vector<FrameEdge> edges;
  std::vector<StaticFrame> frames;  // [0] is the top level
  std::vector<std::uint32_t> roots; // top-level nodes with no input
  // Per slot: the node whose output it keeps (fetched values), or kNoIndex.
  std::vector<std::uint32_t> slot_producer;
  std::int64_t max_parallel_iterations = 1;
  bool has_async = false;  // some node has an asynchronous kernel

  // "op #3 'kiln.switch'" for errors.
  std::string describe(std::uint32_t node) const;
};

// The frame plan of `plan` (a root plan whose instructions are built) over
// its program's top block; `value_slot` maps the program copy's values to
// slots. kiln::Error (InvalidArgument) naming the op when frames are ill-formed:
// values of two frames meet, an exit at the top level, a next_iteration
// outside a loop frame or naming another frame's merge, enters of one frame
// disagreeing on parallel_iterations, a fetch of a value inside a frame, or
// an op the propagator does not run (regions, another place than the CPU).
std::shared_ptr<const FramePlan> build_frame_plan(
    const ExecutionPlan& plan, const Block& block,
    const std::unordered_map<const detail::ValueImpl*, std::uint32_t>& value_slot);

}  // namespace kiln
