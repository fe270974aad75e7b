# cordon-worker's call server (worker-python.c, worker-template.c): compiled
# into the zygote, run by each executor, a clone of the sandbox's call template
# (never of its agent). Stdlib only.
#
# Protocol on fd 3 (the agent): u32 length | u32 flags | JSON request in;
# u32 length | u32 flags | JSON result out. A fresh executor serves one call
# and exits. Any other serves calls until it leaves: after each one it scrubs
# what the call left; if it cannot, or the call changed a class it cannot put
# back, it says so (flag 1) and exits, and the agent clones another from the
# template for the next call. The agent checks for itself that nothing the
# call started is left (worker-call.c).
import ast
import builtins
import _signal
import json
import os
import signal
import struct
import sys
import threading
import time
import traceback

import _cordon_native

# The runtime's common modules, imported once in the zygote: a call that uses
# them pays nothing for the import.
PRELOAD = ("abc", "array", "base64", "bisect", "cmath", "collections", "contextlib", "copy", "csv",
           "dataclasses", "datetime", "decimal", "enum", "fractions", "functools", "hashlib", "heapq",
           "io", "itertools", "math", "numbers", "operator", "pathlib", "random", "re", "shutil",
           "statistics", "string", "subprocess", "tempfile", "textwrap", "typing", "unicodedata")
for _name in PRELOAD:
    try:
        __import__(_name)
    except Exception:  # a trimmed interpreter: the call imports it itself
        pass

import shutil  # noqa: E402

MAX_CALLS = 1000  # a server is replaced after this many calls, however clean it looks
OUT_MAX = 1 << 20  # bytes of stdout and of stderr kept per call
FRESH = 1
_compiled = {}
_streams = []


