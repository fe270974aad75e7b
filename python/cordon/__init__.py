"""cordon: Python SDK for cordond (standard library only).

    from cordon import Sandbox
    with Sandbox.create(image="host", memory_mb=512, timeout_s=600, labels={"job": "j1"}) as sb:
        r = sb.exec(["python3", "-c", "print(6*7)"])     # r.exit_code, r.stdout, r.stderr, r.duration_ms
        for ev in sb.exec_stream(["sh", "-c", "echo a; sleep 1; echo b"]):
            print(ev["type"], ev.get("data"))
        sb.files.write("/workspace/a.txt", b"hi")

AsyncSandbox has the same methods as coroutines, for trainers that drive
thousands of sandboxes from one process. docs/sdk-python.md has the rest."""

import asyncio
import base64
import codecs
import http.client
import json
import tarfile
import tempfile
import urllib.parse

from ._http import (ConnectionLost, CordonError, Endpoint, ExecError, FileExists, Forbidden, ImageInUse,
                    IncompleteRead, InvalidArgument, NotFound, PullFailed, SandboxEnded, SandboxNotRunning,
                    ServerError, SessionBusy, TooLarge, TooManySandboxes, Unauthorized, Unavailable, alines,
                    cut_short)
from . import _tar, images
from .processes import AsyncProcess, Process
from .sessions import AsyncSession, Session, _open_body
from . import ports as _ports

__all__ = ["Sandbox", "AsyncSandbox", "ExecResult", "Endpoint", "CordonError", "InvalidArgument", "ExecError",
           "NotFound", "SandboxNotRunning", "SandboxEnded", "TooManySandboxes", "Unauthorized", "ServerError",
           "Forbidden", "TooLarge", "IncompleteRead", "ImageInUse", "PullFailed", "Unavailable", "ConnectionLost",
           "FileExists", "Process", "AsyncProcess", "Session", "AsyncSession", "SessionResult", "SessionBusy", "images",
           "trajectory", "checkpoints", "delete_checkpoint"]

_LIMITS = ("cpus", "memory_mb", "pids", "disk_mb", "timeout_s", "idle_timeout_s", "nofile", "ptys")
_TOP = ("tier", "image", "pull", "network", "mounts", "protect", "env", "workdir", "labels", "hostname", "read_only", "writable_system", "watch_writes",
        "on_violation", "disk", "user", "trajectory", "checkpoints", "checkpoint")


def _spec(kw):
    """Keyword arguments named as the spec's fields → the spec's JSON."""
    spec, limits = {}, {}
    for k, v in kw.items():
        if v is None:
            continue
        if k in _LIMITS:
            limits[k] = v
        elif k == "network" and isinstance(v, str):
            spec["network"] = {"mode": v}
        elif k in _TOP:
            spec[k] = v
        else:
            raise TypeError(f"unknown sandbox field {k!r} (fields: {', '.join(_TOP + _LIMITS)})")
    if limits:
        spec["limits"] = limits
    return spec


def _verifier(verifier, copy):
    """verifier=True or "in_place": a step in the sandbox itself; "sibling": in a fresh sandbox of the
    same spec into which only the paths of copy are copied (docs/events.md)."""
    if verifier == "sibling":  # cordond checks copy (InvalidArgument, field "verifier.copy…")
        return {"mode": "sibling", "copy": [copy] if isinstance(copy, str) else list(copy or [])}
    if copy:
        raise ValueError("copy is for verifier='sibling'")
    if verifier in (True, "in_place"):
        return True
    if verifier in (False, None):
        return None
    raise ValueError(f"verifier: True, 'in_place' or 'sibling', not {verifier!r}")


def _pty(pty):
    """pty=True: 24x80; (rows, cols); {"rows": R, "cols": C}. cordond checks the numbers (1-999)."""
    if pty is True:
        return {"rows": 24, "cols": 80}
    if isinstance(pty, dict):
        return {"rows": pty.get("rows"), "cols": pty.get("cols")}
    if isinstance(pty, (tuple, list)) and len(pty) == 2:
        return {"rows": pty[0], "cols": pty[1]}
    raise ValueError(f"pty: True, (rows, cols) or {{'rows': R, 'cols': C}}, not {pty!r}")


def _exec_body(cmd, env, cwd, stdin, timeout_s, stream, verifier=False, copy=None, user=None, pty=None, step=None):
    if isinstance(cmd, str):
        cmd = ["sh", "-c", cmd]
    body = {"cmd": list(cmd), "encoding": "base64"}
    if env:
        body["env"] = dict(env)
    if cwd is not None:  # cordond refuses an empty one, naming "cwd"
        body["cwd"] = cwd
    if pty not in (None, False):
        body["pty"] = _pty(pty)
    if user is not None:
        body["user"] = user
    if stdin is not None:
        body["stdin_b64"] = base64.b64encode(stdin.encode() if isinstance(stdin, str) else stdin).decode()
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    if stream:
        body["stream"] = True
    v = _verifier(verifier, copy)
    if v is not None:
        body["verifier"] = v
    if step is not None:
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step: expected an int from 0, got {step!r}")
        body["step"] = step
    return body


def _q(path):
    return urllib.parse.quote(path, safe="")


def _step_q(step):
    if step is None:
        return ""
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step: expected an int from 0, got {step!r}")
    return f"&step={step}"


def _label_query(label):
    """label "k=v", a list of them, or a dict → the query string's label=… parts."""
    labels = ([f"{k}={v}" for k, v in label.items()] if isinstance(label, dict)
              else [label] if isinstance(label, str) else list(label or []))
    return "&".join(f"label={_q(x)}" for x in labels)


