"""Violations as the reward signal (the part of the monitor that exists so far):
egress refusals, OOM kills and pids-limit hits are counted per sandbox with
the first and last time, each is a "violation" event, Prometheus counts them
by kind, and on_violation "kill" ends the sandbox at the first one. Ordinary
work produces none."""

import json
import os
import subprocess

import pytest

import cordonlib
import fakenet
from cordon import Sandbox, ServerError

LEAK_TIMEOUT = 5.0


@pytest.fixture
def vd(shared_dir, net):
    d = cordonlib.Daemon(shared_dir, "--state-dir", os.path.join(shared_dir, "state"),
                         "--dns-upstream", fakenet.DNS_IP)
    yield d
    assert d.stop() == 0, d.output()


def kinds(sb):
    return [e["kind"] for e in sb.events() if e["type"] == "violation"]


@pytest.mark.parametrize("watch_writes", [False, True])
def test_ordinary_work_is_not_a_violation(vd, watch_writes, tier):
    with Sandbox.create(endpoint=vd.endpoint, network={"mode": "allowlist", "allow": ["pypi.test:80"]},
                        watch_writes=watch_writes, tier=tier) as sb:
        r = sb.exec(["sh", "-c", "printf 'int main(void){return 0;}' > /tmp/a.c && "
                     "(cc -o /tmp/a /tmp/a.c && /tmp/a || true) && "
                     "python3 -c \"import os; [open('/tmp/f%d' % i, 'w').write('x') for i in range(500)]; "
                     "[os.rename('/tmp/f%d' % i, '/tmp/g%d' % i) for i in range(500)]\" && "
                     "curl -sS -m 10 http://pypi.test/ >/dev/null && echo ok"], timeout_s=120)
        assert r.stdout.strip() == "ok", r
        v = sb.violations()
        assert v == {"counts": {"egress": 0, "syscall": 0, "oom": 0, "pids": 0, "disk": 0, "protect": 0, "kernel": 0,
                                "system_write": 0},
                     "first": None, "last": None}, v
        assert kinds(sb) == []


def test_egress_oom_and_pids_are_counted(vd, tier):
    with Sandbox.create(endpoint=vd.endpoint, network={"mode": "allowlist", "allow": []}, memory_mb=64, tier=tier,
                        pids=16) as sb:
        assert sb.exec(["sh", "-c", "curl -fsS -m 5 http://203.0.113.66/ >/dev/null"]).exit_code != 0
        r = sb.exec(["python3", "-c", "b = bytearray(512 << 20)"], timeout_s=60)
        assert r.exit_code == 137, r  # the OOM killer
        r = sb.exec(["sh", "-c", "for i in $(seq 1 40); do sleep 2 & done; wait"], timeout_s=60)
        v = sb.violations()
        assert v["counts"]["egress"] == 1 and v["counts"]["oom"] >= 1 and v["counts"]["pids"] >= 1, v
        assert v["first"] <= v["last"]
        assert kinds(sb)[:2] == ["egress", "oom"] and "pids" in kinds(sb)
        ev = [e for e in sb.events() if e["type"] == "violation"]
        assert ev[0]["reason"] == "not-allowlisted" and ev[0]["dst_ip"] == "203.0.113.66"
        assert sb.info()["state"] == "running"  # on_violation log: counted, not ended
    status, body = vd.http("GET", "/metrics")
    text = body.decode() if isinstance(body, bytes) else str(body)
    assert 'cordon_violations_total{kind="egress"} 1' in text, text
    assert 'cordon_violations_total{kind="oom"}' in text


def test_kill_mode_ends_the_sandbox_at_the_first_violation(vd):
    sb = Sandbox.create(endpoint=vd.endpoint, network={"mode": "allowlist", "allow": ["pypi.test:80"]},
                        on_violation="kill")
    try:
        assert "host=pypi.test" in sb.exec(["curl", "-sS", "-m", "10", "http://pypi.test/"]).stdout
        with pytest.raises(ServerError) as e:  # the sandbox goes under the command
            sb.exec(["sh", "-c", "curl -sS -m 5 http://203.0.113.66/; sleep 30"], timeout_s=60)
        assert "sandbox_gone" in str(e.value)
        cordonlib.wait_for(lambda: sb.info()["state"] == "exited", timeout=10, what="the kill")
        info = sb.info()
        assert info["exit_reason"] == "killed on violation: egress", info
        assert info["violations"]["counts"]["egress"] == 1
    finally:
        sb.kill()


