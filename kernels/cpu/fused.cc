// CPU kernel of kiln.fused_elementwise (kiln/dialect/fused_ops.h): the body
// runs tile by tile (kTile elements, each register's tile in L1), each step
// over a whole tile through the loop its op's own kernel runs — the unary
// family's KernelMath through map_elementwise, gradients through
// map_elementwise of Math::backward, binaries through Math::forward — so
// the results are the unfused kernels' bit for bit. Registers that hold one
// value for every element (one-element operands, constants, steps over
// those only) are computed once and broadcast.
#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "cpu_kernel_util.h"
#include "unary_kernel_math.h"
#include "vector_math.h"
#include "kiln/dialect/binary_math.h"
#include "kiln/dialect/fused_ops.h"

namespace kiln::cpu {
namespace {

constexpr std::int64_t kTile = 512;  // a multiple of every SIMD width

template <typename T>
using TileFn = void (*)(const T* a, const T* b, T* out, std::int64_t n);

template <typename Math, typename T>
void unary_tile(const T* a, const T*, T* out, std::int64_t n) {
  map_elementwise<KernelMath<Math>, T>(a, out, n);
}
template <typename Math, typename T>
void unary_grad_tile(const T* a, const T* d, T* out, std::int64_t n) {
  map_elementwise<Math, T>(a, d, out, n);
}
template <typename Math, typename T>
void binary_tile(const T* a, const T* b, T* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = Math::forward(a[i], b[i]);
}

template <typename T, typename... Maths>
std::vector<TileFn<T>> unary_table(MathList<Maths...>) {
  return {&unary_tile<Maths, T>...};
}
template <typename T, typename... Maths>
std::vector<TileFn<T>> unary_grad_table(MathList<Maths...>) {
  return {&unary_grad_tile<Maths, T>...};
}
// In fused_binary_names() order.
template <typename T>
std::vector<TileFn<T>> binary_table() {
  return {&binary_tile<AddMath, T>,     &binary_tile<SubMath, T>,     &binary_tile<MulMath, T>,
          &binary_tile<DivMath, T>,     &binary_tile<MaximumMath, T>, &binary_tile<MinimumMath, T>,
          &binary_tile<PowMath, T>};
}

// One scalar step (every operand uniform), as the unfused kernel computes
// that element.
template <typename T>
T scalar_step(const FusedStep& s, const std::vector<TileFn<T>>& fns, T a, T b) {
  T out{};
  fns[s.fn](&a, &b, &out, 1);
  return out;
}

// One register of a run: uniform (one value for every element) or full; a
// full register's data is an input's, an output's or a row of scratch.
// Trivial: Registers sets up only the registers a body has.
template <typename T>
struct Register {
  T* base;            // full: its data (an input's is only read); null: not yet known
  std::int64_t row;   // a row of scratch (a step's own or a broadcast uniform), or -1
  T value;            // uniform: the value
  bool uniform;
  bool moves;         // base is a tensor's data: each tile starts t0 further
};

// A run's registers and scratch: on the stack for bodies of up to kStack
// registers and tiles of up to kStackScratch elements, on the heap past
// that (no thread_local: its look-up costs a call in a shared library).
template <typename T>
class Registers {
 public:
  static constexpr std::size_t kStack = 32, kStackScratch = 4096;
  explicit Registers(std::size_t regs) {
    if (regs > kStack) {
      heap_ = std::make_unique_for_overwrite<Register<T>[]>(regs);
      reg = heap_.get();
    }
    std::fill_n(reg, regs, Register<T>{nullptr, -1, T(0), false, false});
  }
  Registers(const Registers&) = delete;  // reg may point into this object
  Registers& operator=(const Registers&) = delete;
  T* scratch(std::size_t elements) {
    if (elements <= kStackScratch) return scratch_;
    heap_scratch_ = std::make_unique_for_overwrite<T[]>(elements);
    return heap_scratch_.get();
  }

