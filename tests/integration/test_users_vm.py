"""Users on the VM tiers (issue 21 point 3): the spec's and an exec's "user" in a guest, as on the
container tier (test_images_user.py). The guest's init is the guest kernel's root: a command changes
its ids first, with its capabilities kept only until its confinement takes every one of them."""

import pytest

from cordon import InvalidArgument, Sandbox
from test_images_user import SHOW, image_daemon, user_image  # noqa: F401 (image_daemon: a fixture)

pytestmark = pytest.mark.needs_vm

CAPS = ["sh", "-c", "grep ^Cap /proc/self/status"]


def no_caps(r):
    caps = dict(line.split(":\t") for line in r.stdout.splitlines())
    return set(caps) == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} and all(
        int(v, 16) == 0 for v in caps.values())


def test_a_microvm_runs_the_image_user_and_an_execs(image_daemon, oci_layout):
    """What this catches: a guest that ignored the user (every command root: `id -u` printed 0), or
    a command that kept the guest init's capabilities after its change of ids (CapPrm non-zero)."""
    ref = user_image(oci_layout)
    with Sandbox.create(endpoint=image_daemon.endpoint, image=ref, tier="microvm", user="app") as sb:
        assert sb.exec(SHOW).stdout == "1001\n1002 3000\n/home/app\n"
        assert sb.exec(SHOW, user="0").stdout == "0\n0\n/root\n"
        assert sb.exec(SHOW, user="dev:app").stdout == "1000\n1002 3000\n/home/dev\n"
        assert sb.exec(SHOW, user="1234:5678").stdout.split()[:2] == ["1234", "5678"]
        for user in (None, "0", "dev"):
            r = sb.exec(CAPS, user=user)
            assert r.exit_code == 0 and no_caps(r), (user, r)
        r = sb.exec(["sh", "-c", "pwd; stat -c %u:%g .; touch f && echo wrote"])
        assert r.stdout == "/workspace\n1001:1002\nwrote\n", r  # cordon's workdir is the user's
        with pytest.raises(InvalidArgument) as e:
            sb.exec(["true"], user="ghost")
        assert e.value.field == "user" and "ghost" in e.value.message, e.value
        # A timeout still ends a command of another uid.
        r = sb.exec(["sh", "-c", "sleep 60; echo late"], timeout_s=1)
        assert r.timed_out and "late" not in r.stdout, r
    with pytest.raises(InvalidArgument) as e:
        Sandbox.create(endpoint=image_daemon.endpoint, image=ref, tier="microvm", user="ghost")
    assert e.value.field == "user" and "no user 'ghost'" in e.value.message, e.value


def test_a_full_vm_runs_a_numeric_user(daemon):
    with Sandbox.create(endpoint=daemon.endpoint, tier="vm", user="2000:2000") as sb:
        r = sb.exec(["sh", "-c", "id -u; id -g"])
        assert r.stdout == "2000\n2000\n", r
        r = sb.exec(CAPS)
        assert no_caps(r), r
        assert sb.exec(["id", "-u"], user="0").stdout == "0\n"


def test_the_cli_and_the_async_sdk_pass_a_user_to_a_microvm(daemon):
    import asyncio
    import os
    import subprocess

    import cordonlib
    from cordon import AsyncSandbox
    env = dict(os.environ, CORDON_SOCKET=daemon.socket)

    def cli(*args):
        return subprocess.run([cordonlib.CORDON_BIN, *args], capture_output=True, text=True, env=env, timeout=120)

    r = cli("create", "--tier", "microvm", "--user", "2000:2000")
    assert r.returncode == 0, r
    sid = r.stdout.strip()
    try:
        r = cli("exec", sid, "--", "id", "-u")
        assert (r.returncode, r.stdout) == (0, "2000\n"), r
        r = cli("exec", sid, "--user", "0", "--", "id", "-u")
        assert (r.returncode, r.stdout) == (0, "0\n"), r
    finally:
        assert cli("kill", sid).returncode == 0

    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint, tier="microvm", user="3000:3000") as sb:
            assert (await sb.exec(["id", "-u"])).stdout == "3000\n"
            assert (await sb.exec(["id", "-u"], user="4000")).stdout == "4000\n"

    asyncio.run(main())