def _update_body(timeout_s, idle_timeout_s, labels, cpus=None, memory_mb=None, pids=None, on_violation=None,
                 protect=None):
    if isinstance(protect, str):
        raise ValueError("protect: a list of patterns (the whole new list), not a string")
    body = {k: v for k, v in (("timeout_s", timeout_s), ("idle_timeout_s", idle_timeout_s), ("labels", labels),
                              ("on_violation", on_violation),
                              ("protect", None if protect is None else list(protect))) if v is not None}
    limits = {k: v for k, v in (("cpus", cpus), ("memory_mb", memory_mb), ("pids", pids)) if v is not None}
    if limits:
        body["limits"] = limits
    if not body:
        raise ValueError("update: give timeout_s, idle_timeout_s, labels, cpus, memory_mb, pids, on_violation or "
                         "protect")
    return body


_READ_CHUNK = 1 << 20


def _read_query(sb, path, max_bytes):
    if max_bytes is not None and (not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0):
        raise ValueError(f"max_bytes: expected a positive int, got {max_bytes!r}")
    return f"{sb._path}/files?path={_q(path)}" + (f"&max_bytes={max_bytes}" if max_bytes else "")


def _take(n, chunk, max_bytes, path):
    """The running total after chunk; the daemon enforces max_bytes, and so does the SDK (never more in memory)."""
    n += len(chunk)
    if max_bytes is not None and n > max_bytes:
        raise TooLarge(413, "file_too_large", f"{path}: more than max_bytes ({max_bytes})", "max_bytes")
    return n


def _archive_query(sb, remote, max_bytes):
    return f"{sb._path}/archive?path={_q(remote)}" + (f"&max_bytes={int(max_bytes)}" if max_bytes else "")


def _move_query(sb, src, dst, overwrite):
    return f"{sb._path}/move?from={_q(src)}&to={_q(dst)}" + ("" if overwrite else "&overwrite=false")


def _chmod_query(sb, path, mode):
    m = format(mode, "o") if isinstance(mode, int) else str(mode)
    return f"{sb._path}/chmod?path={_q(path)}&mode={_q(m)}"


def _watch_query(sb, path, recursive):
    return f"{sb._path}/watch?path={_q(path)}" + ("&recursive=true" if recursive else "")


def _stat_query(sb, path, follow_symlinks):
    return f"{sb._path}/stat?path={_q(path)}" + ("" if follow_symlinks else "&follow=false")


class ExecResult:
    """What a command did. stdout/stderr are str (invalid UTF-8 replaced);
    stdout_bytes/stderr_bytes are exact; max_rss_kb is the largest resident set
    of its processes."""

    def __init__(self, d):
        self.exit_code = d["exit_code"]
        self.signal = d.get("signal")
        self.timed_out = d.get("timed_out", False)
        self.truncated = d.get("truncated", False)
        self.duration_ms = d.get("duration_ms")
        self.cpu_user_ms = d.get("cpu_user_ms")
        self.cpu_system_ms = d.get("cpu_system_ms")
        self.max_rss_kb = d.get("max_rss_kb")
        self.stdout_bytes = base64.b64decode(d.get("stdout_b64", ""))
        self.stderr_bytes = base64.b64decode(d.get("stderr_b64", ""))
        self.stdout = self.stdout_bytes.decode("utf-8", "replace")
        self.stderr = self.stderr_bytes.decode("utf-8", "replace")
        self.step = d.get("step")  # its index in the sandbox's trajectory, if it records one
        self.replayed = d.get("replayed", False)  # answered from the trajectory's log: nothing ran
        # False when it ran but its step could not be written down (step_error says why): re-issued, it runs again
        self.step_recorded = d.get("step_recorded", self.step is not None)
        self.step_error = d.get("step_error")

    def __repr__(self):
        return f"ExecResult(exit_code={self.exit_code}, stdout={self.stdout[:60]!r}, stderr={self.stderr[:60]!r})"


class SessionResult(ExecResult):
    """What a command of a session did: ExecResult's fields (no signal or CPU times: the command ran
    inside the shell), and interrupted (it was interrupted: timeout_s, Session.interrupt(), or its
    client left), restarted (the shell was started again: the command did not end on SIGINT, or
    the last one ended the shell), session_ended (the shell exited: `exit N`)."""

    def __init__(self, d):
        super().__init__(d)
        self.session = d.get("session")
        self.interrupted = d.get("interrupted", False)
        self.restarted = d.get("restarted", False)
        self.session_ended = d.get("session_ended", False)

    def __repr__(self):
        return (f"SessionResult(exit_code={self.exit_code}, stdout={self.stdout[:60]!r}, "
                f"stderr={self.stderr[:60]!r})")


class CallResult:
    """What a call did (the process tier): result is the value of the code's last
    expression (JSON, or its repr when not JSON-serialisable), error is None or a dict
    with "type", "message" and "traceback"."""

    def __init__(self, d):
        self.result = d.get("result")
        self.stdout = d.get("stdout", "")
        self.stderr = d.get("stderr", "")
        self.error = d.get("error")
        self.duration_ms = d.get("duration_ms")
        self.timed_out = d.get("timed_out", False)
        self.step = d.get("step")  # its index in the sandbox's trajectory (None: it records none)
        self.replayed = d.get("replayed", False)  # answered from the trajectory's log: nothing ran

    def __repr__(self):
        return f"CallResult(result={self.result!r:.60}, error={self.error and self.error.get('type')!r})"


def _call_body(code, input, timeout_s, fresh, step=None):
    body = {"language": "python", "code": code, "input": input}
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    if fresh:
        body["fresh"] = True
    if step is not None:
        body["step"] = step
    return body


def _stream_event(d, decoders):
    """An NDJSON line of a streamed exec → the event handed to the caller.
    decoders: one incremental UTF-8 decoder per stream, so that a character
    split between two chunks is not turned into two U+FFFD."""
    if "data_b64" in d:
        raw = base64.b64decode(d.pop("data_b64"))
        d["data_bytes"] = raw
        if d["type"] not in decoders:
            decoders[d["type"]] = codecs.getincrementaldecoder("utf-8")("replace")
        d["data"] = decoders[d["type"]].decode(raw)
    elif d.get("type") in ("exit", "error"):
        for kind, dec in decoders.items():  # what an unfinished character left behind
            rest = dec.decode(b"", final=True)
            if rest:
                d.setdefault("unfinished", {})[kind] = rest
    return d


