"""Checkpoints and forks (issue 23 points 3 and 5, docs/trajectories.md): a sandbox made with
"checkpoints": true keeps its writable layer in the checkpoint store, POST …/checkpoints freezes
its files into a reflink copy, and a fork (or a create with "checkpoint") starts new sandboxes
from one.

What these catch: a checkpoint that is not the files of its moment (a write after it seen in a
fork, a file deleted before it back again, a mode, link or owner changed), forks that see each
other's writes, a fork that loses the egress policy, checkpoints lost by a restart of cordond, a
chain that grows a stack of layers, and the layers' loop devices or the store left behind (the
autouse leak check)."""

import os
import subprocess
import time

import pytest

import cordon
from cordon import Sandbox
from cordonlib import CORDON_BIN, Daemon, state_daemon

TREE = r"""
set -e
cd /workspace
mkdir -p d/e sticky
echo hello > d/f; chmod 600 d/f
printf 'x%.0s' $(seq 1 3000) > d/e/big
head -c 5000000 /dev/urandom > blob
: > empty
ln -s d/f rel; ln -s /etc/hostname abs; ln -s nowhere dangling
ln d/f hard
chmod 1777 sticky; chmod 751 d/e
mkfifo pipe
echo gone > gone; rm gone
echo tmp > /tmp/t
"""
# What a tree is, to compare: every entry's type, mode, size, owner, link target and content hash.
SNAPSHOT = r"""
cd / && find workspace tmp -mindepth 1 \( -path tmp/.X11-unix -prune \) -o -printf '%p %y %m %s %U %G %n %l\n' | sort
cd / && find workspace tmp -type f -exec sha256sum {} + | sort
"""


@pytest.fixture
def cd(state_daemon):
    return state_daemon


@pytest.fixture
def egress_daemon(shared_dir, net):
    """A cordond whose resolver asks the fake internet (fakenet.py)."""
    import fakenet
    yield from state_daemon(shared_dir, "--dns-upstream", fakenet.DNS_IP)


def snapshot(sb):
    r = sb.exec(SNAPSHOT)
    assert r.exit_code == 0, r
    return r.stdout


def test_a_fork_has_the_checkpoints_files_exactly(cd):
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True) as sb:
        assert sb.exec(TREE).exit_code == 0
        before = snapshot(sb)
        ck = sb.checkpoint()
        assert ck["id"].startswith("ck-") and ck["sandbox"] == sb.id and ck["parent"] is None, ck
        # after the checkpoint: none of this is in it
        assert sb.exec("echo later > /workspace/later; rm /workspace/d/f; chmod 700 /workspace/sticky; "
                       "echo changed > /workspace/empty").exit_code == 0
        assert snapshot(sb) != before
        [child] = sb.fork(1, checkpoint=ck)
        with child:
            assert child.id != sb.id
            assert snapshot(child) == before  # content, deleted files, modes, links, owners, hard links
            assert child.exec("cat /workspace/rel").stdout == "hello\n"
            # its files are its own to change (the layer of another slot, idmapped onto this one's)
            r = child.exec("echo mine >> /workspace/d/f && cat /workspace/d/f && touch /workspace/d/e/n && id -u")
            assert r.exit_code == 0 and r.stdout == "hello\nmine\n0\n", r
            assert child.info()["spec"]["checkpoint"] == ck["id"]
        # a create from it, as a resume does
        with Sandbox.create(endpoint=cd.endpoint, checkpoint=ck["id"]) as again:
            assert snapshot(again) == before
        assert [c["id"] for c in sb.checkpoints()] == [ck["id"]]


