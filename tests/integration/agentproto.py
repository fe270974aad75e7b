"""The agent protocol (src/proto/frame.h) spoken from Python, for tests that
drive cordon-init directly: encoders for what the host sends, decoders for what
init answers. Kept deliberately independent of the C codec it checks."""

import os
import socket
import struct
import subprocess

MAGIC = 0x314E4443  # "CDN1"
HEADER = struct.Struct("<IHHII")

EXEC, EXIT, ERROR, SIGNAL, PING, PONG = 1, 2, 3, 4, 5, 6
STDOUT, STDERR, STDIN, FILE, DATA, DONE, RESIZE = 7, 8, 9, 10, 11, 12, 13
MORE = 1

SHUTDOWN_ON_EXIT, PIPES, WANT_STDIN, PTY = 1, 2, 4, 8
F_WRITE, F_READ, F_STAT, F_LIST, F_MKDIR, F_REMOVE = 1, 2, 3, 4, 5, 6


def frame(ftype, channel, payload=b"", flags=0, magic=MAGIC):
    return HEADER.pack(magic, ftype, flags, channel, len(payload)) + payload


def exec_payload(argv, env=(), cwd="", flags=PIPES, rows=0, cols=0):
    out = struct.pack("<IIIHH", flags, len(argv), len(env), rows, cols)
    for s in [cwd, *argv, *env]:
        out += s.encode() + b"\0"
    return out


def file_payload(op, path, mode=0, data=b""):
    return struct.pack("<II", op, mode) + path.encode() + b"\0" + data


def decode_stat(p):
    """One struct cdn_file_stat: (dict, bytes taken)."""
    mode, size, mtime = struct.unpack_from("<IQq", p)
    end = p.index(b"\0", 20)
    return {"mode": mode, "size": size, "mtime": mtime, "name": p[20:end].decode()}, end + 1


def decode_exit(p):
    code, sig, user_us, sys_us, rss = struct.unpack("<iiQQQ", p)
    return {"exit_code": code, "signal": sig, "user_us": user_us, "sys_us": sys_us, "maxrss_kb": rss}


def decode_error(p):
    (errnum,) = struct.unpack_from("<i", p)
    return errnum, p[4:-1].decode()


class Agent:
    """cordon-init started on the host with one end of a socketpair as fd 3."""

    def __init__(self, init_bin, cwd=None):
        self.sock, theirs = socket.socketpair()

        def at_fd3():
            os.dup2(theirs.fileno(), 3)

        self.proc = subprocess.Popen([init_bin], preexec_fn=at_fd3, pass_fds=(3,),  # fd 3 as made by at_fd3
                                     stdin=subprocess.DEVNULL, cwd=cwd)
        theirs.close()
        self.sock.settimeout(20)
        self.buf = b""

    def send(self, ftype, channel, payload=b"", flags=0):
        self.sock.sendall(frame(ftype, channel, payload, flags))

    def recv(self):
        """Next frame as (type, flags, channel, payload), or None at EOF."""
        while True:
            if len(self.buf) >= HEADER.size:
                magic, ftype, flags, channel, length = HEADER.unpack_from(self.buf)
                assert magic == MAGIC, f"bad magic {magic:#x}"
                if len(self.buf) >= HEADER.size + length:
                    payload = self.buf[HEADER.size:HEADER.size + length]
                    self.buf = self.buf[HEADER.size + length:]
                    return ftype, flags, channel, payload
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                return None
            self.buf += chunk

    def until_end(self, channel):
        """Frames of one request up to and including its last (EXIT, ERROR or DONE);
        frames of other channels are kept for later calls."""
        mine, others = [], []
        while True:
            f = self.recv()
            assert f is not None, "connection closed before the request ended"
            (mine if f[2] == channel else others).append(f)
            if f[2] == channel and f[0] in (EXIT, ERROR, DONE):
                self.pending = others
                return mine

    def run(self, channel, argv, stdin=None, **kw):
        flags = PIPES | (WANT_STDIN if stdin is not None else 0) | kw.pop("flags", 0)
        self.send(EXEC, channel, exec_payload(argv, flags=flags, **kw))
        if stdin is not None:
            for i in range(0, len(stdin), 256 << 10):  # a frame carries at most 1 MiB
                self.send(STDIN, channel, stdin[i:i + (256 << 10)])
            self.send(STDIN, channel, b"")
        frames = self.until_end(channel)
        out = b"".join(p for t, _, _, p in frames if t == STDOUT)
        err = b"".join(p for t, _, _, p in frames if t == STDERR)
        return frames[-1], out, err

    def close(self):
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
