#!/usr/bin/env python3
"""Fails when a file of one of kiln's layers includes a header of a layer
above it (DESIGN.md, "Layers and folders": a layer includes only layers
below it, and its own).

A file's layer is its folder under include/kiln/, src/ or kernels/
(kernels/* and src/kernel/ are the `kernel` layer). Prints each offending
include as FILE:LINE: LAYER includes HEADER (layer L) and exits 1; prints
"layers: N files, every include runs downward" and exits 0 otherwise.

usage: check_layers.py SOURCE_ROOT
"""

import os
import re
import sys

# Bottom to top.
LAYERS = ["support", "ir", "dialect", "runtime", "kernel", "passes", "exec", "frontend", "io",
          "onnx"]
RANK = {name: k for k, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"kiln/([a-z_]+)/')
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")


def layer_of(rel):
    parts = rel.split(os.sep)
    if parts[0] == "include" and len(parts) > 3 and parts[1] == "kiln":
        return parts[2]
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] == "kernels":
        return "kernel"
    return None


def files_of(root):
    for top in ("include/kiln", "src", "kernels"):
        for dirpath, _dirs, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    bad, checked = [], 0
    for rel in files_of(root):
        layer = layer_of(rel)
        if layer not in RANK:
            continue
        checked += 1
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m and m.group(1) in RANK and RANK[m.group(1)] > RANK[layer]:
                    header = line.split('"')[1]
                    bad.append(f"{rel}:{lineno}: {layer} includes {header} (layer {m.group(1)})")
    for line in bad:
        print(line)
    if bad:
        print(f"layers: {len(bad)} includes run upward (order, bottom to top: "
              f"{' < '.join(LAYERS)})")
        return 1
    print(f"layers: {checked} files, every include runs downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