def test_a_fork_of_8_diverges(cd):
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True, trajectory="grpo/q1", labels={"job": "j"}) as sb:
        sb.exec("echo prompt > /workspace/p", step=0)
        kids = sb.fork(8, labels={"group": "g1"})
        try:
            assert len(kids) == 8 and len({k.id for k in kids}) == 8
            for i, k in enumerate(kids, 1):
                spec = k.info()["spec"]
                assert spec["trajectory"] == f"grpo/q1/b{i}" and k.labels == {"job": "j", "group": "g1"}, spec
                t = k.trajectory()
                assert [s["step"] for s in t["steps"]] == [0] and t["steps"][0]["sandbox"] == sb.id, t
                # each continues its own trajectory from the fork's step
                r = k.exec(f"echo {i} > /workspace/answer; echo {i} >> /workspace/p; ls /workspace", step=1)
                assert r.exit_code == 0 and r.step == 1, r
            for i, k in enumerate(kids, 1):
                assert k.exec("cat /workspace/answer /workspace/p").stdout == f"{i}\nprompt\n{i}\n"
            assert sb.exec("ls /workspace; cat /workspace/p").stdout == "p\nprompt\n"
            assert len(sb.trajectory()["steps"]) == 2  # its own step 1 (the ls), none of theirs
            # a second fork of the same trajectory takes the next free names
            more = sb.fork(2)
            kids += more
            assert [k.info()["spec"]["trajectory"] for k in more] == ["grpo/q1/b9", "grpo/q1/b10"]
            assert [s["step"] for s in more[0].trajectory()["steps"]] == [0, 1]
        finally:
            for k in kids:
                k.kill()


def test_checkpoints_survive_a_restart_of_cordond(shared_dir):
    state = os.path.join(shared_dir, "state")
    d = Daemon(shared_dir, "--state-dir", state, keep=True)
    sb = Sandbox.create(endpoint=d.endpoint, checkpoints=True)
    sb.exec("echo one > /workspace/n")
    ck1 = sb.checkpoint()
    sb.exec("echo two > /workspace/n")
    ck2 = sb.checkpoint()
    assert ck2["parent"] == ck1["id"]
    d.kill9()
    d2 = Daemon(shared_dir, "--state-dir", state)
    try:
        assert [c["id"] for c in cordon.checkpoints(sandbox=sb.id, endpoint=d2.endpoint)] == [ck1["id"], ck2["id"]]
        again = Sandbox.connect(sb.id, endpoint=d2.endpoint)
        again.exec("echo three > /workspace/n")
        ck3 = again.checkpoint()  # the adopted sandbox's layer, found again
        for ck, want in [(ck1, "one"), (ck3, "three")]:
            [k] = again.fork(1, checkpoint=ck["id"])
            with k:
                assert k.exec("cat /workspace/n").stdout == want + "\n"
        again.kill()
        # a checkpoint outlives its sandbox, until deleted
        with Sandbox.create(endpoint=d2.endpoint, checkpoint=ck2["id"]) as k:
            assert k.exec("cat /workspace/n").stdout == "two\n"
        cordon.delete_checkpoint(ck2, endpoint=d2.endpoint)
        with pytest.raises(cordon.NotFound):
            d2.endpoint.json("GET", f"/v1/checkpoints/{ck2['id']}")
        assert ck2["id"] not in [c["id"] for c in cordon.checkpoints(endpoint=d2.endpoint)]
    finally:
        assert d2.stop() == 0, d2.output()


def test_a_chain_of_200_checkpoints(cd):
    """Each checkpoint is one whole reflink copy, not a delta on the one before: any of a long
    chain starts a sandbox as fast, on one layer."""
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True) as sb:
        ids = []
        for i in range(200):
            sb.files.write("/workspace/n", f"{i}\n".encode())
            ids.append(sb.checkpoint()["id"])
        chain = sb.checkpoints()
        assert [c["id"] for c in chain] == ids
        assert all(c["parent"] == p for c, p in zip(chain[1:], ids))
        for i in (0, 99, 199):
            with Sandbox.create(endpoint=cd.endpoint, checkpoint=ids[i]) as k:
                assert k.files.read("/workspace/n") == f"{i}\n".encode()
                # one overlay over one layer, however long the chain
                assert k.exec("grep -c ' overlay ' /proc/self/mountinfo").stdout == "1\n"