class _FilesUser:
    """The user file operations run as (files.as_user): its permission checks, and what they make is
    its; None: the sandbox's root."""
    _user = None

    def as_user(self, user):
        """These operations as user of the sandbox (a name, uid, name:group or uid:gid, resolved in
        its own /etc/passwd): a file written is the user's, a path the user may not reach is
        refused (Forbidden)."""
        f = type(self)(self._sb)
        f._user = user
        return f

    def _u(self, url):
        return url + (f"&user={_q(self._user)}" if self._user is not None else "")


class _Files(_FilesUser):
    def __init__(self, sb):
        self._sb = sb

    def write(self, path, data, step=None):
        """Create or replace path (parents are made); returns its stat dict. step=k: in a sandbox that
        records a trajectory, this write is step k (run once, as exec's step)."""
        data = data.encode() if isinstance(data, str) else bytes(data)
        _, body = self._sb._ep.request("PUT", self._u(f"{self._sb._path}/files?path={_q(path)}" + _step_q(step)),
                                       data, {"Content-Type": "application/octet-stream"})
        return json.loads(body)

    def read(self, path, max_bytes=None):
        """The file's bytes. A file longer than max_bytes (default: the daemon's max_read, 256 MiB) is
        refused with TooLarge; for big files use read_to, which holds none of it in memory."""
        buf = bytearray()
        self._stream(path, max_bytes, buf.extend)
        return bytes(buf)

    def read_to(self, path, fileobj, max_bytes=None):
        """Stream the file into fileobj (anything with a binary write()); returns the bytes written."""
        return self._stream(path, max_bytes, fileobj.write)

    def _stream(self, path, max_bytes, sink):
        _, resp = self._sb._ep.request("GET", self._u(_read_query(self._sb, path, max_bytes)), stream=True)
        n = 0
        try:
            while True:
                chunk = resp.read(_READ_CHUNK)
                if not chunk and cut_short(resp):
                    raise http.client.IncompleteRead(b"")
                if not chunk:
                    return n
                n = _take(n, chunk, max_bytes, path)
                sink(chunk)
        except (http.client.HTTPException, ConnectionError) as e:
            raise IncompleteRead(200, "incomplete", f"{path}: the download ended early ({e!r})") from None
        finally:
            resp.close()
            resp._cordon_conn.close()

    def list(self, path):
        """Entries of a directory: dicts with name, type, size, mode, mtime."""
        return self._sb._ep.json("GET", self._u(f"{self._sb._path}/ls?path={_q(path)}"))["entries"]

    def remove(self, path):
        self._sb._ep.json("DELETE", self._u(f"{self._sb._path}/files?path={_q(path)}"))

    def stat(self, path, follow_symlinks=True):
        """{"path", "type", "size", "mode", "mtime"}; NotFound if it does not exist. With
        follow_symlinks=False a symlink is described itself (type "symlink", "target")."""
        return self._sb._ep.json("GET", self._u(_stat_query(self._sb, path, follow_symlinks)))

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def mkdir(self, path):
        """mkdir -p; returns the directory's stat dict."""
        return self._sb._ep.json("POST", self._u(f"{self._sb._path}/mkdir?path={_q(path)}"))

    def rename(self, src, dst, overwrite=True):
        """Move src to dst inside the sandbox (dst's parents are made); a dst ending in "/" receives
        src under its own name. Returns dst's stat dict. An existing dst is replaced, as mv does;
        with overwrite=False it raises FileExists. Across file systems: InvalidArgument
        ("cross_device")."""
        return self._sb._ep.json("POST", self._u(_move_query(self._sb, src, dst, overwrite)))

    def chmod(self, path, mode):
        """Set path's permission bits (an int such as 0o755, or an octal string "755"); a symlink is
        followed. Returns the stat dict."""
        return self._sb._ep.json("POST", self._u(_chmod_query(self._sb, path, mode)))

    def watch(self, path, recursive=False):
        """Yield the changes below the directory path as they happen: {"type": "start"} first, then
        {"type": "create"|"write"|"remove"|"rename_from"|"rename_to"|"chmod", "path" (relative to
        path; "path_b64" when the name is not UTF-8), "dir", ["cookie"]}, {"type": "overflow"} when
        some were lost, and last {"type": "gone"} if the directory went. recursive=True: its
        subdirectories too, those made later as well. Closing the generator ends the watch."""
        _, resp = self._sb._ep.request("GET", self._u(_watch_query(self._sb, path, recursive)), stream=True)
        lines = self._sb._ep.lines(resp)
        try:
            for line in lines:
                yield json.loads(line)
        finally:
            lines.close()

    def upload_dir(self, local, remote):
        """The contents of the host directory local into remote (made if missing), as one tar
        stream; symlinks stay links. Returns {"path", "entries", "bytes"}."""
        return self._put_archive(remote, _tar.pack_dir(local))

    def write_many(self, files):
        """Several files in one request (two if absolute and relative paths are mixed): files is
        {path: bytes or str}; parents are made. Returns the number of files written."""
        return sum(self._put_archive(root, _tar.pack_files(names))["entries"]
                   for root, names in _tar.split_files(files).items())

    def _put_archive(self, remote, data):
        _, body = self._sb._ep.request("PUT", self._u(f"{self._sb._path}/archive?path={_q(remote)}"), data,
                                       {"Content-Type": "application/x-tar"})
        return json.loads(body)

    def download_dir(self, remote, local, max_bytes=None):
        """The tree under remote into the host directory local (made if missing); returns the number
        of entries written. Only names beneath local are written, never through a symlink; links
        are made as links, devices and FIFOs left out. max_bytes (default: the daemon's max_read)
        bounds the files' bytes in all."""
        _, resp = self._sb._ep.request("GET", self._u(_archive_query(self._sb, remote, max_bytes)), stream=True)
        try:
            n = _tar.unpack(resp, local)
            if resp.read() == b"" and cut_short(resp):
                raise http.client.IncompleteRead(b"")
            return n
        except (tarfile.TarError, EOFError, http.client.HTTPException, ConnectionError) as e:
            raise IncompleteRead(200, "incomplete", f"{remote}: the download ended early ({e!r})") from None
        finally:
            resp.close()
            resp._cordon_conn.close()


