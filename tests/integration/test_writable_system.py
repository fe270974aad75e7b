"""Spec writable_system (docs/spec.md): the image's system directories (/usr, /etc, /bin, /lib…)
writable to commands, as package managers need (apt; pip into a python image's /usr/local), on the
container and microvm tiers alike. Off by default: there landlock (a guest's read-only root) refuses
those writes and, with watch_writes, counts them as system_write violations. On, the writes are the
sandbox's own (no violation), and since the agent may then have replaced what a verifier would run,
an in-place verifier step is refused (409 verifier_unsafe): a sibling step starts from the image."""

import pytest

from cordon import CordonError, InvalidArgument, Sandbox
from test_images import busybox_layer, cordon

TIERS = ["container", pytest.param("microvm", marks=pytest.mark.needs_vm)]

# What an install does: a package under /usr/local, a user in /etc/passwd, a new "python3".
INSTALL = ("mkdir -p /usr/local/lib/site-packages/pkg && echo 'X = 1' > /usr/local/lib/site-packages/pkg/init.py"
           " && echo 'agent:x:0:0::/:/bin/sh' >> /etc/passwd && cp /bin/busybox /usr/local/bin/python3"
           " && echo installed")
CONFIG = {"Env": ["PATH=/usr/local/bin:/bin"], "WorkingDir": "/testbed"}


@pytest.fixture
def image(oci_layout):
    lay = oci_layout()
    lay.tag(lay.new_image([busybox_layer().dir("usr").dir("usr/local").dir("usr/local/bin").dir("testbed")],
                          config=CONFIG), "v1")
    ref = f"oci:{lay.path}:v1"
    assert cordon("image", "pull", ref).returncode == 0
    yield ref
    cordon("image", "rm", ref)


@pytest.mark.parametrize("tier", TIERS)
def test_an_install_writes_the_system_directories(daemon, image, tier):
    """Caught (the field ignored): the install fails on /usr/local, as it does without the field."""
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier, image=image) as sb:
        r = sb.exec(["sh", "-c", INSTALL])
        assert r.exit_code != 0 and "installed" not in r.stdout, r  # the default: read-only to commands
        assert sb.exec(["grep", "-c", "agent", "/etc/passwd"]).stdout == "0\n"
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier, image=image, writable_system=True) as sb:
        assert sb.info()["spec"]["writable_system"] is True
        r = sb.exec(["sh", "-c", INSTALL])
        assert (r.exit_code, r.stdout) == (0, "installed\n"), r
        r = sb.exec(["sh", "-c", "cat /usr/local/lib/site-packages/pkg/init.py; grep -c agent /etc/passwd"])
        assert r.stdout == "X = 1\n1\n", r
        # the kernel's views stay what they were
        r = sb.exec(["sh", "-c", "touch /proc/x || touch /sys/x || echo kept"])
        assert r.stdout.endswith("kept\n"), r


@pytest.mark.parametrize("tier", TIERS)
def test_an_in_place_verifier_step_is_refused(daemon, image, tier):
    """The agent replaced the `python3` a grader runs and added a root user: an in-place step would
    run the agent's program, so it is refused and the answer points to the sibling mode (which starts
    from the image: test_verifier.py). Caught (the verifier not judging by what commands may write):
    the step ran, and printed the agent's output."""
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier, image=image, writable_system=True) as sb:
        r = sb.exec(["sh", "-c", INSTALL + " && printf '#!/bin/sh\\necho forged\\n' > /usr/local/bin/python3"])
        assert r.exit_code == 0, r
        with pytest.raises(CordonError) as e:
            sb.exec(["python3", "-c", "print(1)"], verifier=True)
        assert e.value.status == 409 and e.value.code == "verifier_unsafe", e.value
        assert "sibling" in e.value.message, e.value


def test_allowed_system_writes_are_no_violations(daemon, image):
    """With watch_writes, a write the spec allows is not a system_write; one it does not allow still
    is. Caught (the monitor judging by the path alone): the install counted three."""
    with Sandbox.create(endpoint=daemon.endpoint, image=image, writable_system=True, watch_writes=True) as sb:
        assert sb.exec(["sh", "-c", INSTALL]).exit_code == 0
        assert sb.violations()["counts"]["system_write"] == 0
    with Sandbox.create(endpoint=daemon.endpoint, image=image, watch_writes=True) as sb:
        assert sb.exec(["sh", "-c", "echo x >> /etc/passwd"]).exit_code != 0
        assert sb.violations()["counts"]["system_write"] == 1


@pytest.mark.parametrize("tier, image", [("process", "host"), ("container", "host")])
def test_refused_where_the_system_is_the_hosts(daemon, tier, image):
    with pytest.raises(InvalidArgument) as e:
        Sandbox.create(endpoint=daemon.endpoint, tier=tier, image=image, writable_system=True)
    assert e.value.field == "writable_system", e.value


def test_a_sibling_step_on_an_image_whose_tar_is_busyboxs(daemon, image):
    """The sibling's copy runs the image's own tar on both sides: busybox's has no --anchored (GNU's
    option for the protected paths' exclusions), so it is given only with protected paths. Caught
    (before): every sibling step on a busybox or alpine image failed, "tar: unrecognized option".
    The sibling starts from the image: the agent's installs are not there."""
    with Sandbox.create(endpoint=daemon.endpoint, image=image, writable_system=True) as sb:
        assert sb.exec(["sh", "-c", INSTALL + " && echo work > /testbed/result"]).exit_code == 0
        r = sb.exec(["sh", "-c", "cat /testbed/result; grep -c agent /etc/passwd; ls /usr/local/bin"],
                    verifier="sibling", copy=["/testbed"])
        assert r.stdout == "work\n0\n", r


@pytest.mark.parametrize("tier", TIERS)
def test_without_it_an_in_place_step_runs_on_an_image(daemon, image, tier):
    """The image's /etc is its root's, so access() says the sandbox's root may write it; landlock
    (a guest's read-only root) says no, and the step runs in place. Caught (before, on the
    container tier): every in-place step on an OCI image was refused as verifier_unsafe."""
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier, image=image) as sb:
        r = sb.exec(["sh", "-c", "echo $PATH; id -u"], verifier=True)
        assert r.exit_code == 0 and r.stdout.splitlines()[-1] == "0", r
        assert "/usr/local/bin" in r.stdout.splitlines()[0], r  # not writable: on the step's PATH