def test_what_checkpoints_refuse(cd):
    with Sandbox.create(endpoint=cd.endpoint) as plain:
        with pytest.raises(cordon.CordonError) as e:
            plain.checkpoint()
        assert (e.value.status, e.value.code) == (409, "checkpoints_off"), e.value
    for fields, field in [({"tier": "microvm", "checkpoints": True}, "checkpoints"),
                          ({"disk": "memory", "checkpoints": True}, "checkpoints"),
                          ({"checkpoints": "yes"}, "checkpoints"),
                          ({"checkpoint": "ck-nothex"}, "checkpoint"),
                          ({"checkpoint": "ck-0123456789abcdef"}, "checkpoint")]:
        with pytest.raises(cordon.InvalidArgument) as e:
            Sandbox.create(endpoint=cd.endpoint, **fields)
        assert e.value.field == field, (fields, e.value)
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True) as a, \
            Sandbox.create(endpoint=cd.endpoint, checkpoints=True) as b:
        ck = a.checkpoint()
        # a container's checkpoint keeps its files, not its memory (a microvm guest's keeps both)
        for body, field in [({"memory": True}, "memory"), ({"memory": "yes"}, "memory"), ({"what": 1}, "what")]:
            with pytest.raises(cordon.InvalidArgument) as e:
                cd.endpoint.json("POST", f"/v1/sandboxes/{a.id}/checkpoints", body)
            assert e.value.field == field, (body, e.value)
        assert "memory" not in a.checkpoint(memory=False)
        with pytest.raises(cordon.CordonError) as e:
            b.fork(1, checkpoint=ck)
        assert (e.value.status, e.value.code) == (409, "checkpoint_mismatch"), e.value
        for body, field in [({"count": 0}, "count"), ({"count": 65}, "count"), ({"count": "2"}, "count"),
                            ({"labels": {"a": 1}}, "labels"), ({"what": 1}, "what")]:
            with pytest.raises(cordon.InvalidArgument) as e:
                cd.endpoint.json("POST", f"/v1/sandboxes/{a.id}/fork", body)
            assert e.value.field == field, (body, e.value)
        with pytest.raises(cordon.NotFound):
            a.fork(1, checkpoint="ck-0123456789abcdef")
    with pytest.raises(cordon.NotFound):
        cd.endpoint.json("GET", "/v1/checkpoints/ck-0123456789abcdef")
    with pytest.raises(cordon.NotFound):
        cd.endpoint.json("DELETE", "/v1/checkpoints/nonsense")


def allowed_and_denied(sb):
    r = sb.exec("curl -sS -m 10 http://pypi.test/")
    assert r.exit_code == 0 and "host=pypi.test" in r.stdout, r
    r = sb.exec("curl -sS -m 10 http://evil.test/")
    assert r.exit_code == 6, r  # not resolved: off the list
    assert sb.violations()["counts"]["egress"] >= 1


def test_a_fork_keeps_the_egress_policy(egress_daemon):
    with Sandbox.create(endpoint=egress_daemon.endpoint, checkpoints=True,
                        network={"mode": "allowlist", "allow": ["pypi.test:80"]}) as sb:
        [k] = sb.fork(1)
        with k:
            assert k.info()["spec"]["network"] == sb.info()["spec"]["network"]
            allowed_and_denied(k)


def test_the_cli_takes_lists_forks_and_deletes(cd):
    env = dict(os.environ, CORDON_SOCKET=cd.socket)

    def cli(*args):
        return subprocess.run([CORDON_BIN, *args], env=env, capture_output=True, text=True)

    made = cli("create", "--checkpoints", "--trajectory", "cli-ck")
    assert made.returncode == 0, made.stderr
    sid = made.stdout.strip()
    try:
        assert cli("exec", "--step", "0", sid, "--", "sh", "-c", "echo v1 > /workspace/v").returncode == 0
        ck = cli("checkpoint", sid)  # the C client's cordon_checkpoint
        assert ck.returncode == 0 and ck.stdout.startswith("ck-"), ck
        ck = ck.stdout.strip()
        assert cli("exec", sid, "--", "sh", "-c", "echo v2 > /workspace/v").returncode == 0
        rows = cli("checkpoint", "ls", sid).stdout.splitlines()
        assert len(rows) == 1 and rows[0].split()[:2] == [ck, sid] and rows[0].endswith("cli-ck@1"), rows
        forked = cli("fork", sid, "-n", "2", "--checkpoint", ck)  # cordon_fork
        assert forked.returncode == 0, forked.stderr
        kids = forked.stdout.split()
        assert len(kids) == 2
        for k in kids:
            r = cli("exec", k, "--", "cat", "/workspace/v")
            assert (r.returncode, r.stdout) == (0, "v1\n"), r
        from_ck = cli("create", "--from-checkpoint", ck)
        assert from_ck.returncode == 0, from_ck.stderr
        kids.append(from_ck.stdout.strip())
        assert cli("exec", kids[-1], "--", "cat", "/workspace/v").stdout == "v1\n"
        assert cli("kill", *kids).returncode == 0
        rb = cli("rollback", sid, ck)  # cordon_rollback
        assert rb.returncode == 0, rb.stderr
        assert cli("exec", sid, "--", "cat", "/workspace/v").stdout == "v1\n"
        assert cli("rollback", sid, "nonsense").returncode == 125
        assert cli("checkpoint", "rm", ck).returncode == 0
        assert cli("checkpoint", "ls", sid).stdout == ""
        bad = cli("fork", sid, "-n", "0")
        assert bad.returncode == 125 and "usage" in bad.stderr, bad
        bad = cli("run", "--checkpoints", "--", "true")
        assert bad.returncode == 125 and "cordon create" in bad.stderr, bad
        plain = cli("create").stdout.strip()
        off = cli("checkpoint", plain)
        assert off.returncode != 0 and "checkpoints" in off.stderr, off
        cli("kill", plain)
    finally:
        cli("kill", sid)


