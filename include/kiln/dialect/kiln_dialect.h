// The kiln dialect: kiln's own ops. Including this header gives every op of
// the dialect; each family's header declares its ops, gradient ops and Vjps
// together.
#pragma once

#include "kiln/dialect/attention_ops.h"
#include "kiln/dialect/binary_ops.h"
#include "kiln/dialect/builtin.h"
#include "kiln/dialect/compare_ops.h"
#include "kiln/dialect/control_flow_ops.h"
#include "kiln/dialect/conv_ops.h"
#include "kiln/dialect/dataflow_ops.h"
#include "kiln/dialect/debug_ops.h"
#include "kiln/dialect/fused_ops.h"
#include "kiln/dialect/grad_op.h"
#include "kiln/dialect/indexing_ops.h"
#include "kiln/dialect/io_ops.h"
#include "kiln/dialect/linalg_ops.h"
#include "kiln/dialect/loss_scaling_ops.h"
#include "kiln/dialect/manipulation_ops.h"
#include "kiln/dialect/nn_ops.h"
#include "kiln/dialect/norm_ops.h"
#include "kiln/dialect/optimizer_ops.h"
#include "kiln/dialect/pool_ops.h"
#include "kiln/dialect/random_ops.h"
#include "kiln/dialect/reduce_ops.h"
#include "kiln/dialect/resize_ops.h"
#include "kiln/dialect/rnn_ops.h"
#include "kiln/dialect/search_ops.h"
#include "kiln/dialect/send_recv_ops.h"
#include "kiln/dialect/signal_ops.h"
#include "kiln/dialect/collective_ops.h"
#include "kiln/dialect/shape_ops.h"
#include "kiln/dialect/tensor_array_ops.h"
#include "kiln/dialect/tensor_ops.h"
#include "kiln/dialect/unary_ops.h"

namespace kiln {

class KilnDialect : public Dialect {
 public:
  KilnDialect();
};

}  // namespace kiln
