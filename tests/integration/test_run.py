"""`cordon run` as a command: streams, exit status, flags, the --json record,
--spec, and refusing bad input (DESIGN §2-§3)."""

import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from cordonlib import CORDON_BIN, EXIT_CORDON, RECORD_FIELDS, HostState, Running, find_sandbox_proc, run

# ---------------------------------------------------------------- streams


def test_stdout_and_stderr_pass_through_separately():
    r = run(["--", "sh", "-c", "echo to-out; echo to-err >&2; echo more-out"])
    assert r.code == 0, r.stderr
    assert r.stdout == "to-out\nmore-out\n"
    assert r.stderr == "to-err\n"


def test_stdin_is_piped_through():
    data = "".join(f"line {i}\n" for i in range(50000))  # several pipe buffers
    r = run(["--", "cat"], input=data)
    assert r.code == 0, r.stderr
    assert r.stdout == data


def test_large_output_passes_through_intact():
    r = run(["--", "seq", "1", "300000"])
    assert r.code == 0, r.stderr
    assert r.stdout == "".join(f"{i}\n" for i in range(1, 300001))


def test_unread_stdin_does_not_hang():
    r = run(["--", "head", "-c", "5"], input="x" * (8 << 20), timeout=30)
    assert (r.code, r.stdout) == (0, "xxxxx"), r.stderr


def test_stdin_eof_reaches_the_command():
    r = run(["--", "wc", "-l"], input="a\nb\nc\n")
    assert (r.code, r.stdout.strip()) == (0, "3"), r.stderr


def test_arguments_reach_the_command_verbatim():
    args = ["with space", "quote'\"", "$HOME", "*", ""]
    r = run(["--", "python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *args])
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout) == args


def test_command_without_double_dash():
    r = run(["echo", "no-dashes"])
    assert (r.code, r.stdout) == (0, "no-dashes\n"), r.stderr


# ---------------------------------------------------------------- exit status


@pytest.mark.parametrize("status", [0, 1, 3, 77, 255])
def test_exit_status_is_the_commands(status):
    r = run(["--", "sh", "-c", f"exit {status}"])
    assert r.code == status, r.stderr
    assert r.cordon_lines == []


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGTERM, signal.SIGKILL])
def test_killed_by_signal_is_128_plus_n(sig):
    r = run(["--json", "--", "sh", "-c", f"kill -{sig.name[3:]} $$"])
    assert r.code == 128 + sig, r.stderr
    assert r.record["signal"] == sig
    assert r.record["exit_code"] == 128 + sig


# ---------------------------------------------------------------- environment


def test_env_flag_sets_variables():
    r = run(["--env", "FOO=bar baz", "--env", "EMPTY=", "--env", "EQ=a=b", "--",
             "sh", "-c", 'printf "%s|%s|%s|%s" "$FOO" "${EMPTY-unset}" "$EQ" "$PATH"'])
    assert r.code == 0, r.stderr
    foo, empty, eq, path = r.stdout.split("|")
    assert (foo, empty, eq) == ("bar baz", "", "a=b")
    assert "/usr/bin" in path.split(":")


def test_env_flag_overrides_defaults():
    r = run(["--env", "HOME=/elsewhere", "--", "sh", "-c", 'echo "$HOME"'])
    assert (r.code, r.stdout) == (0, "/elsewhere\n"), r.stderr


def test_host_environment_does_not_leak_in():
    env = {**os.environ, "CORDON_IT_SECRET": "s3cret"}
    r = run(["--", "env"], env=env)
    assert r.code == 0, r.stderr
    assert "CORDON_IT_SECRET" not in r.stdout
    assert "s3cret" not in r.stdout


def test_default_workdir_is_workspace_and_writable():
    r = run(["--", "sh", "-c", "pwd; echo x > f && cat f"])
    assert (r.code, r.stdout) == (0, "/workspace\nx\n"), r.stderr


def test_workdir_below_an_image_directory():
    # /opt exists in the image and belongs to a host uid the sandbox does not map.
    r = run(["--workdir", "/opt/app", "--", "sh", "-c", "pwd; echo x > f && cat f"])
    assert (r.code, r.stdout) == (0, "/opt/app\nx\n"), r.stderr


def test_workdir_flag():
    r = run(["--workdir", "/job/deep/dir", "--", "sh", "-c", "pwd; echo x > f && cat f"])
    assert (r.code, r.stdout) == (0, "/job/deep/dir\nx\n"), r.stderr


def test_default_hostname_is_cordon():
    r = run(["--", "sh", "-c", "hostname; cat /proc/sys/kernel/hostname"])
    assert (r.code, r.stdout) == (0, "cordon\ncordon\n"), r.stderr


