// CPU kernel of kiln.fused_elementwise (kiln/dialect/fused_ops.h): the body
// runs tile by tile (kTile elements, each register's tile in L1), each step
// over a whole tile through the loop its op's own kernel runs — the unary
// family's KernelMath through map_elementwise, gradients through
// map_elementwise of Math::backward, binaries through Math::forward — so
// the results are the unfused kernels' bit for bit. Registers that hold one
// value for every element (one-element operands, constants, steps over
// those only) are computed once and broadcast.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif
#include <algorithm>
#include <array>
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

// A run's per-register state: on the stack for bodies of up to kStack
// registers and tiles of up to kStackScratch elements, on the heap past
// that (no thread_local: its look-up costs a call in a shared library).
template <typename T>
class Registers {
 public:
  static constexpr std::size_t kStack = 32, kStackScratch = 4096;
  explicit Registers(std::size_t regs) {
    if (regs > kStack) {
      heap_uniform_.resize(regs);
      heap_value_.resize(regs);
      heap_input_.resize(regs);
      heap_src_.resize(regs);
      heap_out_.resize(regs);
      heap_dst_.resize(regs);
      heap_row_.resize(regs);
      uniform = heap_uniform_.data();
      value = heap_value_.data();
      input = heap_input_.data();
      src = heap_src_.data();
      out_of = heap_out_.data();
      dst = heap_dst_.data();
      row = heap_row_.data();
    }
    std::fill_n(uniform, regs, 0);
    std::fill_n(input, regs, nullptr);
    std::fill_n(out_of, regs, nullptr);
    std::fill_n(row, regs, -1);
  }
  T* scratch(std::size_t elements) {
    if (elements <= kStackScratch) return scratch_;
    heap_scratch_.resize(elements);
    return heap_scratch_.data();
  }

  char* uniform = uniform_;
  T* value = value_;
  const T** input = input_;
  const T** src = src_;
  T** out_of = out_;
  T** dst = dst_;
  std::int64_t* row = row_;

 private:
  char uniform_[kStack];
  T value_[kStack];
  const T* input_[kStack];
  const T* src_[kStack];
  T* out_[kStack];
  T* dst_[kStack];
  std::int64_t row_[kStack];
  T scratch_[kStackScratch];
  std::vector<char> heap_uniform_;
  std::vector<T> heap_value_;
  std::vector<const T*> heap_input_, heap_src_;
  std::vector<T*> heap_out_, heap_dst_;
  std::vector<std::int64_t> heap_row_;
  std::vector<T> heap_scratch_;
};

