#!/usr/bin/env python3
"""PyTorch-eager peer of bench/cuda_bench.cc (`./run bench cuda`), on CUDA.

The same models, shapes, losses and optimizers as kiln's cuda.* figures:
  seed    x[16,16] -> Linear(16,1) -> MSE vs label[16,1], Adam(1e-3)
  mlp256  784-512-512-10 ReLU MLP, batch 256, cross-entropy, Adam(1e-3)
  gpt     the GPT of gpt_torch.py (its GPT class, the fastest of its
          variants), batch 16, seq 64, AdamW(3e-4, weight decay 0.01)
  gpt2s   GPT-2 small (vocab 50257, d 768, 12 heads, 12 pre-norm GELU
          blocks, seq 512, batch 8), AdamW(fused=True): fp32 with TF32 off
          (.f32), TF32 matmuls (.tf32), bf16 autocast (.amp_bf16); the loss
          read on the host every step, as kiln's; and each mode's peak
          device memory (torch.cuda.max_memory_allocated) over 3 steps
  attention  F.scaled_dot_product_attention forward and backward (autograd.grad
          of q, k, v), [8, 12, 512, 64], causal, bf16 and f32 (TF32 off):
          BENCH cuda.attention.fused.<dtype>.torch.fwd_bwd, in us; bf16 with
          the keys past 512, 448, ..., 64 masked too (a boolean attn_mask, the
          causal mask folded in): ...bf16.torch.padded_fwd_bwd; bf16 with
          ALiBi's bias as a float attn_mask [1, 12, 512, 512] (the causal
          mask folded in): cuda.attention.biased.bf16.torch.fwd_bwd; bf16
          with k and v of 4 heads (enable_gqa=True, PyTorch 2.5 or later):
          cuda.attention.gqa.bf16.torch.fwd_bwd; bf16 with dropout_p=0.1:
          cuda.attention.dropout.bf16.torch.fwd_bwd
  resnet18, mobilenet_v2  torchvision's networks layer for layer (written out
          here: the GPU machine may lack torchvision), batch 64 of 224x224
          images, 1000 classes, cross-entropy, SGD(0.01, momentum 0.9, fused
          where this torch has it), cudnn.benchmark on: .f32 (TF32 off),
          .tf32 (TF32 convolutions and matmuls: PyTorch's cuDNN default),
          .amp_bf16 (bf16 autocast), each the faster of NCHW and channels_last
          (a # line gives both), and amp's peak memory
each fed one fixed batch (on the device) every step. A step ends with
torch.cuda.synchronize() (kiln's step ends with the loss on the host). Prints
  BENCH cuda.<model>.torch.step <value> us|ms   median of 9 repetitions
Nothing without a CUDA device (a # line says so).
Usage: cuda_torch.py [filter]: "" or "cuda" runs every model; otherwise a
comma-separated list of groups as cuda_bench names them (cuda.gpt2s,
cuda.attention, cuda.resnet18, ...), each running its model's figures only
"""
import statistics
import sys
import time

FILTER = sys.argv[1] if len(sys.argv) > 1 else ""
if FILTER and not FILTER.startswith("cuda"):
    sys.exit(0)


def wanted(group):
    """Whether FILTER selects `group` ("cuda.gpt2s"): everything, the group,
    a family above it or a figure under it, as cuda_bench's selects()."""
    if FILTER in ("", "cuda"):
        return True
    return any(f == group or f.startswith(group + ".") or group.startswith(f + ".")
               for f in FILTER.split(","))


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
                                       batch_first=True, norm_first=True)
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


def conv_bn(cin, cout, k, stride=1, groups=1):
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(inplace=True),
                                  *conv_bn(cout, cout, 3))
        self.skip = (nn.Sequential(*conv_bn(cin, cout, 1, stride))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.skip(x))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [*conv_bn(cin, hidden, 1), nn.ReLU6(inplace=True)]
        layers += [*conv_bn(hidden, hidden, 3, stride, hidden), nn.ReLU6(inplace=True),
                   *conv_bn(hidden, cout, 1)]
        self.body, self.residual = nn.Sequential(*layers), stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def resnet18():
    layers, cin = [*conv_bn(3, 64, 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)], 64
    for cout in (64, 128, 256, 512):
        layers += [BasicBlock(cin, cout, 1 if cout == 64 else 2), BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


def mobilenet_v2():
    table = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
             (6, 160, 3, 2), (6, 320, 1, 1))
    layers, cin = [*conv_bn(3, 32, 3, 2), nn.ReLU6(inplace=True)], 32
    for expand, cout, repeats, stride in table:
        for i in range(repeats):
            layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
            cin = cout
    layers += [*conv_bn(cin, 1280, 1), nn.ReLU6(inplace=True), nn.AdaptiveAvgPool2d(1),
               nn.Flatten(), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers)


