"""A small stand-in for conmon (podman) and containerd's shim, for test_runtime.py: it is the
subreaper of the container's init, as they are, so that init becomes its child once create exits,
and it reads init's exit status as they do.

    rtshim.py RUNTIME ROOT BUNDLE ID OUTDIR [--no-start] [--console]

The container's stdout and stderr are OUTDIR/stdout and OUTDIR/stderr (init inherits create's, as
under conmon). OUTDIR/result.json holds create's and start's exit codes and stderr, init's pid, and
its exit: {"exited": N} or {"signaled": N}. With --no-start, start is left to the test, and the
shim waits for init all the same. With --console (a bundle with process.terminal), the shim is the
console socket's listener, as conmon is: it takes the terminal's master, writes "typed\n" to it
once the process started, and appends what comes out of it to OUTDIR/stdout."""

import ctypes
import json
import os
import socket
import subprocess
import sys
import threading

PR_SET_CHILD_SUBREAPER = 36


def main():
    runtime, root, bundle, cid, out = sys.argv[1:6]
    start = "--no-start" not in sys.argv[6:]
    console = "--console" in sys.argv[6:]
    master, extra = [], []
    if console:
        path = os.path.join(out, "console.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(1)
        extra = ["--console-socket", path]

        def take():
            conn, _ = srv.accept()
            msg, fds, _, _ = socket.recv_fds(conn, 1024, 1)
            master.extend(fds)
            conn.close()
        taker = threading.Thread(target=take, daemon=True)
        taker.start()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    result = {}
    pid_file = os.path.join(out, "pid")
    with open(os.path.join(out, "stdout"), "wb") as so, open(os.path.join(out, "stderr"), "wb") as se:
        r = subprocess.run([runtime, "--root", root, "create", "--bundle", bundle, "--pid-file", pid_file] + extra + [cid],
                           stdin=subprocess.DEVNULL, stdout=so, stderr=se, timeout=60)
    result["create"] = r.returncode
    if r.returncode == 0:
        pid = int(open(pid_file).read())
        result["pid"] = pid
        if start:
            r = subprocess.run([runtime, "--root", root, "start", cid], capture_output=True, text=True, timeout=60)
            result["start"], result["start_stderr"] = r.returncode, r.stderr
        with open(os.path.join(out, "ready"), "w"):
            pass
        if console:
            taker.join(timeout=30)
            result["console"] = len(master)
            os.write(master[0], b"typed\n")
            with open(os.path.join(out, "stdout"), "ab") as so:
                while True:
                    try:
                        data = os.read(master[0], 4096)
                    except OSError:  # EIO: the last slave closed
                        break
                    if not data:
                        break
                    so.write(data)
        _, status = os.waitpid(pid, 0)
        result["exit"] = ({"signaled": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                          else {"exited": os.WEXITSTATUS(status)})
    with open(os.path.join(out, "result.json.tmp"), "w") as f:
        json.dump(result, f)
    os.rename(os.path.join(out, "result.json.tmp"), os.path.join(out, "result.json"))


if __name__ == "__main__":
    main()
