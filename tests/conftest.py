"""pytest wiring shared by tests/integration and tests/security (see testenv.py): markers that
name a component the run prepares itself, and the counts tests/run-all checks.

CORDON_TEST_COUNTS=FILE: at the end of the session, write the outcome counts as JSON
({"passed": N, "failed": N, "skipped": N, "deselected": N, "error": N, "skips": {reason: N}}), so
that tests/run-all can print every skip reason and refuse a pass whose passed count fell below
its floor (tests/floors.json).
"""

import json
import os

import pytest

import testenv


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_vm"):
        testenv.need_vm()


def _skip_reason(report):
    r = report.longrepr
    if isinstance(r, tuple) and len(r) == 3:
        return str(r[2]).removeprefix("Skipped: ")
    return str(r)


def pytest_terminal_summary(terminalreporter):
    path = os.environ.get("CORDON_TEST_COUNTS")
    if not path:
        return
    stats = terminalreporter.stats
    # A test with a failing teardown (the leak check) is reported twice: passed in its call and
    # errored in its teardown; count it as an error, not as passed.
    errored = {r.nodeid for r in stats.get("error", []) if getattr(r, "when", "") != "collect"}
    passed = {r.nodeid for r in stats.get("passed", []) if getattr(r, "when", "call") == "call"} - errored
    skips = {}
    for r in stats.get("skipped", []):
        reason = _skip_reason(r)
        skips[reason] = skips.get(reason, 0) + 1
    counts = {"passed": len(passed), "failed": len(stats.get("failed", [])), "error": len(stats.get("error", [])),
              "skipped": len(stats.get("skipped", [])), "deselected": len(stats.get("deselected", [])),
              "skips": skips}
    with open(path, "w") as f:
        json.dump(counts, f, indent=1, sort_keys=True)
