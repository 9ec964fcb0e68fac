#!/usr/bin/env python3
"""Exports the real CNNs kiln's CPU inference is benchmarked on to ONNX.

torchvision's resnet18, mobilenet_v2, efficientnet_b0, shufflenet_v2_x0_5 and
convnext_tiny with random weights under a fixed seed, their batch-norm
running statistics made non-trivial (mean ~ N(0, 0.1), var ~ U(0.5, 1.5)),
exported by PyTorch's exporter (opset 13, inference mode, dynamic batch) as

  OUT_DIR/<name>/model.onnx
  OUT_DIR/<name>/test_data_set_0/input_0.pb    a batch-2 224x224 input
  OUT_DIR/<name>/test_data_set_0/output_0.pb   PyTorch's output for it

so `kiln-onnx run MODEL --data DIR` compares kiln with PyTorch. The files are
large (resnet18 45 MB, convnext_tiny 110 MB) and are not committed: `./run
bench onnx` writes them to build-release/cnn_models when Debian's
python3-torchvision and python3-onnx are installed. A model already there is
kept.

Usage: /usr/bin/python3 bench/peers/cnn_export.py OUT_DIR [NAME...]
"""
import os
import sys

import torch
import torchvision

MODELS = ["resnet18", "mobilenet_v2", "efficientnet_b0", "shufflenet_v2_x0_5", "convnext_tiny"]


def randomize_norm_statistics(model, g):
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)


def export(out_dir, name):
    folder = os.path.join(out_dir, name)
    path = os.path.join(folder, "model.onnx")
    if os.path.exists(path):
        return
    from onnx import numpy_helper  # Debian's python3-onnx
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(7)
    model = getattr(torchvision.models, name)().eval()
    with torch.no_grad():
        randomize_norm_statistics(model, g)
        sample = torch.randn(2, 3, 224, 224, generator=g)
        expected = model(sample)
        data = os.path.join(folder, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        torch.onnx.export(model, (sample,), path + ".part", opset_version=13,
                          do_constant_folding=True, input_names=["image"],
                          output_names=["logits"],
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    for fname, tensor, tname in (("input_0.pb", sample, "image"),
                                 ("output_0.pb", expected, "logits")):
        with open(os.path.join(data, fname), "wb") as f:
            f.write(numpy_helper.from_array(tensor.numpy(), tname).SerializeToString())
    os.replace(path + ".part", path)
    print(f"wrote {path}", file=sys.stderr)


def main():
    out_dir = sys.argv[1]
    for name in sys.argv[2:] or MODELS:
        export(out_dir, name)


if __name__ == "__main__":
    main()
