"""cordon-setup (src/tiers/container/setup-main.c), the root helper that makes container sandboxes'
setup children, driven directly: a request that is cut short, of another kind, without its args,
with args that do not read, or with fewer fds than its args name gets an EINVAL answer naming what
is wrong, and the helper goes on serving; it ends at its socket's EOF, and at once when its host is
not its parent. None of these requests makes a sandbox.

What it catches: a request with fewer fds than its args name used to be taken, each fd after the
gap shifted into another's place (a network namespace given could go missing, and the sandbox be
born in the host's); and a request cut short used to end the helper."""

import os
import select
import socket
import struct
import subprocess

from cordonlib import CORDON_BIN

SETUP_BIN = os.path.join(os.path.dirname(CORDON_BIN), "cordon-setup")
ANSWER = struct.Struct("=i i 48s 256s")  # struct cdn_setup_answer: pid, then struct cdn_error


def start(parent=None):
    host, helper = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # its socket at fd 3 (close_fds would close the dup: Python's own fds are not inheritable anyway)
    proc = subprocess.Popen([SETUP_BIN, str(parent or os.getpid())], close_fds=False,
                            preexec_fn=lambda: os.dup2(helper.fileno(), 3))
    helper.close()
    return host, proc


def answer(host):
    assert select.select([host], [], [], 10)[0], "no answer in 10 s"
    data, fds, _, _ = socket.recv_fds(host, 4096, 4)
    for fd in fds:
        os.close(fd)
    pid, errnum, _, msg = ANSWER.unpack(data[:ANSWER.size])
    return pid, errnum, msg.split(b"\0")[0].decode()


def memfd(content):
    fd = os.memfd_create("args")
    os.write(fd, content)
    return fd


def test_bad_requests_are_answered_and_the_helper_goes_on():
    host, proc = start()
    try:
        host.send(b"x")
        assert answer(host)[1:] == (22, "cordon-setup: a request cut short or of another kind")
        host.send(b"r")
        pid, errnum, msg = answer(host)
        assert pid == 0 and errnum == 22 and "a request without its args" in msg, msg
        junk = memfd(b"not packed args" * 10)
        socket.send_fds(host, [b"r"], [junk])
        pid, errnum, msg = answer(host)
        assert pid == 0 and errnum == 22 and "does not read" in msg, msg
        # more fds than a request takes (12): cut short by the kernel, answered, not an end
        nulls = [os.open("/dev/null", os.O_RDONLY) for _ in range(14)]
        socket.send_fds(host, [b"r"], nulls)
        pid, errnum, msg = answer(host)
        assert pid == 0 and errnum == 22 and "cut short" in msg, msg
        for fd in nulls + [junk]:
            os.close(fd)
        assert proc.poll() is None  # still serving
    finally:
        host.close()
    assert proc.wait(timeout=10) == 0  # EOF: done


def test_a_request_short_of_fds_is_refused():
    # valid args (the fuzz corpus's, packed by setup-args.c) that name 5 fds: agent, init, error pipe,
    # go pipe and stdio; the request brings 4, the last one missing (as a netns or cgroup fd could be)
    with open(os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "setup-args", "plain"), "rb") as f:
        args = memfd(f.read())
    nulls = [os.open("/dev/null", os.O_RDONLY) for _ in range(4)]
    host, proc = start()
    try:
        socket.send_fds(host, [b"r"], nulls + [args])
        pid, errnum, msg = answer(host)
        assert pid == 0 and errnum == 22 and msg == "cordon-setup: a request with 4 fds, not 5", msg
        assert proc.poll() is None
    finally:
        host.close()
        for fd in nulls + [args]:
            os.close(fd)
    assert proc.wait(timeout=10) == 0


def test_a_helper_whose_host_is_not_its_parent_ends_at_once():
    host, proc = start(parent=1)
    try:
        assert proc.wait(timeout=10) == 1
    finally:
        host.close()
