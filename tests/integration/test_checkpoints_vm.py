"""Checkpoints of tier microvm (issue 23 points 3 and 4, docs/trajectories.md): a microvm guest's
files live in its RAM (an overlay on a tmpfs), so its checkpoint is the whole guest, saved by QEMU
into the checkpoint store (memory and devices), and a rollback restores the guest as it was then:
its files, and the processes it ran, which go on where they were; a process started after the
checkpoint is gone. Only guests on an OCI or directory image without mounts: QEMU 7.2 cannot save
a guest with a 9p share mounted (the host image's /usr, the binds come that way).

What these catch: a guest that comes back with the files of the moment of the rollback, not the
checkpoint's; restored guests that are not told what changed since they were saved: their clock
(4 s behind), their network (a fork's child answers on its parent's address and asks its parent's
resolver), their randomness (without RESUME's reseed, the three children of a fork read the same
16 bytes from /dev/urandom: seen once, `assert 1 == 3`); a guest stream broken around a checkpoint
(a command streaming its output meanwhile must arrive whole, and the next host must speak to the
restored guest); a QEMU, tap or cgroup left behind by a rollback (the autouse leak check)."""

import os
import threading
import time

import pytest

import cordon
from cordon import Sandbox
from cordonlib import Daemon
from test_checkpoints import cd, egress_daemon  # noqa: F401 (the fixtures: a cordond with its own store)

pytestmark = pytest.mark.needs_vm


# busybox's own resolver (its static wget would need glibc's NSS), then plain HTTP over nc
FETCH = ("ip=$(nslookup {host} | awk '/^Name:/ {{n=1}} n && /^Address/ {{a=$NF}} END {{print a}}') && "
         "[ -n \"$ip\" ] && printf 'GET / HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' | nc -w 10 $ip 80")


def fetch(sb, host):
    return sb.exec(FETCH.format(host=host))


def fetched(sb, host):
    """Whether the fake internet answered for host; what the guest's network looked like if not."""
    r = fetch(sb, host)
    if r.exit_code == 0 and f"host={host}" in r.stdout:
        return True, r
    net = sb.exec("ip addr show eth0; ip route; cat /etc/resolv.conf; nslookup " + host)
    return False, (r, net.stdout, net.stderr, sb.info().get("network"))


def vm(cd, image, **kw):
    return Sandbox.create(endpoint=cd.endpoint, tier="microvm", image=image, checkpoints=True, **kw)


def alive(sb, pid):
    return sb.exec(f"kill -0 {pid} && echo yes || echo no").stdout.strip() == "yes"


def test_a_rollback_restores_the_guest_as_it_was(cd, busybox_image):
    with vm(cd, busybox_image, trajectory="vm/1") as sb:
        r = sb.exec("echo one > /workspace/a; echo keep > /workspace/b; mkdir -p /tmp/d; echo t > /tmp/d/t; "
                    "chmod 640 /workspace/b; ln -s a /workspace/l", step=0)
        assert r.exit_code == 0, r
        # a process of before: it goes on after the rollback, where it was
        before = sb.exec("sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 & echo $!", step=1).stdout.strip()
        tree = sb.exec("ls -la /workspace /tmp/d; cat /workspace/a").stdout
        ck = sb.checkpoint()
        assert ck["id"].startswith("ck-") and ck["memory"] is True and ck["tier"] == "microvm", ck
        assert ck["step"] == 3, ck
        r = sb.exec("echo two > /workspace/a; rm /workspace/b /tmp/d/t; echo new > /workspace/c", step=3)
        assert r.exit_code == 0, r
        after = sb.start(["sleep", "300"]).pid  # a process of after: gone after the rollback
        time.sleep(4)
        info = sb.rollback(ck)
        assert info["state"] == "running" and info["id"] == sb.id and info["rolled_back_steps"] == 1, info
        assert sb.exec("ls -la /workspace /tmp/d; cat /workspace/a").stdout == tree
        assert sb.exec("test -e /workspace/c || echo none").stdout == "none\n"
        assert alive(sb, before)
        assert after not in [p.pid for p in sb.processes()]
        assert "sleep 300" not in sb.exec("ps -o pid,args").stdout
        # the guest's clock is the host's again, not the checkpoint's (4 s behind)
        assert abs(int(sb.exec("date +%s").stdout) - time.time()) < 2.5
        # again: a checkpoint of the restored guest, and back to the first one twice
        sb.exec("echo three > /workspace/a")
        ck2 = sb.checkpoint()
        assert ck2["parent"] == ck["id"], ck2
        sb.exec("rm -f /workspace/*")
        sb.rollback(ck2)
        assert sb.exec("cat /workspace/a").stdout == "three\n"
        for _ in range(2):
            sb.rollback(ck)
            assert sb.exec("cat /workspace/a /workspace/b").stdout == "one\nkeep\n"
        ev = [e["type"] for e in sb.events()]
        assert ev.count("rollback") == 4 and "agent_error" not in ev, ev
        assert [c["id"] for c in sb.checkpoints()] == [ck["id"], ck2["id"]]


