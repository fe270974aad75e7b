"""Many sandboxes, some ending badly, then nothing may be left on the host:
500 runs, 4 at a time — plain ones, timed-out ones, and ones whose `cordon
run` is SIGKILLed while the command is still running."""

import random
import signal
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from cordonlib import EXIT_TIMEOUT, HostState, Running, check_no_leaks, format_leaks, run

LEAK_TIMEOUT = 5.0  # read by the autouse leak check in conftest.py

N_PLAIN, N_TIMEOUT, N_KILLED = 440, 30, 30
CONCURRENCY = 4


def plain(i):
    if i % 2:
        r = run(["--", "true"], timeout=60)
        return "plain", r.code == 0, f"true → {r.code} {r.stderr!r}", None
    r = run(["--", "sh", "-c", f"echo run-{i}; cat /proc/self/uid_map"], timeout=60)
    lines = r.stdout.splitlines()
    ok = r.code == 0 and len(lines) == 2 and lines[0] == f"run-{i}"
    base = int(lines[1].split()[1]) if ok else None
    return "plain", ok, f"echo → {r.code} {r.stdout!r} {r.stderr!r}", base


def timed_out(i):
    r = run(["--timeout", "200ms", "--", "sleep", "10"], timeout=60)
    return "timeout", r.code == EXIT_TIMEOUT, f"timeout → {r.code} {r.stderr!r}", None


def killed(i, rng_seed):
    rng = random.Random(rng_seed)
    s = Running(["--", "sleep", "10"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.05, 0.15))
    s.proc.send_signal(signal.SIGKILL)
    code = s.proc.wait(timeout=30)
    # -9: killed as meant; anything else means cordon ended on its own first.
    return "killed", code == -signal.SIGKILL, f"SIGKILLed cordon run → {code}", None


@pytest.mark.serial  # checks the host for leaks inside the test: no other pass may run
def test_500_runs_leave_nothing_behind(no_leaks):
    rng = random.Random(0xC0D0)
    jobs = ([(plain, (i,)) for i in range(N_PLAIN)] + [(timed_out, (i,)) for i in range(N_TIMEOUT)]
            + [(killed, (i, rng.random())) for i in range(N_KILLED)])
    rng.shuffle(jobs)
    t0 = time.monotonic()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        results = list(pool.map(lambda job: job[0](*job[1]), jobs))
    elapsed = time.monotonic() - t0

    counts = Counter(kind for kind, *_ in results)
    bad = [detail for _, ok, detail, _ in results if not ok]
    bases = {b for *_, b in results if b is not None}
    t1 = time.monotonic()
    leaks = check_no_leaks(no_leaks, timeout=LEAK_TIMEOUT)
    settle = time.monotonic() - t1
    print(f"\n{len(results)} runs in {elapsed:.1f}s ({CONCURRENCY} at a time): "
          f"{counts['plain']} plain, {counts['timeout']} timed out, {counts['killed']} SIGKILLed; "
          f"{len(bad)} unexpected outcomes; {len(bases)} distinct uid ranges seen; "
          f"host clean after {settle:.2f}s" if not leaks else "host NOT clean")

    assert (counts["plain"], counts["timeout"], counts["killed"]) == (N_PLAIN, N_TIMEOUT, N_KILLED)
    assert not leaks, "left on the host after 500 runs:\n" + format_leaks(leaks)
    assert not bad, f"{len(bad)} runs ended unexpectedly, e.g.:\n" + "\n".join(bad[:10])
    assert len(bases) > CONCURRENCY  # many slots used, not one reused serially
    assert not HostState.snapshot().leaks_since(no_leaks)
