#!/usr/bin/env python3
"""Compile-fail checks: a method that an interface requires, when
missing, is a compile error.

usage: compile_fail.py SOURCE_ROOT FILE.cc:EXPECTED [FILE.cc:EXPECTED ...]

For each FILE (relative to SOURCE_ROOT), runs `g++ -std=c++20 -fsyntax-only`
twice:
  - with -DKILN_COMPILE_FAIL_FIXED, where the file repairs its defect: must
    compile (so the failure below comes from the defect, not a typo or a
    missing include);
  - as is: must FAIL, with EXPECTED (the static_assert text) in the errors.
Exits 1 if any check does not hold.
"""

import os
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    root = os.path.abspath(sys.argv[1])
    base = ["g++", "-std=c++20", "-fsyntax-only", f"-I{os.path.join(root, 'include')}",
            "-I/usr/include"]
    failures = 0
    for spec in sys.argv[2:]:
        rel, expected = spec.split(":", 1)
        path = os.path.join(root, rel)
        fixed = subprocess.run(base + ["-DKILN_COMPILE_FAIL_FIXED", path],
                               capture_output=True, text=True)
        if fixed.returncode != 0:
            sys.stdout.write(fixed.stderr[-4000:])
            print(f"compile_fail: FAIL: {rel} with -DKILN_COMPILE_FAIL_FIXED does not compile; "
                  "the check would not prove anything")
            failures += 1
            continue
        bad = subprocess.run(base + [path], capture_output=True, text=True)
        if bad.returncode == 0:
            print(f"compile_fail: FAIL: {rel} compiled, but it must not")
            failures += 1
        elif expected not in bad.stderr:
            sys.stdout.write(bad.stderr[-4000:])
            print(f"compile_fail: FAIL: {rel} failed to compile, but without \"{expected}\"")
            failures += 1
        else:
            line = next(l for l in bad.stderr.splitlines() if expected in l)
            print(f"compile_fail: ok: {rel} is rejected: {line.strip()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
