// CPU kernels of kiln.stft and kiln.mel_weight_matrix. stft's DFTs are
// direct sums over a frame's N points with one table of N cosines and
// sines (angle 2π·(k·n mod N)/N); frames are independent and run in
// parallel.
#include <cmath>
#include <vector>

#include "cpu_kernel_util.h"
#include "intra_op.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/signal_ops.h"

namespace kiln::cpu {
namespace {

template <typename T>
struct StftK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const Tensor signal = typed_input<T>(ctx, 0), window = typed_input<T>(ctx, 2);
    const bool onesided = ctx.attrs<StftOp>().onesided;
    const Dims& sd = signal.dims();
    if (sd.rank() != 3 || (sd[2] != 1 && sd[2] != 2) || (onesided && sd[2] == 2))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' signal [", sd.to_string(), "] must be [B, L, 1]",
                  onesided ? " (onesided: real)" : " or [B, L, 2]");
    const std::int64_t b = sd[0], len = sd[1], parts = sd[2], n = window.numel();
    const double step = host_scalar(ctx, 1, "frame_step");
    if (!(step >= 1) || step != std::floor(step))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' frame_step must be a whole number >= 1, got ", step);
    if (n < 1 || n > len)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' the window's ", n, " points must fit the signal's ", len);
    const auto hop = static_cast<std::int64_t>(step);
    const std::int64_t frames = (len - n) / hop + 1, bins = onesided ? n / 2 + 1 : n;
    Tensor& out = ctx.alloc_output(0, Dims{b, frames, bins, 2}, signal.dtype());
    std::vector<double> cs(static_cast<std::size_t>(n)), sn(cs.size());
    for (std::int64_t m = 0; m < n; ++m) {
      const double angle = 2 * M_PI * static_cast<double>(m) / static_cast<double>(n);
      cs[static_cast<std::size_t>(m)] = std::cos(angle), sn[static_cast<std::size_t>(m)] = std::sin(angle);
    }
    const T* ps = signal.data<T>();
    const T* pw = window.data<T>();
    T* po = out.data<T>();
    parallel_for(b * frames, items_per_range(n * bins * 8), [&](std::int64_t f0, std::int64_t f1) {
      std::vector<double> re(static_cast<std::size_t>(n)), im(re.size());
      for (std::int64_t f = f0; f < f1; ++f) {
        const T* frame = ps + ((f / frames) * len + (f % frames) * hop) * parts;
        for (std::int64_t i = 0; i < n; ++i) {
          const double w = static_cast<double>(pw[i]);
          re[static_cast<std::size_t>(i)] = w * static_cast<double>(frame[i * parts]);
          im[static_cast<std::size_t>(i)] = parts == 2 ? w * static_cast<double>(frame[i * parts + 1]) : 0.0;
        }
        T* o = po + f * bins * 2;
        for (std::int64_t k = 0; k < bins; ++k) {
          double sr = 0, si = 0;  // Σ (re + i·im)(cos θ - i·sin θ), θ = 2πkn/N
          for (std::int64_t i = 0, m = 0; i < n; ++i, m = (m + k) % n) {
            const auto at = static_cast<std::size_t>(m);
            sr += re[static_cast<std::size_t>(i)] * cs[at] + im[static_cast<std::size_t>(i)] * sn[at];
            si += im[static_cast<std::size_t>(i)] * cs[at] - re[static_cast<std::size_t>(i)] * sn[at];
          }
          o[k * 2] = static_cast<T>(sr), o[k * 2 + 1] = static_cast<T>(si);
        }
      }
    });
  }
};

// The num_mel_bins + 2 filter edges as spectrogram bins.
std::vector<std::int64_t> mel_edges(std::int64_t mel_bins, std::int64_t dft_length, double sample_rate, double low_hz,
                                    double high_hz) {
  auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const double low = mel(low_hz), step = (mel(high_hz) - low) / static_cast<double>(mel_bins + 2);
  std::vector<std::int64_t> edges(static_cast<std::size_t>(mel_bins + 2));
  for (std::int64_t i = 0; i < mel_bins + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + low) / 2595.0) - 1.0);
    edges[static_cast<std::size_t>(i)] =
        static_cast<std::int64_t>(std::floor(static_cast<double>(dft_length + 1) * hz / sample_rate));
  }
  return edges;
}

template <typename Int>
struct MelWeightMatrixK {
  static void run(KernelContext& ctx) {
    const std::string_view op = ctx.op()->name();
    const double mel_bins = host_scalar(ctx, 0, "num_mel_bins"), dft = host_scalar(ctx, 1, "dft_length");
    const double rate = host_scalar(ctx, 2, "sample_rate"), low = host_scalar(ctx, 3, "lower_edge_hertz"),
                 high = host_scalar(ctx, 4, "upper_edge_hertz");
    if (mel_bins < 1 || dft < 1 || rate < 1 || mel_bins > 1 << 16 || dft > 1 << 24)
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' num_mel_bins (", mel_bins, "), dft_length (", dft,
                  ") and sample_rate (", rate, ") must be >= 1 (at most 2^16 mel bins, 2^24 points)");
    if (!(low >= 0) || !(high > low) || !std::isfinite(high))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' needs 0 <= lower_edge_hertz (", low,
                  ") < upper_edge_hertz (", high, "), both finite");
    const auto m = static_cast<std::int64_t>(mel_bins), n = static_cast<std::int64_t>(dft), bins = n / 2 + 1;
    const std::vector<std::int64_t> e = mel_edges(m, n, rate, low, high);
    std::vector<double> w(static_cast<std::size_t>(bins * m), 0.0);
    for (std::int64_t i = 0; i < m; ++i) {
      const std::int64_t lo = e[static_cast<std::size_t>(i)], mid = e[static_cast<std::size_t>(i + 1)],
                         hi = e[static_cast<std::size_t>(i + 2)];
      if (lo < 0 || mid >= bins || hi > bins)
        throw_error(ErrorKind::InvalidArgument, "op '", op, "' mel bin ", i, "'s edges ", lo, ", ", mid, ", ", hi,
                    " fall outside the ", bins, " spectrogram bins");
      for (std::int64_t j = lo; j <= mid; ++j)  // rising edge (1 at mid; a bin wide: only mid)
        w[static_cast<std::size_t>(j * m + i)] = mid == lo ? 1.0 : static_cast<double>(j - lo) / static_cast<double>(mid - lo);
      for (std::int64_t j = mid; j < hi; ++j)  // falling edge
        w[static_cast<std::size_t>(j * m + i)] = static_cast<double>(hi - j) / static_cast<double>(hi - mid);
    }
    const DataType dt = ctx.attrs<MelWeightMatrixOp>().dtype;
    Tensor& out = ctx.alloc_output(0, Dims{bins, m}, dt);
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (dt == DataType::Float32) out.data<float>()[i] = static_cast<float>(w[i]);
      else out.data<double>()[i] = w[i];
    }
  }
};

}  // namespace

KILN_REGISTER_KERNELS(StftOp, Cpu, StftK, float, double);
KILN_REGISTER_KERNELS(MelWeightMatrixOp, Cpu, MelWeightMatrixK, std::int32_t, std::int64_t);

}  // namespace kiln::cpu
