"""Protected paths changed while the sandbox runs (PATCH /v1/sandboxes/{id} "protect"): the setup
phase puts hidden tests in place with nothing protected, the agent phase protects them, and a later
phase may release some. Paths protected late hold as the ones of a create do (test_protect.py's
attacks), a process that already holds something beneath them makes the change fail instead of
keeping a writable way in, and a restarted cordond keeps guarding them."""

import asyncio
import os
import subprocess
import time

import pytest

import cordonlib
from cordonlib import Daemon
from cordon import AsyncSandbox, InvalidArgument, Sandbox, SandboxNotRunning
from test_protect import READS, SECRET, SPEC, WRITES, intact, ws  # noqa: F401 (ws: a fixture)

PROTECT = SPEC["protect"]


def make(d, ws_dir, **kw):
    return Sandbox.create(endpoint=d.endpoint, mounts=[{"source": ws_dir, "target": "/workspace"}], **kw)


# The container tier's cordond binds and guards them; a VM guest's init does (init-vm-protect.c).
@pytest.fixture(params=["container", pytest.param("microvm", marks=pytest.mark.needs_vm), pytest.param("vm", marks=pytest.mark.needs_vm)])
def tier(request):
    return request.param


def sh(sb, cmd):
    return sb.exec(["sh", "-c", cmd])


def printed(p):
    return "".join(e.get("data", "") for e in p.output()["output"])


@pytest.fixture
def d(shared_dir):
    dm = Daemon(shared_dir)
    yield dm
    assert dm.stop() == 0, dm.output()


def test_paths_protected_later_hold_as_at_creation(d, ws, tier):
    with make(d, ws, tier=tier) as sb:
        assert sh(sb, "cat /workspace/answer.key").stdout == SECRET  # the setup phase: nothing protected
        info = sb.update(protect=PROTECT)
        assert info["spec"]["protect"] == PROTECT
        readers = []
        for name, cmd in {**READS, **WRITES}.items():
            r = sh(sb, cmd)
            assert r.exit_code != 0, (name, r)
            if SECRET in r.stdout or "solve()" in r.stdout:
                readers.append(name)
        assert readers == []
        intact(ws)
        r = sh(sb, "cat /workspace/solution.py && echo more >> /workspace/solution.py && ls /workspace")
        assert r.exit_code == 0 and "answer.key" in r.stdout, r
        v = sb.violations()
        assert v["counts"]["protect"] >= len(READS) - 1, v
        # The files API is the operator's; a symlink of the agent's into a protected path is not.
        assert sb.files.read("/workspace/answer.key") == SECRET.encode()
        assert sh(sb, "ln -s /workspace/answer.key /workspace/link").exit_code == 0
        with pytest.raises(Exception) as e:
            sb.files.read("/workspace/link")
        assert getattr(e.value, "code", "") == "protected_path", e.value
        ev = [e for e in sb.events() if e["type"] == "updated"]
        assert ev and ev[-1]["protect"] == PROTECT, ev
        # A verifier step reads them, as it does paths protected at creation.
        r = sb.exec(["cat", "/workspace/tests/test_hidden.py"], verifier=True)
        assert r.exit_code == 0 and "solve()" in r.stdout, r


