#!/usr/bin/env python3
"""PyTorch-eager peers of bench/model_bench.cc's Elman RNN (`./run bench models`).

The same model, data shapes, loss and optimizer as kiln's model.rnn:
x [T=32, B=32, 64] (time-major) -> h_t = tanh(x_t W_ih + b + h_{t-1} W_hh),
hidden 128, h_0 = 0 -> every h_t through a linear head to 10 -> MSE against a
fixed y [32, 32, 10]; SGD(0.01); one random but fixed batch fed every step.
Two forms of the recurrence:
  loop   a Python loop over time steps with explicit tensors, the way a user
         writes a custom recurrence (torch.mm, torch.tanh, torch.stack)
  fused  torch.nn.RNN(64, 128, nonlinearity='tanh'), PyTorch's own kernel

Prints, in ms per training step (zero_grad(set_to_none), forward, backward,
step), medians of several repetitions after warm-up:
  BENCH model.rnn.torch_loop.t1 <ms> ms      the Python loop, 1 thread
  BENCH model.rnn.torch_loop.t1.min <ms> ms  its fastest repetition
  BENCH model.rnn.torch.t1 <ms> ms           nn.RNN, 1 thread
  BENCH model.rnn.torch.t1.min <ms> ms
  BENCH model.rnn.torch{,_loop}.t2 <ms> ms   the best of (intra-op, OpenBLAS)
                                              threads (2, 2), (2, 1), (1, 2)
Usage: rnn_torch.py [filter]  (runs for "", "models", "model", "model.rnn", "cf")
"""
import sys

FILTER = sys.argv[1] if len(sys.argv) > 1 else ""
if FILTER not in ("", "models", "model", "model.rnn", "cf"):
    sys.exit(0)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch_threads import report  # noqa: E402

T, B, I, H, O = 32, 32, 64, 128, 10


def build(fused):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(13)
    x = torch.randn(T, B, I, generator=g)
    y = torch.randn(T, B, O, generator=g)
    head = nn.Linear(H, O)
    loss_fn = nn.MSELoss()
    if fused:
        rnn = nn.RNN(I, H, nonlinearity="tanh")
        params = list(rnn.parameters()) + list(head.parameters())

        def forward():
            out, _ = rnn(x)
            return out
    else:
        k = 1.0 / H ** 0.5
        w_ih = nn.Parameter(torch.empty(I, H).uniform_(-k, k))
        w_hh = nn.Parameter(torch.empty(H, H).uniform_(-k, k))
        b = nn.Parameter(torch.empty(H).uniform_(-k, k))
        params = [w_ih, w_hh, b] + list(head.parameters())

        def forward():
            h = torch.zeros(B, H)
            hs = []
            for t in range(T):
                h = torch.tanh(torch.addmm(b, x[t], w_ih) + torch.mm(h, w_hh))
                hs.append(h)
            return torch.stack(hs)

    opt = torch.optim.SGD(params, lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(head(forward()), y)
        loss.backward()
        opt.step()
        return loss

    return step


def main():
    for name, fused in (("torch_loop", False), ("torch", True)):
        report(f"model.rnn.{name}", build(fused), 5, 15)


if __name__ == "__main__":
    main()
