"""What one call of the process tier can do to another (issue 18, items 1, 4 and 8; docs/process.md,
"How it works" and "What it protects against").

The attacks are the red team's: a call that leaves a process holding the channel its answers travel
on and answers the next call (a grader's) itself; a call that patches `json.JSONEncoder.encode`
so that the next call's result is serialised by it; a call that mutates what the scrub does not put
back (a class attribute, a function's code, a module-level list); a call that searches its own memory
for the bytes of a protected file the harness read through the files API or a verifier step printed;
a POSIX message queue made in the host's IPC namespace. A call with `"fresh": true` must run in a
pristine interpreter that none of this reaches, and a non-fresh call must at least not meet processes
an earlier call left behind.

Seen failing before the fix (the tree of issue 18: the call server a fork of the agent that ran every
call of the sandbox until it chose to leave; each test run once against it):
- test_a_leftover_process_cannot_answer_the_next_call[fresh] and [warm]: the grader got
  {'passed': True, 'score': 1.0} from the leftover process instead of {'score': 0.0, 'passed': False};
- test_a_patched_encoder_does_not_serialise_the_next_call[fresh] and [warm]: the same, from the
  patched JSONEncoder.encode;
- test_a_fresh_call_is_pristine: the fresh call saw ['%', 'mutated', True] (all three mutations);
- test_a_leftover_process_of_a_call_is_ended: "timed out after 3s waiting for the call's leftover
  8074 to be ended";
- test_protected_bytes_never_reach_a_call: the first call after files.read() found the key in its
  own memory ([1, 1, 0]: once, and the call's own marker once);
- test_no_posix_message_queue_reaches_the_host: both queues (the call's and the command's) existed in
  the host's IPC namespace afterwards, although mq_open had failed inside;
- test_no_call_runs_beside_a_verifier_step: the call got 200 with the protected key as its result;
- test_calls_waiting_for_a_verifier_step_do_not_run: the verifier step never started (its stream
  timed out after 120 s): the queued call's new server kept the QUIESCE from completing.
"""
import ctypes
import json
import os
import time
import uuid

import pytest

from cordonlib import wait_for
from cordon import Sandbox

LEAK_TIMEOUT = 5.0

HONEST = {"score": 0.0, "passed": False}
FORGED = {"score": 1.0, "passed": True}
FORGED_ANSWER = json.dumps({"result": FORGED, "stdout": "", "stderr": "", "error": None, "duration_ms": 0.1,
                            "timed_out": False})

# A grader: the agent wrote 41, the expected answer (the grader's input) is 42.
GRADER = ("submitted = open('/workspace/answer.txt').read().strip()\n"
          "ok = submitted == input['expected']\n"
          "{'score': float(ok), 'passed': ok}")

# The red team's first attack: a grandchild (the subreaper bit of the call's process unset first, so that
# it is not the call server's child) that holds every socket the call had, stops the server once the call
# is answered, and answers whatever request comes next with a forged result.
FORGER = r"""
import ctypes, os, signal, struct, time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER off (refused is fine too)
server = os.getpid()
socks = []
for fd in os.listdir('/proc/self/fd'):
    try:
        if os.readlink('/proc/self/fd/' + fd).startswith('socket:'):
            socks.append(int(fd))
    except OSError:
        pass
forged = input.encode()
pid = os.fork()
if pid == 0:
    if os.fork() == 0:
        try:
            time.sleep(0.5)
            os.kill(server, signal.SIGSTOP)
            fd = socks[0]
            while True:
                n, flags = struct.unpack('<II', os.read(fd, 8))
                got = b''
                while len(got) < n:
                    got += os.read(fd, n - len(got))
                os.write(fd, struct.pack('<II', len(forged), 0) + forged)
        finally:
            os._exit(0)
    os._exit(0)
os.waitpid(pid, 0)
len(socks)
"""


def grade(sb, fresh):
    return sb.call(GRADER, input={"expected": "42"}, fresh=fresh, timeout_s=20)


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "warm"])
def test_a_leftover_process_cannot_answer_the_next_call(daemon, fresh):
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
        sb.files.write("/workspace/answer.txt", b"41\n")
        c = sb.call(FORGER, input=FORGED_ANSWER)
        assert c.error is None and c.result >= 1, c.error
        time.sleep(1.5)  # the leftover has had its time to stop the server
        g = grade(sb, fresh)
        assert g.error is None and g.result == HONEST, (g.result, g.error)


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "warm"])
def test_a_patched_encoder_does_not_serialise_the_next_call(daemon, fresh):
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
        sb.files.write("/workspace/answer.txt", b"41\n")
        sb.call("import json\njson.JSONEncoder.encode = lambda self, o: %r\n1" % FORGED_ANSWER)
        g = grade(sb, fresh)
        assert g.error is None and g.result == HONEST, (g.result, g.error)
        # and the interpreter that serves the next ordinary call is not the patched one either
        assert sb.call("import json\njson.JSONEncoder.encode.__name__").result == "encode"


