"""A small stand-in for conmon (podman) and containerd's shim, for test_runtime.py: it is the
subreaper of the container's init, as they are, so that init becomes its child once create exits,
and it reads init's exit status as they do.

    rtshim.py RUNTIME ROOT BUNDLE ID OUTDIR [--no-start]

The container's stdout and stderr are OUTDIR/stdout and OUTDIR/stderr (init inherits create's, as
under conmon). OUTDIR/result.json holds create's and start's exit codes and stderr, init's pid, and
its exit: {"exited": N} or {"signaled": N}. With --no-start, start is left to the test, and the
shim waits for init all the same."""

import ctypes
import json
import os
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def main():
    runtime, root, bundle, cid, out = sys.argv[1:6]
    start = "--no-start" not in sys.argv[6:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    result = {}
    pid_file = os.path.join(out, "pid")
    with open(os.path.join(out, "stdout"), "wb") as so, open(os.path.join(out, "stderr"), "wb") as se:
        r = subprocess.run([runtime, "--root", root, "create", "--bundle", bundle, "--pid-file", pid_file, cid],
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
        _, status = os.waitpid(pid, 0)
        result["exit"] = ({"signaled": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                          else {"exited": os.WEXITSTATUS(status)})
    with open(os.path.join(out, "result.json.tmp"), "w") as f:
        json.dump(result, f)
    os.rename(os.path.join(out, "result.json.tmp"), os.path.join(out, "result.json"))


if __name__ == "__main__":
    main()
