#!/usr/bin/env python3
"""Writes the ONNX models kiln's importer is tested and benchmarked on.

The LeNet-5 of lenet_torch.py and the char-transformer GPT of gpt_torch.py
(its hand-written block, the form kiln's own GPT has), exported by PyTorch's
own exporter (torch.onnx.export, opset 13) in inference mode with a dynamic
batch axis, each beside one data set in ONNX's backend-test layout:

  test/onnx/models/<name>/model.onnx
  test/onnx/models/<name>/test_data_set_0/input_0.pb   a sample input
  test/onnx/models/<name>/test_data_set_0/output_0.pb  PyTorch's output for it

so `kiln-onnx run MODEL --data DIR` and the tests compare kiln with PyTorch
without PyTorch installed. The weights are PyTorch's default initialization
under a fixed seed; the files are committed (LeNet ~0.3 MB, GPT ~1.8 MB).
Needs Debian's python3-torch and python3-onnx (for the TensorProto files).

Usage: /usr/bin/python3 bench/peers/onnx_export.py [OUT_DIR]
       (OUT_DIR defaults to test/onnx/models next to this repository's root)
"""
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "test", "onnx", "models")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.argv = sys.argv[:1] + ["model"]  # the peers read a benchmark filter from argv[1] when imported
import gpt_torch  # noqa: E402
from lenet_torch import lenet  # noqa: E402


def write(name, model, sample, input_name, output_name):
    from onnx import numpy_helper  # Debian's python3-onnx; only needed here
    folder = os.path.join(OUT, name)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    model.eval()
    with torch.no_grad():
        expected = model(sample)
        torch.onnx.export(model, (sample,), os.path.join(folder, "model.onnx"),
                          opset_version=13, do_constant_folding=True,
                          input_names=[input_name], output_names=[output_name],
                          dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}})
    for fname, tensor, tname in (("input_0.pb", sample, input_name),
                                 ("output_0.pb", expected, output_name)):
        proto = numpy_helper.from_array(tensor.numpy(), tname)
        with open(os.path.join(data, fname), "wb") as f:
            f.write(proto.SerializeToString())
    print(f"wrote {folder}: input {tuple(sample.shape)}, output {tuple(expected.shape)}")


def main():
    g = torch.Generator().manual_seed(21)
    write("lenet", lenet(), torch.randn(8, 1, 28, 28, generator=g), "image", "logits")
    torch.manual_seed(0)
    gpt = gpt_torch.GPT("manual")
    ids = torch.randint(0, gpt_torch.VOCAB, (2, gpt_torch.SEQ), generator=g, dtype=torch.int64)
    write("gpt", gpt, ids, "ids", "logits")


if __name__ == "__main__":
    main()