MUTATE = ("import string, textwrap\n"
          "string.Template.delimiter = '%'\n"
          "textwrap.dedent.__code__ = (lambda text: 'mutated').__code__\n"
          "string.__all__.append('mutated')\n")
LOOK = ("import string, textwrap\n"
        "[string.Template.delimiter, textwrap.dedent('  x'), 'mutated' in string.__all__]")


def test_a_fresh_call_is_pristine(daemon):
    """Before: what a call left is not seen by a later fresh call. After: what a fresh call did is not
    seen by the next one."""
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
        assert sb.call(MUTATE + "1").result == 1
        assert sb.call(LOOK, fresh=True).result == ["$", "x", False]
        assert sb.call(MUTATE + "1", fresh=True).result == 1
        assert sb.call(LOOK).result == ["$", "x", False]
        assert sb.call(LOOK, fresh=True).result == ["$", "x", False]


LEAVE_SLEEPER = r"""
import ctypes, os
ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    if os.fork() == 0:
        os.close(r)
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        os.execv('/bin/sleep', ['sleep', '60'])
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
int(os.read(r, 32))
"""


def _dead(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        # Gone between open and read: the kernel answers ESRCH then.
        return True


def test_a_leftover_process_of_a_call_is_ended(daemon):
    """A process a call leaves behind, even reparented away from the call's interpreter, is ended
    before the next call runs, and that call still works."""
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
        pid = sb.call(LEAVE_SLEEPER).result
        assert isinstance(pid, int) and pid > 0
        wait_for(lambda: _dead(pid), timeout=3, what=f"the call's leftover {pid} to be ended")
        assert sb.call("input + 1", input=1).result == 2


# Search the call's own memory for a key split in two (so that the search itself never holds it
# whole), and for a marker the call made (the search must find that one: it works).
# Search the call's own memory for a key split in two (so that the search itself never holds it
# whole), and for a marker the call made (the search must find that one: it works). The call's
# process is not dumpable, so its /proc/self/mem is root's: each readable mapping is copied through
# a memfd instead (pwrite from an address the kernel cannot read is EFAULT, not a crash). The raw
# syscall, not libc's pwrite, which a sanitizer build intercepts (and checks the source against its
# redzones). Mappings above 1 GiB (a sanitizer build's shadow and allocator, into which the kernel
# may merge the interpreter's own) are not searched, and then the marker may be missed too: the call
# says how many bytes it skipped.
SCAN = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
PWRITE64 = {'x86_64': 18, 'aarch64': 68}[os.uname().machine]
def pwrite(fd, addr, n):
    return libc.syscall(ctypes.c_long(PWRITE64), ctypes.c_long(fd), ctypes.c_void_p(addr), ctypes.c_size_t(n),
                        ctypes.c_long(0))
maps, skipped = [], 0
with open('/proc/self/maps') as f:
    for line in f:
        parts = line.split()
        if 'r' in parts[1] and not (len(parts) > 5 and parts[5].startswith('[v')):
            lo, hi = (int(x, 16) for x in parts[0].split('-'))
            if hi - lo <= 1 << 30:
                maps.append((lo, hi))
            else:
                skipped += hi - lo
buf = os.memfd_create('scan')
def count(p, s):
    hits = 0
    for lo, hi in maps:
        addr = lo
        while addr < hi:
            n = min(hi - addr, 1 << 20)
            want = n + 64 if addr + n < hi else n
            got = pwrite(buf, addr, want)
            if got <= 0:
                break
            chunk = os.pread(buf, got, 0)
            i = chunk.find(p)
            while 0 <= i < n:
                if chunk[i + len(p):i + len(p) + len(s)] == s:
                    hits += 1
                i = chunk.find(p, i + 1)
            addr += n
    return hits
marker = (input['mp'] + input['ms']).encode()
[count(input['p'].encode(), input['s'].encode()), count(input['mp'].encode(), input['ms'].encode()), skipped]
"""
SECRET = "the-answer-is-42-" + "k" * 15


def test_protected_bytes_never_reach_a_call(daemon, shared_dir):
    ws = os.path.join(shared_dir, "ws")
    os.makedirs(ws)
    with open(os.path.join(ws, "answer.key"), "w") as f:
        f.write(SECRET)
    os.chmod(ws, 0o777)
    scan_input = {"p": SECRET[:12], "s": SECRET[12:], "mp": "cordon-mark", "ms": "er-3c8a1f"}
    with Sandbox.create(endpoint=daemon.endpoint, tier="process", mounts=[{"source": ws, "target": "/workspace"}],
                        protect=["/workspace/answer.key"]) as sb:
        assert sb.exec(["cat", "/workspace/answer.key"]).exit_code != 0  # protected indeed
        assert sb.files.read("/workspace/answer.key") == SECRET.encode()  # the harness reads it
        c = sb.call(SCAN, input=scan_input, timeout_s=60)
        assert c.error is None, c.error
        # the search works (it finds the marker), unless it had to skip a sanitizer's huge mappings
        assert (c.result[1] >= 1 or c.result[2] > 0) and c.result[0] == 0, c.result
        r = sb.exec(["cat", "/workspace/answer.key"], verifier=True)  # a verifier step prints it
        assert r.exit_code == 0 and r.stdout == SECRET, r
        for fresh in (False, True):
            c = sb.call(SCAN, input=scan_input, timeout_s=60, fresh=fresh)
            assert c.error is None, c.error
            assert (c.result[1] >= 1 or c.result[2] > 0) and c.result[0] == 0, (fresh, c.result)


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



def _protected_ws(shared_dir):
    ws = os.path.join(shared_dir, "ws")
    os.makedirs(ws)
    with open(os.path.join(ws, "answer.key"), "w") as f:
        f.write(SECRET)
    os.chmod(ws, 0o777)
    return dict(tier="process", mounts=[{"source": ws, "target": "/workspace"}], protect=["/workspace/answer.key"])


READ_KEY = "open('/workspace/answer.key').read()"


def test_no_call_runs_beside_a_verifier_step(daemon, shared_dir):
    """A verifier step runs alone and may read the protected paths: a call while it runs is refused
    (409), as other commands are."""
    with Sandbox.create(endpoint=daemon.endpoint, **_protected_ws(shared_dir)) as sb:
        events = sb.exec_stream(["sh", "-c", "echo start; sleep 2; echo end"], verifier=True)
        assert next(events)["data"] == "start\n"
        status, body = daemon.http("POST", f"/v1/sandboxes/{sb.id}/call", {"code": READ_KEY})
        assert status == 409 and body["error"]["code"] == "verifier_running", (status, body)
        assert list(events)[-1]["exit_code"] == 0
        c = sb.call(READ_KEY)
        assert c.error and c.error["type"] == "PermissionError", c.result


def test_calls_waiting_for_a_verifier_step_do_not_run(daemon, shared_dir):
    """Calls running or queued in the sandbox when a verifier step begins end in an error: none runs
    once the sandbox is quiet, and the step is not held up by them."""
    import threading
    with Sandbox.create(endpoint=daemon.endpoint, **_protected_ws(shared_dir)) as sb:
        results = {}

        def call(name, code):
            results[name] = sb.call(code, timeout_s=30)

        slow = threading.Thread(target=call, args=("slow", "import time\ntime.sleep(1.5)\n1"))
        slow.start()
        time.sleep(0.5)
        queued = threading.Thread(target=call, args=("queued", "import time\ntime.sleep(0.5)\n" + READ_KEY))
        queued.start()
        time.sleep(0.3)
        events = sb.exec_stream(["sh", "-c", "echo start; sleep 1; echo end"], verifier=True, timeout_s=20)
        assert next(events)["data"] == "start\n"
        assert list(events)[-1]["exit_code"] == 0
        slow.join()
        queued.join()
        for name in ("slow", "queued"):
            r = results[name]
            assert SECRET not in json.dumps(r.result), (name, r.result)
            assert r.error and r.error["type"] == "WorkerDied", (name, r.error)
        assert sb.call("1 + 1").result == 2


REACH = r"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
dumpable = libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: its memory would be the sandbox's to read
dumpable_errno = ctypes.get_errno()
me, agent = os.getpid(), os.getppid()
try:
    pid_max = int(open('/proc/sys/kernel/pid_max').read())
except OSError:
    pid_max = 1 << 22
killed = []
for pid in range(2, pid_max + 1):  # every process it may signal but itself and the agent
    if pid not in (me, agent):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
[dumpable, dumpable_errno, killed]
"""


def test_a_call_reaches_neither_the_template_nor_its_own_memory_rights(daemon):
    """The template cannot be signalled by the sandbox (its uids), so a call that kills everything it
    may leaves later calls, fresh or not, working; an executor cannot make itself dumpable again.
    Seen failing before the fix: prctl(PR_SET_DUMPABLE, 1) succeeded in the call ([0, 0, []]); the
    rest is the template's, which came with the fix."""
    with Sandbox.create(endpoint=daemon.endpoint, tier="process") as sb:
        sb.call("1")
        c = sb.call(REACH, timeout_s=60)
        assert c.error is None, c.error
        assert c.result[0] == -1 and c.result[1] == 1, c.result  # EPERM
        assert c.result[2] == [], c.result  # nothing else of the sandbox runs: the template is not its to kill
        assert sb.call("input * 2", input=21, fresh=True).result == 42
        assert sb.call("input * 2", input=21).result == 42
