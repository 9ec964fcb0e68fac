#!/usr/bin/env python3
"""PyTorch-eager peer of bench/cnn_train_bench.cc (`./run bench models`).

torchvision's resnet18 and mobilenet_v2 (random weights, 1000 classes),
batch 16 of 224x224 images, cross-entropy, SGD(lr 0.01, momentum 0.9); one
random but fixed batch fed every step. Prints ms per training step
(zero_grad(set_to_none), forward, backward, step), medians of 4 steps after
2 warm-up steps:
  BENCH model.<net>.torch.t1 <ms> ms      torch.set_num_threads(1)
  BENCH model.<net>.torch.t1.min <ms> ms  the fastest step at 1 thread
  BENCH model.<net>.torch.t2 <ms> ms      2 intra-op threads (OpenBLAS 2)
  BENCH model.<net>.amp_bf16.torch.t1, .t2  the same step under CPU autocast
                                          in bf16 (its convolutions and matmuls
                                          in bf16: oneDNN's bf16 kernels)
Usage: cnn_train_torch.py [filter]  (runs for "", "models", "model",
"model.resnet18", "model.mobilenet_v2", "model.<net>.amp_bf16")
"""
import statistics
import sys
import time

FILTER = sys.argv[1] if len(sys.argv) > 1 else ""
NETS = ("resnet18", "mobilenet_v2")
KEYS = tuple("model." + n for n in NETS) + tuple("model." + n + ".amp_bf16" for n in NETS)
if FILTER not in ("", "models", "model") + KEYS:
    sys.exit(0)

import torch  # noqa: E402
from torch_threads import set_threads  # noqa: E402

try:
    import torchvision  # noqa: E402
except ImportError:
    print("# cnn_train_torch.py skipped: torchvision is not installed")
    sys.exit(0)


def build(name, amp=False):
    torch.manual_seed(0)
    net = getattr(torchvision.models, name)(num_classes=1000)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(17)
    x = torch.randn(16, 3, 224, 224, generator=g)
    y = torch.randint(0, 1000, (16,), generator=g, dtype=torch.int64)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()

    return step


def times(step, threads):
    set_threads(threads, threads)
    for _ in range(2):
        step()
    t = []
    for _ in range(4):
        t0 = time.perf_counter()
        step()
        t.append((time.perf_counter() - t0) * 1e3)
    set_threads(1, 1)
    return t


def main():
    for name in NETS:
        for amp in (False, True):
            key = f"model.{name}" + (".amp_bf16" if amp else "")
            if FILTER.startswith("model.") and FILTER != key:
                continue
            step = build(name, amp)
            try:
                t1, t2 = times(step, 1), times(step, 2)
            except RuntimeError as e:  # a bf16 CPU kernel this PyTorch lacks
                print(f"# {key}.torch skipped: {str(e).splitlines()[0]}")
                continue
            print(f"BENCH {key}.torch.t1 {statistics.median(t1):.3f} ms")
            if not amp:
                print(f"BENCH {key}.torch.t1.min {min(t1):.3f} ms")
            print(f"BENCH {key}.torch.t2 {statistics.median(t2):.3f} ms")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