def trajectory(trajectory_id, endpoint=None):
    """The steps recorded in trajectory trajectory_id (GET /v1/trajectories/{id}), whether or not a
    sandbox records it now."""
    ep = endpoint or Endpoint()
    path = "/v1/trajectories/" + urllib.parse.quote(trajectory_id, safe="/")
    o = ep.json("GET", path)
    while o.get("more"):  # cordond answers in pages (?from=K&limit=N): all of them, as one
        page = ep.json("GET", f"{path}?from={o['from'] + len(o['steps'])}")
        o["steps"] += page["steps"]
        o.update({k: v for k, v in page.items() if k not in ("steps", "from")})
    return o


def _checkpoints_query(sandbox, trajectory_id):
    q = {k: v for k, v in (("sandbox", sandbox), ("trajectory", trajectory_id)) if v}
    return "/v1/checkpoints" + ("?" + urllib.parse.urlencode(q) if q else "")


def _fork_body(n, checkpoint, labels):
    body = {"count": n}
    if checkpoint is not None:
        body["checkpoint"] = checkpoint["id"] if isinstance(checkpoint, dict) else checkpoint
    if labels:
        body["labels"] = labels
    return body


class _ClassOrInstance:
    """A method that is one thing called on the class and another on an instance: Sandbox.resume(
    trajectory_id) resumes a trajectory, sb.resume() thaws a paused sandbox."""

    def __init__(self, on_class, on_instance):
        self.on_class, self.on_instance = on_class, on_instance

    def __get__(self, obj, cls):
        if obj is None:
            return self.on_class.__get__(cls, type(cls))
        return self.on_instance.__get__(obj, cls)


def _resume_path(trajectory_id):
    return "/v1/trajectories/" + urllib.parse.quote(trajectory_id, safe="/") + "/resume"


def checkpoints(sandbox=None, trajectory_id=None, endpoint=None):
    """The checkpoints in cordond's store, oldest first, optionally only a sandbox's or a
    trajectory's; each {"id", "sandbox", "created", "disk_mb", "parent", "trajectory", "step", …}.
    They outlive their sandbox and cordond's restarts until deleted."""
    return (endpoint or Endpoint()).json("GET", _checkpoints_query(sandbox, trajectory_id))["checkpoints"]


def delete_checkpoint(checkpoint_id, endpoint=None):
    """Delete a checkpoint (its id, or the dict checkpoint() returned)."""
    ck = checkpoint_id["id"] if isinstance(checkpoint_id, dict) else checkpoint_id
    return (endpoint or Endpoint()).json("DELETE", f"/v1/checkpoints/{_q(ck)}")


