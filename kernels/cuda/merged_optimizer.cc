// Host halves of the merged optimizer updates' CUDA kernels
// (kiln/dialect/merged_optimizer_ops.h; the device halves in
// merged_optimizer.cu): each checks every parameter's operands with the CPU
// kernels' messages, gives each result its buffer (in place, or a copy of
// its operand) and launches the multi-tensor kernels on the op's stream.
// f32 and f64, the single updates' dtypes (an f32 parameter's gradient also
// bf16 or f16, each parameter's its own); the skip flag stays on the device.
//
// The multi-tensor launches run all parameters' updates at once, which is
// the single updates' order only when no two parameters share memory (nor
// one of them the learning rate or the skip flag). A merged op whose
// parameters do (a user's, updating one beta power for two parameters,
// say) runs them one after another through the single launchers instead.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_host.h"
#include "launch.h"
#include "kiln/dialect/merged_optimizer_ops.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cuda {
namespace {

// Single operand i of parameter k: of T and, unless numel < 0, of `numel`
// elements; kiln::Error naming the merged op, the operand and the parameter.
template <typename Merged, typename T>
const Tensor& member(const KernelContext& ctx, std::uint32_t k, std::uint32_t i, std::int64_t numel) {
  using Single = typename Merged::SingleOp;
  const std::uint32_t at = MergedLayout<Single>::operand(k, i);
  const Tensor& t = typed_input<T>(ctx, at);
  if (numel >= 0 && t.numel() != numel)
    throw_error(ErrorKind::InvalidArgument, "op '", Merged::name, "' operand '", Single::operand_names[i],
                "'", i == MergedLayout<Single>::lr ? std::string() : " of parameter #" + std::to_string(k),
                " (#", at, ") has ", t.numel(), " elements (shape [", t.dims().to_string(), "]), expected ",
                numel);
  return t;
}

// The optional skip flag (on the device), or null.
template <typename Merged>
const bool* skip_flag(const KernelContext& ctx) {
  if (!Merged::has_skip(ctx.num_inputs())) return nullptr;
  const Tensor& flag = ctx.input(ctx.num_inputs() - 1);
  if (flag.dtype() != DataType::Bool || flag.numel() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", Merged::name, "' operand '", kSkipOperandName, "' (#",
                ctx.num_inputs() - 1, ") must be a bool of one element, got ", flag.type_string());
  return flag.data<bool>();
}

// Parameter k's size and the buffers its update only reads, every operand checked.
template <typename Merged, typename T>
void read_operands(const KernelContext& ctx, std::uint32_t k, ParameterUpdate<T>& u) {
  using Single = typename Merged::SingleOp;
  u.n = member<Merged, T>(ctx, k, 0, -1).numel();
  const std::uint32_t at = MergedLayout<Single>::operand(k, kGradOperand);
  u.g = gradient_input(ctx, at, data_type_of<T>, u.n, Merged::name,
                       "'grad' of parameter #" + std::to_string(k) + " (#" + std::to_string(at) + ")");
  if constexpr (std::is_same_v<Single, Momentum_Op>) {
    (void)member<Merged, T>(ctx, k, 2, u.n);
  } else if constexpr (!std::is_same_v<Single, Sgd_Op>) {  // adam_, adamw_
    (void)member<Merged, T>(ctx, k, 3, u.n);
    (void)member<Merged, T>(ctx, k, 4, u.n);
    u.beta_pow[0] = member<Merged, T>(ctx, k, 5, 1).template data<T>();
    u.beta_pow[1] = member<Merged, T>(ctx, k, 6, 1).template data<T>();
  }
}

// Parameter k's results, each (result, operand) pair of the single op's:
// the operand's buffer in place, else a copy of it. ParameterUpdate's
// written fields follow the single ops' results: param, then momentum_'s
// velocity or adam_'s moments and beta powers.
template <typename Merged, typename T>
void take_results(KernelContext& ctx, std::uint32_t k, ParameterUpdate<T>& u) {
  using Single = typename Merged::SingleOp;
  using Layout = MergedLayout<Single>;
  T** const field[] = {&u.p, &u.state[0], &u.state[1], &u.beta_pow_out[0], &u.beta_pow_out[1]};
  for (auto [r, i] : Single::inplace_map) {
    const Tensor in = ctx.input(Layout::operand(k, i));
    *field[r] = updated<T>(ctx, Layout::result(k, r), Layout::operand(k, i), in);
  }
}

// Whether two parameters' operands share memory, the learning rate and the
// skip flag counting as one more parameter's. Spans sorted by start: a
// span that overlaps an earlier one of another owner overlaps the one
// reaching furthest so far, or that one's owner differs from its own.
template <typename Merged>
bool operands_overlap(const KernelContext& ctx, std::uint32_t count) {
  constexpr std::uint32_t per = MergedLayout<typename Merged::SingleOp>::operands;
  struct Span {
    std::uintptr_t begin, end;
    std::uint32_t owner;
  };
  std::vector<Span> spans;
  spans.reserve(ctx.num_inputs());
  for (std::uint32_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    if (t.bytes() == 0) continue;
    const auto begin = reinterpret_cast<std::uintptr_t>(t.raw_data());
    const bool shared = i == 0 || i > count * per;
    spans.push_back({begin, begin + t.bytes(), shared ? count : (i - 1) / per});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  std::uintptr_t end = 0;
  std::uint32_t end_owner = 0;
  for (const Span& s : spans) {
    if (s.begin < end && s.owner != end_owner) return true;
    if (s.end > end) {
      end = s.end;
      end_owner = s.owner;
    }
  }
  return false;
}

// Every parameter's update: all at once through `all(updates, count, lr,
// skip)`, or, where parameters share memory, one after another through
// `one(update, lr, skip)` (each one's copies made just before its launch,
// as the single ops' kernels make them).
template <typename Merged, typename T, typename One, typename All>
void update_parameters(KernelContext& ctx, One&& one, All&& all) {
  const std::uint32_t count = Merged::parameter_count(ctx.num_inputs());
  const T* lr = member<Merged, T>(ctx, 0, MergedLayout<typename Merged::SingleOp>::lr, 1).template data<T>();
  const bool* skip = skip_flag<Merged>(ctx);
  std::vector<ParameterUpdate<T>> u(count);
  for (std::uint32_t k = 0; k < count; ++k) read_operands<Merged>(ctx, k, u[k]);
  const bool serial = operands_overlap<Merged>(ctx, count);
  for (std::uint32_t k = 0; k < count; ++k) {
    take_results<Merged>(ctx, k, u[k]);
    if (serial) one(u[k], lr, skip);
  }
  if (!serial) all(u.data(), static_cast<int>(count), lr, skip);
  check_launch(ctx);
}

template <typename T>
struct MergedSgdK {
  static void run(KernelContext& ctx) {
    const cudaStream_t s = stream_of(ctx);
    update_parameters<MergedSgd_Op, T>(
        ctx,
        [&](const ParameterUpdate<T>& u, const T* lr, const bool* skip) {
          launch_sgd(u.p, u.g, lr, skip, u.n, s);
        },
        [&](const ParameterUpdate<T>* u, int count, const T* lr, const bool* skip) {
          launch_merged_sgd(u, count, lr, skip, s);
        });
  }
};

template <typename T>
struct MergedMomentumK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<MergedMomentum_Op>();
    const T mu = static_cast<T>(a.mu);
    const cudaStream_t s = stream_of(ctx);
    update_parameters<MergedMomentum_Op, T>(
        ctx,
        [&](const ParameterUpdate<T>& u, const T* lr, const bool* skip) {
          launch_momentum(u.p, u.state[0], u.g, lr, skip, mu, a.use_nesterov, u.n, s);
        },
        [&](const ParameterUpdate<T>* u, int count, const T* lr, const bool* skip) {
          launch_merged_momentum(u, count, lr, skip, mu, a.use_nesterov, s);
        });
  }
};

