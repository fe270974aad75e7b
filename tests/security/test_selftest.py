"""`cordon selftest`: the escape probes of this directory, shipped as a command (issue 18, item 16).

An operator runs them against their own host, kernel and configuration: per tier, every probe contained or
escaped, an escape by the tier's or the spec's design reported as expected with its reason, exit 1 on any
other escape, 125 when the selftest itself could not run. These tests drive the real command; that it can
fail is shown twice: --baseline (no sandbox) must find the escapes, and a probe that reports an escape
must make the command exit 1.
"""

import json
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from testenv import need, need_vm

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORDON_BIN = os.environ.get("CORDON_BIN") or os.path.join(REPO, "build", "cordon")
CORDON_PROBE = os.environ.get("CORDON_PROBE") or os.path.join(REPO, "build", "tests", "security", "cordon-probe")

# What the command reports as escapes by design, per tier (docs/process.md, docs/microvm.md).
BY_DESIGN = {
    "container": set(),
    "process": {"uid_map_root", "gid_map_root", "host_pid_visible", "net_default_route", "net_interfaces"},
    "microvm": {"uid_map_root", "gid_map_root"},
    "vm": {"uid_map_root", "gid_map_root"},
}


@pytest.fixture(autouse=True)
def _parts():
    need(os.geteuid() == 0, "the security suite must run as root")
    need(os.access(CORDON_BIN, os.X_OK), f"no cordon binary at {CORDON_BIN}")
    need(os.access(CORDON_PROBE, os.X_OK), f"no cordon-probe binary at {CORDON_PROBE}")


def selftest(*args, probe=CORDON_PROBE, timeout=600):
    env = dict(os.environ, CORDON_PROBE=probe)
    r = subprocess.run([CORDON_BIN, "selftest", *args], capture_output=True, text=True, env=env, timeout=timeout)
    return r


def selftest_json(*args, **kw):
    r = selftest("--json", *args, **kw)
    try:
        return r, json.loads(r.stdout)
    except ValueError:
        pytest.fail(f"not JSON (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


@pytest.mark.parametrize("tier", ["container", "process", pytest.param("microvm", marks=pytest.mark.needs_vm)])
def test_every_probe_contained(tier):
    r, out = selftest_json("--tier", tier)
    assert r.returncode == 0 and out["ok"], r.stdout + r.stderr
    [t] = out["tiers"]
    assert t["tier"] == tier and t["error"] is None and t["escaped"] == 0, t
    assert len(t["probes"]) >= 30 and not t["partial"]
    expected = {p["name"] for p in t["probes"] if p["expected"]}
    assert expected == BY_DESIGN[tier], t
    for p in t["probes"]:
        assert p["verdict"] == "contained" or p["expected"], p


def test_every_tier_by_default():
    """Without --tier: every tier this host can run (the VM tiers once `cordon vm prepare` ran, which
    tests/run-all does)."""
    need_vm()
    r, out = selftest_json()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    # The tier table's order (src/tiers/tier.c), weakest isolation first.
    assert [t["tier"] for t in out["tiers"]] == ["process", "container", "microvm", "vm"]
    assert all(t["escaped"] == 0 and len(t["probes"]) >= 30 for t in out["tiers"])


def test_the_operators_spec_decides_what_is_by_design(tmp_path):
    """--spec and run flags are the operator's configuration: a network makes an interface expected, a memory
    limit above the probe's 2 GiB makes that probe's success expected; everything else must still hold."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"network": {"mode": "open"}, "limits": {"memory_mb": 3072}}))
    r, out = selftest_json("--tier", "container", "--spec", str(spec))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    [t] = out["tiers"]
    reasons = {p["name"]: p["expected"] for p in t["probes"] if p["expected"]}
    assert set(reasons) <= {"net_interfaces", "net_default_route", "memory_2g"}, reasons
    assert "net_interfaces" in reasons and "network" in reasons["net_interfaces"], reasons


def test_kill_mode_stops_at_the_first_watched_attempt():
    r, out = selftest_json("--tier", "container", "--on-violation", "kill")
    assert r.returncode == 0, r.stdout + r.stderr
    [t] = out["tiers"]
    assert t["partial"] and t["exit_status"] == 137 and t["escaped"] == 0, t


def test_baseline_finds_the_escapes():
    """The control: the probes as root with no sandbox must report the escapes they look for."""
    r = selftest("--baseline")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert "ESCAPED   mount/mount_tmpfs" in r.stdout and "ESCAPED   host-files/canary_direct" in r.stdout, r.stdout
    assert "the control works" in r.stdout


@pytest.fixture
def fake_dir():
    """Where stand-in probes go: under /tmp and traversable (a sandbox's root maps to an unprivileged
    host uid, which cannot pass pytest's 0700 tmp_path to reach a bind source)."""
    d = tempfile.mkdtemp(prefix="cordon-selftest-fake-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _fake_probe(d, name, body):
    """A stand-in for cordon-probe (a shell script, bound into the sandbox as the real one is)."""
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return path


def test_an_escape_makes_it_fail(fake_dir):
    """What the command catches: a probe that reports an escape (here a stand-in that says so) gives exit 1
    and names it."""
    lines = "".join(f"echo 'PROBE kernel p{i} contained EPERM'\n" for i in range(31))
    probe = _fake_probe(fake_dir, "escapes", lines + "echo 'PROBE host-files canary_direct escaped read-the-canary'\n"
                                          "echo 'SUMMARY probes=32 contained=31 escaped=1'\nexit 1\n")
    r = selftest("--tier", "container", probe=probe)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ESCAPED   host-files/canary_direct: read-the-canary" in r.stdout and "result: ESCAPED" in r.stdout


def test_output_that_breaks_the_contract_is_an_error(fake_dir):
    """The probe's output is the sandbox's: a SUMMARY that does not match its lines, or none, is not a pass."""
    probe = _fake_probe(fake_dir, "mismatch", "echo 'PROBE kernel a contained EPERM'\necho 'SUMMARY probes=5 contained=5 "
                                  "escaped=0'\n")
    r = selftest("--tier", "container", probe=probe)
    assert r.returncode == 125 and "breaks its contract" in r.stdout, r.stdout + r.stderr
    probe = _fake_probe(fake_dir, "garbage", "echo hello\n")
    r = selftest("--tier", "container", probe=probe)
    assert r.returncode == 125 and "before the probe's summary" in r.stdout, r.stdout + r.stderr


def test_bad_flags_name_the_field():
    r = selftest("--tier", "bogus")
    assert r.returncode == 125 and "--tier 'bogus'" in r.stderr, r.stderr
    r = selftest("--tier", "container", "--memory", "12")
    assert r.returncode == 125 and "limits.memory_mb" in r.stdout, r.stdout
    r = selftest("--tier", "container", probe="/nonexistent/cordon-probe")
    assert r.returncode == 125 and "cordon-probe not found" in r.stderr, r.stderr
