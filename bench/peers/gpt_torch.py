#!/usr/bin/env python3
"""PyTorch-eager peer of bench/model_bench.cc's GPT (`./run bench models`).

The same model, shapes, loss and optimizer as kiln's model.gpt: vocab 96,
d_model 128, 4 heads, 2 pre-LN causal transformer blocks (FF 512, GELU, no
dropout), learned token + position embeddings, final LayerNorm, linear head;
seq 64, batch 16; cross-entropy over [B*L, 96] logits; AdamW(3e-4,
weight_decay 0.01); one random but fixed batch fed every step.

torch 1.13 (Debian's) has no public F.scaled_dot_product_attention, so the
block is built three ways and the fastest is the peer's number:
  layer   nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, activation='gelu',
          batch_first=True, norm_first=True) with a float causal mask
  manual  a hand-written block: fused qkv Linear, q·kᵀ·scale + causal mask,
          softmax, ·v, out Linear; FF Linear, GELU, Linear
  sdpa    the hand-written block with 1.13's private
          F._scaled_dot_product_attention(..., is_causal=True)
Prints, in ms per training step, medians of several repetitions after warm-up:
  BENCH model.gpt.torch.t1 <ms> ms   the fastest variant, torch.set_num_threads(1), OpenBLAS at 1
  BENCH model.gpt.torch.t1.min <ms> ms  the fastest single step of any variant at 1 thread
  BENCH model.gpt.torch.t2 <ms> ms   the fastest variant and (intra-op, OpenBLAS) threads of
                                     (2, 2), (2, 1), (1, 2)
and every variant and setting as a # line. Debian's torch calls OpenBLAS
(pthreads build) for its GEMMs, whose thread count torch.set_num_threads
does not set: it is set through ctypes (torch_threads.py).

model.gpt_d512 (kiln's model_bench model.gpt_d512): the same GPT at vocab
8192, d_model 512, 8 heads, FF 2048, 4 blocks, seq 128, batch 8, as the
sdpa variant (the fastest there), in f32 and under CPU autocast in bf16
(oneDNN's bf16 matmuls), the best of the thread settings above for t2:
  BENCH model.gpt_d512.torch.t1, .t2, model.gpt_d512.amp_bf16.torch.t1, .t2  ms
Usage: gpt_torch.py [filter]  (runs for "", "models", "model", "model.gpt",
"model.gpt_d512")
"""
import math
import os
import statistics
import sys
import time

FILTER = sys.argv[1] if len(sys.argv) > 1 else ""
if __name__ == "__main__" and FILTER not in ("", "models", "model", "model.gpt", "model.gpt_d512"):
    sys.exit(0)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch_threads import set_threads, time_steps  # noqa: E402
import torch.nn.functional as F  # noqa: E402

VOCAB, D, HEADS, FF, LAYERS, SEQ, BATCH = 96, 128, 4, 512, 2, 64, 16
TINY = (VOCAB, D, HEADS, FF, LAYERS, SEQ, BATCH)
D512 = (8192, 512, 8, 2048, 4, 128, 8)


class Block(nn.Module):
    """Pre-LN causal block, as kiln's TransformerEncoderLayer(x, causal=true)."""

    def __init__(self, use_sdpa, shape=TINY):
        super().__init__()
        _, d, self.heads, ff, _, seq, _ = shape
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.linear1, self.linear2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.use_sdpa = use_sdpa
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        self.register_buffer("mask", mask)

    def attention(self, x):
        b, l, d = x.shape
        q, k, v = self.qkv(x).view(b, l, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        if self.use_sdpa:
            o = F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]
        else:
            s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads)) + self.mask
            o = torch.matmul(torch.softmax(s, dim=-1), v)
        return self.out(o.transpose(1, 2).reshape(b, l, d))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self, variant, shape=TINY):
        super().__init__()
        vocab, d, heads, ff, layers, seq, _ = shape
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.variant = variant
        if variant == "layer":
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
                for _ in range(layers))
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))
        else:
            self.blocks = nn.ModuleList(Block(variant == "sdpa", shape) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)
        self.register_buffer("positions", torch.arange(seq))

    def forward(self, ids):
        x = self.tok(ids) + self.pos(self.positions)
        for blk in self.blocks:
            x = blk(x, src_mask=self.mask) if self.variant == "layer" else blk(x)
        return self.head(self.norm(x))