def _compile(code):
    """The call's code, and its last expression (the result) compiled apart."""
    c = _compiled.get(code)
    if c is None:
        tree = ast.parse(code, "<call>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = compile(ast.Expression(tree.body.pop().value), "<call>", "eval")
        c = (compile(tree, "<call>", "exec"), last)
        if len(_compiled) >= 256:
            _compiled.clear()
        _compiled[code] = c
    return c


def _read(fd, n):
    b = b""
    while len(b) < n:
        c = os.read(fd, n - len(b))
        if not c:
            os._exit(0)  # the agent is gone
        b += c
    return b


def _write(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a class whose attributes cannot be set


class _State:
    """What a call may change, as it was before the first call."""

    def __init__(self):
        self.dicts = [sys.modules]
        classes, seen = [], set()
        for m in list(sys.modules.values()):
            d = getattr(m, "__dict__", None)
            if type(d) is dict:
                self.dicts.append(d)
                for v in d.values():
                    if isinstance(v, type) and not v.__flags__ & _IMMUTABLE and id(v) not in seen:
                        seen.add(id(v))
                        classes.append(v)
        self.dicts.append(os.environ._data)
        self.copies = [d.copy() for d in self.dicts]
        # The classes of every module loaded (json.JSONEncoder and the like): a call that sets an
        # attribute of one changes its dict's tag, and the executor leaves.
        self.classes_changed = _cordon_native.classes_changed
        _cordon_native.watch_classes(classes)
        self.environ = dict(os.environ._data)
        self.changed, self.snapshot = _cordon_native.changed, _cordon_native.snapshot
        self.lists = [(lst, list(lst)) for lst in (sys.path, sys.argv, sys.meta_path, sys.path_hooks)]
        self.signals = {}
        for s in signal.valid_signals():
            try:
                self.signals[s] = _signal.getsignal(s)  # the C function: signal.getsignal makes enums
            except (ValueError, OSError):
                pass
        # fd 4: the call's directory, to return to (fds above it are closed after each call)
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if fd != 4:
            os.dup2(fd, 4, inheritable=False)
            os.close(fd)
        self.cwd = 4
        self.calldir = os.getcwd()
        self.calldir_size = os.stat(self.calldir).st_size  # tmpfs: 20 bytes per entry, so empty = this
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.recursion = sys.getrecursionlimit()
        self.snapshot(self.dicts)

    def restore_dicts(self):
        """First thing after a call, before the server uses any module again: the dicts put back
        (a call may have replaced json.dumps or os.write). Uses only what it captured."""
        changed = self.changed()
        if not changed:
            return
        env = self.dicts[-1]
        call_env = dict(env) if env != self.environ else None
        for i in changed:
            d = self.dicts[i]
            d.clear()
            d.update(self.copies[i])
        self.snapshot(self.dicts)
        if call_env is not None:  # the process's own environment too (os.environ wrote it), for C code
            for k in set(call_env) | set(self.environ):
                if k not in self.environ:
                    os.unsetenv(k)
                elif call_env.get(k) != self.environ[k]:
                    os.putenv(k, self.environ[k])

    def scrub(self):
        """Put the rest back; False when that is not possible (the server must go)."""
        clean = not self.classes_changed()
        # Child processes still there: the server goes, and the agent kills its process group, which
        # none of them can leave (seccomp). The agent also looks for itself (worker-call.c).
        try:
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            clean = False
        except ChildProcessError:
            pass
        # Python threads still there. (Native ones are not looked for: a thread is part of the
        # executor, which later non-fresh calls share anyway; it ends with it.)
        if threading.active_count() > 1 or len(sys._current_frames()) > 1:
            clean = False
        for lst, saved in self.lists:
            if lst != saved:
                lst[:] = saved
        for s, h in self.signals.items():
            try:
                if _signal.getsignal(s) is not h:
                    _signal.signal(s, h)
            except (ValueError, OSError, TypeError):
                clean = False
        if sys.getrecursionlimit() != self.recursion:
            sys.setrecursionlimit(self.recursion)
        if sys.gettrace() is not None or sys.getprofile() is not None:
            sys.settrace(None)
            sys.setprofile(None)
        os.umask(self.umask)
        os.fchdir(self.cwd)
        os.closerange(5, 1 << 20)  # 0-2 stdio, 3 the agent, 4 the call's directory
        # Files: the call's directory is emptied. It is a tmpfs, whose directory size counts its
        # entries: at its empty size there is nothing to look for.
        if os.stat(self.calldir).st_size == self.calldir_size:
            return clean
        with os.scandir(self.calldir) as it:
            leftovers = [e.path for e in it]
        for p in leftovers:
            try:
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                else:
                    os.unlink(p)
            except OSError:
                clean = False
        return clean


def _capture(fd, stream):
    try:
        stream.flush()
    except Exception:
        pass
    size = os.lseek(fd, 0, os.SEEK_END)
    data = os.pread(fd, min(size, OUT_MAX), 0) if size else b""
    if size:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
    text = data.decode("utf-8", "replace")
    if size > OUT_MAX:
        text += "\n[cordon: output truncated at 1 MiB]"
    return text


def _run(req):
    result, err = None, None
    g = {"__name__": "__main__", "__builtins__": builtins, "input": req.get("input")}
    t0 = time.perf_counter()
    try:
        body, last = _compile(req["code"])
        exec(body, g)
        if last is not None:
            result = eval(last, g)
    except BaseException as e:  # SystemExit and KeyboardInterrupt are the call's errors too
        err = {"type": type(e).__name__, "message": str(e),
               "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__))}
    return result, err, (time.perf_counter() - t0) * 1e3


def serve(fd, fresh):
    try:
        state = _start(fresh)
    except BaseException as e:  # say why to the call that is waiting, then go
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        length, _ = struct.unpack("<II", _read(fd, 8))
        _read(fd, length)
        body = json.dumps({"result": None, "stdout": "", "stderr": "", "timed_out": False, "duration_ms": None,
                           "error": {"type": "WorkerStartError", "message": str(e), "traceback": tb}}).encode()
        _write(fd, struct.pack("<II", len(body), 1) + body)
        os._exit(1)
    _loop(fd, state)


def _start(fresh):
    out_fd, err_fd = _cordon_native.memfd("stdout"), _cordon_native.memfd("stderr")
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1 << 16)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1 << 16)
    sys.stdin = open(0, "r", closefd=False)
    _streams[:] = [sys.stdout, sys.stderr]  # what the server flushes, whatever a call rebinds
    return None if fresh else _State()  # a fresh executor serves one call: nothing to put back


def _loop(fd, state):
    served = 0
    while True:
        length, flags = struct.unpack("<II", _read(fd, 8))
        req = json.loads(_read(fd, length))
        result, err, ms = _run(req)
        if state:
            state.restore_dicts()
        out = {"result": result, "stdout": _capture(1, _streams[0]), "stderr": _capture(2, _streams[1]),
               "error": err, "duration_ms": round(ms, 3), "timed_out": False}
        try:
            body = json.dumps(out).encode()
        except (TypeError, ValueError):
            out["result"] = repr(result)
            body = json.dumps(out).encode()
        served += 1
        result = out = None
        leaving = state is None or (flags & FRESH) or not state.scrub() or served >= MAX_CALLS
        # Flag 1: this executor ends now; the agent kills its process group and clones another for
        # the next call (which must not be sent here).
        _write(fd, struct.pack("<II", len(body), 1 if leaving else 0) + body)
        if leaving:
            os._exit(0)
