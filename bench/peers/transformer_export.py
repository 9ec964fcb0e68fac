#!/usr/bin/env python3
"""Exports the real-size transformers kiln's CPU inference is benchmarked on.

Two models of the sizes people deploy, written as the Hugging Face models are
(so the exported graphs have the shapes an exported BERT or GPT-2 has), with
PyTorch's default initialization under a fixed seed:

  bert_base   BERT-base's encoder: token + position embeddings, LayerNorm,
              12 post-LN blocks (d 768, 12 heads, q / k / v projections,
              scores scaled by 1/8, softmax, FF 3072 with exact GELU),
              vocabulary 30522; input ids [batch, 128], output the last
              hidden state [batch, 128, 768]
  gpt2_small  GPT-2 small: token + position embeddings, 12 pre-LN causal
              blocks (d 768, 12 heads, one qkv projection, the causal mask
              added to the scaled scores, FF 3072 with tanh GELU), a final
              LayerNorm and the head tied to the token embedding,
              vocabulary 50257; input ids [batch, 256], output the logits
              [batch, 256, 50257]

exported by PyTorch's exporter (opset 13, inference mode, dynamic batch) as

  OUT_DIR/<name>/model.onnx
  OUT_DIR/<name>/test_data_set_0/input_0.pb    a batch-1 input
  OUT_DIR/<name>/test_data_set_0/output_0.pb   PyTorch's output for it

so `kiln-onnx run MODEL --data DIR` compares kiln with PyTorch. The files
are large (~0.45 GB each) and are not committed: `./run bench onnx` writes
them to build-release/transformer_models when Debian's python3-torch and
python3-onnx are installed. A model already there is kept.

Usage: /usr/bin/python3 bench/peers/transformer_export.py OUT_DIR [NAME...]
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# name: (vocab, d, heads, ff, layers, seq, causal)
SHAPES = {"bert_base": (30522, 768, 12, 3072, 12, 128, False),
          "gpt2_small": (50257, 768, 12, 3072, 12, 256, True)}


class BertBlock(nn.Module):
    """A post-LN encoder block as Hugging Face's BertLayer computes it."""

    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.dense, self.norm1 = nn.Linear(d, d), nn.LayerNorm(d, eps=1e-12)
        self.intermediate, self.output = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm2 = nn.LayerNorm(d, eps=1e-12)

    def split(self, x):
        b, l, d = x.shape
        return x.view(b, l, self.heads, d // self.heads).permute(0, 2, 1, 3)

    def forward(self, x):
        b, l, d = x.shape
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        o = torch.matmul(torch.softmax(s, dim=-1), v).permute(0, 2, 1, 3).reshape(b, l, d)
        x = self.norm1(x + self.dense(o))
        return self.norm2(x + self.output(F.gelu(self.intermediate(x))))


class Gpt2Block(nn.Module):
    """A pre-LN causal block as Hugging Face's GPT2Block computes it."""

    def __init__(self, d, heads, ff, seq):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, ff), nn.Linear(ff, d)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

    def attention(self, x):
        b, l, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(b, l, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads) + self.mask
        o = torch.matmul(torch.softmax(s, dim=-1), v)
        return self.c_proj(o.transpose(1, 2).reshape(b, l, d))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Transformer(nn.Module):
    def __init__(self, name):
        super().__init__()
        vocab, d, heads, ff, layers, seq, self.causal = SHAPES[name]
        self.tokens, self.positions = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.norm = nn.LayerNorm(d, eps=1e-12 if not self.causal else 1e-5)
        make = (lambda: Gpt2Block(d, heads, ff, seq)) if self.causal else (lambda: BertBlock(d, heads, ff))
        self.blocks = nn.ModuleList(make() for _ in range(layers))
        self.register_buffer("position_ids", torch.arange(seq).unsqueeze(0))

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(self.position_ids)
        if not self.causal:  # BERT normalizes the embeddings and returns the hidden state
            x = self.norm(x)
            for block in self.blocks:
                x = block(x)
            return x
        for block in self.blocks:
            x = block(x)
        return torch.matmul(self.norm(x), self.tokens.weight.t())


def export(out_dir, name):
    folder = os.path.join(out_dir, name)
    path = os.path.join(folder, "model.onnx")
    if os.path.exists(path):
        return
    from onnx import numpy_helper  # Debian's python3-onnx
    vocab, seq = SHAPES[name][0], SHAPES[name][5]
    output = "logits" if SHAPES[name][6] else "hidden"
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(7)
    model = Transformer(name).eval()
    with torch.no_grad():
        sample = torch.randint(0, vocab, (1, seq), generator=g, dtype=torch.int64)
        expected = model(sample)
        data = os.path.join(folder, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        torch.onnx.export(model, (sample,), path + ".part", opset_version=13,
                          do_constant_folding=True, input_names=["ids"], output_names=[output],
                          dynamic_axes={"ids": {0: "batch"}, output: {0: "batch"}})
    for fname, tensor, tname in (("input_0.pb", sample, "ids"), ("output_0.pb", expected, output)):
        with open(os.path.join(data, fname), "wb") as f:
            f.write(numpy_helper.from_array(tensor.numpy(), tname).SerializeToString())
    os.replace(path + ".part", path)
    print(f"wrote {folder}: input {tuple(sample.shape)}, output {tuple(expected.shape)}", file=sys.stderr)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for name in sys.argv[2:] or list(SHAPES):
        export(sys.argv[1], name)


if __name__ == "__main__":
    main()
