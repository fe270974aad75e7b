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

import suitelock
import testenv


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """CORDON_TEST_PHASE=vm: only the tests that boot guests (marked needs_vm); =rest: only the
    others. tests/run-all runs a pass in these two parts so that one pass's guests (one CPU of
    TCG each) overlap the other pass's tests. Not reported as deselected: the parts' counts add
    up to the whole pass's (tests/counts.py). First, so that a deselection below is reported
    by the one part that holds the test."""
    phase = os.environ.get("CORDON_TEST_PHASE")
    if phase not in (None, "", "vm", "rest"):
        raise pytest.UsageError(f"CORDON_TEST_PHASE={phase!r}: vm or rest")
    if phase:
        items[:] = [i for i in items if (i.get_closest_marker("needs_vm") is not None) == (phase == "vm")]


def pytest_configure(config):
    # A shell without job control starts background jobs with SIGINT and SIGQUIT ignored, and every
    # cordon the tests start would inherit that: a SIGINT before `cordon run` blocks its signals
    # would then vanish (test_lifecycle.py saw "still running 5s later" from `run-all &`). The tests
    # expect what a terminal gives: the default disposition, which exec passes on.
    import signal
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def suite_lock(request):
    """The room lock of suitelock.py for the whole test: shared, or exclusive for a test marked
    `serial`. integration/conftest.py's no_leaks takes it exclusively again for its check."""
    lk = suitelock.lock()
    serial = request.node.get_closest_marker("serial") is not None
    lk.exclusive() if serial else lk.shared()
    request.node.cordon_serial = serial
    yield lk
    lk.release()


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
