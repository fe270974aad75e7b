"""pytest wiring for cordon's integration tests.

Every test runs the real `cordon run` (CORDON_BIN, default <repo>/build/cordon)
as root on this host, and every test is followed by a check that the host's
kernel state is as it was: no new mounts (nsfs included), no cordon cgroup
directories, no processes running as a sandbox uid, no orphaned cordon
guards, no new network links or named netns. Teardown of a finished sandbox
may lag by a few ms, so the check polls for up to 3 s before it fails.
"""

import os
import shutil
import subprocess
import tempfile

import pytest

import cordonlib
import testenv
# The registry harness's fixtures (registry.py): registry_factory, oci_layout, fault_proxy, blob_server.
from registry import blob_server, fault_proxy, oci_layout, registry_factory  # noqa: F401


def _skip_reason():
    if os.geteuid() != 0:
        return "cordon integration tests need root"
    if not os.access(cordonlib.CORDON_BIN, os.X_OK):
        return f"no cordon binary at {cordonlib.CORDON_BIN} (build it, or set CORDON_BIN)"
    return None


def pytest_collection_modifyitems(config, items):
    # CORDON_VM_TIER_TESTS=none (run-all's sanitizer pass): none of them; test_vm.py still runs. The
    # host's side of tier vm is the microvm's code, which that pass runs over the tier fixture.
    only = set() if os.environ.get("CORDON_VM_TIER_TESTS") == "none" else VM_TIER_TESTS
    drop = [i for i in items if getattr(i, "callspec", None)
            and ((i.callspec.params.get("tier") == "vm" and i.originalname not in only)
                 or (i.callspec.params.get("tier") == "process" and i.originalname in PROCESS_TIER_NA))]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in set(drop)]


def pytest_report_header(config):
    return f"cordon binary: {cordonlib.CORDON_BIN}"


@pytest.fixture(autouse=True)
def no_leaks(request, suite_lock):
    """Snapshot host state before the test; after it, fail the test if any
    sandbox state is left behind."""
    # Not a skip in a strict run (testenv.py): tests/run-all runs as root and builds cordon.
    reason = _skip_reason()
    testenv.need(not reason, reason)
    before = cordonlib.HostState.snapshot()
    yield before
    timeout = getattr(request.module, "LEAK_TIMEOUT", 3.0)
    # Nothing new since `before`: nothing leaked, whoever else runs. Else, with the host to
    # ourselves (suitelock.py), so that what another pass's running tests made is gone or in
    # `before`, poll until it is clean or the time is up. This cannot hide a leak: what this
    # test left stays in every snapshot. (It saves the wait for the other pass's test in most
    # checks: tests/run-all runs two passes side by side.)
    leaks = cordonlib.HostState.snapshot().leaks_since(before)
    if leaks and not request.node.cordon_serial:
        suite_lock.release()
        suite_lock.exclusive()
    if leaks:
        leaks = cordonlib.check_no_leaks(before, timeout=timeout)
    if leaks:
        pytest.fail(f"sandbox state left on the host {timeout}s after the test:\n"
                    + cordonlib.format_leaks(leaks), pytrace=False)


@pytest.fixture
def shared_dir():
    """A host directory a sandbox can write: world-writable (0777), since
    the sandbox's root is an unprivileged uid on the host (>= 2^30) and gets
    no more access to host files than "other" does. Lives under /tmp because
    pytest's tmp_path sits below a 0700 directory the sandbox cannot traverse."""
    d = tempfile.mkdtemp(prefix="cordon-it-", dir="/tmp")
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def state_daemon(shared_dir):
    """A cordond of the test's own, with its own state directory (d.state): what it keeps on disk
    (trajectories, the checkpoint store) is the test's alone. Extra options: state_daemon_args."""
    yield from cordonlib.state_daemon(shared_dir)


def _busybox():
    for p in ("/bin/busybox", "/usr/bin/busybox"):
        if os.access(p, os.X_OK):
            return p
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "busybox-static"],
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=False)
        if os.access("/bin/busybox", os.X_OK):
            return "/bin/busybox"
    return None


@pytest.fixture(scope="session")
def busybox_image():
    """A directory image holding only a static busybox (Debian's busybox-static)."""
    bb = _busybox()
    cordonlib.need(bb, "busybox-static is not installed and could not be installed")
    # a dynamic one would need the host's libc in the image
    cordonlib.need(cordonlib.is_static_elf(bb), f"{bb} is not statically linked (install busybox-static)")
    d = tempfile.mkdtemp(prefix="cordon-it-image-", dir="/tmp")
    os.chmod(d, 0o755)
    cordonlib.build_busybox_image(d, bb)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def daemon(shared_dir):
    """A cordond of this test's own (temporary socket). After the test it is
    stopped with SIGTERM, must exit 0, and — by no_leaks — must leave nothing
    of its sandboxes behind."""
    cordonlib.need(os.access(cordonlib.CORDOND_BIN, os.X_OK), f"no cordond binary at {cordonlib.CORDOND_BIN}")
    d = cordonlib.Daemon(shared_dir)
    yield d
    code = d.stop()
    assert code == 0, f"cordond exited {code}:\n{d.output()}"