def test_a_checkpoint_while_a_command_streams_its_output(cd, busybox_image):
    """The guest's init holds its output while QEMU saves it: the stream stays whole for this host
    (the command's output arrives complete, in order) and for the next one (a rollback)."""
    with vm(cd, busybox_image) as sb:
        out = {}

        def stream():
            out["r"] = sb.exec("i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i+1)); done")

        t = threading.Thread(target=stream)
        t.start()
        cks = [sb.checkpoint() for _ in range(3)]
        t.join(120)
        r = out["r"]
        assert r.exit_code == 0 and r.stdout.splitlines() == [f"line-{i}" for i in range(3000)], r.stdout[-200:]
        # a command that was streaming when the checkpoint was taken
        pid = sb.exec("sh -c 'while :; do echo x; done' >/dev/null & echo $!").stdout.strip()
        busy = sb.start(["sh", "-c", "while :; do echo y; done"])
        ck = sb.checkpoint()
        busy.kill()
        sb.rollback(ck)
        assert sb.exec("echo ok").stdout == "ok\n"
        assert alive(sb, pid)
        sb.rollback(cks[0])
        assert sb.exec("echo ok").stdout == "ok\n"
        assert "agent_error" not in [e["type"] for e in sb.events()]


def test_a_fork_of_a_guest_diverges(cd, busybox_image):
    """Each child is the guest of the checkpoint (its files, its processes going on), its own from
    there: what one writes the others do not see."""
    with vm(cd, busybox_image, trajectory="vmfork") as sb:
        sb.exec("echo base > /workspace/f; mkdir /workspace/d")
        pid = sb.exec("sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 & echo $!").stdout.strip()
        kids = sb.fork(3)
        try:
            assert [k.info()["spec"]["trajectory"] for k in kids] == [f"vmfork/b{i}" for i in (1, 2, 3)]
            ids = set()
            for i, k in enumerate(kids):
                assert k.info()["tier"] == "microvm" and k.id != sb.id
                assert alive(k, pid)  # the parent's process, going on in each
                assert k.exec(f"echo {i} > /workspace/d/mine; echo {i} >> /workspace/f").exit_code == 0
                ids.add(k.exec("head -c 16 /dev/urandom | od -An -tx1").stdout)
            for i, k in enumerate(kids):
                assert k.exec("cat /workspace/d/mine /workspace/f").stdout == f"{i}\nbase\n{i}\n"
                assert abs(int(k.exec("date +%s").stdout) - time.time()) < 2.5
            assert len(ids) == 3  # reseeded: the children do not draw the same randomness
            assert sb.exec("cat /workspace/f; ls /workspace/d").stdout == "base\n"
            # a child goes back to the checkpoint it was made from, and checkpoints on its own
            ck = kids[0].info()["spec"]["checkpoint"]
            kids[0].rollback(ck)
            assert kids[0].exec("cat /workspace/f").stdout == "base\n"
            assert kids[1].checkpoint()["memory"] is True
        finally:
            for k in kids:
                k.kill()


