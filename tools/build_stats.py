#!/usr/bin/env python3
"""kiln's build figures, as `BUILD <name> <value> <unit>` lines (./run build-stats).

  build_stats.py log BUILD_DIR [--top N]
      The edges of BUILD_DIR/.ninja_log, each as last built: how many, their
      seconds in all and by kind (library, kernels, CUDA, tests, links), and
      the N slowest. With -j2 on 2 cores an edge's seconds are its
      compiler's CPU time; with more jobs than cores they include waiting.
  build_stats.py headers SOURCE_ROOT HEADER...
      For each public header: how many of kiln's headers (and how many in
      all, system ones included) a host file that includes it reads, and
      their lines.
  build_stats.py budget SOURCE_ROOT HEADER:MAX...
      The same count of kiln headers for each HEADER; exits 1, naming the
      header and what it reads, when one reads more than MAX (a meson test,
      header_budget, so that a public header cannot grow unnoticed).
  build_stats.py host SOURCE_ROOT [--runs 3]
      CPU seconds of `c++ -O2` on examples/host_project/main.cc (includes
      kiln/kiln.h, builds and trains the seed model): the best of --runs.

The README ("Build figures") says what each line measures.
"""

import argparse
import os
import resource
import shlex
import subprocess
import sys
import time


def ninja_edges(log_path):
    """{output: seconds} of the newest build of each output recorded in a
    .ninja_log (v5). Ninja appends an entry per edge it runs and compacts
    the log now and then, so runs cannot be told apart; the newest entry of
    each output is what the tree holds now (after a cold build: that
    build's edges)."""
    edges = {}
    with open(log_path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            start, end, _mtime, output, _hash = line.rstrip("\n").split("\t")
            edges[output] = (int(end) - int(start)) / 1000
    return edges


def kind_of(output):
    name = os.path.basename(output)
    if ".cu." in name:
        return "cuda"
    if output.startswith("test/"):
        return "test" if name.endswith((".o", ".gch")) else "link"
    if not name.endswith((".o", ".gch")):
        return "link"
    return "kernel" if "kernels_" in name else "other"


def cmd_log(args):
    path = os.path.join(args.build_dir, ".ninja_log")
    if not os.path.exists(path):
        sys.exit(f"build_stats: {path} does not exist (build {args.build_dir} first)")
    edges = ninja_edges(path)
    print(f"BUILD build.edges {len(edges)} count")
    print(f"BUILD build.edge_seconds {sum(edges.values()):.1f} s")
    groups = {}
    for out, secs in edges.items():
        groups[kind_of(out)] = groups.get(kind_of(out), 0) + secs
    for kind in sorted(groups):
        print(f"BUILD build.edge_seconds.{kind} {groups[kind]:.1f} s")
    for out, secs in sorted(edges.items(), key=lambda e: -e[1])[:args.top]:
        print(f"BUILD build.slowest {secs:.1f} s {out}")


def include_list(source_root, header, cxx):
    """Every file the preprocessor reads for a TU that includes `header`."""
    cmd = [cxx, "-std=c++20", "-I", os.path.join(source_root, "include"), "-M", "-x", "c++", "-"]
    out = subprocess.run(cmd, input=f'#include "{header}"\n', capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"build_stats: {shlex.join(cmd)} failed:\n{out.stderr}")
    files = out.stdout.replace("\\\n", " ").split()[1:]
    return [os.path.normpath(f) for f in files if f != "-"]


def count_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def cmd_headers(args):
    include_root = os.path.abspath(os.path.join(args.source_root, "include")) + os.sep
    for header in args.header:
        files = include_list(args.source_root, header, args.cxx)
        own = [f for f in files if os.path.abspath(f).startswith(include_root)]
        key = header.removeprefix("kiln/").removesuffix(".h").replace("/", ".")
        print(f"BUILD headers.{key} {len(own)} count")
        print(f"BUILD headers.{key}.lines {sum(count_lines(f) for f in own)} lines")
        print(f"BUILD headers.{key}.all {len(files)} count")


def cmd_budget(args):
    include_root = os.path.abspath(os.path.join(args.source_root, "include")) + os.sep
    over = 0
    for spec in args.budget:
        header, sep, limit = spec.rpartition(":")
        if not sep or not limit.isdigit():
            sys.exit(f"build_stats: budget {spec!r} is not HEADER:MAX")
        files = include_list(args.source_root, header, args.cxx)
        own = [os.path.relpath(f, include_root) for f in files
               if os.path.abspath(f).startswith(include_root)]
        key = header.removeprefix("kiln/").removesuffix(".h").replace("/", ".")
        print(f"BUILD headers.{key} {len(own)} count")
        if len(own) > int(limit):
            over += 1
            print(f"build_stats: {header} reads {len(own)} kiln headers, more than its budget of "
                  f"{limit} (tools/build_stats.py budget, test/meson.build):\n  " + "\n  ".join(own),
                  file=sys.stderr)
    sys.exit(1 if over else 0)


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cmd_host(args):
    src = os.path.join(args.source_root, "examples", "host_project", "main.cc")
    cmd = [args.cxx, "-std=c++20", "-O2", "-I", os.path.join(args.source_root, "include"),
           "-c", src, "-o", os.devnull]
    best_cpu = best_wall = None
    for _ in range(args.runs):
        cpu0, wall0 = child_cpu(), time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True)
        cpu, wall = child_cpu() - cpu0, time.monotonic() - wall0
        if out.returncode != 0:
            sys.exit(f"build_stats: {shlex.join(cmd)} failed:\n{out.stderr}")
        best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
        best_wall = wall if best_wall is None else min(best_wall, wall)
    print(f"BUILD host.compile_O2 {best_cpu:.2f} s")
    print(f"BUILD host.compile_O2.wall {best_wall:.2f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("log")
    p.add_argument("build_dir")
    p.add_argument("--top", type=int, default=12)
    p.set_defaults(run=cmd_log)
    p = sub.add_parser("headers")
    p.add_argument("source_root")
    p.add_argument("header", nargs="+")
    p.set_defaults(run=cmd_headers)
    p = sub.add_parser("budget")
    p.add_argument("source_root")
    p.add_argument("budget", nargs="+", metavar="HEADER:MAX")
    p.set_defaults(run=cmd_budget)
    p = sub.add_parser("host")
    p.add_argument("source_root")
    p.add_argument("--runs", type=int, default=3)
    p.set_defaults(run=cmd_host)
    args = ap.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
