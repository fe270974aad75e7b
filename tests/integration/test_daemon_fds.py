"""cordond's own file descriptors (issue 25 point 1): it raises RLIMIT_NOFILE to what max_sandboxes
needs (as root, up to fs.nr_open), works out how many sandboxes the limit it got serves, and refuses
a create past them with a clear 429 before any fd runs out.

Here cordond runs with a hard limit it cannot raise (prlimit, and setpriv dropping CAP_SYS_RESOURCE),
so the budget is small. Seen failing without it: the 113th of these creates failed in the middle
(500 "sandbox_failed: arrange fds in the setup child: Too many open files")."""

import os

import pytest

import cordon
from cordon import Sandbox
from cordonlib import Daemon, wait_for

LIMIT = 600
RESERVE = 64  # a sixteenth of the limit, 64 at least (cordond.c fd_budget)
FDS = 3  # what box.c cdn_box_fds counts for these sandboxes' spec (measured: 3.0)


def test_a_create_past_the_fd_budget_is_a_clear_429(shared_dir):
    d = Daemon(shared_dir, "--max-sandboxes", "4096",
               wrap=["prlimit", f"--nofile={LIMIT}:{LIMIT}", "setpriv", "--bounding-set=-sys_resource", "--"])
    made = []
    try:
        fds = d.endpoint.json("GET", "/v1/health")["fds"]
        # what cordond holds for itself, counted at its start: its open fds then, its stocks and sockets,
        # and the files of its holds of slots (confine/slot.h: 128 for 4,096 sandboxes)
        standing = fds["standing"]
        assert 128 < standing < 260, fds
        budget = LIMIT - RESERVE - standing
        fit = budget // FDS
        assert fds == {"limit": LIMIT, "standing": standing, "budget": budget, "used": 0, "holding": 0}, fds
        assert f"warning: RLIMIT_NOFILE {LIMIT}" in d.output()
        spec = {"nofile": 256}  # within cordond's hard limit, which the sandboxes inherit
        for _ in range(fit):
            made.append(Sandbox.create(endpoint=d.endpoint, **spec))
        with pytest.raises(cordon.CordonError) as e:
            made.append(Sandbox.create(endpoint=d.endpoint, **spec))
        assert e.value.status == 429 and e.value.code == "too_many_sandboxes", e.value
        assert f"RLIMIT_NOFILE {LIMIT}" in str(e.value) and f"the {fit} that exist" in str(e.value), e.value
        # refused before the fds ran out: cordond has its reserve left, and what exists works
        assert len(os.listdir(f"/proc/{d.proc.pid}/fd")) <= LIMIT - RESERVE, len(os.listdir(f"/proc/{d.proc.pid}/fd"))
        assert all(sb.exec("true").exit_code == 0 for sb in made)
        assert d.endpoint.json("GET", "/v1/health")["fds"]["used"] == fit * FDS
        made.pop().kill()  # one gone (its teardown done): one more fits
        wait_for(lambda: d.endpoint.json("GET", "/v1/health")["fds"]["holding"] < fit, what="the teardown")
        made.append(Sandbox.create(endpoint=d.endpoint, **spec))
        metrics = d.http("GET", "/metrics")[1].decode()
        assert f"cordon_fd_budget {budget}\n" in metrics and f"cordon_fd_budget_used {fit * FDS}\n" in metrics
    finally:
        for sb in made:
            sb.kill()
        assert d.stop() == 0, d.output()
