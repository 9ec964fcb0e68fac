#!/usr/bin/env python3
"""Fails when a Catch2 test case or section name would crash Catch2 2.13's
console reporter as it prints the name (for a failure, or with -s): the
reporter indents the wrapped name to just past its first ": ", and asserts
(m_width > m_indent) when that is past the 79-column console, so a failing
test would abort the whole run instead of reporting.

Reads TEST_CASE("..." "...") and SECTION("...") names (adjacent string
literals joined) in test/**/*.cc. Prints each offending name as
FILE:LINE: name's ": " at column N (must be < LIMIT) and exits 1; prints
"test names: N names print" and exits 0 otherwise.

usage: check_test_names.py SOURCE_ROOT
"""

import os
import re
import sys

CONSOLE_WIDTH = 79  # CATCH_CONFIG_CONSOLE_WIDTH (80) - 1
# The first ": " must start before this column: the name's indent (a test
# case 0, a section 2) plus the ": " itself stay inside the console.
LIMIT = {"TEST_CASE": CONSOLE_WIDTH - 2, "SECTION": CONSOLE_WIDTH - 2 - 2}
NAMED = re.compile(r'\b(TEST_CASE|SECTION)\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def main():
    root = sys.argv[1]
    bad, count = [], 0
    for folder, _, files in os.walk(os.path.join(root, "test")):
        for f in sorted(files):
            if not f.endswith(".cc"):
                continue
            path = os.path.join(folder, f)
            text = open(path, encoding="utf-8").read()
            for m in NAMED.finditer(text):
                name = "".join(LITERAL.findall(m.group(2)))
                count += 1
                at, limit = name.find(": "), LIMIT[m.group(1)]
                if at >= limit:
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append(f"{os.path.relpath(path, root)}:{line}: name's \": \" at column {at} "
                               f"(must be < {limit}): {name[:60]}...")
    for b in bad:
        print(b)
    if bad:
        return 1
    print(f"test names: {count} names print")
    return 0


if __name__ == "__main__":
    sys.exit(main())