def test_a_process_holding_a_way_in_refuses_the_change(d, ws, tier):
    """A descriptor opened before the change (or a working directory inside) leads to the mount as
    it was, writable: the change is refused while one exists, naming the holder, and nothing is
    protected meanwhile. Without the check (container.c find_holder) the PATCH succeeded and
    `echo x >&3` rewrote the answer key through the descriptor held from before."""
    os.chmod(os.path.join(ws, "answer.key"), 0o666)  # the sandbox's to write, until protected
    with make(d, ws, tier=tier) as sb:
        p = sb.start(["sh", "-c", "exec 3>>/workspace/answer.key; echo ready; read x; echo forged >&3; sleep 600"],
                     keep_stdin=True)
        cordonlib.wait_for(lambda: "ready" in printed(p), timeout=10, what="holder ready")
        with pytest.raises(SandboxNotRunning) as e:
            sb.update(protect=PROTECT)
        assert e.value.code == "protect_busy" and "/workspace/answer.key" in e.value.message, e.value
        assert f"pid {p.pid} " in e.value.message, e.value
        assert sb.info()["spec"]["protect"] == []
        assert sh(sb, "cat /workspace/answer.key").stdout == SECRET  # refused: nothing changed
        q = sb.start(["sh", "-c", "cd /workspace/tests && echo ready && sleep 600"])
        p.kill()
        p.wait(timeout=10)
        cordonlib.wait_for(lambda: "ready" in printed(q), timeout=10, what="cwd holder")
        with pytest.raises(SandboxNotRunning) as e:
            sb.update(protect=PROTECT)
        assert "has its cwd in /workspace/tests" in e.value.message, e.value
        q.kill()
        q.wait(timeout=10)
        sb.update(protect=PROTECT)
        assert sh(sb, "echo x >> /workspace/answer.key").exit_code != 0
    intact(ws)


def test_released_paths_are_the_sandboxs_again(d, ws, tier):
    os.chmod(os.path.join(ws, "tests"), 0o777)
    with make(d, ws, protect=PROTECT, tier=tier) as sb:
        assert sh(sb, "touch /workspace/tests/new").exit_code != 0
        sb.update(protect=["/workspace/answer.key"])  # the tests released, the key kept
        r = sh(sb, "cat /workspace/tests/test_hidden.py && touch /workspace/tests/new && rm /workspace/tests/new")
        assert r.exit_code == 0 and "solve()" in r.stdout, r
        assert sh(sb, "cat /workspace/answer.key").exit_code != 0
        # Released, the directory still cannot be moved aside (its bind stays, writable).
        assert sh(sb, "mv /workspace/tests /workspace/t2").exit_code != 0
        sb.update(protect=[])
        assert sh(sb, "cat /workspace/answer.key").stdout == SECRET
        assert sb.info()["spec"]["protect"] == []
        before = sb.violations()["counts"]["protect"]
        sh(sb, "cat /workspace/answer.key /workspace/tests/sub/deep.txt")
        assert sb.violations()["counts"]["protect"] == before


def test_protected_later_survives_a_cordond_crash(shared_dir, ws):
    """The group made for the change is handed to init, which holds it: while no cordond runs, an
    open of a protected file waits (nobody answers), and the next cordond takes the group back."""
    d1 = Daemon(shared_dir, keep=True)
    try:
        sb = make(d1, ws)
        sb.update(protect=PROTECT)
        assert sh(sb, "cat /workspace/answer.key").exit_code != 0
        time.sleep(0.2)  # the hand-over waits for nothing else to be written to init
        # A reader that tries while no cordond runs. Had the group died with cordond, its marks
        # would have gone with it and this read would get the key.
        sb.start(["sh", "-c", "sleep 1.5; cat /workspace/answer.key > /tmp/out 2>&1; echo $? > /tmp/rc"])
    finally:
        d1.kill9()
    time.sleep(3)
    d2 = Daemon(shared_dir)
    try:
        sb2 = Sandbox.connect(sb.id, endpoint=d2.endpoint)
        assert any(e["type"] == "adopted" for e in sb2.events())
        cordonlib.wait_for(lambda: sh(sb2, "cat /tmp/rc").exit_code == 0, timeout=10, what="the reader's end")
        r = sh(sb2, "cat /tmp/out /tmp/rc")
        assert SECRET not in r.stdout and r.stdout.split()[-1] != "0", r
        r = sh(sb2, "cat /workspace/answer.key; echo x >> /workspace/answer.key")
        assert SECRET not in r.stdout and r.exit_code != 0, r
        assert sb2.violations()["counts"]["protect"] >= 1
        sb2.kill()
    finally:
        assert d2.stop() == 0, d2.output()
    intact(ws)


