#!/usr/bin/env python3
"""PyTorch-eager peer of `./run bench onnx`: the models kiln imports from ONNX
(bench/peers/onnx_export.py wrote them from these same modules), run in
PyTorch itself for inference: eval mode, torch.no_grad, the batch kiln's
benchmark uses (LeNet-5: 64 images; GPT: 16 sequences of 64), random inputs.

Prints, in ms per forward pass, medians of several repetitions after warm-up:
  BENCH onnx.<name>.infer.torch.t1 <ms> ms   intra-op 1, OpenBLAS 1
  BENCH onnx.<name>.infer.torch.t2 <ms> ms   the best of (intra-op, OpenBLAS)
                                             (2, 2), (2, 1), (1, 2)
Usage: onnx_infer_torch.py [filter]  (runs for "", "onnx", "onnx.<name>")
"""
import os
import statistics
import sys
import time

FILTER = sys.argv[1] if len(sys.argv) > 1 else ""
NAMES = [n for n in ("lenet", "gpt")
         if FILTER in ("", "onnx", f"onnx.{n}") or FILTER.startswith(f"onnx.{n}.")]
if not NAMES:
    sys.exit(0)

import torch  # noqa: E402
from torch_threads import SETTINGS, set_threads, time_steps  # noqa: E402

sys.argv = sys.argv[:1] + ["model"]  # the peers read a benchmark filter from argv[1] when imported
import gpt_torch  # noqa: E402
from lenet_torch import lenet  # noqa: E402


def model(name):
    g = torch.Generator().manual_seed(7)
    if name == "lenet":
        return lenet().eval(), torch.rand(64, 1, 28, 28, generator=g) * 2 - 1
    torch.manual_seed(0)
    ids = torch.randint(0, gpt_torch.VOCAB, (16, gpt_torch.SEQ), generator=g, dtype=torch.int64)
    return gpt_torch.GPT("manual").eval(), ids


def main():
    for name in NAMES:
        net, x = model(name)
        runs = 20 if name == "lenet" else 5

        def step():
            with torch.no_grad():
                return net(x)

        samples = {k: [] for k in SETTINGS}
        for _ in range(3):
            for k, (intra, blas) in SETTINGS.items():
                set_threads(intra, blas)
                samples[k] += time_steps(step, runs, 5)
                set_threads(1, 1)
                time.sleep(0.25)  # OpenBLAS's threads spin a while after their last GEMM
        med = {k: statistics.median(v) for k, v in samples.items()}
        best2 = min((k for k in SETTINGS if k.startswith("t2")), key=lambda k: med[k])
        print(f"BENCH onnx.{name}.infer.torch.t1 {med['t1']:.4f} ms")
        print(f"BENCH onnx.{name}.infer.torch.t2 {med[best2]:.4f} ms")
        print(f"# onnx.{name}.infer.torch.t2 is {best2} (torch {torch.__version__}, "
              f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')})")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