class Sandbox:
    """A sandbox in cordond. Use as a context manager: it is killed on exit."""

    def __init__(self, info, endpoint):
        self.id = info["id"]
        self._info = info
        self._ep = endpoint
        self._path = f"/v1/sandboxes/{self.id}"
        self.files = _Files(self)

    # ---- making and finding ----
    @classmethod
    def create(cls, endpoint=None, **fields):
        """Create a sandbox; keyword arguments are the spec's fields (tier,
        image, memory_mb, cpus, pids, disk_mb, timeout_s, network, mounts,
        protect, env, workdir, labels, disk="disk"|"memory", …). An OCI image that is not
        in cordond's store is pulled first; pull="always" pulls it anyway, pull="never" refuses."""
        ep = endpoint or Endpoint()
        return cls(ep.json("POST", "/v1/sandboxes", _spec(fields)), ep)

    @classmethod
    def connect(cls, sandbox_id, endpoint=None):
        ep = endpoint or Endpoint()
        return cls(ep.json("GET", f"/v1/sandboxes/{_q(sandbox_id)}"), ep)

    def trajectory(self):
        """The steps recorded in this sandbox's trajectory (create(trajectory="ID")): {"id", "steps",
        "next_step", "sandbox"}; each step has "step", "kind", "request", "result", "violations",
        "time", "wall_ms" (docs/trajectories.md)."""
        tid = self._info.get("spec", {}).get("trajectory")
        if not tid:
            raise ValueError(f"sandbox {self.id} records no trajectory")
        return trajectory(tid, self._ep)

    # ---- checkpoints and forks (create with checkpoints=True; docs/trajectories.md) ----
    def checkpoint(self, memory=None):
        """Freeze this sandbox's files as they are now into a checkpoint (only what changed since
        the last one costs space); returns its record: {"id": "ck-…", "sandbox", "created",
        "step" (the trajectory's steps then), …}. Processes go on; their writes wait meanwhile.
        A microvm guest's checkpoint is the whole guest, its memory too ("memory": true in the
        record); memory=True/False says which one the caller expects (400 when it is not this tier's)."""
        return self._ep.json("POST", f"{self._path}/checkpoints", {} if memory is None else {"memory": memory})

    def checkpoints(self):
        """This sandbox's checkpoints, oldest first."""
        return self._ep.json("GET", f"{self._path}/checkpoints")["checkpoints"]

    def fork(self, n=1, checkpoint=None, labels=None):
        """n new sandboxes with this one's spec and egress policy, each with the files of
        checkpoint (one of this sandbox's; default: a checkpoint taken now) and, when this one
        records a trajectory T, the trajectory T/b1…T/bn that starts with T's steps up to the
        checkpoint. labels are added to theirs. All or none: a failure deletes those made."""
        r = self._ep.json("POST", f"{self._path}/fork", _fork_body(n, checkpoint, labels))
        return [Sandbox(info, self._ep) for info in r["sandboxes"]]

    def rollback(self, checkpoint):
        """Make this sandbox's files exactly those of checkpoint (one of its own, or the one it was
        made from): every process of it ends and a new init starts on them; its id, spec, network,
        events and violation counts stay. Its trajectory goes back to the checkpoint's step: the
        later steps are kept in the trajectory's "rolled_back" list. Returns its fresh info."""
        ck = checkpoint["id"] if isinstance(checkpoint, dict) else checkpoint
        self._info = self._ep.json("POST", f"{self._path}/rollback", {"checkpoint": ck})
        return self._info

    @classmethod
    def list(cls, label=None, endpoint=None):
        """Sandboxes, optionally only those with label "k=v" (or a dict of them)."""
        ep = endpoint or Endpoint()
        q = _label_query(label)
        return [cls(d, ep) for d in ep.json("GET", "/v1/sandboxes" + (f"?{q}" if q else ""))["sandboxes"]]

    @classmethod
    def kill_all(cls, label, endpoint=None):
        """Delete every sandbox with all of these labels ("k=v", a list, or a dict; at least one),
        running or ended; returns their ids."""
        q = _label_query(label)
        if not q:
            raise ValueError("kill_all: give at least one label")
        return (endpoint or Endpoint()).json("DELETE", f"/v1/sandboxes?{q}")["deleted"]

    # ---- using ----
    def info(self):
        """Fresh state of the sandbox (state, spec, labels, usage)."""
        self._info = self._ep.json("GET", self._path)
        return self._info

    @property
    def labels(self):
        return self._info.get("labels", {})

    def update(self, timeout_s=None, idle_timeout_s=None, labels=None, cpus=None, memory_mb=None, pids=None,
               on_violation=None, protect=None):
        """Change the running sandbox (a phase change: setup, agent, verifier): timeout_s a new
        lifetime counted from now (0: none), idle_timeout_s (0: none), labels merged into its labels
        (a value None removes that label), its limits (cpus, memory_mb, pids), on_violation, and
        protect (the whole new list of protected paths; [] none; container tier). A process of the
        sandbox that holds something beneath a new one raises SandboxNotRunning (409 protect_busy).
        Returns its fresh info. An ended sandbox raises SandboxEnded."""
        self._info = self._ep.json("PATCH", self._path, _update_body(timeout_s, idle_timeout_s, labels, cpus,
                                                                     memory_mb, pids, on_violation, protect))
        return self._info

    def pause(self):
        """Freeze every process of the sandbox (its memory kept) until resume(); its lifetime and
        idle clocks stop meanwhile, and requests that would reach it raise SandboxNotRunning (409
        sandbox_paused). Returns its fresh info ("paused": true)."""
        self._info = self._ep.json("POST", f"{self._path}/pause", {})
        return self._info

    def _thaw(self, timeout_s=None):
        """Thaw a paused sandbox: its lifetime is timeout_s from now, else what was left of it."""
        self._info = self._ep.json("POST", f"{self._path}/resume", {} if timeout_s is None else {"timeout_s": timeout_s})
        return self._info

    def _resume_trajectory(cls, trajectory_id, endpoint=None):
        """Sandbox.resume(trajectory_id): the sandbox that records trajectory_id when it is alive;
        else a new one from the trajectory's newest checkpoint, the trajectory back at that
        checkpoint's step (the later steps kept as rolled back), so that a worker re-issuing its
        steps from 0 gets the recorded answers up to there and runs the rest. ("resumed": whether
        a new sandbox was made.)"""
        ep = endpoint or Endpoint()
        return cls(ep.json("POST", _resume_path(trajectory_id), {}), ep)

    resume = _ClassOrInstance(_resume_trajectory, _thaw)

    def set_timeout(self, timeout_s):
        """The sandbox ends timeout_s seconds from now (0: no lifetime)."""
        return self.update(timeout_s=timeout_s)

    def exec(self, cmd, env=None, cwd=None, stdin=None, timeout_s=None, verifier=False, copy=None, user=None,
             pty=None, step=None):
        """Run cmd (a list, or a string for sh -c) to completion. cwd: absolute, or relative to
        the sandbox's workdir. pty=True (24x80), (rows, cols) or {"rows", "cols"}: on a
        pseudo-terminal (stdout and stderr are then one stream). verifier=True: a verifier
        step, which ends the sandbox's other processes first, runs alone and may read the
        protected paths; verifier="sibling", copy=[paths]: the same in a fresh sandbox of the
        same spec that gets only those paths from this one (docs/events.md). user: run as
        this user of the sandbox ("name", "uid", "name:group", "uid:gid"; docs/spec.md). step=k: in a
        sandbox that records a trajectory, this exec is step k: run once, and answered from the log
        (.replayed) when step k is already recorded with the same request (docs/trajectories.md)."""
        return ExecResult(self._ep.json("POST", f"{self._path}/exec",
                                        _exec_body(cmd, env, cwd, stdin, timeout_s, False, verifier, copy, user,
                                                   pty, step)))

    def start(self, cmd, env=None, cwd=None, stdin=None, timeout_s=None, user=None, pty=None, keep_stdin=False):
        """Start cmd in the background and return at once, with its Process (.pid in the sandbox).
        keep_stdin=True: its stdin stays open for Process.send_stdin (a pty's always is). Its output is
        kept (the newest 1 MiB) for Process.output/follow, by this client or any other later."""
        body = _exec_body(cmd, env, cwd, stdin, timeout_s, False, user=user, pty=pty)
        body["background"] = True
        if keep_stdin:
            body["keep_stdin"] = True
        return Process(self, self._ep.json("POST", f"{self._path}/exec", body))

    def processes(self):
        """Its background processes, running or ended (until deleted): a list of Process."""
        return [Process(self, i) for i in self._ep.json("GET", f"{self._path}/processes")["processes"]]

    def process(self, pid):
        """The background process pid (NotFound if it is not one, or was deleted)."""
        return Process(self, self._ep.json("GET", f"{self._path}/processes/{int(pid)}"))

    def session(self, shell=None, cwd=None, env=None, user=None, id=None):
        """A shell session (Session): one shell whose state (cwd, exported variables, functions,
        aliases) carries over from one Session.run to the next. shell: "bash" (default; "sh" where
        there is none), "sh", or a path. id="s1": the existing session of that id (any client)."""
        if id is not None:
            return Session(self, self._ep.json("GET", f"{self._path}/sessions/{_q(id)}"))
        return Session(self, self._ep.json("POST", f"{self._path}/sessions", _open_body(shell, cwd, env, user)))

    def open_port(self, port):
        """A socket connected to TCP port `port` inside the sandbox (127.0.0.1 there), through cordond:
        raw bytes both ways, whatever the sandbox's network mode. NotFound/ServerError-like CordonError
        (502, code "port_unreachable") when nothing listens there."""
        return _ports.open_tunnel(self._ep, f"{self._path}/ports/{int(port)}")

    def port_request(self, port, path="/", method="GET", body=None, headers=None):
        """An HTTP request to the server on `port` inside the sandbox, through cordond's proxy path:
        (status, headers, body bytes) as that server answered."""
        path = path if path.startswith("/") else "/" + path
        return _ports.request(self._ep, f"{self._path}/ports/{int(port)}{path}", method, body, headers)

    def forward_port(self, port, local_port=0):
        """PortForward: 127.0.0.1:.port here (local_port, 0: any free one) to `port` inside the
        sandbox, served by a thread until .close() or the end of `with`."""
        return _ports.PortForward(self, port, local_port)

    def sessions(self):
        """Its open sessions: a list of Session."""
        return [Session(self, i) for i in self._ep.json("GET", f"{self._path}/sessions")["sessions"]]

    def call(self, code, input=None, timeout_s=None, fresh=False, step=None):
        """Run Python code in the sandbox's warm interpreter (tier process): the variable
        `input` holds input; the value of the last expression is the result. fresh=True:
        a pristine interpreter made for this call alone, ended after it with everything it
        started; use it for any call whose result must be trusted (docs/process.md). step=k: in a
        sandbox that records a trajectory, this call is step k (run once, as exec's step)."""
        return CallResult(self._ep.json("POST", f"{self._path}/call", _call_body(code, input, timeout_s, fresh, step)))

    def exec_stream(self, cmd, env=None, cwd=None, stdin=None, timeout_s=None, verifier=False, copy=None, user=None,
                    pty=None, step=None):
        """Yield events as they come: {"type": "stdout"|"stderr", "data", "data_bytes"}, then
        {"type": "exit", "exit_code", …} (or {"type": "error", "error": {…}}). Closing the
        generator early (close(), leaving a for loop and dropping it) hangs up: cordond ends
        the command."""
        _, resp = self._ep.request("POST", f"{self._path}/exec",
                                   _exec_body(cmd, env, cwd, stdin, timeout_s, True, verifier, copy, user, pty, step),
                                   stream=True)
        decoders = {}
        lines = self._ep.lines(resp)
        try:
            for line in lines:
                yield _stream_event(json.loads(line), decoders)
        finally:
            lines.close()

    def events(self, follow=False):
        """The sandbox's events (dicts with "type"); with follow=True an
        iterator that yields them as they happen, until the sandbox is deleted."""
        if not follow:
            _, data = self._ep.request("GET", f"{self._path}/events")
            return [json.loads(x) for x in data.splitlines() if x.strip()]
        return self._follow()

    def _follow(self, what="events?follow=true"):
        """An NDJSON stream of the sandbox's (events, usage), decoded line by line."""
        _, resp = self._ep.request("GET", f"{self._path}/{what}", stream=True)
        lines = self._ep.lines(resp)
        try:
            for line in lines:
                yield json.loads(line)
        finally:
            lines.close()

    def usage(self):
        """What it uses now (once it ended: at its end): {"time", "cpu_ms", "memory_bytes",
        "memory_peak_bytes", "pids", "disk_used_bytes", "disk_size_bytes", "net_rx_bytes",
        "net_tx_bytes", "oom_kills", "pids_limit_hits"}; None where the tier cannot tell."""
        return self._ep.json("GET", f"{self._path}/usage")

    def usage_stream(self, interval_s=1.0):
        """Yield usage() every interval_s seconds (0.1-3600) until the sandbox ends (the last one is
        its usage at the end)."""
        return self._follow(f"usage?follow=true&interval_s={float(interval_s)!r}")

    def set_network(self, mode="allowlist", allow=()):
        """Replace the egress policy of the running sandbox (e.g. open package
        mirrors for setup, then close them): connections the new list forbids
        are cut. Returns {"mode", "allow", "generation"}."""
        return self._ep.json("PATCH", f"{self._path}/network", {"mode": mode, "allow": list(allow)})

    def violations(self):
        """The reward signal: {"counts": {"egress": 2, "oom": 0, …}, "first": t, "last": t}
        (unix times of the first and last violation, None before any)."""
        v = self._ep.json("GET", f"{self._path}/violations")
        v.pop("id", None)
        return v

    def monitor_text(self, text):
        """Submit free text about the sandbox (e.g. an agent's message) to the
        monitor's text rules; returns the matches [{"rule", "severity",
        "description"}] (each is also an "alert" event)."""
        return self._ep.json("POST", f"{self._path}/monitor/text", {"text": text})["alerts"]

    def kill(self):
        """Delete the sandbox (idempotent)."""
        try:
            self._ep.json("DELETE", self._path)
        except NotFound:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()

    def __repr__(self):
        return f"Sandbox({self.id})"