def test_a_rollback_restores_the_files_exactly_and_ends_every_process(cd, shared_dir):
    answers = os.path.join(shared_dir, "answers")
    os.makedirs(answers)
    with open(os.path.join(answers, "secret"), "w") as f:
        f.write("42\n")
    os.chmod(shared_dir, 0o755)
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True, trajectory="rb/1",
                        mounts=[{"source": answers, "target": "/srv/answers", "readonly": True}],
                        protect=["/srv/answers/**"]) as sb:
        assert sb.exec(TREE, step=0).exit_code == 0
        before = snapshot(sb)  # step 1
        ck = sb.checkpoint()
        assert ck["step"] == 2, ck
        events_before = len(sb.events())
        sb.exec("echo later > /workspace/later; rm -r /workspace/d; chmod 700 /workspace/sticky; "
                "ln -sf /tmp /workspace/rel; echo changed > /workspace/empty; rm /tmp/t", step=2)
        sb.exec("true", step=3)
        pid = sb.start(["sleep", "300"]).pid  # a process started after the checkpoint
        assert snapshot(sb) != before
        info = sb.rollback(ck)
        assert info["state"] == "running" and info["id"] == sb.id and info["rolled_back_steps"] == 3, info
        assert snapshot(sb) == before  # content, deleted files back, modes, links, owners
        ps = sb.exec("ps -eo pid,args").stdout
        assert "sleep 300" not in ps, ps  # every process of before is gone
        assert pid not in [p.pid for p in sb.processes()]
        # the trajectory is back at the checkpoint's step; the steps after it are kept, marked
        t = sb.trajectory()
        assert t["next_step"] == 4 and [s["step"] for s in t["steps"]] == [0, 1, 2, 3], t  # 2, 3: the looks
        assert [(s["step"], s["rolled_back"]["checkpoint"]) for s in t["rolled_back"]] == [
            (2, ck["id"]), (3, ck["id"]), (4, ck["id"])], t
        r = sb.exec("echo another step", step=4)  # a new step 4: not the rolled-back one
        assert (r.exit_code, r.replayed, r.step) == (0, False, 4), r
        # still its own: events go on (the rollback among them), writes work, its guard holds
        ev = sb.events()
        assert len(ev) > events_before and any(e["type"] == "rollback" for e in ev), ev[-5:]
        assert sb.exec("echo x > /workspace/d/f && cat /workspace/d/f").stdout == "x\n"
        r = sb.exec("cat /srv/answers/secret")
        assert r.exit_code != 0 and "42" not in r.stdout, r  # the guard holds in the new init too
        assert sb.violations()["counts"]["protect"] >= 1
        # again, to a checkpoint of the rolled-back sandbox
        ck2 = sb.checkpoint()
        sb.exec("rm -rf /workspace/*")
        sb.rollback(ck2)
        assert sb.exec("cat /workspace/d/f").stdout == "x\n"


