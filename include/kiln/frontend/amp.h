// Automatic mixed precision as a program rewrite (Paddle's
// `paddle.static.amp`, PyTorch's autocast): the forward of a training
// program runs its GEMMs in bf16 or f16 while everything else stays f32.
//
// Level O1: each op of the allow list (default: kiln.matmul) reads its f32
// floating operands through a cast to the low dtype and gives a low-dtype
// result (f32 accumulation inside its kernel) — unless it reads f64 or the
// other 16-bit float, which it keeps; every other op that reads a
// value made low this way reads it through a cast back to f32. One cast per
// value, placed before its first reader, shared by every later reader. The
// backward that append_backward (or an optimizer's minimize) then builds
// runs the allow-list ops' gradients in the low dtype too, and the casts'
// gradients bring the parameters' gradients back to f32: the parameters
// stay f32 (they are the master weights the optimizer updates). bf16 needs
// no loss scaling (its exponent is f32's).
//
//   auto opt = kiln::optim::Adam(1e-3);
//   kiln::amp::decorate(opt, {.dtype = kiln::DataType::BFloat16}).minimize(loss);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/block.h"
#include "kiln/ir/value.h"
#include "kiln/support/data_type.h"

namespace kiln {

namespace optim {
class Optimizer;
}

namespace amp {

// O0: nothing changes. O2 (every activation and parameter low, f32 master
// copies) is not built yet: asking for it is a kiln::Error (Unimplemented).
enum class Level : std::uint8_t { O0, O1, O2 };

struct Options {
  Level level = Level::O1;
  DataType dtype = DataType::BFloat16;  // BFloat16 or Float16
  // The ops run in `dtype`; empty: default_allow_list().
  std::vector<std::string> allow;
};

// kiln.matmul.
const std::vector<std::string>& default_allow_list();

struct RewriteResult {
  std::size_t lowered_ops = 0;  // allow-list ops now running in the low dtype
  std::size_t casts = 0;        // casts inserted, down and back up
};

// Rewrites the forward ops of `block` (a program's top-level block, before
// its backward is built). kiln::Error: an unknown level or a dtype other
// than bf16 / f16 (InvalidArgument), O2 (Unimplemented), an allow-list
// name that is no registered op or whose op has no CPU kernel for the dtype
// (InvalidArgument, naming it), a block that already holds backward ops
// (InvalidArgument). On an error `block` is unchanged.
RewriteResult rewrite(Block& block, const Options& options = {});

// An optimizer whose minimize first rewrites the loss's program.
class Decorated {
 public:
  Decorated(optim::Optimizer& optimizer, Options options) : optimizer_(optimizer), options_(std::move(options)) {}
  // rewrite(the loss's block), then the optimizer's minimize.
  std::vector<std::pair<Value, Value>> minimize(Value loss);

 private:
  optim::Optimizer& optimizer_;
  Options options_;
};

inline Decorated decorate(optim::Optimizer& optimizer, Options options = {}) {
  return Decorated(optimizer, std::move(options));
}

}  // namespace amp
}  // namespace kiln