// merged_adam_ (decay off, coeff 0) and merged_adamw_.
template <typename Merged, typename T>
void merged_adam_update(KernelContext& ctx, double beta1_d, double beta2_d, double eps_d,
                        double coeff_d, bool decay) {
  const T beta1 = static_cast<T>(beta1_d), beta2 = static_cast<T>(beta2_d);
  const T eps = static_cast<T>(eps_d), coeff = static_cast<T>(coeff_d);
  const cudaStream_t s = stream_of(ctx);
  update_parameters<Merged, T>(
      ctx,
      [&](const ParameterUpdate<T>& u, const T* lr, const bool* skip) {
        launch_adam(u.p, u.state[0], u.state[1], u.g, lr, skip, u.beta_pow[0], u.beta_pow[1],
                    u.beta_pow_out[0], u.beta_pow_out[1], beta1, beta2, eps, coeff, decay, u.n, s);
      },
      [&](const ParameterUpdate<T>* u, int count, const T* lr, const bool* skip) {
        launch_merged_adam(u, count, lr, skip, beta1, beta2, eps, coeff, decay, s);
      });
}

template <typename T>
struct MergedAdamK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<MergedAdam_Op>();
    merged_adam_update<MergedAdam_Op, T>(ctx, a.beta1, a.beta2, a.epsilon, 0.0, false);
  }
};

template <typename T>
struct MergedAdamWK {
  static void run(KernelContext& ctx) {
    const auto& a = ctx.attrs<MergedAdamW_Op>();
    merged_adam_update<MergedAdamW_Op, T>(ctx, a.beta1, a.beta2, a.epsilon, a.coeff, true);
  }
};

}  // namespace

KILN_REGISTER_KERNELS(MergedSgd_Op, Cuda, MergedSgdK, float, double);
KILN_REGISTER_KERNELS(MergedMomentum_Op, Cuda, MergedMomentumK, float, double);
KILN_REGISTER_KERNELS(MergedAdam_Op, Cuda, MergedAdamK, float, double);
KILN_REGISTER_KERNELS(MergedAdamW_Op, Cuda, MergedAdamWK, float, double);

}  // namespace kiln::cuda