def test_a_rollback_keeps_the_egress_policy(egress_daemon):
    with Sandbox.create(endpoint=egress_daemon.endpoint, checkpoints=True,
                        network={"mode": "allowlist", "allow": ["pypi.test:80"]}) as sb:
        sb.rollback(sb.checkpoint())
        allowed_and_denied(sb)


def test_oom_kills_and_pids_hits_after_a_rollback_are_violations(cd):
    """The new init of a rollback runs in another cgroup (the old one's teardown goes on beside it),
    which may be a new one or one kept from another sandbox, with counts of its own. Its OOM kills and
    pids-limit hits are counted from where it stands: before the fix, the box's counts stayed the old
    cgroup's, and those after the rollback went uncounted (`assert 1 > 1`) until they passed them."""
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True, memory_mb=64, pids=16) as sb:
        def hits():
            r = sb.exec(["python3", "-c", "b = bytearray(512 << 20)"], timeout_s=60)
            assert r.exit_code == 137, r  # the OOM killer
            sb.exec(["sh", "-c", "for i in $(seq 1 40); do sleep 2 & done; wait"], timeout_s=60)
            return sb.violations()["counts"]
        first = hits()
        assert first["oom"] >= 1 and first["pids"] >= 1, first
        ck = sb.checkpoint()
        sb.rollback(ck)
        assert sb.violations()["counts"] == first  # the rollback itself is none
        again = hits()
        assert again["oom"] > first["oom"] and again["pids"] > first["pids"], (first, again)
        assert sb.usage()["oom_kills"] >= 1, sb.usage()


def test_files_a_sandbox_wrote_in_a_read_write_bind_stay_its_own_after_a_rollback(cd, shared_dir):
    """A bind is not idmapped: its files keep the host ids of the slot that wrote them. A rollback whose
    new init took another slot (as one without read-write binds does) would see them as nobody's:
    before the fix, `echo b >> f` failed with "Permission denied" after the rollback."""
    rw = os.path.join(shared_dir, "rw")
    os.makedirs(rw)
    os.chmod(rw, 0o777)
    os.chmod(shared_dir, 0o755)
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True,
                        mounts=[{"source": rw, "target": "/srv/rw"}]) as sb:
        assert sb.exec("echo a > /srv/rw/f && mkdir /srv/rw/d && echo c > /srv/rw/d/g").exit_code == 0
        ck = sb.checkpoint()
        sb.exec("true")
        for _ in range(2):
            sb.rollback(ck)
            r = sb.exec("echo b >> /srv/rw/f && cat /srv/rw/f && rm -r /srv/rw/d && stat -c %u /srv/rw/f")
            assert r.exit_code == 0 and r.stdout == "a\nb\n0\n", r
            sb.exec("echo a > /srv/rw/f && mkdir /srv/rw/d && echo c > /srv/rw/d/g")


def test_a_rollback_to_an_older_checkpoint_and_back_to_the_newest(cd):
    """A rollback to the newest checkpoint starts on the layer made ahead for it (standby.c); one to
    any other clones its image then. Both give the checkpoint's files exactly, again and again, and a
    deleted checkpoint's layer made ahead goes with it (the leak check: its loop device)."""
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True) as sb:
        assert sb.exec(TREE).exit_code == 0
        one = snapshot(sb)
        ck1 = sb.checkpoint()
        sb.exec("echo two > /workspace/two && rm /workspace/blob")
        two = snapshot(sb)
        ck2 = sb.checkpoint()
        for ck, want in [(ck1, one), (ck1, one), (ck2, two), (ck2, two), (ck1, one)]:
            sb.exec("rm -rf /workspace/d && echo x > /workspace/x")
            sb.rollback(ck)
            assert snapshot(sb) == want, ck["id"]
        cd.endpoint.json("DELETE", f"/v1/checkpoints/{ck1['id']}")
        sb.exec("echo three > /workspace/three")
        sb.rollback(ck2)
        assert snapshot(sb) == two


