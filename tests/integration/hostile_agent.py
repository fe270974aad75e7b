"""A hostile agent: what a compromised sandbox init (a VM guest whose kernel the agent owns) can say to
cordond. Run as a container's init in place of cordon-init (test_agent_protocol.py starts cordond with
CORDON_INIT naming a static trampoline that execs `python3 THIS_FILE`): it inherits the agent socket
as fd 3 and the other fds cordon-init would keep (7 listen, 8 slot lock, 9 seccomp listener), and
speaks the frame protocol on fd 3 — sometimes correctly, mostly not.

What it does is chosen by the requests themselves:
  EXEC argv[0]   ok          STDOUT "ok\\n", end of stdout, EXIT 0 (a well-behaved answer)
                 result      RESULT on the exec's channel (a frame only calls end with)
                 done        DONE on the exec's channel
                 data        DATA on the exec's channel
                 bad-exit    EXIT whose payload does not decode
                 hang        nothing, ever (SIGNALs for it are ignored too)
                 chan0 T     a frame of type T (a number) on channel 0, then EXIT 0
                 quiesce M   how the next QUIESCEs are answered: done | result | hang; then EXIT 0
                 bg-old      STDOUT without STARTED first, then EXIT 0 (an init from before STARTED)
                 bg-flood N  STARTED (pid 4242), N one-byte STDOUT frames, a STARTED again, EXIT 0
  QUIESCE        as set by `quiesce M` (default: done)
  FILE           path "/exit": EXIT on the file's channel; "/hang": nothing, ever (nor to CANCEL);
                 "/stall": nothing, and the agent stops reading its socket (so an upload's body stays
                 with cordond); else DONE with a stat
It depends on nothing but the standard library (the container's image is the host's /usr).
"""

import os
import struct
import time

MAGIC = 0x314E4443
HEADER = struct.Struct("<IHHII")
EXEC, EXIT, ERROR, SIGNAL, PING, PONG, STDOUT, STDERR, STDIN, FILE, DATA, DONE = range(1, 13)
QUIESCE, RESULT, STARTED = 14, 20, 24
FD = 3


def send(ftype, channel, payload=b""):
    data = HEADER.pack(MAGIC, ftype, 0, channel, len(payload)) + payload
    while data:
        data = data[os.write(FD, data):]


def exit_payload(code):
    return struct.pack("<iiQQQ", code, 0, 0, 0, 0)


def stat_payload():
    return struct.pack("<IQq", 0o100644, 0, 0) + b"\0"


def read_exactly(n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(FD, n - len(buf))
        if not chunk:
            raise SystemExit(0)  # the host hung up: an init that leaves ends the sandbox
        buf += chunk
    return buf


def argv_of(payload):
    flags, argc, envc, rows, cols = struct.unpack_from("<IIIHH", payload)
    strings = payload[16:].split(b"\0")
    return [s.decode(errors="replace") for s in strings[1:1 + argc]]  # strings[0]: cwd


def on_exec(channel, payload, state):
    argv = argv_of(payload)
    what = argv[0] if argv else ""
    if what == "ok":
        send(STDOUT, channel, b"ok\n")
        send(STDOUT, channel, b"")
        send(EXIT, channel, exit_payload(0))
    elif what == "result":
        send(RESULT, channel, b"{}")
    elif what == "done":
        send(DONE, channel)
    elif what == "data":
        send(DATA, channel, b"x")
    elif what == "bad-exit":
        send(EXIT, channel, b"\1\2\3\4\5")
    elif what == "chan0":
        send(int(argv[1]), 0, b"\0" * 8)
        send(EXIT, channel, exit_payload(0))
    elif what == "quiesce":
        state["quiesce"] = argv[1]
        send(EXIT, channel, exit_payload(0))
    elif what == "bg-old":
        send(STDOUT, channel, b"x")
        send(EXIT, channel, exit_payload(0))
    elif what == "bg-flood":
        send(STARTED, channel, struct.pack("<I", 4242))
        frame = HEADER.pack(MAGIC, STDOUT, 0, channel, 1) + b"y"
        batch = frame * 4096
        for _ in range(int(argv[1]) // 4096):
            data = batch
            while data:
                data = data[os.write(FD, data):]
        send(STARTED, channel, struct.pack("<I", 1))  # a second one: ignored
        send(EXIT, channel, exit_payload(0))
    elif what != "hang":
        send(ERROR, channel, struct.pack("<i", 2) + f"no behaviour {what!r}".encode() + b"\0")


def main():
    state = {"quiesce": "done"}
    while True:
        magic, ftype, flags, channel, length = HEADER.unpack(read_exactly(HEADER.size))
        payload = read_exactly(length) if length else b""
        if ftype == EXEC:
            on_exec(channel, payload, state)
        elif ftype == QUIESCE:
            mode = state["quiesce"]
            if mode == "done":
                send(DONE, channel)
            elif mode == "result":
                send(RESULT, channel, b"{}")
        elif ftype == FILE:
            path = payload[8:].split(b"\0", 1)[0]
            if path == b"/exit":
                send(EXIT, channel, exit_payload(0))
            elif path == b"/hang":
                pass
            elif path == b"/stall":
                while True:
                    time.sleep(3600)
            else:
                send(DONE, channel, stat_payload())
        elif ftype == PING:
            send(PONG, channel, payload)
        # STDIN, SIGNAL, RESIZE, DATA: ignored, as a hostile agent may


if __name__ == "__main__":
    main()