def build(variant, shape=TINY, amp=False):
    """One training step of the GPT (`amp`: its forward under CPU autocast in bf16)."""
    vocab, _, _, _, _, seq_len, batch = shape
    torch.manual_seed(0)
    model = GPT(variant, shape)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    g = torch.Generator().manual_seed(12)
    seq = torch.randint(0, vocab, (batch, seq_len + 1), generator=g, dtype=torch.int64)
    ids, label = seq[:, :-1].contiguous(), seq[:, 1:].reshape(-1).contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            logits = model(ids)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), label)
        loss.backward()
        opt.step()
        return loss

    return step


def main_d512():
    """model.gpt_d512 in f32 and amp_bf16: t1, and t2 as the best thread setting."""
    steps = {"": build("sdpa", D512), ".amp_bf16": build("sdpa", D512, amp=True)}
    settings = {"t1": (1, 1), "t2": (2, 2), "t2.intra2_blas1": (2, 1), "t2.intra1_blas2": (1, 2)}
    samples = {(m, k): [] for m in steps for k in settings}
    for _ in range(2):
        for m, step in steps.items():
            for k, (intra, blas) in settings.items():
                set_threads(intra, blas)
                samples[(m, k)] += time_steps(step, 1, 3, warm=2)
                set_threads(1, 1)
                time.sleep(0.25)
    for m in steps:
        med = {k: statistics.median(samples[(m, k)]) for k in settings}
        for k, v in med.items():
            print(f"# model.gpt_d512{m}.torch.{k}: median {v:.1f} ms")
        print(f"BENCH model.gpt_d512{m}.torch.t1 {med['t1']:.3f} ms")
        print(f"BENCH model.gpt_d512{m}.torch.t2 {min(v for k, v in med.items() if k != 't1'):.3f} ms")
    sys.stdout.flush()


def main():
    variants = ["layer", "manual", "sdpa"]
    steps = {}
    for v in variants:
        try:
            steps[v] = build(v)
            set_threads(1, 1)
            losses = [float(steps[v]().detach()) for _ in range(20)]
            print(f"# model.gpt.torch[{v}] loss over 20 steps: " +
                  " ".join(f"{l:.4f}" for l in losses[::4] + [losses[-1]]))
        except Exception as e:  # a variant 1.13 cannot run is left out, said so
            print(f"# model.gpt.torch[{v}] unavailable: {type(e).__name__}: {e}")
            steps.pop(v, None)
    settings = {"t1": (1, 1), "t2": (2, 2), "t2.intra2_blas1": (2, 1), "t2.intra1_blas2": (1, 2)}
    samples = {(v, k): [] for v in steps for k in settings}
    for _ in range(3):
        for v, step in steps.items():
            for k, (intra, blas) in settings.items():
                set_threads(intra, blas)
                samples[(v, k)] += time_steps(step, 1, 7, warm=5)
                set_threads(1, 1)
                time.sleep(0.25)  # OpenBLAS's threads spin a while after their last GEMM
    med = {key: statistics.median(s) for key, s in samples.items()}
    for (v, k), m in med.items():
        print(f"# model.gpt.torch[{v}].{k} (intra-op {settings[k][0]}, OpenBLAS {settings[k][1]}): "
              f"median {m:.3f} ms, min {min(samples[(v, k)]):.3f} ms")
    best1 = min((key for key in med if key[1] == "t1"), key=lambda key: med[key])
    best2 = min((key for key in med if key[1].startswith("t2")), key=lambda key: med[key])
    print(f"BENCH model.gpt.torch.t1 {med[best1]:.3f} ms")
    print(f"BENCH model.gpt.torch.t1.min {min(min(samples[(v, 't1')]) for v in steps):.3f} ms")
    print(f"BENCH model.gpt.torch.t2 {med[best2]:.3f} ms")
    print(f"# model.gpt.torch.t1 is [{best1[0]}], .t2 is [{best2[0]}].{best2[1]} "
          f"(torch {torch.__version__}, GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')})")
    sys.stdout.flush()


if __name__ == "__main__":
    if FILTER != "model.gpt_d512":
        main()
    if FILTER in ("", "models", "model", "model.gpt_d512"):
        main_d512()