def test_what_a_rollback_refuses(cd):
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True) as a, \
            Sandbox.create(endpoint=cd.endpoint, checkpoints=True) as b:
        ck = a.checkpoint()
        with pytest.raises(cordon.CordonError) as e:
            b.rollback(ck)
        assert (e.value.status, e.value.code) == (409, "checkpoint_mismatch"), e.value
        with pytest.raises(cordon.NotFound):
            a.rollback("ck-0123456789abcdef")
        for body, field in [({}, "checkpoint"), ({"checkpoint": 1}, "checkpoint"), ({"x": 1}, "x")]:
            with pytest.raises(cordon.InvalidArgument) as e:
                cd.endpoint.json("POST", f"/v1/sandboxes/{a.id}/rollback", body)
            assert e.value.field == field, (body, e.value)
        [k] = a.fork(1, checkpoint=ck)
        with k:  # a fork may go back to the checkpoint it was made from
            k.exec("echo k > /workspace/k")
            k.rollback(ck)
            assert k.exec("ls /workspace").stdout == ""
        a.pause()
        with pytest.raises(cordon.CordonError) as e:
            a.rollback(ck)
        assert e.value.status == 409, e.value
        a.resume()


def test_resume_after_the_sandbox_was_deleted_behind_the_trajectorys_back(cd):
    append = "echo once >> /workspace/log; wc -l < /workspace/log"
    sb = Sandbox.create(endpoint=cd.endpoint, checkpoints=True, trajectory="resume/1")
    assert sb.exec(append, step=0).stdout == "1\n"
    ck = sb.checkpoint()
    assert ck["step"] == 1
    assert sb.exec(append, step=1).stdout == "2\n"
    alive = Sandbox.resume("resume/1", endpoint=cd.endpoint)  # alive: that one
    assert alive.id == sb.id and alive._info["resumed"] is False
    sb.kill()  # gone (reaped, its host rebooted): the worker does not know
    again = Sandbox.resume("resume/1", endpoint=cd.endpoint)
    with again:
        assert again.id != sb.id and again._info["resumed"] is True and again._info["checkpoint"] == ck["id"]
        # the worker re-issues its steps from 0: answered from the log up to the checkpoint, then run
        r = again.exec(append, step=0)
        assert (r.stdout, r.replayed) == ("1\n", True), r
        r = again.exec(append, step=1)
        assert (r.stdout, r.replayed) == ("2\n", False), r  # ran again, on the checkpoint's files
        assert again.files.read("/workspace/log") == b"once\nonce\n"
        t = again.trajectory()
        assert t["next_step"] == 2 and t["sandbox"] == again.id, t
        assert [s["step"] for s in t["rolled_back"]] == [1], t
        # the thaw of a paused sandbox is still sb.resume()
        again.pause()
        assert again.resume().get("paused") is not True and again.exec("true").exit_code == 0
    with pytest.raises(cordon.NotFound):
        Sandbox.resume("never/checkpointed", endpoint=cd.endpoint)
    with pytest.raises(cordon.InvalidArgument):
        cd.endpoint.json("POST", "/v1/trajectories/" + "a" * 250 + "/resume", {})


def test_a_checkpoint_with_no_room_left_fails_cleanly(shared_dir):
    """A store of 600 MiB: a checkpoint of the first sandbox (150 MiB) leaves room for it to rewrite
    all of its layer; the second (250 MiB) has filled the store past that room, and its checkpoint
    is 507 with the sandbox running on. Without the check the checkpoint is taken, and
    the sandbox's later writes can meet a full store as I/O errors."""
    state = os.path.join(shared_dir, "state")
    d = Daemon(shared_dir, "--state-dir", state, "--checkpoint-store-size", "600M")
    try:
        with Sandbox.create(endpoint=d.endpoint, checkpoints=True, disk_mb=150) as a:
            a.exec("head -c 100M /dev/urandom > /workspace/big")
            a.checkpoint()
            a.exec("head -c 100M /dev/urandom > /workspace/big")  # new blocks: the checkpoint keeps the old
            with Sandbox.create(endpoint=d.endpoint, checkpoints=True, disk_mb=250) as b:
                b.exec("head -c 200M /dev/urandom > /workspace/f")
                with pytest.raises(cordon.CordonError) as e:
                    b.checkpoint()
                assert (e.value.status, e.value.code) == (507, "insufficient_storage"), e.value
                assert b.checkpoints() == []  # nothing of it left in the store
                r = b.exec("echo still > /workspace/g && cat /workspace/g && sha256sum /workspace/f | wc -l")
                assert (r.exit_code, r.stdout) == (0, "still\n1\n"), r
            # deleting checkpoints gives the room back (b's layer goes once its mounts are gone)
            for ck in a.checkpoints():
                cordon.delete_checkpoint(ck, endpoint=d.endpoint)
            for _ in range(100):
                try:
                    assert a.checkpoint()["id"].startswith("ck-")
                    break
                except cordon.CordonError as e:
                    assert e.status == 507, e
                    time.sleep(0.1)
            else:
                pytest.fail("no room came back")
    finally:
        assert d.stop() == 0, d.output()


