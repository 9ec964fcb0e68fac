#!/usr/bin/env python3
"""Compile budget test: a generated 300-op stress header must pass
`g++ -std=c++20 -fsyntax-only` in <= 3 s.

Generates the header with tools/gen_stress_ops.py into WORK_DIR, compiles a TU
that includes it (and calls its register/build functions) up to five times,
stopping at the first run within budget, and keeps the best run. Prints

  compile_budget: 300 ops in X.XX s (budget 3.00 s)

and exits 1 when X is over the budget (or the TU does not compile).

X is the compiler's CPU time (user + sys). On an idle machine that equals the
wall time of the one-threaded compiler; on a shared, loaded machine (other
builds, meson running tests in parallel) the wall time mostly measures the
wait for a core, so it is printed too but the budget is checked against
min(wall, cpu) of the best run. Even CPU time grows on this VM in noisy
spells (2.5 s and 4.0 s for the same header minutes apart; one spell held
five back-to-back compiles at 4.0 s), hence the retries, spaced by a growing
pause (10 s, 20 s, ...) so that they outlast such a spell. A run over budget
is also weighed by a calibration TU compiled right after it (the standard
and Boost.Hana headers, no kiln code): its time scaled by
CALIBRATION_SECONDS / the calibration's CPU time, when that is below 1. A
spell slows both compiles alike; a header regression slows only the stress
TU and stays over budget.

usage: compile_budget.py SOURCE_ROOT WORK_DIR [--ops 300] [--budget 3.0] [--runs 5]
"""

import argparse
import os
import resource
import subprocess
import sys
import time


# The calibration TU: the standard and Boost.Hana headers kiln's IR reads,
# no kiln code. CALIBRATION_SECONDS is its -fsyntax-only CPU time on the
# 2-core VM the budget was set on (AMD EPYC, g++ 12, quiet: 1.10-1.25 s;
# the stress TU 2.1-2.2 s there).
CALIBRATION_HEADERS = ["algorithm", "array", "atomic", "boost/hana.hpp", "functional", "map", "memory",
                       "optional", "ostream", "span", "string", "unordered_map", "vector"]
CALIBRATION_SECONDS = 1.10


def timed_compile(cmd, what):
    """(wall, cpu) seconds of one compile; exits 1 naming `what` when it fails."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.stdout.write(p.stdout + p.stderr)
        print(f"compile_budget: FAIL: {what} does not compile")
        sys.exit(1)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source_root")
    ap.add_argument("work_dir")
    ap.add_argument("--ops", type=int, default=300)
    ap.add_argument("--budget", type=float, default=3.0, help="seconds (default 3.0)")
    ap.add_argument("--runs", type=int, default=5,
                    help="compile up to this many times, stopping at the first run within "
                         "budget; keep the best (a loaded machine only adds time, so a header "
                         "regression stays over budget in every run)")
    ap.add_argument("--cxx", default="g++")
    args = ap.parse_args()

    root = os.path.abspath(args.source_root)
    work = os.path.abspath(args.work_dir)
    os.makedirs(work, exist_ok=True)
    header = os.path.join(work, "stress_ops.h")
    tu = os.path.join(work, "stress_ops_tu.cc")
    subprocess.run([sys.executable, os.path.join(root, "tools", "gen_stress_ops.py"),
                    "-n", str(args.ops), "-o", header], check=True)
    with open(tu, "w") as f:
        f.write('#include "stress_ops.h"\n\n'
                "// Uses the generated functions so nothing is left uninstantiated.\n"
                "void compile_budget_entry(kiln::Program& p) {\n"
                "  kiln::stress::register_stress_ops();\n"
                "  kiln::stress::build_stress_program(p);\n"
                "}\n")

    cmd = [args.cxx, "-std=c++20", "-fsyntax-only", f"-I{os.path.join(root, 'include')}",
           "-I/usr/include", f"-I{work}", tu]
    calib = os.path.join(work, "calibration_tu.cc")
    with open(calib, "w") as f:
        f.write("".join(f"#include <{h}>\n" for h in CALIBRATION_HEADERS))
    calib_cmd = [args.cxx, "-std=c++20", "-fsyntax-only", "-I/usr/include", calib]
    print("compile_budget: " + " ".join(cmd))
    best = None  # (measure, wall, cpu)
    for i in range(args.runs):
        if i > 0:
            time.sleep(10 * i)
        wall, cpu = timed_compile(cmd, f"the {args.ops}-op stress TU")
        m = min(wall, cpu)
        note = ""
        if m > args.budget:  # a slow machine, or a slow spell: weigh it by the calibration TU
            _, calib_cpu = timed_compile(calib_cmd, "the calibration TU")
            m *= min(1.0, CALIBRATION_SECONDS / calib_cpu)
            note = f", calibration TU {calib_cpu:.2f} s (reference {CALIBRATION_SECONDS:.2f} s) -> {m:.2f} s"
        print(f"compile_budget: run {i + 1}: wall {wall:.2f} s, cpu {cpu:.2f} s "
              f"(load average {os.getloadavg()[0]:.1f}){note}")
        if best is None or m < best[0]:
            best = (m, wall, cpu)
        if m <= args.budget:
            break

    measured, wall, cpu = best
    print(f"compile_budget: {args.ops} ops in {measured:.2f} s (budget {args.budget:.2f} s)"
          f" [best run: wall {wall:.2f} s, cpu {cpu:.2f} s]")
    if measured > args.budget:
        print(f"compile_budget: FAIL: over budget by {measured - args.budget:.2f} s; profile with "
              f"`{' '.join(cmd[:3])} -ftime-report ...`")
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
