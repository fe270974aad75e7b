"""What one call of the process tier can do to the host (issue 18, item 8; docs/process.md).

Seen failing before the fix: test_no_posix_message_queue_reaches_the_host: both queues (the call's and
the command's) existed in the host's IPC namespace afterwards, although mq_open had failed inside.
"""
import ctypes
import json
import os
import uuid

from cordon import Sandbox

MQ = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.mq_open(NAME.encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
err = ctypes.get_errno()
if fd >= 0:
    libc.mq_close(fd)
RESULT = [fd, err]
"""


def _host_has_queue(name):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.mq_open(name.encode(), os.O_RDONLY)
    if fd >= 0:
        libc.mq_close(fd)
        libc.mq_unlink(name.encode())  # leave the host as it was
        return True
    return False


def test_no_posix_message_queue_reaches_the_host(daemon):
    """mq_open from a call and from a command is refused, and no queue appears in the host's IPC
    namespace (where the process tier lives)."""
    names = ["/cordon-test-" + uuid.uuid4().hex[:12] for _ in range(2)]
    try:
        with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
            c = sb.call(MQ.replace("NAME", repr(names[0])).replace("RESULT = ", ""))
            assert c.error is None and c.result[0] == -1, c.result
            script = MQ.replace("NAME", repr(names[1])).replace("RESULT = ", "print(") + ")"
            r = sb.exec(["python3", "-c", script])
            assert r.exit_code == 0 and json.loads(r.stdout)[0] == -1, r
    finally:
        created = [n for n in names if _host_has_queue(n)]
    assert created == [], f"queues made in the host's IPC namespace: {created}"