def test_bad_protect_patches_are_refused(d, ws, tier):
    with make(d, ws, tier=tier) as sb:
        for body, field, needle in [
            ({"protect": "/workspace/answer.key"}, "protect", "array"),
            ({"protect": ["workspace"]}, "protect[0]", "absolute"),
            ({"protect": ["/workspace/answer.key", "/workspace/nothing-here"]}, "protect[1]", "does not exist"),
        ]:
            st, r = d.http("PATCH", f"/v1/sandboxes/{sb.id}", body)
            assert st == 400 and r["error"]["field"] == field and needle in r["error"]["message"], (body, r)
        assert sb.info()["spec"]["protect"] == []
        assert sh(sb, "cat /workspace/answer.key").stdout == SECRET  # nothing of a refused patch stays


def test_a_tier_that_fixes_them_at_creation_says_so(d):
    with Sandbox.create(endpoint=d.endpoint, tier="process") as sb:
        with pytest.raises(InvalidArgument) as e:
            sb.update(protect=["/tmp"])
        assert e.value.field == "protect" and "fixed at creation on tier process" in e.value.message, e.value


def test_cli_and_async_sdk_change_them(d, ws):
    env = dict(os.environ, CORDON_SOCKET=d.socket)
    with make(d, ws) as sb:
        p = subprocess.run([cordonlib.CORDON_BIN, "update", sb.id, "--protect", "/workspace/answer.key"], env=env,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 and '"protect":["/workspace/answer.key"]' in p.stdout, p
        assert sh(sb, "cat /workspace/answer.key").exit_code != 0
        p = subprocess.run([cordonlib.CORDON_BIN, "update", sb.id, "--no-protect"], env=env, capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 0, p
        assert sh(sb, "cat /workspace/answer.key").stdout == SECRET

    async def phase():
        async with await AsyncSandbox.create(endpoint=d.endpoint,
                                             mounts=[{"source": ws, "target": "/workspace"}]) as asb:
            info = await asb.update(protect=["/workspace/tests/**"])
            assert info["spec"]["protect"] == ["/workspace/tests/**"]
            r = await asb.exec(["cat", "/workspace/tests/test_hidden.py"])
            assert r.exit_code != 0 and "solve()" not in r.stdout, r

    asyncio.run(phase())


def test_ways_in_past_a_new_pin_a_hard_link_or_a_symlink_refuse_the_change(d, ws, tier):
    """The other ways a reference from before the change gets past it: a working directory in a
    parent that becomes a mount point only now (the binds land on the new mount; the shell's
    directory is the one beneath it), a hard link made before, a symlink that would steer the bind.
    Each is refused, naming it. Without the check of a newly pinned parent (holder_roots), the PATCH
    succeeded and the shell in /workspace/repo appended to tests/mine."""
    os.makedirs(os.path.join(ws, "repo", "tests"))
    os.chmod(os.path.join(ws, "repo"), 0o777)
    os.chmod(os.path.join(ws, "repo", "tests"), 0o777)
    with make(d, ws, tier=tier) as sb:
        assert sh(sb, "echo mine > /workspace/repo/tests/mine").exit_code == 0
        p = sb.start(["sh", "-c", "cd /workspace/repo && echo ready && read x && echo forged >> tests/mine; sleep 600"],
                     keep_stdin=True)
        cordonlib.wait_for(lambda: "ready" in printed(p), timeout=10, what="holder ready")
        with pytest.raises(SandboxNotRunning) as e:
            sb.update(protect=["/workspace/repo/tests/**"])
        assert e.value.code == "protect_busy" and "has its cwd in /workspace/repo" in e.value.message, e.value
        p.kill()
        p.wait(timeout=10)
        # (the failed change left /workspace/repo a mount point of its own: a link stays inside it)
        assert sh(sb, "ln /workspace/repo/tests/mine /workspace/repo/linked").exit_code == 0
        with pytest.raises(SandboxNotRunning) as e:
            sb.update(protect=["/workspace/repo/tests/**"])
        assert "/workspace/repo/tests/mine has 2 names" in e.value.message, e.value
        assert sh(sb, "rm /workspace/repo/linked && ln -s /workspace/repo/tests /workspace/repo/alias").exit_code == 0
        with pytest.raises(InvalidArgument) as e:
            sb.update(protect=["/workspace/repo/alias"])
        assert e.value.field == "protect[0]" and "reached through a symlink" in e.value.message, e.value
        assert sb.info()["spec"]["protect"] == []
        sb.update(protect=["/workspace/repo/tests/**"])
        assert sh(sb, "echo x >> /workspace/repo/tests/mine").exit_code != 0
        assert sh(sb, "cat /workspace/repo/tests/mine").exit_code != 0


def test_a_pattern_over_a_protected_path_and_a_path_named_twice(d, ws, tier):
    """A new pattern whose bind covers a path protected before copies that path's mount with it: the
    copy is guarded too. Without marking what lies beneath a new bind (init-vm-protect.c mark_all),
    `cat deep.txt` read the key through the unmarked copy on microvm. A path named by two patterns
    stays protected when one of them goes: without the check of the paths still protected, dropping
    the later pattern made its bind, stacked on the first, writable: an open is the guard's to refuse,
    but truncate(2) by name opens nothing, and emptied the key."""
    deep = "/workspace/tests/sub/deep.txt"
    os.chmod(os.path.join(ws, "tests", "sub"), 0o777)
    os.chmod(os.path.join(ws, "tests", "sub", "deep.txt"), 0o666)

    def guarded():
        r = sh(sb, f"cat {deep}; echo x >> {deep}")
        assert SECRET not in r.stdout and r.exit_code != 0, r
        r = sb.exec(["python3", "-c", f"import os; os.truncate('{deep}', 0)"])
        assert r.exit_code != 0 and "Read-only file system" in r.stderr, r

    with make(d, ws, protect=[deep], tier=tier) as sb:
        sb.update(protect=[deep, "/workspace/tests/sub/*.txt"])  # the same path named twice
        sb.update(protect=[deep])
        guarded()
        sb.update(protect=["/workspace/tests/sub/*.txt", deep])
        sb.update(protect=["/workspace/tests/sub/*.txt"])
        guarded()
        sb.update(protect=[deep, "/workspace/tests/**"])
        guarded()
        r = sh(sb, "cat /workspace/tests/test_hidden.py")
        assert r.exit_code != 0 and "solve()" not in r.stdout, r
        sb.update(protect=[deep])  # the tests released, the key beneath them kept
        r = sh(sb, "cat /workspace/tests/test_hidden.py")
        assert r.exit_code == 0 and "solve()" in r.stdout, r
        guarded()
        r = sb.exec(["cat", deep], verifier=True)  # the step finds them where they were
        assert r.exit_code == 0 and SECRET in r.stdout, r
        assert sb.violations()["counts"]["protect"] >= 4
    with open(os.path.join(ws, "tests", "sub", "deep.txt")) as f:
        assert f.read() == SECRET


@pytest.mark.needs_vm
def test_a_guest_refuses_a_pattern_too_long_for_its_start(d, ws):
    """A guest learns its first patterns in 256 bytes each: a longer one is refused, not cut short
    (it then named another path, and the one asked for went unprotected). A later PATCH takes up to
    1024 bytes."""
    long = "/workspace/" + "a" * 300
    with pytest.raises(InvalidArgument) as e:
        Sandbox.create(endpoint=d.endpoint, tier="microvm", protect=[long])
    assert e.value.field == "protect[0]" and "at most 255 bytes" in e.value.message, e.value
    deep = os.path.join(ws, "b" * 200, "c" * 100)
    os.makedirs(os.path.dirname(deep))
    with open(deep, "w") as f:
        f.write(SECRET)
    with make(d, ws, tier="microvm") as sb:
        path = "/workspace/" + os.path.relpath(deep, ws)
        sb.update(protect=[path])
        r = sh(sb, f"cat {path}")
        assert r.exit_code != 0 and SECRET not in r.stdout, r