def cnn_step(net, mode, channels_last):
    """mode: f32 (TF32 off), tf32, amp_bf16 (autocast; TF32 on for what stays f32)."""
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = mode != "f32"
    torch.backends.cudnn.allow_tf32 = mode != "f32"
    torch.manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = globals()[net]().to(DEV, memory_format=fmt).train()
    try:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
    except (TypeError, RuntimeError):  # a torch without fused SGD
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(17)
    x = torch.randn(64, 3, 224, 224, generator=g).to(DEV).contiguous(memory_format=fmt)
    y = torch.randint(0, 1000, (64,), generator=g).to(DEV)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "amp_bf16"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def cnn_figures(net):
    for mode in ("f32", "tf32", "amp_bf16") if net == "resnet18" else ("f32", "amp_bf16"):
        best = None
        for cl in (False, True):
            t = timed(cnn_step(net, mode, cl), 5, reps=5)
            print(f"# cuda.{net}.{mode}.torch[{'channels_last' if cl else 'NCHW'}] {t * 1e3:.3f} ms")
            best = t if best is None else min(best, t)
        print(f"BENCH cuda.{net}.{mode}.torch.step {best * 1e3:.3f} ms")
        if mode == "amp_bf16":
            step = cnn_step(net, mode, True)
            torch.cuda.reset_peak_memory_stats()
            for _ in range(3):
                step()
            print(f"BENCH cuda.{net}.{mode}.torch.peak "
                  f"{torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
            del step
        torch.cuda.empty_cache()
        sys.stdout.flush()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False


PADDED_KEYS = (512, 448, 384, 320, 256, 192, 128, 64)


def attention_step(dtype, padded=False, biased=False, kv_heads=12, dropout_p=0.0):
    torch.manual_seed(3)
    shape, kv_shape = (8, 12, 512, 64), (8, kv_heads, 512, 64)
    q = torch.randn(shape, device=DEV, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(kv_shape, device=DEV, dtype=dtype, requires_grad=True) for _ in range(2))
    dout = torch.randn(shape, device=DEV, dtype=dtype)
    mask = None
    keys = torch.arange(512, device=DEV)
    if padded:  # [8, 1, 512, 512]: key j seen by row i when j <= i and j < the batch's count
        lengths = torch.tensor(PADDED_KEYS, device=DEV).view(8, 1, 1, 1)
        mask = (keys.view(1, 1, 1, 512) <= keys.view(1, 1, 512, 1)) & (keys.view(1, 1, 1, 512) < lengths)
    if biased:  # ALiBi: head h adds -2^(-8 (h + 1) / 12) * (i - j); -inf above the diagonal
        slopes = torch.exp2(-8.0 * torch.arange(1, 13, device=DEV) / 12).view(1, 12, 1, 1)
        distance = (keys.view(1, 1, 512, 1) - keys.view(1, 1, 1, 512)).float()
        bias = (-slopes * distance).masked_fill(distance < 0, float("-inf"))
        mask = bias.to(dtype)

    def step():
        if kv_heads != 12:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        elif dropout_p:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
        elif mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return torch.autograd.grad(out, (q, k, v), dout)
    return step


def gpt_figures():
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


def main():
    if wanted("cuda.seed"):
        print(f"BENCH cuda.seed.torch.step {timed(seed_step(), 200) * 1e6:.3f} us")
    if wanted("cuda.mlp256"):
        print(f"BENCH cuda.mlp256.torch.step {timed(mlp_step(256), 50) * 1e3:.4f} ms")
    if wanted("cuda.gpt"):
        gpt_figures()
    if wanted("cuda.gpt2s"):
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
    if wanted("cuda.attention"):
        torch.backends.cuda.matmul.allow_tf32 = False
        for name, dtype in (("bf16", torch.bfloat16), ("f32", torch.float32)):
            t = timed(attention_step(dtype), 20)
            print(f"BENCH cuda.attention.fused.{name}.torch.fwd_bwd {t * 1e6:.3f} us")
        t = timed(attention_step(torch.bfloat16, padded=True), 20)
        print(f"BENCH cuda.attention.fused.bf16.torch.padded_fwd_bwd {t * 1e6:.3f} us")
        t = timed(attention_step(torch.bfloat16, biased=True), 20)
        print(f"BENCH cuda.attention.biased.bf16.torch.fwd_bwd {t * 1e6:.3f} us")
        try:
            t = timed(attention_step(torch.bfloat16, kv_heads=4), 20)
            print(f"BENCH cuda.attention.gqa.bf16.torch.fwd_bwd {t * 1e6:.3f} us")
        except TypeError as e:  # a torch before 2.5 has no enable_gqa
            print(f"# cuda.attention.gqa.bf16.torch unavailable: {e}")
        t = timed(attention_step(torch.bfloat16, dropout_p=0.1), 20)
        print(f"BENCH cuda.attention.dropout.bf16.torch.fwd_bwd {t * 1e6:.3f} us")
    for net in ("resnet18", "mobilenet_v2"):
        if wanted("cuda." + net):
            cnn_figures(net)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
