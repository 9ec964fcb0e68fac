#!/usr/bin/env python3
"""PyTorch-eager peer of bench/cuda_bench.cc (`./run bench cuda`), on CUDA.

The same models, shapes, losses and optimizers as kiln's cuda.* figures:
  seed    x[16,16] -> Linear(16,1) -> MSE vs label[16,1], Adam(1e-3)
  mlp256  784-512-512-10 ReLU MLP, batch 256, cross-entropy, Adam(1e-3)
  gpt     the GPT of gpt_torch.py (its GPT class, the fastest of its
          variants), batch 16, seq 64, AdamW(3e-4, weight decay 0.01)
  gpt2s   GPT-2 small (vocab 50257, d 768, 12 heads, 12 post-norm GELU
          blocks, seq 512, batch 8), AdamW(fused=True): fp32 with TF32 off
          (.f32), TF32 matmuls (.tf32), bf16 autocast (.amp_bf16); the loss
          read on the host every step, as kiln's; and each mode's peak
          device memory (torch.cuda.max_memory_allocated) over 3 steps
  attention  F.scaled_dot_product_attention forward and backward (autograd.grad
          of q, k, v), [8, 12, 512, 64], causal, bf16 and f32 (TF32 off):
          BENCH cuda.attention.fused.<dtype>.torch.fwd_bwd, in us
each fed one fixed batch (on the device) every step. A step ends with
torch.cuda.synchronize() (kiln's step ends with the loss on the host). Prints
  BENCH cuda.<model>.torch.step <value> us|ms   median of 9 repetitions
Nothing without a CUDA device (a # line says so).
Usage: cuda_torch.py [filter]  (runs for "" and names starting with "cuda")
"""
import statistics
import sys
import time

FILTER = sys.argv[1] if len(sys.argv) > 1 else ""
if FILTER and not FILTER.startswith("cuda"):
    sys.exit(0)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if not torch.cuda.is_available():
    print("# cuda_torch.py: no CUDA device, nothing measured")
    sys.exit(0)

import gpt_torch  # noqa: E402  (its filter applies only when run as a script)

DEV = torch.device("cuda")


def timed(step, steps, reps=9, warm=10):
    """Per-step time (s) of each repetition of `steps` steps."""
    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        t.append((time.perf_counter() - t0) / steps)
    return statistics.median(t)


def trainer(model, opt, loss_fn, x, y):
    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def seed_step():
    torch.manual_seed(1)
    model = nn.Linear(16, 1).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 16, device=DEV), torch.randn(16, 1, device=DEV)
    return trainer(model, opt, F.mse_loss, x, y)


def mlp_step(batch):
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 784, device=DEV)
    y = torch.randint(0, 10, (batch,), device=DEV)
    return trainer(model, opt, F.cross_entropy, x, y)


def gpt_step(variant):
    torch.manual_seed(0)
    model = gpt_torch.GPT(variant).to(DEV).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    g = torch.Generator().manual_seed(12)
    seq = torch.randint(0, gpt_torch.VOCAB, (gpt_torch.BATCH, gpt_torch.SEQ + 1), generator=g)
    ids = seq[:, :-1].contiguous().to(DEV)
    label = seq[:, 1:].reshape(-1).contiguous().to(DEV)
    return trainer(model, opt,
                   lambda logits, y: F.cross_entropy(logits.reshape(-1, gpt_torch.VOCAB), y),
                   ids, label)


class GPT2S(nn.Module):
    V, D, H, FF, L, SEQ, BATCH = 50257, 768, 12, 3072, 12, 512, 8

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(self.V, self.D), nn.Embedding(self.SEQ, self.D)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(self.D, self.H, self.FF, dropout=0.0, activation="gelu",
                                       batch_first=True)
            for _ in range(self.L))
        self.norm, self.head = nn.LayerNorm(self.D), nn.Linear(self.D, self.V)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(self.SEQ))
        self.register_buffer("positions", torch.arange(self.SEQ))

    def forward(self, ids):
        x = self.tok(ids) + self.pos(self.positions)
        for blk in self.blocks:
            x = blk(x, src_mask=self.mask, is_causal=True)
        return self.head(self.norm(x))


def gpt2s_step(mode):
    """mode: f32 (TF32 off), tf32, amp_bf16 (autocast; TF32 on for what stays f32)."""
    torch.backends.cuda.matmul.allow_tf32 = mode != "f32"
    torch.backends.cudnn.allow_tf32 = mode != "f32"
    torch.manual_seed(0)
    model = GPT2S().to(DEV).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
    g = torch.Generator().manual_seed(12)
    seq = torch.randint(0, GPT2S.V, (GPT2S.BATCH, GPT2S.SEQ + 1), generator=g)
    ids = seq[:, :-1].contiguous().to(DEV)
    label = seq[:, 1:].reshape(-1).contiguous().to(DEV)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "amp_bf16"):
            loss = F.cross_entropy(model(ids).reshape(-1, GPT2S.V), label)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def attention_step(dtype):
    torch.manual_seed(3)
    shape = (8, 12, 512, 64)
    q, k, v = (torch.randn(shape, device=DEV, dtype=dtype, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device=DEV, dtype=dtype)

    def step():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad(out, (q, k, v), dout)
    return step


def main():
    print(f"BENCH cuda.seed.torch.step {timed(seed_step(), 200) * 1e6:.3f} us")
    print(f"BENCH cuda.mlp256.torch.step {timed(mlp_step(256), 50) * 1e3:.4f} ms")
    best = None
    for variant in ("layer", "manual", "sdpa"):
        try:
            t = timed(gpt_step(variant), 20)
        except Exception as e:  # a variant this torch cannot run is left out, said so
            print(f"# cuda.gpt.torch[{variant}] unavailable: {type(e).__name__}: {e}")
            continue
        print(f"# cuda.gpt.torch[{variant}] {t * 1e3:.4f} ms")
        best = t if best is None else min(best, t)
    if best is not None:
        print(f"BENCH cuda.gpt.torch.step {best * 1e3:.4f} ms")
    if FILTER in ("", "cuda") or FILTER.startswith("cuda.gpt2s"):
        for mode in ("f32", "tf32", "amp_bf16"):
            step = gpt2s_step(mode)
            print(f"BENCH cuda.gpt2s.{mode}.torch.step {timed(step, 5, reps=5) * 1e3:.3f} ms")
            torch.cuda.reset_peak_memory_stats()
            for _ in range(3):
                step()
            peak = torch.cuda.max_memory_allocated() / 2**20
            print(f"BENCH cuda.gpt2s.{mode}.torch.peak {peak:.1f} MiB")
            del step
            torch.cuda.empty_cache()
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True
    if FILTER in ("", "cuda") or FILTER.startswith("cuda.attention"):
        torch.backends.cuda.matmul.allow_tf32 = False
        for name, dtype in (("bf16", torch.bfloat16), ("f32", torch.float32)):
            t = timed(attention_step(dtype), 20)
            print(f"BENCH cuda.attention.fused.{name}.torch.fwd_bwd {t * 1e6:.3f} us")
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