template <typename T>
struct FusedElementwiseK {
  static void run(KernelContext& ctx) {
    static const std::vector<TileFn<T>> unary = unary_table<T>(UnaryFamily{});
    static const std::vector<TileFn<T>> unary_grad = unary_grad_table<T>(UnaryFamily{});
    static const std::vector<TileFn<T>> binary = binary_table<T>();
    const auto& attrs = ctx.attrs<FusedElementwiseOp>();
    const std::vector<FusedStep>& steps = attrs.body.steps();
    const std::uint32_t num_in = ctx.num_inputs();
    const Tensor& x0 = typed_input<T>(ctx, 0);
    const Dims dims = x0.dims();
    const std::int64_t n = x0.numel();
    const std::size_t regs = num_in + steps.size();

    // Per register: uniform (one value for all elements) or full; a full
    // register's tile is an input's data, an output's data or scratch.
    Registers<T> ws(regs);
    char* uniform = ws.uniform;
    T* value = ws.value;
    const T** input = ws.input;
    for (std::uint32_t i = 0; i < num_in; ++i) {
      const Tensor& t = typed_input<T>(ctx, i);
      if (i > 0 && t.numel() == 1 && (n != 1 || t.dims() != dims)) {  // one element, any rank
        uniform[i] = 1;
        value[i] = t.data<T>()[0];
      } else if (t.dims() != dims) {
        throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' operand #", i, " has dims ",
                    t.dims().to_string(), ": it must have operand #0's dims ", dims.to_string(),
                    " or one element");
      } else {
        input[i] = t.data<T>();
      }
    }
    auto fns_of = [&](const FusedStep& s) -> const std::vector<TileFn<T>>& {
      return s.kind == FusedStep::Kind::Unary ? unary : s.kind == FusedStep::Kind::UnaryGrad ? unary_grad : binary;
    };
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const FusedStep& s = steps[k];
      const std::size_t r = num_in + k;
      switch (s.kind) {
        case FusedStep::Kind::Const:
          uniform[r] = 1;
          value[r] = static_cast<T>(s.c0);
          break;
        case FusedStep::Kind::MeanAllGrad:
          if (!uniform[s.a] && n != 1)
            throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                        "' step kiln.mean_grad reads a register of more than one element");
          uniform[r] = 1;
          value[r] = (uniform[s.a] ? value[s.a] : input[s.a][0]) * (T(1) / static_cast<T>(n));
          break;
        case FusedStep::Kind::Scale:
          if (uniform[s.a]) {
            uniform[r] = 1;
            value[r] = static_cast<T>(s.c0) * value[s.a] + static_cast<T>(s.c1);
          }
          break;
        default: {
          const bool b_uniform = s.b < 0 || uniform[s.b];
          if (uniform[s.a] && b_uniform) {
            uniform[r] = 1;
            value[r] = scalar_step<T>(s, fns_of(s), value[s.a], s.b < 0 ? T(0) : value[s.b]);
          }
        }
      }
    }

    // Outputs (allocated after every input was read, as run_binary does).
    T** out_of = ws.out_of;
    for (std::size_t o = 0; o < attrs.outputs.size(); ++o) {
      const auto r = static_cast<std::size_t>(attrs.outputs[o]);
      Tensor& out = ctx.alloc_output(static_cast<std::uint32_t>(o), dims, x0.dtype());
      T* p = out.data<T>();
      if (uniform[r]) std::fill(p, p + n, value[r]);
      else if (!out_of[r]) out_of[r] = p;
      else {
        // The same register twice: computed once, copied after the loop.
      }
    }

    // Scratch: one tile per full step register not written to an output,
    // one per uniform register a full step reads (filled once).
    std::int64_t* row = ws.row;
    std::int64_t rows = 0;
    for (std::size_t r = 0; r < regs; ++r) {
      const bool step_reg = r >= num_in;
      if ((step_reg && !uniform[r] && !out_of[r]) || uniform[r]) row[r] = rows++;
    }
    // Rows of min(n, kTile) elements: a small tensor's run touches no more.
    const std::int64_t tile = std::min(kTile, n);
    T* scratch = ws.scratch(static_cast<std::size_t>(rows * tile));
    for (std::size_t r = 0; r < regs; ++r)
      if (uniform[r]) std::fill_n(scratch + row[r] * tile, tile, value[r]);

    const T** src = ws.src;
    T** dst = ws.dst;
    for (std::int64_t t0 = 0; t0 < n; t0 += kTile) {
      const std::int64_t len = std::min(kTile, n - t0);
      for (std::size_t r = 0; r < regs; ++r) {
        if (uniform[r]) src[r] = scratch + row[r] * tile;
        else if (r < num_in) src[r] = input[r] + t0;
        else {
          dst[r] = out_of[r] ? out_of[r] + t0 : scratch + row[r] * tile;
          src[r] = dst[r];
        }
      }
      for (std::size_t k = 0; k < steps.size(); ++k) {
        const std::size_t r = num_in + k;
        if (uniform[r]) continue;
        const FusedStep& s = steps[k];
        if (s.kind == FusedStep::Kind::Scale) {
          const T sc = static_cast<T>(s.c0), bi = static_cast<T>(s.c1);
          const T* __restrict a = src[s.a];
          T* __restrict o = dst[r];
          for (std::int64_t i = 0; i < len; ++i) o[i] = sc * a[i] + bi;
        } else {
          fns_of(s)[s.fn](src[s.a], s.b < 0 ? nullptr : src[s.b], dst[r], len);
        }
      }
    }
    // An output register listed twice: later results copy the first.
    for (std::size_t o = 0; o < attrs.outputs.size(); ++o) {
      const auto r = static_cast<std::size_t>(attrs.outputs[o]);
      T* p = ctx.output(static_cast<std::uint32_t>(o)).template data<T>();
      if (!uniform[r] && p != out_of[r]) std::copy(out_of[r], out_of[r] + n, p);
    }
  }
};

}  // namespace

KILN_REGISTER_KERNELS(FusedElementwiseOp, Cpu, FusedElementwiseK, float, double);

}  // namespace kiln::cpu
