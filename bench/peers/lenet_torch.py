#!/usr/bin/env python3
"""PyTorch-eager peer of bench/model_bench.cc's LeNet-5 (`./run bench models`).

The same model, data shapes, loss and optimizer as kiln's model.lenet:
x [64, 1, 28, 28] -> conv 5x5 1->6 pad 2, relu, maxpool 2 -> conv 5x5 6->16,
relu, maxpool 2 -> flatten 400 -> 120 relu -> 84 relu -> 10; cross-entropy
with int64 labels; Adam(1e-3); one random but fixed batch fed every step.

Prints, in ms per training step (zero_grad(set_to_none), forward, backward,
step), medians of several repetitions after warm-up:
  BENCH model.lenet.torch.t1 <ms> ms   torch.set_num_threads(1), OpenBLAS at 1
  BENCH model.lenet.torch.t1.min <ms> ms  the fastest single step at 1 thread
  BENCH model.lenet.torch.t2 <ms> ms   the best of (intra-op, OpenBLAS) threads
                                       (2, 2), (2, 1), (1, 2); each as a # line
Debian's torch calls OpenBLAS (pthreads build) for its GEMMs, whose thread
count torch.set_num_threads does not set: it is set through ctypes (torch_threads.py).
Usage: lenet_torch.py [filter]  (runs for "", "models", "model", "model.lenet")
"""
import sys

FILTER = sys.argv[1] if len(sys.argv) > 1 else ""
if FILTER not in ("", "models", "model", "model.lenet"):
    sys.exit(0)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch_threads import report  # noqa: E402


def lenet():
    """The network, PyTorch's default initialization under seed 0."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10))


def build():
    net = lenet()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(64, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (64,), generator=g, dtype=torch.int64)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def main():
    report("model.lenet.torch", build(), 2, 15)


if __name__ == "__main__":
    main()
