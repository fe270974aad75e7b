"""Issue 21's Done-when: an OpenHands-style episode end to end (examples/openhands_episode.py) — a
shell session, a background server on a port reached through the proxy path, an interactive PTY, a
directory upload, a phase change of the network, the verifier step — run against a cordond of the
tests, as a user would run it."""

import os
import subprocess
import sys

from cordonlib import REPO


def test_an_openhands_style_episode_runs_end_to_end(daemon):
    script = os.path.join(REPO, "examples", "openhands_episode.py")
    r = subprocess.run([sys.executable, script, "--socket", daemon.socket], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == "episode: all steps passed", r.stdout
    steps = [ln for ln in lines if ln.startswith(("ok  ", "FAIL"))]
    assert len(steps) == 13 and all(ln.startswith("ok  ") for ln in steps), r.stdout
    for what in ("session cd + export", "proxy path", "interactive terminal", "upload the repository",
                 "network closed", "verifier step"):
        assert any(what in ln for ln in steps), what
