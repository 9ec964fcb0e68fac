// Partitioning a program by place (seed 003: TensorFlow splits a graph whose
// nodes sit on several devices into one graph per device, joined by _Send /
// _Recv pairs, and runs the pieces as one step). An op's place is its
// discardable attribute "kiln.place" (set_op_place), else a default;
// partition() clones the top-level ops into one program per place and
// joins every value one place makes and another reads with a kiln.send /
// kiln.recv pair; run_partitioned() runs the parts as one step, one
// executor each, over one rendezvous (ExecutorBarrier: the first failure
// aborts every part).
//
// A control-flow op goes whole with its regions; values its regions read
// from another place are received before it. Every part gets the whole
// program's parameters. In a program with dataflow ops (kiln.switch, …)
// every recv passes a dead value on (RecvOp's passes_dead), so a part that
// holds none of them still runs as a dataflow program: a value dead on one
// place is dead on the next, as TensorFlow's partitioned graphs send it.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/exec/executor.h"
#include "kiln/exec/run_options.h"
#include "kiln/dialect/placement_attributes.h"
#include "kiln/ir/program.h"

namespace kiln {


// Puts `op` on `place` for partition().
void set_op_place(Operation* op, Place place);
// The op's "kiln.place", or `fallback`; kiln::Error naming the op when the
// attribute is not a place.
Place op_place(const Operation* op, Place fallback);

// One place's piece of a partitioned program.
struct ProgramPart {
  Place place;
  Program program;
  std::vector<std::string> feeds;     // names of the data ops it holds
  std::vector<Value> fetch;           // values of `program` it fetches
  std::vector<std::size_t> fetch_of;  // fetch[i] is the whole program's fetch[fetch_of[i]]
};

struct PartitionedProgram {
  std::vector<ProgramPart> parts;  // in the order their places first occur
  std::size_t transfers = 0;       // send / recv pairs
  std::size_t num_fetches = 0;
};

// Splits `program`; `fetch` are values of its top-level block. kiln::Error
// naming the op or value for a fetch that is no top-level value, or a value
// that crosses places and is not a tensor.
PartitionedProgram partition(const Program& program, const std::vector<Value>& fetch,
                             Place default_place = Place::cpu());

// One step: part k on executors[k] (one per part, in the parts' order;
// each usually on that part's place), `feed` handed to the part holding
// each data op, the fetched tensors in the whole program's fetch order.
// options.rendezvous, when null, is a fresh one for the step. The parts run
// concurrently on their executors' own workers: an executor of one thread
// has none, and its part queues on the one shared asynchronous thread
// (parts then run one after another). kiln::Error
// for a count of executors other than the parts', a feed no part takes,
// and the first part's error.
std::vector<Tensor> run_partitioned(const PartitionedProgram& pp,
                                    std::span<Executor* const> executors, const FeedMap& feed,
                                    RunOptions options = {});

}  // namespace kiln
