"""Two pytest processes may drive sandboxes on this host at once: tests/run-all runs the normal and
the sanitizer pass side by side. Each test checks the host for state its sandboxes left behind
(integration/conftest.py, no_leaks), and that check must not see the other pass's sandboxes, which
are alive and still to be checked by their own test. So every test holds the shared "room" lock
while it runs, and a leak check (or a test marked `serial`, which must have the host to itself)
takes it exclusively: it waits until the other pass is between tests. A writer holds the
turnstile while it waits, so that the other pass cannot start its next test meanwhile and starve
it. In a single pass the locks cost four flock calls a test.
"""

import fcntl
import os

DIR = "/run/cordon-tests"


class SuiteLock:
    def __init__(self):
        os.makedirs(DIR, exist_ok=True)
        self.turnstile = os.open(os.path.join(DIR, "turnstile"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.room = os.open(os.path.join(DIR, "room"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def _enter(self, how):
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.room, how)
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)

    def shared(self):
        self._enter(fcntl.LOCK_SH)

    def exclusive(self):
        self._enter(fcntl.LOCK_EX)

    def release(self):
        fcntl.flock(self.room, fcntl.LOCK_UN)


_lock = None


def lock():
    global _lock
    if _lock is None:
        _lock = SuiteLock()
    return _lock


class ExclusiveFile:
    """A host resource that one pass at a time may hold across tests (the fake internet's fixed
    interface and addresses). Taken before a test enters the room, never inside it."""

    def __init__(self, name):
        self.fd = os.open(os.path.join(DIR, name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def close(self):
        os.close(self.fd)
