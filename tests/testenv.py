"""What the test suites need of the machine, and what happens when it is missing.

tests/run-all installs and prepares everything the suites use (Debian packages, QEMU, the guest
kernel and initramfs of `cordon vm prepare`, a debootstrap disk, busybox). In such a run — and in
any run with CI=true — a test whose component is missing FAILS: a skip there once hid every VM-tier
test on clean machines while CI stayed green. A developer's partial machine (plain `pytest`) gets a
skip instead. Skips that stay legitimate anywhere go through pytest.skip directly and say why the
machine cannot do it (no hardware virtualisation, another architecture, a build without the lean CLI).

Whether the VM tiers are ready is the product's answer (`cordon vm status --json`), never a file
name copied into Python.
"""

import functools
import json
import os
import shutil
import subprocess
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORDON_BIN = os.environ.get("CORDON_BIN") or os.path.join(REPO, "build", "cordon")

STRICT = os.environ.get("CI") == "true" or os.environ.get("CORDON_TESTS_STRICT") == "1"


def need(ok, what):
    """A component the test run installs or prepares itself: without it the test fails in a strict
    run and is skipped elsewhere. what: the missing thing and how to get it."""
    if ok:
        return
    if STRICT:
        pytest.fail(f"missing: {what} — tests/run-all installs or prepares it, so a strict run (CI=true or "
                    "tests/run-all) fails rather than skips", pytrace=False)
    pytest.skip(what)


@functools.lru_cache(maxsize=None)
def vm_status():
    """`cordon vm status --json`: QEMU, the prepared guest kernel and initramfs (as a dict; on
    cordon's own failure, ready False with its error in missing)."""
    try:
        r = subprocess.run([CORDON_BIN, "vm", "status", "--json"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        return {"ready": False, "missing": [f"{CORDON_BIN}: {e}"]}
    try:
        st = json.loads(r.stdout)
    except ValueError:
        return {"ready": False, "missing": [f"cordon vm status exited {r.returncode}: {r.stderr.strip()}"]}
    return st


def vm_ready():
    return bool(vm_status().get("ready"))


def need_vm():
    st = vm_status()
    need(st.get("ready"), "the VM tiers: " + "; ".join(st.get("missing") or ["not ready"]))


def guest_release():
    """The guest kernel's release, as `cordon vm prepare` unpacked it."""
    need_vm()
    return vm_status()["release"]


def hw_virt():
    """Whether KVM can run an unmodified guest here (/dev/kvm and the CPU's own VMX/SVM): a machine
    without it runs the VM tiers under TCG, which is a legitimate skip for KVM-only tests."""
    return vm_status().get("accel_possible") == "kvm"


def _processes_naming(paths):
    """PIDs whose command line names one of paths (podman, conmon and their cleanup commands carry
    the storage's --root and --runroot)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace")
        except OSError:
            continue
        if any(p in argv for p in paths):
            found.append(int(pid))
    return found


def release_podman_storage(root, runroot, timeout=60):
    """End of a test's own podman storage (--root root, --runroot runroot): waits for the podman and
    conmon processes that still name it (conmon runs `podman container cleanup` after a container
    ends, and that command binds the storage's overlay directory on itself again), then undoes that
    bind. Once, a cleanup that ran after the unmount left the bind behind, and a later session's leak
    check failed on it. Fails if the storage stays mounted."""
    deadline = time.monotonic() + timeout
    while _processes_naming([root, runroot]) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _processes_naming([root, runroot])
    overlay = os.path.join(root, "overlay")
    while subprocess.run(["mountpoint", "-q", overlay]).returncode == 0:
        subprocess.run(["umount", overlay], check=True)
    shutil.rmtree(runroot, ignore_errors=True)
    assert not left, f"podman processes of {root} still running after {timeout} s: {left}"
