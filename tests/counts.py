#!/usr/bin/env python3
"""The end of tests/run-all: every pass's counts, every skip reason with its count, and a check of
each pass's passed count against its floor in tests/floors.json — so that a harness change that
makes tests vanish (a skip, a deselection, a module no longer collected) cannot go green.

usage: tests/counts.py FLOORS 'NAME=FILE[+FILE…]' …
FILE: what tests/conftest.py wrote for a pytest pass (CORDON_TEST_COUNTS), or a meson testlog.json.
A pass run in parts (run-all's phases, CORDON_TEST_PHASE) names each part's file: they are summed.
Exit 1 when a pass has no counts, failed tests, or fewer passed than its floor. Raise a floor
whenever tests are added (the table says by how much a pass is above it).
"""

import json
import sys


def read_counts(path):
    with open(path) as f:
        text = f.read()
    try:
        data = json.loads(text)
        if isinstance(data, dict) and "passed" in data:
            return data
    except ValueError:
        pass
    # meson's testlog.json: one JSON object per test
    c = {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "deselected": 0, "skips": {}}
    for line in text.splitlines():
        if not line.strip():
            continue
        t = json.loads(line)
        res = t.get("result")
        if res in ("OK", "EXPECTEDFAIL"):
            c["passed"] += 1
        elif res == "SKIP":
            c["skipped"] += 1
            reason = f"meson test {t.get('name')}: skipped (exit 77)"
            c["skips"][reason] = c["skips"].get(reason, 0) + 1
        else:
            c["failed"] += 1
    return c


def read_all(paths):
    total = {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "deselected": 0, "skips": {}}
    for p in paths.split("+"):
        c = read_counts(p)
        for k in ("passed", "failed", "error", "skipped", "deselected"):
            total[k] += c[k]
        for reason, n in c["skips"].items():
            total["skips"][reason] = total["skips"].get(reason, 0) + n
    return total


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        floors = json.load(f)
    bad = []
    rows = []
    skips = {}
    for arg in argv[2:]:
        name, _, path = arg.partition("=")
        floor = floors.get(name)
        try:
            c = read_all(path)
        except (OSError, ValueError) as e:
            bad.append(f"{name}: no counts ({e})")
            rows.append((name, "-", "-", "-", "-", "-", floor))
            continue
        rows.append((name, c["passed"], c["failed"], c["error"], c["skipped"], c["deselected"], floor))
        for reason, n in c["skips"].items():
            skips.setdefault(reason, {})[name] = n
        if floor is None:
            bad.append(f"{name}: no floor in {argv[1]}")
        elif c["passed"] < floor:
            bad.append(f"{name}: {c['passed']} passed, below its floor of {floor}: tests vanished")
        if c["failed"] or c["error"]:
            bad.append(f"{name}: {c['failed']} failed, {c['error']} errors")
    print(f"{'pass':28} {'passed':>7} {'failed':>7} {'errors':>7} {'skipped':>8} {'deselected':>11} {'floor':>7}")
    for name, *nums, floor in rows:
        print(f"{name:28} " + " ".join(f"{str(n):>{w}}" for n, w in zip(nums, (7, 7, 7, 8, 11)))
              + f" {str(floor):>7}")
    print("\nskip reasons:" if skips else "\nno test was skipped")
    for reason, per in sorted(skips.items(), key=lambda kv: -sum(kv[1].values())):
        where = ", ".join(f"{n} in {p}" for p, n in per.items())
        print(f"  {sum(per.values()):4}× {reason}  ({where})")
    for b in bad:
        print(f"counts: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