  Register<T>* reg = stack_;

 private:
  Register<T> stack_[kStack];
  T scratch_[kStackScratch];
  std::unique_ptr<Register<T>[]> heap_;
  std::unique_ptr<T[]> heap_scratch_;
};

template <typename T>
const std::vector<TileFn<T>>& tile_fns(const FusedStep& s) {
  static const std::vector<TileFn<T>> unary = unary_table<T>(UnaryFamily{});
  static const std::vector<TileFn<T>> unary_grad = unary_grad_table<T>(UnaryFamily{});
  static const std::vector<TileFn<T>> binary = binary_table<T>();
  return s.kind == FusedStep::Kind::Unary ? unary : s.kind == FusedStep::Kind::UnaryGrad ? unary_grad : binary;
}

// One run of a body, in three phases: the operands and the steps over
// uniform registers, then the outputs and scratch rows, then the tiles.
template <typename T>
class FusedRun {
 public:
  explicit FusedRun(KernelContext& ctx)
      : ctx_(ctx),
        attrs_(ctx.attrs<FusedElementwiseOp>()),
        steps_(attrs_.body.steps()),
        num_in_(ctx.num_inputs()),
        x0_(typed_input<T>(ctx, 0)),
        dims_(x0_.dims()),
        n_(x0_.numel()),
        regs_(num_in_ + steps_.size()),
        ws_(regs_),
        reg_(ws_.reg) {}

  void run() {
    read_operands();
    compute_uniform_steps();
    bind_outputs();
    bind_scratch();
    run_tiles();
    copy_repeated_outputs();
  }

 private:
  // One-element operands are uniform; the others must have operand 0's dims.
  void read_operands() {
    for (std::uint32_t i = 0; i < num_in_; ++i) {
      const Tensor& t = i == 0 ? x0_ : typed_input<T>(ctx_, i);
      Register<T>& g = reg_[i];
      if (i > 0 && t.numel() == 1 && (n_ != 1 || t.dims() != dims_)) {  // one element, any rank
        g.uniform = true;
        g.value = t.data<T>()[0];
      } else if (i > 0 && t.dims() != dims_) {
        throw_error(ErrorKind::InvalidArgument, "op '", ctx_.op()->name(), "' operand #", i, " has dims ",
                    t.dims().to_string(), ": it must have operand #0's dims ", dims_.to_string(),
                    " or one element");
      } else {
        g.base = const_cast<T*>(t.data<T>());  // read only: inputs are never a step's output
        g.moves = true;
      }
    }
  }

  // Steps whose operands are all uniform give one value, computed here.
  void compute_uniform_steps() {
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      const FusedStep& s = steps_[k];
      Register<T>& g = reg_[num_in_ + k];
      const Register<T>& ra = reg_[s.a < 0 ? 0 : s.a];
      switch (s.kind) {
        case FusedStep::Kind::Const:
          g.uniform = true;
          g.value = static_cast<T>(s.c0);
          break;
        case FusedStep::Kind::MeanAllGrad:
          if (ra.uniform) {
            g.uniform = true;
            g.value = ra.value * (T(1) / static_cast<T>(n_));
          } else if (n_ != 1) {
            throw_error(ErrorKind::InvalidArgument, "op '", ctx_.op()->name(),
                        "' step kiln.mean_grad reads a register of more than one element");
          }  // else one full element: computed in the tile loop
          break;
        case FusedStep::Kind::Scale:
          if (ra.uniform) {
            g.uniform = true;
            g.value = static_cast<T>(s.c0) * ra.value + static_cast<T>(s.c1);
          }
          break;
        default:
          if (ra.uniform && (s.b < 0 || reg_[s.b].uniform)) {
            g.uniform = true;
            g.value = scalar_step<T>(s, tile_fns<T>(s), ra.value, s.b < 0 ? T(0) : reg_[s.b].value);
          }
      }
    }
  }