def test_hostname_flag_and_host_hostname_untouched():
    host_before = os.uname().nodename
    r = run(["--hostname", "agent-7", "--", "sh", "-c", 'hostname; echo "$HOSTNAME"'])
    assert (r.code, r.stdout) == (0, "agent-7\nagent-7\n"), r.stderr
    assert os.uname().nodename == host_before


def test_labels_are_accepted():
    r = run(["--label", "job=j1", "--label", "trajectory=t7", "--", "echo", "labelled"])
    assert (r.code, r.stdout) == (0, "labelled\n"), r.stderr


def test_python3_works_in_host_image():
    r = run(["--", "python3", "-c", "print(6*7)"])
    assert (r.code, r.stdout) == (0, "42\n"), r.stderr


def test_python3_stdlib_and_ssl_certs_work():
    r = run(["--", "python3", "-c",
             "import ssl, json, sqlite3; c = ssl.create_default_context(); "
             "print(len(c.get_ca_certs()) > 0 or bool(c.cert_store_stats()['x509']))"])
    assert (r.code, r.stdout) == (0, "True\n"), r.stderr


# ---------------------------------------------------------------- --json


def test_json_record_fields_and_types():
    r = run(["--json", "--memory", "256M", "--pids", "64", "--cpus", "0.5", "--disk", "100M",
             "--", "sh", "-c", "echo out; i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exit 5"])
    assert r.code == 5
    assert r.stdout == "out\n"  # the record goes to stderr only
    rec = r.record
    assert rec is not None, f"no JSON record on stderr: {r.stderr!r}"
    for name, typ in RECORD_FIELDS.items():
        assert name in rec, f"record lacks {name}: {rec}"
        assert isinstance(rec[name], typ), f"{name}={rec[name]!r} is not {typ}"
        if typ is int:
            assert not isinstance(rec[name], bool), name
    assert rec["tier"] == "container"
    assert rec["exit_code"] == 5
    assert rec["signal"] is None and rec["error"] is None
    assert rec["timed_out"] is False and rec["oom_killed"] is False
    assert rec["id"]
    assert rec["wall_ms"] > 0
    # The loop above is user time (about half a second here): the record measures the command's CPU.
    assert rec["cpu_user_ms"] >= 50 and rec["cpu_user_ms"] + rec["cpu_system_ms"] <= rec["wall_ms"] + 50, rec
    assert rec["memory_peak_bytes"] > 0
    assert rec["pids_limit_hits"] == 0
    assert rec["violations"] == {"egress": 0, "syscall": 0, "oom": 0, "pids": 0, "protect": 0, "kernel": 0,
                                 "system_write": 0}
    lim = rec["limits"]
    assert lim["memory_mb"] == 256 and lim["pids"] == 64 and lim["disk_mb"] == 100
    assert lim["cpus"] == pytest.approx(0.5)


def test_json_record_is_one_line_and_last():
    r = run(["--json", "--", "sh", "-c", "echo err-before >&2"])
    lines = r.stderr.splitlines()
    assert lines[0] == "err-before"
    assert len(lines) == 2
    assert json.loads(lines[-1]) == r.record


def test_json_ids_are_unique():
    ids = {run(["--json", "--", "true"]).record["id"] for _ in range(5)}
    assert len(ids) == 5


def test_json_record_on_cordon_error():
    r = run(["--json", "--", "/no/such/command"])
    assert r.code == EXIT_CORDON
    assert r.record is not None and r.record["exit_code"] == EXIT_CORDON
    assert r.record["error"] and "/no/such/command" in r.record["error"]


def test_no_record_without_json_flag():
    r = run(["--", "sh", "-c", "exit 0"])
    assert r.record is None and r.stderr == ""


# ---------------------------------------------------------------- lean build

LEAN = os.path.exists(os.path.join(os.path.dirname(CORDON_BIN), "cordon-full"))


def exe_of(pid):
    return os.readlink(f"/proc/{pid}/exe")


@pytest.mark.skipif(not LEAN, reason="cordon is the full build here (no musl-gcc, or a sanitizer build)")
def test_lean_cordon_runs_itself_and_hands_json_runs_to_cordon_full():
    # The lean cordon is a static musl binary (no glibc start-up); what needs
    # jansson goes to cordon-full by exec, in the same process.
    from cordonlib import is_static_elf

    assert is_static_elf(CORDON_BIN)
    for args, exe in ((["--", "sleep", "30"], "cordon"), (["--json", "--", "sleep", "30"], "cordon-full")):
        with Running(args) as r:
            find_sandbox_proc(lambda p: p.comm == "sleep")
            assert os.path.basename(exe_of(r.pid)) == exe, args


