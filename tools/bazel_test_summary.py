#!/usr/bin/env python3
"""Runs `bazel test`, echoes its output, and prints `N passed, N failed, N skipped` per test case.

"N passed, N failed" leads the line so readers of the older two-count form still match. Per-case
counts come from each target's test.xml; a case is skipped when it says so (gtest's
result="skipped" or a <skipped> element, GTEST_SKIP) or was never run (status="notrun"). A target without usable XML (failed to build,
timed out, no status) counts as one failure; a failing target whose cases all passed (a crash after
the tests) counts one extra failure. Exits with bazel's exit code.
"""
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

STATUS_RE = re.compile(
    r"^(//\S+)\s+(?:\(cached\)\s+)?"
    r"(PASSED|FAILED TO BUILD|FAILED|FLAKY|TIMEOUT|NO STATUS|SKIPPED|INCOMPLETE)\b")


def count_cases(xml_path):
    """Returns (passed, failed, skipped) for one test.xml, or None when it cannot be read."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return None
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif (case.find("skipped") is not None or case.get("result") == "skipped" or
              case.get("status") == "notrun"):
            skipped += 1
        else:
            passed += 1
    if passed + failed + skipped == 0:
        return None
    return passed, failed, skipped


def main(argv):
    bazel = os.environ.get("BAZEL", "bazel")
    cmd = [bazel, "test"] + (argv or ["//..."])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    targets = []
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        m = STATUS_RE.match(line.strip())
        if m:
            targets.append((m.group(1), m.group(2)))
    rc = proc.wait()

    testlogs = subprocess.run([bazel, "info", "bazel-testlogs"] + [a for a in argv if a.startswith("--config")],
                              capture_output=True, text=True).stdout.strip()
    passed = failed = skipped = 0
    for label, status in targets:
        if status == "SKIPPED":
            continue
        pkg, name = label[2:].split(":", 1)
        counts = None
        if status in ("PASSED", "FAILED", "FLAKY") and testlogs:
            counts = count_cases(os.path.join(testlogs, pkg, name, "test.xml"))
        if counts is None:
            if status == "PASSED":
                passed += 1
            else:
                failed += 1
            continue
        p, f, s = counts
        passed, failed, skipped = passed + p, failed + f, skipped + s
        if status == "FAILED" and f == 0:
            failed += 1
    if rc != 0 and not targets:
        failed += 1
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