def test_a_restored_sandbox_follows_none_of_the_symlinks_left_in_it(cd):
    """What a sandbox leaves in its layer is the next one's setup's input. A symlink it put in place
    of its working directory would have the fork's setup make the image's /etc its writable
    working directory; it is refused instead."""
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True, workdir="/workspace/w") as sb:
        assert sb.exec("cd / && rm -rf /workspace/w && ln -s /etc /workspace/w && ls -ld /workspace/w").exit_code == 0
        ck = sb.checkpoint()
        with pytest.raises(cordon.CordonError) as e:
            sb.fork(1, checkpoint=ck)  # its spec: the same working directory
        assert "symlink" in e.value.message, e.value
        assert sb.exec("cat /etc/hostname").exit_code == 0


def test_a_sibling_verifier_of_a_restored_sandbox_starts_from_the_image(cd):
    """A sibling verifier is a fresh sandbox of the image with only the copied paths; made from a
    checkpoint's spec, it would start with the agent's files (seen before the fix: the planted
    conftest.py was there)."""
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True) as sb:
        sb.exec("mkdir -p /workspace/repo && echo ok > /workspace/repo/a && echo planted > /workspace/conftest.py")
        ck = sb.checkpoint()
        with Sandbox.create(endpoint=cd.endpoint, checkpoint=ck["id"]) as k:
            r = k.exec("ls /workspace; cat /workspace/repo/a", verifier="sibling", copy=["/workspace/repo"])
            assert r.stdout == "repo\nok\n", r


def test_every_step_checkpoints_each_step_that_ran(cd):
    """checkpoints "every_step": a checkpoint after each step that ran (an exec, a file write), of
    that step's files, taken once the answer is out; none for a replayed step. Seen failing: without
    the hook after a step no checkpoint appears ([] != [1, 2]); without the one at the next step's
    start, the first step's is lost when the next comes within the 1 ms delay, as this client's
    does ([2] != [1, 2])."""
    def cks(of=None):
        return cordon.checkpoints(sandbox=(of or sb).id, endpoint=cd.endpoint)

    def wait_for(n, of=None):
        deadline = time.monotonic() + 10
        while len(cks(of)) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return cks(of)

    with Sandbox.create(endpoint=cd.endpoint, trajectory="every/1", checkpoints="every_step") as sb:
        assert sb.info()["spec"]["checkpoints"] == "every_step"
        assert cks() == []  # none before a step
        assert sb.exec("echo a > /workspace/f", step=0).exit_code == 0
        # the next step at once, maybe within the first one's delay: that one is taken first
        sb.files.write("/workspace/g", b"b", step=1)
        got = wait_for(2)
        assert [c["step"] for c in got] == [1, 2], got
        assert sb.exec("echo a > /workspace/f", step=0).replayed  # a replay runs nothing …
        time.sleep(0.2)
        assert len(cks()) == 2  # … and changes nothing to checkpoint
        [first] = sb.fork(1, checkpoint=got[0]["id"])
        with first:
            assert first.exec("cat /workspace/f; ls /workspace").stdout == "a\nf\n"
        events = [e["type"] for e in sb.events()]
        assert events.count("checkpoint") >= 2 and "checkpoint_failed" not in events, events
        last = got[1]["id"]
    # the sandbox is gone: a resume starts from the last step's checkpoint
    with Sandbox.resume("every/1", endpoint=cd.endpoint) as again:
        assert again._info["checkpoint"] == last
        assert again.info()["spec"]["checkpoints"] == "every_step"  # and it goes on checkpointing
        r = again.exec("cat /workspace/f /workspace/g", step=2)
        assert (r.stdout, r.replayed) == ("a\nb", False), r
        assert [c["step"] for c in wait_for(1, again)] == [3]


