#!/usr/bin/env python3
"""One line for a test run: passed, failed and skipped per stage, with the reasons
for the skips grouped, after what each failed test printed about its failure (so that
the end of a CI log says why). Reads the JUnit files ctest writes (--output-junit).

usage: test_summary.py STAGE=FILE.xml [STAGE=FILE.xml ...]
(several files may share a stage; exits 1 when any test failed)"""
import collections
import re
import sys
import xml.etree.ElementTree as ET


def skip_reason(out):
    """The reason a skipped test printed: GoogleTest's line after ': Skipped', a
    script's 'skipped: ...', or ctest's own note."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped") and i + 1 < len(lines) and lines[i + 1].strip():
            return lines[i + 1].strip()
    for line in lines:
        m = re.search(r"\bskipped: (.*)", line)
        if m:
            return m.group(1).strip()
    return "no reason printed"


def failure_excerpt(out, limit=30):
    """What a failed test said about its failure: GoogleTest's failure blocks (the
    line naming the file and the lines after it), else the output's last lines."""
    lines = out.splitlines()
    picked = []
    for i, line in enumerate(lines):
        if re.search(r"(: Failure$|^\[  FAILED  \]|Expected|Which is|Value of|Actual|error:)", line.strip()):
            picked.extend(range(max(0, i - 1), min(len(lines), i + 6)))
    keep = sorted(set(picked)) or list(range(max(0, len(lines) - limit), len(lines)))
    return [lines[i] for i in keep][:limit]


def tally(files):
    passed, failed, skipped = 0, [], collections.Counter()
    # failed: (name, excerpt) pairs
    for path in files:
        root = ET.parse(path).getroot()
        suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
        for suite in suites:
            for case in suite.iter("testcase"):
                out = "".join(e.text or "" for e in case.iter("system-out"))
                status = case.get("status", "run")
                if case.find("failure") is not None or status == "fail":
                    failed.append((case.get("name"), failure_excerpt(out)))
                elif case.find("skipped") is not None or status in ("notrun", "disabled"):
                    skipped[skip_reason(out)] += 1
                else:
                    passed += 1
    return passed, failed, skipped


def main(args):
    stages = collections.OrderedDict()
    for arg in args:
        stage, _, path = arg.partition("=")
        stages.setdefault(stage, []).append(path)
    parts, failures = [], []
    for stage, files in stages.items():
        passed, failed, skipped = tally(files)
        for name, excerpt in failed:
            print(f"--- {stage}: {name}")
            print("\n".join("    " + line for line in excerpt))
        failures += [f"{stage}: {name}" for name, _ in failed]
        text = f"{stage}: {passed} passed, {len(failed)} failed, {sum(skipped.values())} skipped"
        if skipped:
            text += " (" + "; ".join(f"{n} {why}" for why, n in skipped.most_common()) + ")"
        parts.append(text)
    if failures:
        print("failed tests:\n  " + "\n  ".join(failures))
    print("test summary: " + " | ".join(parts))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
