"""The CLI's client commands (DESIGN §3: create, exec, kill, ls, inspect,
events, cp) and the C client libcordon, against a cordond of the test's own."""

import json
import os
import subprocess

import pytest

from cordonlib import CORDON_BIN, EXIT_CORDON, need

SMOKE = os.path.join(os.path.dirname(CORDON_BIN), "tests", "lib", "libcordon-smoke")


def cli(daemon, *args, input=None):
    env = dict(os.environ, CORDON_SOCKET=daemon.socket)
    return subprocess.run([CORDON_BIN, *args], input=input, capture_output=True, env=env, timeout=60)


def test_exec_verifier_modes(daemon):
    sid = cli(daemon, "create").stdout.decode().strip()
    assert cli(daemon, "exec", sid, "--", "sh", "-c",
               "mkdir -p /workspace/repo && echo hi > /workspace/repo/f && touch /workspace/other").returncode == 0
    r = cli(daemon, "exec", sid, "--verifier", "--", "ls", "/workspace")
    assert (r.returncode, r.stdout) == (0, b"other\nrepo\n"), r
    r = cli(daemon, "exec", sid, "--verifier=sibling", "--copy", "/workspace/repo", "--", "sh", "-c",
            "ls /workspace; cat /workspace/repo/f")
    assert (r.returncode, r.stdout) == (0, b"repo\nhi\n"), r  # the sibling has only what was copied
    r = cli(daemon, "exec", sid, "--verifier=sibling", "--", "true")
    assert r.returncode == EXIT_CORDON and b"--copy" in r.stderr, r
    assert cli(daemon, "kill", sid).returncode == 0


def test_create_exec_ls_inspect_events_kill(daemon):
    r = cli(daemon, "create", "--memory", "128M", "--label", "job=cli", "--env", "FROM_SPEC=yes")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.decode().strip()
    assert len(sid) == 12
    r = cli(daemon, "exec", sid, "--env", "A=b", "--workdir", "/tmp", "--",
            "sh", "-c", "echo $A $FROM_SPEC; pwd; echo to-err >&2; exit 7")
    assert (r.returncode, r.stdout, r.stderr) == (7, b"b yes\n/tmp\n", b"to-err\n")
    r = cli(daemon, "exec", sid, "--timeout", "300ms", "--", "sleep", "30")
    assert r.returncode == 124
    ls = cli(daemon, "ls", "--label", "job=cli").stdout.decode().splitlines()
    assert ls[0].split()[:3] == ["ID", "STATE", "TIER"] and ls[1].split()[:2] == [sid, "running"]
    assert len(cli(daemon, "ls", "--label", "job=other").stdout.decode().splitlines()) == 1
    info = json.loads(cli(daemon, "inspect", sid).stdout)
    assert info["spec"]["limits"]["memory_mb"] == 128 and info["labels"] == {"job": "cli"}
    events = [json.loads(x)["type"] for x in cli(daemon, "events", sid).stdout.decode().splitlines()]
    assert events[:2] == ["created", "running"] and "exec" in events
    assert cli(daemon, "kill", sid).returncode == 0
    r = cli(daemon, "inspect", sid)
    assert r.returncode == EXIT_CORDON and b"no sandbox" in r.stderr


def test_cp_both_ways(daemon, tmp_path):
    sid = cli(daemon, "create").stdout.decode().strip()
    try:
        blob = os.urandom(200000)
        src = tmp_path / "in.bin"
        src.write_bytes(blob)
        assert cli(daemon, "cp", str(src), f"{sid}:/workspace/d/in.bin").returncode == 0
        r = cli(daemon, "exec", sid, "--", "sha256sum", "/workspace/d/in.bin")
        import hashlib
        assert r.stdout.split()[0].decode() == hashlib.sha256(blob).hexdigest()
        out = tmp_path / "out.bin"
        assert cli(daemon, "cp", f"{sid}:/workspace/d/in.bin", str(out)).returncode == 0
        assert out.read_bytes() == blob
        assert cli(daemon, "cp", "-", f"{sid}:rel.txt", input=b"from stdin").returncode == 0
        assert cli(daemon, "cp", f"{sid}:/workspace/rel.txt", "-").stdout == b"from stdin"
        r = cli(daemon, "cp", f"{sid}:/no/such", str(out))
        assert r.returncode == EXIT_CORDON and b"/no/such" in r.stderr
    finally:
        cli(daemon, "kill", sid)


@pytest.mark.parametrize("args,words", [
    (["exec", "0123456789ab", "--", "true"], b"no sandbox '0123456789ab'"),
    (["create", "--memory", "12Q"], b"limits.memory_mb"),
    (["create", "stray"], b"unexpected argument 'stray'"),
    (["exec", "x"], b"usage"),
    (["cp", "a", "b"], b"exactly one side"),
    (["ls", "--label"], b"usage"),
])
def test_bad_input_is_125_with_a_reason(daemon, args, words):
    r = cli(daemon, *args)
    assert r.returncode == EXIT_CORDON and words in r.stderr, r.stderr


def test_no_daemon_is_a_clear_error(shared_dir):
    env = dict(os.environ, CORDON_SOCKET=os.path.join(shared_dir, "nobody-here.sock"))
    r = subprocess.run([CORDON_BIN, "ls"], capture_output=True, env=env, timeout=60)
    assert r.returncode == EXIT_CORDON and b"connect" in r.stderr.lower(), r.stderr


def test_libcordon(daemon):
    need(os.access(SMOKE, os.X_OK), f"no {SMOKE} (built with cordon)")
    r = subprocess.run([SMOKE], capture_output=True, env=dict(os.environ, CORDON_SOCKET=daemon.socket),
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == [
        "exit 3 out 7 bytes err 'to-err", "'",
        "stream 1: one", "stream 2: two", "stream exit 0",
        "read 4 bytes ok 1",
        "read_fd 4 bytes ok 1",
        "over max_bytes: 413 file_too_large max_bytes",
        "missing: 400 exec_failed cmd",
        "not utf-8: -22 cmd",
        "deleted twice: 404 sandbox_not_found",
    ]