class _AsyncFiles(_FilesUser):
    def __init__(self, sb):
        self._sb = sb

    async def write(self, path, data, step=None):
        data = data.encode() if isinstance(data, str) else bytes(data)
        _, body = await self._sb._ep.arequest(
            "PUT", self._u(f"{self._sb._path}/files?path={_q(path)}" + _step_q(step)), data,
            {"Content-Type": "application/octet-stream"})
        return json.loads(body)

    async def read(self, path, max_bytes=None):
        buf = bytearray()
        await self._stream(path, max_bytes, buf.extend)
        return bytes(buf)

    async def read_to(self, path, fileobj, max_bytes=None):
        return await self._stream(path, max_bytes, fileobj.write)

    async def _stream(self, path, max_bytes, sink):
        n = 0
        stream = self._sb._ep.astream("GET", self._u(_read_query(self._sb, path, max_bytes)))
        try:
            async for chunk in stream:
                n = _take(n, chunk, max_bytes, path)
                sink(chunk)
        except IncompleteRead:
            raise
        except ConnectionLost as e:
            raise IncompleteRead(200, "incomplete", f"{path}: the download ended early ({e.message})") from None
        finally:
            await stream.aclose()
        return n

    async def list(self, path):
        return (await self._sb._ep.ajson("GET", self._u(f"{self._sb._path}/ls?path={_q(path)}")))["entries"]

    async def remove(self, path):
        await self._sb._ep.ajson("DELETE", self._u(f"{self._sb._path}/files?path={_q(path)}"))

    async def stat(self, path, follow_symlinks=True):
        return await self._sb._ep.ajson("GET", self._u(_stat_query(self._sb, path, follow_symlinks)))

    async def mkdir(self, path):
        return await self._sb._ep.ajson("POST", self._u(f"{self._sb._path}/mkdir?path={_q(path)}"))

    async def rename(self, src, dst, overwrite=True):
        return await self._sb._ep.ajson("POST", self._u(_move_query(self._sb, src, dst, overwrite)))

    async def chmod(self, path, mode):
        return await self._sb._ep.ajson("POST", self._u(_chmod_query(self._sb, path, mode)))

    async def watch(self, path, recursive=False):
        """An async iterator of watch()'s events; cancelled or closed early, the watch ends."""
        lines = alines(self._sb._ep.astream("GET", self._u(_watch_query(self._sb, path, recursive))))
        try:
            async for line in lines:
                yield json.loads(line)
        finally:
            await lines.aclose()

    async def upload_dir(self, local, remote):
        return await self._put_archive(remote, await asyncio.to_thread(_tar.pack_dir, local))

    async def write_many(self, files):
        n = 0
        for root, names in _tar.split_files(files).items():
            n += (await self._put_archive(root, _tar.pack_files(names)))["entries"]
        return n

    async def _put_archive(self, remote, data):
        _, body = await self._sb._ep.arequest("PUT", self._u(f"{self._sb._path}/archive?path={_q(remote)}"), data,
                                              {"Content-Type": "application/x-tar"})
        return json.loads(body)

    async def download_dir(self, remote, local, max_bytes=None):
        """As Sandbox's: the stream is spooled (to disk past 64 MiB), then unpacked in a thread."""
        stream = self._sb._ep.astream("GET", self._u(_archive_query(self._sb, remote, max_bytes)))
        with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
            try:
                async for chunk in stream:
                    spool.write(chunk)
            except ConnectionLost as e:
                raise IncompleteRead(200, "incomplete", f"{remote}: the download ended early ({e.message})") from None
            finally:
                await stream.aclose()
            spool.seek(0)
            try:
                return await asyncio.to_thread(_tar.unpack, spool, local, False)
            except (tarfile.TarError, EOFError) as e:
                raise IncompleteRead(200, "incomplete", f"{remote}: the archive is not whole ({e!r})") from None


