// program_to_dot: the Program itself as a Graphviz graph — operations are
// nodes, values are edges (from the defining op, or block argument, to each
// user, labelled with the value's number and type), and the regions of
// kiln.if / kiln.while (and of any op with regions) are nested
// `subgraph cluster_…` boxes holding their blocks' arguments and ops. It
// shows the program as written, before pre-analysis; the executor's DAG of
// instructions (with memcpys and stream edges) is InterpreterCore::to_dot().
#pragma once

#include <string>

#include "kiln/ir/program.h"

namespace kiln {

// `digraph program { … }`; values numbered in definition order as the text
// form numbers them (%0, %1, …). Parameters appear as the ops that read them.
std::string program_to_dot(const Program& program);

}  // namespace kiln