def test_what_every_step_refuses(cd):
    for fields, field in [({"checkpoints": "every_step"}, "checkpoints"),  # no trajectory
                          ({"checkpoints": "sometimes", "trajectory": "x"}, "checkpoints"),
                          ({"checkpoint": "every_step", "tier": "process", "trajectory": "x"}, "checkpoints")]:
        with pytest.raises(cordon.CordonError) as e:
            Sandbox.create(endpoint=cd.endpoint, **fields)
        assert e.value.field == field, (fields, e.value)
    # the spelling, "checkpoint": "every_step", is the same policy
    with Sandbox.create(endpoint=cd.endpoint, trajectory="every/2", checkpoint="every_step") as sb:
        assert sb.info()["spec"]["checkpoints"] == "every_step" and "checkpoint" not in sb.info()["spec"]


def test_checkpoints_of_a_sandbox_on_an_oci_image(cd, oci_layout):
    """An OCI image's sandbox (its layers below, with a whiteout, an opaque directory, owners and a
    hard link) keeps checkpoints as the host image's does: a fork and a rollback see the image's
    files as the sandbox had changed them at the checkpoint, and none of the later changes."""
    from test_images import CONFIG, task_layers
    lay = oci_layout()
    lay.tag(lay.new_image(task_layers(), compression="gzip", config=CONFIG), "v1")
    change = ("echo changed > /testbed/README && rm /opt/data/new && mkdir -p /testbed/new && "
              "echo n > /testbed/new/f && rm /testbed/README.link")
    look = ("cat /testbed/README /testbed/readme; ls /opt/data; ls /testbed/new; stat -c '%u:%g' /testbed/new/f "
            "/home/dev/notes; test -e /testbed/README.link && echo link || echo no-link; "
            "test -e /testbed/later && echo later || echo no-later")
    with Sandbox.create(endpoint=cd.endpoint, image=f"oci:{lay.path}:v1", checkpoints=True) as sb:
        assert sb.exec(change).exit_code == 0
        at_ck = sb.exec(look)
        assert at_ck.exit_code == 0 and at_ck.stdout == "changed\nchanged\nf\n0:0\n1000:1000\nno-link\nno-later\n", at_ck
        ck = sb.checkpoint()
        assert sb.exec("echo later > /testbed/later && echo again > /testbed/README").exit_code == 0
        [kid] = sb.fork(1, checkpoint=ck)
        with kid:
            assert kid.exec(look).stdout == at_ck.stdout
            assert kid.exec("echo mine > /testbed/new/f && cat /testbed/new/f").stdout == "mine\n"
        sb.rollback(ck)
        assert sb.exec(look).stdout == at_ck.stdout


def test_every_step_keeps_the_newest_checkpoints(shared_dir):
    """every_step_keep (cordond's option, 32 by default): a sandbox's every_step checkpoints beyond
    it go, the oldest first, so that a sandbox that rewrites its files at every step cannot fill the
    store for all the others; one asked for stays."""
    for d in state_daemon(shared_dir, "--every-step-keep", "2"):
        with Sandbox.create(endpoint=d.endpoint, trajectory="keep/1", checkpoints="every_step") as sb:
            asked = None
            for k in range(4):
                assert sb.exec(f"echo {k} > /workspace/k", step=k).exit_code == 0
                if k == 0:
                    time.sleep(0.2)
                    asked = sb.checkpoint()  # of step 1's files, as the automatic one: both stay
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                got = cordon.checkpoints(sandbox=sb.id, endpoint=d.endpoint)
                if [c["step"] for c in got if c["id"] != asked["id"]] == [3, 4]:
                    break
                time.sleep(0.05)
            assert [c["step"] for c in got if c["id"] != asked["id"]] == [3, 4], got
            assert asked["id"] in [c["id"] for c in got]
            gone = [e for e in sb.events() if e["type"] == "checkpoint_deleted"]
            assert len(gone) == 2 and all(e["why"] == "every_step_keep" for e in gone), gone
            [kid] = sb.fork(1, checkpoint=got[-1]["id"])  # the newest restores
            with kid:
                assert kid.exec("cat /workspace/k").stdout == "3\n"