  // Outputs (allocated after every input was read, as run_binary does): a
  // full register computes straight into its first output.
  void bind_outputs() {
    for (std::size_t o = 0; o < attrs_.outputs.size(); ++o) {
      Register<T>& g = reg_[static_cast<std::size_t>(attrs_.outputs[o])];
      T* p = ctx_.alloc_output(static_cast<std::uint32_t>(o), dims_, x0_.dtype()).template data<T>();
      if (g.uniform) {
        std::fill(p, p + n_, g.value);
      } else if (!g.base) {
        g.base = p;
        g.moves = true;
      }  // else the same register twice: computed once, copied after the tiles
    }
  }

  // Scratch: one row per full step register not written to an output, one
  // per uniform register (filled once), of min(n, kTile) elements: a small
  // tensor's run touches no more.
  void bind_scratch() {
    std::int64_t rows = 0;
    for (std::size_t r = 0; r < regs_; ++r)
      if (reg_[r].uniform || (r >= num_in_ && !reg_[r].base)) reg_[r].row = rows++;
    const std::int64_t tile = std::min(kTile, n_);
    T* scratch = ws_.scratch(static_cast<std::size_t>(rows * tile));
    for (std::size_t r = 0; r < regs_; ++r) {
      Register<T>& g = reg_[r];
      if (g.row < 0) continue;
      g.base = scratch + g.row * tile;
      if (g.uniform) std::fill_n(g.base, tile, g.value);
    }
  }

  void run_tiles() {
    for (std::int64_t t0 = 0; t0 < n_; t0 += kTile) {
      const std::int64_t len = std::min(kTile, n_ - t0);
      auto at = [&](std::int32_t r) { return reg_[r].moves ? reg_[r].base + t0 : reg_[r].base; };
      for (std::size_t k = 0; k < steps_.size(); ++k) {
        const std::int32_t r = static_cast<std::int32_t>(num_in_ + k);
        if (reg_[r].uniform) continue;
        const FusedStep& s = steps_[k];
        T* __restrict o = at(r);
        if (s.kind == FusedStep::Kind::MeanAllGrad) {  // n == 1
          o[0] = at(s.a)[0] * (T(1) / static_cast<T>(n_));
        } else if (s.kind == FusedStep::Kind::Scale) {
          const T sc = static_cast<T>(s.c0), bi = static_cast<T>(s.c1);
          const T* __restrict a = at(s.a);
          for (std::int64_t i = 0; i < len; ++i) o[i] = sc * a[i] + bi;
        } else {
          tile_fns<T>(s)[s.fn](at(s.a), s.b < 0 ? nullptr : at(s.b), o, len);
        }
      }
    }
  }

  // An output register listed twice: the later outputs copy the first.
  void copy_repeated_outputs() {
    for (std::size_t o = 0; o < attrs_.outputs.size(); ++o) {
      const Register<T>& g = reg_[static_cast<std::size_t>(attrs_.outputs[o])];
      T* p = ctx_.output(static_cast<std::uint32_t>(o)).template data<T>();
      if (!g.uniform && p != g.base) std::copy(g.base, g.base + n_, p);
    }
  }

  KernelContext& ctx_;
  const FusedElementwiseOp::Attributes& attrs_;
  const std::vector<FusedStep>& steps_;
  const std::uint32_t num_in_;
  const Tensor& x0_;
  const Dims dims_;  // a copy: an output may be written into x0's variable
  const std::int64_t n_;
  const std::size_t regs_;
  Registers<T> ws_;
  Register<T>* reg_;
};

template <typename T>
struct FusedElementwiseK {
  static void run(KernelContext& ctx) { FusedRun<T>(ctx).run(); }
};

}  // namespace

KILN_REGISTER_KERNELS(FusedElementwiseOp, Cpu, FusedElementwiseK, float, double);

}  // namespace kiln::cpu
