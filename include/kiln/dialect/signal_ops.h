// Signal ops whose sizes are read at run time (-1 dims until then):
// stft, the short-time Fourier transform of framed signals, and
// mel_weight_matrix, the triangular filters that map a spectrogram's bins
// to mel bins. ONNX's STFT and MelWeightMatrix; torch.stft with a window and
// center = false, torchaudio / librosa mel filter banks (ONNX's rounding of
// the filters' edges to whole bins). Pure, no grad.
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {

// kiln.stft(signal, frame_step, window) -> [B, frames, bins, 2]: signal
// [B, L, 1] (real) or [B, L, 2] (complex), f32 or f64; frame_step an i32 /
// i64 scalar (> 0); window [N] of signal's dtype (its length is the frame
// length, N <= L). Frame f holds signal[f · frame_step + n] · window[n] for
// n < N; frames = (L - N) / frame_step + 1; each frame's DFT of N points,
// bins N (onesided: N / 2 + 1, real signals only), the real and imaginary
// parts last.
struct StftOp : Op<StftOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.stft";
  static constexpr int num_operands = 3, num_results = 1;
  KILN_ATTRIBUTES((bool, onesided));
  static void build(Builder& b, OperationArgument& arg, Value signal, Value frame_step, Value window,
                    bool onesided = true);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// kiln.mel_weight_matrix(num_mel_bins, dft_length, sample_rate,
// lower_edge_hertz, upper_edge_hertz) -> [dft_length / 2 + 1, num_mel_bins]
// of `dtype` (f32 or f64): three i32 / i64 scalars and two f32 / f64
// scalars. Mel bin m is a triangle over the spectrogram bins from edge m
// to edge m + 2, rising to 1 at edge m + 1; the num_mel_bins + 2 edges are
// spaced evenly in mel (2595 · log10(1 + hz / 700)) from lower_edge_hertz
// in steps of the mel range / (num_mel_bins + 2), as ONNX's definition
// does, each floored to a bin: floor((dft_length + 1) · hz / sample_rate).
struct MelWeightMatrixOp : Op<MelWeightMatrixOp, ReadOnly, ValueSemantics, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.mel_weight_matrix";
  static constexpr int num_operands = 5, num_results = 1;
  KILN_ATTRIBUTES((DataType, dtype));
  static void build(Builder& b, OperationArgument& arg, Value num_mel_bins, Value dft_length, Value sample_rate,
                    Value lower_edge_hertz, Value upper_edge_hertz, DataType dtype = DataType::Float32);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

}  // namespace kiln
