#!/usr/bin/env python3
"""Counts the real results of `./run test` and prints "N passed, N failed" last.

usage: test_summary.py BUILD_DIR FUZZ_RESULT MESON_RC [TSAN]
  FUZZ_RESULT: pass | fail | none (skipped)
  TSAN: the Catch2 XML report of the [exec] cases run under ThreadSanitizer,
        or fail (its build failed) or none (not run; the default)

Sources:
  - BUILD_DIR/meson-logs/testlog.json: one JSON object per meson test.
  - A meson test whose command has Catch2's XML reporter (`-r xml -o FILE`)
    counts each Catch2 test case in FILE; any other meson test counts as one.
  - The fuzz run counts as one; each test case of the TSan report counts.
Exit status: 0 when nothing failed, 1 otherwise.
"""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

PASS_RESULTS = {"OK", "EXPECTEDFAIL"}
SKIP_RESULTS = {"SKIP"}


def catch2_report(cmd):
    """The XML report path of a Catch2 command line, or None."""
    reporter, out = None, None
    for i, arg in enumerate(cmd):
        nxt = cmd[i + 1] if i + 1 < len(cmd) else None
        if arg in ("-r", "--reporter"):
            reporter = nxt
        elif arg.startswith("--reporter="):
            reporter = arg.split("=", 1)[1]
        elif arg in ("-o", "--out"):
            out = nxt
        elif arg.startswith("--out="):
            out = arg.split("=", 1)[1]
    if reporter and reporter.split("::")[0] == "xml" and out:
        return out
    return None


def describe_failure(case):
    """Lines saying why a Catch2 <TestCase> failed."""
    lines = []
    for el in case.iter():
        where = ""
        if el.get("filename"):
            where = f"{el.get('filename')}:{el.get('line')}: "
        if el.tag == "Expression" and el.get("success") == "false":
            if any(sub.tag in ("Exception", "FatalErrorCondition") for sub in el):
                continue  # an unexpected exception: its child element says it
            orig = (el.findtext("Original") or "").strip()
            expd = (el.findtext("Expanded") or "").strip()
            lines.append(f"  {where}{el.get('type')}( {orig} ) with expansion: {expd}")
        elif el.tag in ("Exception", "FatalErrorCondition", "Failure"):
            lines.append(f"  {where}{el.tag}: {(el.text or '').strip()}")
        elif el.tag == "Info":
            lines.append(f"    info: {(el.text or '').strip()}")
    result = case.find("OverallResult")
    if result is not None:
        for tag in ("StdOut", "StdErr"):
            text = (result.findtext(tag) or "").strip()
            if text:
                lines.append(f"  {tag.lower()}:\n" + "\n".join("    " + l for l in text.splitlines()))
    return lines


def count_catch2(name, report, meson_result):
    """(passed, failed) for one Catch2 binary, printing each failing case."""
    passed = failed = 0
    if not os.path.isfile(report):
        print(f"FAILED {name}: no Catch2 report {report} (meson result {meson_result})")
        return 0, 1
    try:
        root = ET.parse(report).getroot()
    except ET.ParseError as e:
        # A crash can leave the report cut short: count what completed, plus the crash.
        text = open(report, errors="replace").read()
        ok = len(re.findall(r'<OverallResult success="true"', text))
        bad = len(re.findall(r'<OverallResult success="false"', text))
        print(f"FAILED {name}: Catch2 report is cut short ({e}); the binary crashed "
              f"(meson result {meson_result}). See build/meson-logs/testlog.txt")
        return ok, bad + 1
    for case in root.iter("TestCase"):
        result = case.find("OverallResult")
        if result is not None and result.get("success") == "true":
            passed += 1
        else:
            failed += 1
            print(f"FAILED {name}: {case.get('name')}  "
                  f"[{case.get('filename')}:{case.get('line')}]")
            for line in describe_failure(case):
                print(line)
    if meson_result not in PASS_RESULTS and failed > 0:
        print(f"  ({name} ended with meson result {meson_result}: test cases after a crash "
              f"did not run)")
    if meson_result not in PASS_RESULTS and failed == 0:
        # Every case passed but the binary did not (crash at exit, timeout, no cases...).
        print(f"FAILED {name}: meson result {meson_result} although its test cases passed")
        failed += 1
    return passed, failed


def main():
    build, fuzz, meson_rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tsan = sys.argv[4] if len(sys.argv) > 4 else "none"
    passed = failed = skipped = 0
    log = os.path.join(build, "meson-logs", "testlog.json")
    tests = []
    if os.path.isfile(log):
        with open(log) as f:
            tests = [json.loads(line) for line in f if line.strip()]
    print()
    print("==> summary")
    for t in tests:
        name, result = t.get("name", "?"), t.get("result", "?")
        report = catch2_report(t.get("command") or [])
        if report is not None:
            p, fl = count_catch2(name, report, result)
            print(f"  {name}: Catch2, {p} test cases passed, {fl} failed")
            passed += p
            failed += fl
        elif result in PASS_RESULTS:
            passed += 1
            print(f"  {name}: passed")
        elif result in SKIP_RESULTS:
            skipped += 1
            print(f"  {name}: skipped")
        else:
            failed += 1
            print(f"FAILED {name}: {result} (its output is above, and in "
                  f"{build}/meson-logs/testlog.txt)")
    if not tests:
        print(f"no meson test results in {log}")
        if meson_rc != 0:
            failed += 1
    if fuzz == "pass":
        passed += 1
        print("  fuzz: passed")
    elif fuzz == "fail":
        failed += 1
        print("FAILED fuzz (see above)")
    else:
        print("  fuzz: skipped")
    if tsan == "fail":
        failed += 1
        print("FAILED tsan: the ThreadSanitizer build failed (see above)")
    elif tsan != "none":
        rc_file = tsan + ".rc"
        rc = open(rc_file).read().strip() if os.path.isfile(rc_file) else "missing"
        p, fl = count_catch2("tsan", tsan, "OK" if rc == "0" else f"exit status {rc}")
        print(f"  tsan: Catch2 under ThreadSanitizer, {p} test cases passed, {fl} failed")
        passed += p
        failed += fl
    else:
        print("  tsan: skipped")
    if meson_rc != 0 and failed == 0:
        print(f"FAILED meson test exited {meson_rc} although no test failed")
        failed += 1
    if skipped:
        print(f"  ({skipped} skipped)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