@pytest.fixture(params=["container", "process", pytest.param("microvm", marks=pytest.mark.needs_vm),
                        pytest.param("vm", marks=pytest.mark.needs_vm)])
def tier(request):
    """The isolation tier a tier-independent test runs on: each such test runs once per tier (on
    tier vm, only those of VM_TIER_TESTS)."""
    return request.param


# What the process tier does not do (docs/process.md): filter egress by an allowlist (it has no
# network namespace: none or open), outlive the cordond that made it, keep its protection across a
# cordond crash. It guards protected paths as the other tiers do (test_protect.py, test_files_api.py).
# These tier-independent tests are deselected for it; test_process.py tests what it does.
PROCESS_TIER_NA = {
    "test_allowed_http_and_https", "test_name_off_the_list", "test_direct_ip_and_metadata",
    "test_explicit_proxy_requests", "test_udp_quic_icmp_ipv6_dropped", "test_dns_rebinding_and_other_resolvers",
    "test_runtime_patch_cuts_open_connection", "test_open_mode_relays_udp_and_audits_it",
    "test_open_mode_still_audited_and_reserved_refused", "test_one_shot_run_with_allowlist",
    "test_kill9_and_restart_keeps_the_network", "test_dns_from_a_fixed_port_after_a_restart",
    "test_ordinary_work_is_not_a_violation", "test_keepalive_and_pipelined_requests_are_each_judged",
    "test_request_smuggling_is_refused", "test_dns_tunnel_under_the_old_thresholds_is_flagged",
    "test_ordinary_lookups_stay_under_the_dns_budget", "test_dns_budget_refuse_mode",
    "test_one_shot_run_has_the_dns_budget", "test_what_a_connect_tunnel_carries_is_judged",
    "test_one_shot_run_judges_every_request",
    "test_egress_oom_and_pids_are_counted",
    "test_sandboxes_survive_a_restart_and_are_adopted", "test_execs_after_a_restart_do_not_clash_with_running_ones",
    "test_sandbox_that_died_while_no_daemon_ran_is_cleaned_up", "test_lifetime_counts_across_a_restart",
    "test_protection_outlives_a_cordond_crash",
    "test_a_users_recursive_watch_stays_the_users",  # its init cannot change users (test_files_api.py)
}


# A full VM boots its image's whole system (about 15 s under TCG, with the host image's systemd):
# the tier-independent tests that run on tier vm too, one or two of each kind. The others are
# deselected for it.
VM_TIER_TESTS = {
    "test_exec_buffered", "test_exec_stream", "test_files_roundtrip", "test_exec_timeout_kills_the_command",
    "test_exec_timeout_kills_what_the_command_started_setsid_or_not",
    "test_events", "test_allowed_http_and_https", "test_name_off_the_list", "test_direct_ip_and_metadata",
    "test_watched_syscalls_are_violations", "test_egress_oom_and_pids_are_counted",
    "test_oom_kill_of_the_command_is_137_and_recorded", "test_pids_limit_makes_fork_fail",
    "test_disk_limit_write_fails_with_no_space", "test_timeout_not_reached", "test_protected_paths_hold_in_cordond",
    "test_sandboxes_survive_a_restart_and_are_adopted", "test_all_contained",
    "test_symlinks_into_protected_paths_are_refused_and_counted", "test_a_stalled_or_departed_download_does_not_hold_up_the_sandbox",
    "test_a_signal_to_init_reaches_no_command", "test_a_protected_directory_cannot_be_moved_aside",
    "test_the_verifier_does_not_run_what_the_agent_planted", "test_a_sibling_verifier_sees_only_what_was_copied",
    "test_inotify_cannot_watch_a_protected_directory", "test_the_operators_file_requests_are_never_violations",
    "test_paths_protected_later_hold_as_at_creation", "test_a_pattern_over_a_protected_path_and_a_path_named_twice",
}


@pytest.fixture(scope="module")
def net():
    """The fake internet (fakenet.py) for a module's egress tests: our own
    namespace and servers; removed after the module."""
    import fakenet
    import suitelock
    held = suitelock.ExclusiveFile("fakenet")  # its interface and addresses are fixed: one pass at a time
    d = tempfile.mkdtemp(prefix="cordon-fakenet-")
    f = fakenet.FakeNet(d).start()
    yield f
    f.stop()
    shutil.rmtree(d, ignore_errors=True)
    held.close()