def test_a_fork_of_a_guest_keeps_the_egress_policy_on_its_own_network(egress_daemon, busybox_image):
    """The child's guest comes back with its parent's address; it is told its own (without it, its
    packets would leave with the parent's address, which its network does not route)."""
    with vm(egress_daemon, busybox_image, network={"mode": "allowlist", "allow": ["pypi.test:80"]}) as sb:
        [k] = sb.fork(1)
        with k:
            assert k.info()["spec"]["network"] == sb.info()["spec"]["network"]
            for box in (k, sb):
                ok, why = fetched(box, "pypi.test")
                assert ok, why
                a, b, c, d = box.info()["network"]["ip"].split(".")  # the host end of its /30 resolves
                assert box.exec("cat /etc/resolv.conf").stdout.split() == ["nameserver", f"{a}.{b}.{c}.{int(d) - 1}"]
                r = fetch(box, "evil.test")
                assert r.exit_code != 0 and "host=" not in r.stdout, r  # not resolved: off the list
            assert k.violations()["counts"]["egress"] >= 1
            k.rollback(k.checkpoint())
            ok, why = fetched(k, "pypi.test")
            assert ok, why


def test_guest_checkpoints_survive_a_restart_of_cordond(shared_dir, busybox_image):
    """A kill -9 of cordond: the guest runs on, adopted by the next one, which reaches its QEMU's
    monitor again (it listens beside the sandbox's record): it checkpoints and rolls back as before."""
    state = os.path.join(shared_dir, "state")
    d = Daemon(shared_dir, "--state-dir", state, keep=True)
    sb = vm(d, busybox_image)
    sb.exec("echo one > /workspace/n")
    ck1 = sb.checkpoint()
    sb.exec("echo two > /workspace/n")
    d.kill9()
    d2 = Daemon(shared_dir, "--state-dir", state)
    try:
        again = Sandbox.connect(sb.id, endpoint=d2.endpoint)
        assert again.exec("cat /workspace/n").stdout == "two\n"
        ck2 = again.checkpoint()  # the adopted guest's
        assert ck2["memory"] is True and ck2["parent"] is None, ck2
        again.rollback(ck1)
        assert again.exec("cat /workspace/n").stdout == "one\n"
        again.rollback(ck2)
        assert again.exec("cat /workspace/n").stdout == "two\n"
        again.kill()
    finally:
        assert d2.stop() == 0, d2.output()


def test_what_microvm_checkpoints_refuse(cd, busybox_image, shared_dir, tmp_path):
    import shutil
    other = str(tmp_path / "other")
    shutil.copytree(busybox_image, other, symlinks=True)
    # the host image (its /usr comes over 9p) and mounts
    for kw in [{}, {"image": busybox_image, "mounts": [{"source": shared_dir, "target": "/srv/s"}]}]:
        with pytest.raises(cordon.InvalidArgument) as e:
            Sandbox.create(endpoint=cd.endpoint, tier="microvm", checkpoints=True, **kw)
        assert e.value.field == "checkpoints" and "9p" in str(e.value), e.value
    with vm(cd, busybox_image) as sb:
        with pytest.raises(cordon.InvalidArgument) as e:
            sb.checkpoint(memory=False)  # its files are in its RAM: the checkpoint is the whole guest
        assert e.value.field == "memory", e.value
        ck = sb.checkpoint(memory=True)
        # a guest's checkpoint starts a guest of its image only, and no container
        with pytest.raises(cordon.CordonError) as e:
            Sandbox.create(endpoint=cd.endpoint, tier="microvm", image=other, checkpoint=ck["id"])
        assert e.value.field == "image" and "restored guest keeps" in str(e.value), e.value
        with pytest.raises(cordon.CordonError) as e:
            Sandbox.create(endpoint=cd.endpoint, checkpoint=ck["id"])
        assert e.value.field == "checkpoint" and "microvm" in str(e.value), e.value
        # deleted: record and saved guest
        cd.endpoint.json("DELETE", f"/v1/checkpoints/{ck['id']}")
        with pytest.raises(cordon.NotFound):
            sb.rollback(ck)
    with Sandbox.create(endpoint=cd.endpoint, checkpoints=True) as c:  # a container's, to a guest
        cck = c.checkpoint()
    with vm(cd, busybox_image) as sb:
        with pytest.raises(cordon.CordonError) as e:
            sb.rollback(cck)
        assert e.value.status == 409, e.value
