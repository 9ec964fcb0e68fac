#!/usr/bin/env python3
"""Checks that ninja knows the headers each CUDA object of a build includes.

usage: check_cuda_deps.py SOURCE_ROOT BUILD_DIR [--forbid PREFIX...]

Every object of build.ninja's cuda_COMPILER edges must have dependencies
recorded in ninja's log (`ninja -t deps`) that name at least one header of
the source tree; else ninja would not rebuild the object when such a header
changes. They are recorded only when nvcc writes a dependency file, which
Debian's meson (1.0.1) does not ask it for: ./run makes meson's CUDA compiler
tools/nvcc_with_depfile, which does. Run after a build (meson test builds
first). Prints one line per failing object; exit status 1 when any fails.

With --forbid, each object must also read no header whose path below
SOURCE_ROOT starts with one of the PREFIXes (the IR's headers, tensor.h: the
.cu files take device pointers, not tensors, so that a change to those
recompiles no CUDA object).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

HEADER_SUFFIXES = (".h", ".hpp", ".cuh")


def cuda_objects(build_dir):
    with open(os.path.join(build_dir, "build.ninja"), encoding="utf-8") as f:
        return re.findall(r"^build ([^:\s]+): cuda_COMPILER ", f.read(), re.M)


def recorded_deps(build_dir, objects):
    """{object: [dependency paths]}, or {object: None} where none are recorded."""
    ninja = shutil.which("ninja") or "ninja"
    out = subprocess.run([ninja, "-C", build_dir, "-t", "deps", *objects],
                         check=True, capture_output=True, text=True).stdout
    deps, current = {}, None
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            target, _, rest = line.partition(": ")
            current = target
            deps[target] = None if "deps not found" in rest else []
        elif current is not None and deps[current] is not None:
            deps[current].append(line.strip())
    return deps


def forbidden_headers(headers, source_root, build_dir, prefixes):
    rel = [os.path.relpath(os.path.realpath(os.path.join(build_dir, h)), source_root) for h in headers]
    return [r for r in rel if r.startswith(tuple(prefixes))]


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("source_root")
    ap.add_argument("build_dir")
    ap.add_argument("--forbid", nargs="+", default=[], metavar="PREFIX")
    args = ap.parse_args()
    source_root, build_dir, forbid = os.path.realpath(args.source_root), args.build_dir, args.forbid
    objects = cuda_objects(build_dir)
    if not objects:
        print(f"{build_dir}/build.ninja compiles no CUDA")
        return 1
    deps = recorded_deps(build_dir, objects)
    failed = 0
    for obj in objects:
        listed = deps.get(obj)
        if listed is None:
            print(f"FAIL {obj}: ninja has no dependencies recorded (not built, or built without a depfile)")
            failed += 1
            continue
        headers = [d for d in listed if d.endswith(HEADER_SUFFIXES) and
                   os.path.realpath(os.path.join(build_dir, d)).startswith(source_root + os.sep)]
        if not headers:
            print(f"FAIL {obj}: its {len(listed)} recorded dependencies name no header of "
                  f"{source_root} (nvcc wrote no depfile: is meson's CUDA compiler "
                  "tools/nvcc_with_depfile? ./run sets that up)")
            failed += 1
        elif bad := forbidden_headers(headers, source_root, build_dir, forbid):
            print(f"FAIL {obj}: reads {', '.join(bad)} (forbidden: {', '.join(forbid)})")
            failed += 1
        else:
            print(f"ok   {obj}: {len(headers)} headers of the source tree, e.g. {headers[0]}")
    what = "headers recorded" + (", none forbidden" if forbid else "")
    print(f"{len(objects) - failed} of {len(objects)} CUDA objects pass ({what})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