def test_empty_state_dir_compiles_the_seccomp_policy_once(shared_dir):
    # No cached policy: the lean build hands over to cordon-full, which
    # compiles and caches it; the next run reads the cache (and, lean, runs itself).
    state = os.path.join(shared_dir, "state")
    os.mkdir(state, 0o755)  # the image below it must be traversable by the sandbox's uid
    env = dict(os.environ, CORDON_STATE_DIR=state)
    r = run(["--", "sh", "-c", "echo first"], env=env)
    assert (r.code, r.stdout) == (0, "first\n"), r.stderr
    cached = [n for n in os.listdir(os.path.join(state, "cache")) if n.startswith("seccomp-")]
    assert len(cached) == 1, cached
    mtime = os.stat(os.path.join(state, "cache", cached[0])).st_mtime_ns
    r = run(["--", "sh", "-c", "echo second"], env=env)
    assert (r.code, r.stdout) == (0, "second\n"), r.stderr
    assert os.stat(os.path.join(state, "cache", cached[0])).st_mtime_ns == mtime


# ---------------------------------------------------------------- --spec


def test_spec_file(shared_dir):
    spec = {
        "tier": "container",
        "image": "host",
        "limits": {"cpus": 1, "memory_mb": 128, "pids": 32, "disk_mb": 64, "timeout_s": 30},
        "network": {"mode": "none"},
        "env": {"GREETING": "hi from spec"},
        "workdir": "/job",
        "hostname": "spec-host",
        "labels": {"job": "j1"},
    }
    path = os.path.join(shared_dir, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    r = run(["--spec", path, "--json", "--", "sh", "-c", 'echo "$GREETING"; pwd; hostname'])
    assert r.code == 0, r.stderr
    assert r.stdout == "hi from spec\n/job\nspec-host\n"
    assert r.record["limits"]["memory_mb"] == 128
    assert r.record["limits"]["pids"] == 32
    assert r.record["limits"]["disk_mb"] == 64


def test_flags_after_spec_override_it(shared_dir):
    path = os.path.join(shared_dir, "spec.json")
    with open(path, "w") as f:
        json.dump({"hostname": "from-spec", "limits": {"memory_mb": 128}}, f)
    r = run(["--spec", path, "--hostname", "from-flag", "--json", "--", "hostname"])
    assert (r.code, r.stdout) == (0, "from-flag\n"), r.stderr
    assert r.record["limits"]["memory_mb"] == 128


@pytest.mark.parametrize("spec,field", [
    ({"bogus": 1}, "bogus"),
    ({"limits": {"memory_mb": -1}}, "limits.memory_mb"),
    ({"limits": {"what": 1}}, "limits.what"),
    ({"tier": "nope"}, "tier"),
    ({"mounts": [{"source": "/tmp"}]}, "mounts[0]"),
    ({"env": {"K": 1}}, "env.K"),
    ({"read_only": "yes"}, "read_only"),
])
def test_spec_file_bad_fields_are_named(shared_dir, spec, field):
    path = os.path.join(shared_dir, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    r = run(["--spec", path, "--", "true"])
    assert r.code == EXIT_CORDON
    assert_one_cordon_line(r, field)


def test_spec_file_not_json(shared_dir):
    path = os.path.join(shared_dir, "spec.json")
    with open(path, "w") as f:
        f.write("{not json")
    r = run(["--spec", path, "--", "true"])
    assert r.code == EXIT_CORDON
    assert_one_cordon_line(r, "spec")


# ---------------------------------------------------------------- bad input


def assert_one_cordon_line(r, *names):
    lines = r.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {r.stderr!r}"
    assert lines[0].startswith("cordon: "), lines[0]
    assert any(n in lines[0] for n in names), f"{lines[0]!r} names none of {names}"
    assert r.stdout == ""


BAD = [
    (["--memory", "12Q"], ["--memory", "limits.memory_mb"]),
    (["--disk", "lots"], ["--disk", "limits.disk_mb"]),
    (["--cpus", "0"], ["--cpus", "limits.cpus"]),
    (["--cpus", "many"], ["--cpus", "limits.cpus"]),
    (["--pids", "-1"], ["--pids", "limits.pids"]),
    (["--timeout", "5 parsecs"], ["--timeout", "limits.timeout_s"]),
    (["--nofile", "x"], ["--nofile", "limits.nofile"]),
    (["--bogus-flag"], ["--bogus-flag"]),
    (["--image", "/nonexistent/image/dir"], ["image", "/nonexistent/image/dir"]),
    (["--bind", "/nonexistent/src:/data"], ["--bind", "mounts"]),
    (["--bind", "no-colon"], ["--bind", "mounts"]),
    (["--env", "NOEQUALS"], ["--env", "env"]),
    (["--workdir", "relative/path"], ["workdir"]),
    (["--workdir", "/etc/passwd"], ["workdir"]),
    (["--hostname", "not a/hostname"], ["--hostname", "hostname"]),
    (["--memory", "1M"], ["--memory", "limits.memory_mb"]),
    (["--env", "BIG=" + "y" * 70000], ["--env", "env"]),
    (["--net", "allow=pypi.org:0"], ["network.allow[0]", "pypi.org:0"]),
    (["--net", "allow=pypi.org,10.0.0.0/33"], ["network.allow[1]", "10.0.0.0/33"]),
    (["--net", "allow=*"], ["network.allow[0]"]),
    (["--net", "sideways"], ["--net", "network"]),
    (["--protect", "/workspace/answers/**"], ["--protect", "protect"]),
    (["--tier", "process", "--net", "allow=pypi.org"], ["network"]),
    (["--tier", "warp"], ["--tier", "tier"]),
    (["--on-violation", "explode"], ["--on-violation", "on_violation"]),
    (["--spec", "/nonexistent/spec.json"], ["--spec", "/nonexistent/spec.json"]),
]


@pytest.mark.serial  # checks the host for leaks inside the test: no other pass may run
@pytest.mark.parametrize("flags,names", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_input_is_refused_with_125(flags, names):
    before = HostState.snapshot()
    r = run([*flags, "--", "sh", "-c", "echo ran"])
    assert r.code == EXIT_CORDON, (r.code, r.stdout, r.stderr)
    assert_one_cordon_line(r, *names)
    # Nothing was started: no cgroup or sandbox process even for a moment
    # (the autouse check also runs, with its grace period, after the test).
    assert not HostState.snapshot().leaks_since(before)


@pytest.mark.parametrize("cmd", [["/no/such/command"], ["no-such-command-anywhere"]])
def test_command_not_found_is_125(cmd):
    r = run(["--", *cmd])
    assert r.code == EXIT_CORDON
    assert_one_cordon_line(r, cmd[0])


def test_oversized_command_fails_fast_with_125():
    # argv + env beyond what cordon can hand to the sandbox (a 1 MiB frame)
    # must be refused at once, not left to hang until --timeout.
    big = ["x" * 100_000] * 12
    r = run(["--timeout", "8s", "--json", "--", "true", *big], timeout=60)
    assert r.code == EXIT_CORDON, (r.code, r.stderr[:300])
    assert r.record["timed_out"] is False
    assert r.record["wall_ms"] < 5000


def test_no_command_is_125():
    r = run([])
    assert r.code == EXIT_CORDON
    assert_one_cordon_line(r, "command")


def test_flag_missing_its_value_is_125():
    r = run(["--memory"])
    assert r.code == EXIT_CORDON
    assert_one_cordon_line(r, "--memory")


def test_help_exits_zero():
    r = run(["--help"])
    assert r.code == 0
    for flag in ("--memory", "--timeout", "--bind", "--json", "--spec"):
        assert flag in r.stdout


def test_json_record_survives_non_utf8_in_error():
    # The error message quotes the command; a name that is not UTF-8 must
    # still give a parseable record (jansson refuses invalid UTF-8 strings,
    # which once made the whole record silently disappear).
    r = run(["--json", "--", os.fsdecode(b"no\xffcmd")])
    assert r.code == EXIT_CORDON
    assert r.record is not None, r.stderr
    assert r.record["exit_code"] == EXIT_CORDON
    assert "cmd" in r.record["error"]


def test_non_root_caller_gets_a_clear_error():
    # Copies of the binaries that an unprivileged user can reach and execute.
    d = tempfile.mkdtemp(dir="/tmp")
    try:
        os.chmod(d, 0o755)
        for name in ("cordon", "cordon-init"):
            shutil.copy(os.path.join(os.path.dirname(os.path.abspath(CORDON_BIN)), name), d)
            os.chmod(os.path.join(d, name), 0o755)
        p = subprocess.run(["su", "-s", "/bin/sh", "nobody", "-c", f"{d}/cordon run -- true"],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(d)
    assert p.returncode == EXIT_CORDON, p.stderr
    assert "needs root" in p.stderr
    assert p.stderr.count("\n") == 1