class AsyncSandbox:
    """Sandbox for asyncio: the same methods, as coroutines (exec_stream and
    events(follow=True) are async iterators). `async with` kills it on exit."""

    def __init__(self, info, endpoint):
        self.id = info["id"]
        self._info = info
        self._ep = endpoint
        self._path = f"/v1/sandboxes/{self.id}"
        self.files = _AsyncFiles(self)

    @classmethod
    async def create(cls, endpoint=None, **fields):
        ep = endpoint or Endpoint()
        return cls(await ep.ajson("POST", "/v1/sandboxes", _spec(fields)), ep)

    @classmethod
    async def connect(cls, sandbox_id, endpoint=None):
        ep = endpoint or Endpoint()
        return cls(await ep.ajson("GET", f"/v1/sandboxes/{_q(sandbox_id)}"), ep)

    async def trajectory(self):
        """As Sandbox.trajectory."""
        tid = self._info.get("spec", {}).get("trajectory")
        if not tid:
            raise ValueError(f"sandbox {self.id} records no trajectory")
        path = "/v1/trajectories/" + urllib.parse.quote(tid, safe="/")
        o = await self._ep.ajson("GET", path)
        while o.get("more"):  # as trajectory(): every page
            page = await self._ep.ajson("GET", f"{path}?from={o['from'] + len(o['steps'])}")
            o["steps"] += page["steps"]
            o.update({k: v for k, v in page.items() if k not in ("steps", "from")})
        return o

    async def checkpoint(self, memory=None):
        """As Sandbox.checkpoint."""
        return await self._ep.ajson("POST", f"{self._path}/checkpoints", {} if memory is None else {"memory": memory})

    async def checkpoints(self):
        return (await self._ep.ajson("GET", f"{self._path}/checkpoints"))["checkpoints"]

    async def rollback(self, checkpoint):
        """As Sandbox.rollback."""
        ck = checkpoint["id"] if isinstance(checkpoint, dict) else checkpoint
        self._info = await self._ep.ajson("POST", f"{self._path}/rollback", {"checkpoint": ck})
        return self._info

    async def fork(self, n=1, checkpoint=None, labels=None):
        """As Sandbox.fork."""
        r = await self._ep.ajson("POST", f"{self._path}/fork", _fork_body(n, checkpoint, labels))
        return [AsyncSandbox(info, self._ep) for info in r["sandboxes"]]

    @classmethod
    async def list(cls, label=None, endpoint=None):
        ep = endpoint or Endpoint()
        q = _label_query(label)
        return [cls(d, ep) for d in (await ep.ajson("GET", "/v1/sandboxes" + (f"?{q}" if q else "")))["sandboxes"]]

    @classmethod
    async def kill_all(cls, label, endpoint=None):
        q = _label_query(label)
        if not q:
            raise ValueError("kill_all: give at least one label")
        return (await (endpoint or Endpoint()).ajson("DELETE", f"/v1/sandboxes?{q}"))["deleted"]

    async def info(self):
        self._info = await self._ep.ajson("GET", self._path)
        return self._info

    @property
    def labels(self):
        return self._info.get("labels", {})

    async def update(self, timeout_s=None, idle_timeout_s=None, labels=None, cpus=None, memory_mb=None, pids=None,
                     on_violation=None, protect=None):
        self._info = await self._ep.ajson("PATCH", self._path, _update_body(timeout_s, idle_timeout_s, labels, cpus,
                                                                            memory_mb, pids, on_violation, protect))
        return self._info

    async def set_timeout(self, timeout_s):
        return await self.update(timeout_s=timeout_s)

    async def pause(self):
        self._info = await self._ep.ajson("POST", f"{self._path}/pause", {})
        return self._info

    async def _thaw(self, timeout_s=None):
        self._info = await self._ep.ajson("POST", f"{self._path}/resume",
                                          {} if timeout_s is None else {"timeout_s": timeout_s})
        return self._info

    async def _resume_trajectory(cls, trajectory_id, endpoint=None):
        ep = endpoint or Endpoint()
        return cls(await ep.ajson("POST", _resume_path(trajectory_id), {}), ep)

    resume = _ClassOrInstance(_resume_trajectory, _thaw)

    async def exec(self, cmd, env=None, cwd=None, stdin=None, timeout_s=None, verifier=False, copy=None, user=None,
                   pty=None, step=None):
        """Cancelled (asyncio.wait_for, task.cancel()), it hangs up at once: cordond ends the command."""
        return ExecResult(await self._ep.ajson("POST", f"{self._path}/exec",
                                               _exec_body(cmd, env, cwd, stdin, timeout_s, False, verifier, copy, user,
                                                          pty, step)))

    async def start(self, cmd, env=None, cwd=None, stdin=None, timeout_s=None, user=None, pty=None,
                    keep_stdin=False):
        body = _exec_body(cmd, env, cwd, stdin, timeout_s, False, user=user, pty=pty)
        body["background"] = True
        if keep_stdin:
            body["keep_stdin"] = True
        return AsyncProcess(self, await self._ep.ajson("POST", f"{self._path}/exec", body))

    async def processes(self):
        return [AsyncProcess(self, i) for i in (await self._ep.ajson("GET", f"{self._path}/processes"))["processes"]]

    async def process(self, pid):
        return AsyncProcess(self, await self._ep.ajson("GET", f"{self._path}/processes/{int(pid)}"))

    async def session(self, shell=None, cwd=None, env=None, user=None, id=None):
        if id is not None:
            return AsyncSession(self, await self._ep.ajson("GET", f"{self._path}/sessions/{_q(id)}"))
        return AsyncSession(self, await self._ep.ajson("POST", f"{self._path}/sessions",
                                                       _open_body(shell, cwd, env, user)))

    async def open_port(self, port):
        """(reader, writer): an asyncio connection to `port` inside the sandbox, through cordond."""
        return await _ports.aopen_tunnel(self._ep, f"{self._path}/ports/{int(port)}")

    async def sessions(self):
        return [AsyncSession(self, i) for i in (await self._ep.ajson("GET", f"{self._path}/sessions"))["sessions"]]

    async def call(self, code, input=None, timeout_s=None, fresh=False, step=None):
        return CallResult(await self._ep.ajson("POST", f"{self._path}/call",
                                               _call_body(code, input, timeout_s, fresh, step)))

    async def exec_stream(self, cmd, env=None, cwd=None, stdin=None, timeout_s=None, verifier=False, copy=None, user=None,
                          pty=None, step=None):
        """An async iterator of exec_stream's events. Cancelled, or closed early (aclose()), it
        hangs up: cordond ends the command."""
        decoders = {}
        lines = alines(self._ep.astream("POST", f"{self._path}/exec",
                                        _exec_body(cmd, env, cwd, stdin, timeout_s, True, verifier, copy, user, pty,
                                                   step)))
        try:
            async for line in lines:
                yield _stream_event(json.loads(line), decoders)
        finally:
            await lines.aclose()

    def events(self, follow=False):
        """`await sb.events()`: a list of events; `async for ev in sb.events(follow=True)`: they
        as they happen, until the sandbox is deleted (as follow_events())."""
        if follow:
            return self.follow_events()
        return self._events()

    async def _events(self):
        _, data = await self._ep.arequest("GET", f"{self._path}/events")
        return [json.loads(x) for x in data.splitlines() if x.strip()]

    def follow_events(self):
        return self._follow()

    async def _follow(self, what="events?follow=true"):
        """An NDJSON stream of the sandbox's (events, usage), decoded line by line."""
        lines = alines(self._ep.astream("GET", f"{self._path}/{what}"))
        try:
            async for line in lines:
                yield json.loads(line)
        finally:
            await lines.aclose()

    async def usage(self):
        return await self._ep.ajson("GET", f"{self._path}/usage")

    def usage_stream(self, interval_s=1.0):
        return self._follow(f"usage?follow=true&interval_s={float(interval_s)!r}")

    async def set_network(self, mode="allowlist", allow=()):
        return await self._ep.ajson("PATCH", f"{self._path}/network", {"mode": mode, "allow": list(allow)})

    async def violations(self):
        v = await self._ep.ajson("GET", f"{self._path}/violations")
        v.pop("id", None)
        return v

    async def monitor_text(self, text):
        return (await self._ep.ajson("POST", f"{self._path}/monitor/text", {"text": text}))["alerts"]

    async def kill(self):
        try:
            await self._ep.ajson("DELETE", self._path)
        except NotFound:
            pass

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.kill()

    def __repr__(self):
        return f"AsyncSandbox({self.id})"