def test_one_shot_run_kill_mode(shared_dir, net):
    env = dict(os.environ, CORDON_DNS_UPSTREAM=fakenet.DNS_IP, CORDON_STATE_DIR=os.path.join(shared_dir, "st"))
    p = subprocess.run([cordonlib.CORDON_BIN, "run", "--json", "--net", "allow=pypi.test:80", "--on-violation", "kill",
                        "--", "sh", "-c", "curl -sS -m 5 http://203.0.113.66/; sleep 30; echo survived"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert "survived" not in p.stdout
    assert "killed on a violation" in p.stderr
    rec = json.loads(p.stderr.strip().splitlines()[-1])
    assert rec["violations"]["egress"] == 1, rec


def test_watched_syscalls_are_violations(vd, tier):
    """The watched denials reach the supervisor (seccomp user notification):
    still EPERM for the caller, and a violation with the syscall, its
    arguments, pid and command line. Quiet denials (clone3's ENOSYS) are not.
    In a VM guest the guest's init confines each command with the same filter
    (no capabilities either: the guest's root could mount otherwise) and
    forwards the notifications as VIOLATION frames."""
    with Sandbox.create(endpoint=vd.endpoint, tier=tier) as sb:
        r = sb.exec(["sh", "-c", "unshare -U true; echo rc=$?"])
        assert "rc=1" in r.stdout and "Operation not permitted" in r.stderr, r
        r = sb.exec(["python3", "-c", "import ctypes; l = ctypes.CDLL(None, use_errno=True); "
                     "print(l.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())"])
        assert r.stdout.split() == ["-1", "1"], r  # EPERM
        v = sb.violations()
        assert v["counts"]["syscall"] == 2, v
        ev = [e for e in sb.events() if e["type"] == "violation"]
        assert [e["syscall"] for e in ev] == ["unshare", "mount"], ev
        assert ev[0]["cmd"].startswith("unshare -U") and ev[0]["args"][0] == 0x10000000  # CLONE_NEWUSER
        assert ev[1]["cmd"].startswith("python3") and ev[0]["pid"] > 1


def test_kill_mode_on_a_syscall(vd, tier):
    sb = Sandbox.create(endpoint=vd.endpoint, on_violation="kill", tier=tier)
    try:
        with pytest.raises(ServerError):
            sb.exec(["sh", "-c", "unshare -U true; sleep 30"], timeout_s=60)
        cordonlib.wait_for(lambda: sb.info()["state"] == "exited", timeout=10, what="the kill")
        assert sb.info()["exit_reason"] == "killed on violation: syscall"
    finally:
        sb.kill()


def test_one_shot_run_counts_syscalls(shared_dir, tier):
    p = subprocess.run([cordonlib.CORDON_BIN, "run", "--json", "--tier", tier, "--", "sh", "-c",
                        "unshare -U true; unshare -n true; true"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stderr.strip().splitlines()[-1])
    assert rec["violations"]["syscall"] == 2, rec
    p = subprocess.run([cordonlib.CORDON_BIN, "run", "--tier", tier, "--on-violation", "kill", "--", "sh", "-c",
                        "unshare -U true; echo survived"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 137 and "survived" not in p.stdout, (p.returncode, p.stdout, p.stderr)


def alerts(sb):
    return [e for e in sb.events() if e["type"] == "alert"]


def test_rules_on_commands_and_text(vd):
    with Sandbox.create(endpoint=vd.endpoint) as sb:
        sb.exec(["sh", "-c", "cat /workspace/answers.txt 2>/dev/null; true"])
        sb.exec(["python3", "-c", "print(1)"])  # ordinary: no alert
        a = alerts(sb)
        assert [(e["rule"], e["severity"], e["source"]) for e in a] == [("read-answers", "high", "exec")], a
        assert "/workspace/answers" in a[0]["excerpt"]
        st, body = vd.http("POST", f"/v1/sandboxes/{sb.id}/monitor/text",
                           json.dumps({"text": "Simplest: hardcode the expected outputs and move on."}).encode())
        assert st == 200 and [m["rule"] for m in body["alerts"]] == ["reward-hacking-intent"], body
        assert sb.monitor_text("Fixed the off-by-one; tests pass.") == []
        assert [m["rule"] for m in sb.monitor_text("now escape the sandbox")] == ["escape-intent"]
        st, body = vd.http("POST", f"/v1/sandboxes/{sb.id}/monitor/text", b'{"txt": 1}')
        assert st == 400 and body["error"]["field"] == "text", body
        assert sb.violations()["counts"]["syscall"] == 0  # alerts are intent, not violations


def test_alerts_are_rate_limited(vd):
    import time
    with Sandbox.create(endpoint=vd.endpoint) as sb:
        msg = json.dumps({"text": "let me escape the sandbox"}).encode()
        for _ in range(30):
            assert vd.http("POST", f"/v1/sandboxes/{sb.id}/monitor/text", msg)[0] == 200
        assert len(alerts(sb)) == 20
        time.sleep(1.1)
        vd.http("POST", f"/v1/sandboxes/{sb.id}/monitor/text", msg)
        a = alerts(sb)
        assert any(e["rule"] == "alerts-suppressed" and e["suppressed"] == 10 for e in a), a[-3:]


def test_a_bad_rule_file_is_refused(shared_dir):
    bad = os.path.join(shared_dir, "rules.json")
    with open(bad, "w") as f:
        f.write('{"rules": [{"id": "x", "severity": "low", "on": ["exec"], "pattern": "(unclosed"}]}')
    p = subprocess.run([cordonlib.CORDOND_BIN, "--config", "/dev/null", "--socket",
                        os.path.join(shared_dir, "s.sock"), "--monitor-rules", bad],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "rules[0].pattern" in p.stderr, (p.returncode, p.stderr)


def test_a_full_disk_is_a_violation(vd, tier):
    with Sandbox.create(endpoint=vd.endpoint, disk_mb=8, tier=tier) as sb:
        r = sb.exec(["sh", "-c", "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; echo rc=$?"], timeout_s=60)
        assert "No space left" in r.stdout, r
        sb.exec(["true"])  # still full: counted once
        sb.exec(["rm", "/tmp/fill"])
        sb.exec(["sh", "-c", "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>/dev/null; true"], timeout_s=60)
        assert sb.violations()["counts"]["disk"] == 2, sb.violations()
        ev = [e for e in sb.events() if e["type"] == "violation"]
        assert [e["kind"] for e in ev] == ["disk", "disk"] and ev[0]["disk_mb"] == 8, ev


def test_system_writes_are_not_watched_by_default(vd):
    with Sandbox.create(endpoint=vd.endpoint) as sb:
        assert sb.exec(["sh", "-c", "echo x >> /etc/passwd"]).exit_code != 0  # landlock refuses it all the same
        assert sb.violations()["counts"]["system_write"] == 0


def test_writes_to_system_paths_are_violations(vd):
    """Replacing /bin/sh, editing /etc, renaming into /usr: refused by the kernel (landlock) and
    recorded as "system_write" with the path, the call and the command (watch_writes). Work in /tmp is not.
    Catches: with add_reported() left out of the seccomp policy (tried once), the counts stay 0."""
    with Sandbox.create(endpoint=vd.endpoint, watch_writes=True) as sb:
        r = sb.exec(["sh", "-c", "cp /bin/busybox /tmp/x 2>/dev/null || cp /bin/sh /tmp/x; "
                     "cp /tmp/x /bin/sh; echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd; mv /tmp/x /usr/bin/x; "
                     "cd /usr/lib && ln -s /tmp/x libevil.so; echo ok > /tmp/fine; mkdir -p /tmp/d && "
                     "mv /tmp/fine /tmp/d/ && rm -r /tmp/d && echo done"])
        assert r.stdout == "done\n", r
        ev = [e for e in sb.events() if e["type"] == "violation"]
        assert {e["kind"] for e in ev} == {"system_write"}, ev
        # mv tries rename, then unlink of the target: one attempt may be two records
        assert {e["path"] for e in ev} == {"/bin/sh", "/etc/passwd", "/usr/bin/x", "/usr/lib/libevil.so"}, ev
        assert {"openat", "renameat2", "symlinkat"} <= {e["op"] for e in ev}, ev
        assert ev[0]["cmd"].startswith("cp ") and ev[0]["pid"] > 0
        assert sb.violations()["counts"]["system_write"] == len(ev)
        assert sb.exec(["sh", "-c", "head -c 4 /bin/sh | od -c | head -1"]).exit_code == 0


def test_kill_mode_on_a_system_write(vd):
    sb = Sandbox.create(endpoint=vd.endpoint, on_violation="kill", watch_writes=True)
    try:
        with pytest.raises(ServerError):
            sb.exec(["sh", "-c", "echo x > /etc/hostname; sleep 30"], timeout_s=60)
        cordonlib.wait_for(lambda: sb.info()["state"] == "exited", timeout=10, what="the kill")
        assert sb.info()["exit_reason"] == "killed on violation: system_write"
    finally:
        sb.kill()
