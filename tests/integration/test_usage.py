"""Per-sandbox usage (issue 21, point 8): CPU time, memory now and peak, pids, disk used, bytes in
and out, on GET and as an NDJSON stream; /metrics keeps sums, no label per sandbox.

Seen failing before (main's cordond): GET …/usage answered 404 (no route) and info()["usage"] had
only memory_peak_bytes and oom_kills."""

import asyncio
import json
import os
import subprocess
import time

import pytest

from cordon import AsyncSandbox, Sandbox
from cordonlib import CORDON_BIN, wait_for

KEYS = {"time", "cpu_ms", "memory_bytes", "memory_peak_bytes", "pids", "disk_used_bytes", "disk_size_bytes",
        "net_rx_bytes", "net_tx_bytes", "oom_kills", "pids_limit_hits"}

# Half a second of CPU (by its own clock: whatever else the machine runs), then holds 64 MiB and 4
# sleeping children.
BURN = "python3 -c 'import time\nwhile time.process_time() < 0.5: pass'"
LOAD = (BURN + "; "
        "for i in 1 2 3 4; do sleep 60 & done; "
        "python3 -c 'import time; b = bytearray(64 << 20); b[::4096] = b\"x\" * (len(b) // 4096); time.sleep(60)' & "
        "dd if=/dev/zero of=/tmp/fill bs=1M count=20 2>/dev/null; sync; sleep 1")


def test_usage_counts_what_the_sandbox_uses(daemon, tier):
    guest = tier in ("microvm", "vm")
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier, memory_mb=512) as sb:
        u0 = sb.usage()
        assert set(u0) == KEYS, u0
        assert u0["net_rx_bytes"] is None and u0["net_tx_bytes"] is None  # network none: no link to count
        assert sb.exec(["sh", "-c", LOAD], timeout_s=60).exit_code == 0
        u1 = sb.usage()
        assert u1["time"] > u0["time"]
        assert u1["cpu_ms"] - u0["cpu_ms"] >= 450, (u0, u1)  # a VM's: its QEMU's
        if guest:  # a guest's pids and disk: as it reported them at the command's end
            assert u1["pids"] >= 5 and u1["disk_used_bytes"] >= 15 << 20, u1
            assert u1["disk_size_bytes"] >= u1["disk_used_bytes"], u1
            assert u1["memory_bytes"] > 64 << 20, u1  # the VM's memory on the host
        else:
            assert u1["memory_bytes"] >= 64 << 20 and u1["memory_peak_bytes"] >= u1["memory_bytes"], u1
            assert u1["pids"] >= 5, u1  # the 4 sleeps and python
            assert u1["disk_used_bytes"] - u0["disk_used_bytes"] >= 15 << 20, (u0, u1)
            assert u1["disk_size_bytes"] > 900 << 20, u1  # disk_mb's default, 1 GiB
        assert set(sb.info()["usage"]) == KEYS
        # followed: a line every interval
        stream = sb.usage_stream(interval_s=0.2)
        lines = [next(stream) for _ in range(3)]
        stream.close()
        assert [set(x) for x in lines] == [KEYS] * 3
        assert lines[0]["time"] < lines[1]["time"] < lines[2]["time"], lines
        assert 0.1 < lines[2]["time"] - lines[1]["time"] < 2, lines


def test_network_bytes_are_counted(daemon):
    with Sandbox.create(endpoint=daemon.endpoint, network={"mode": "allowlist", "allow": []}) as sb:
        u0 = sb.usage()
        assert u0["net_rx_bytes"] is not None, u0
        sb.exec(["python3", "-c", "import socket\ntry: socket.getaddrinfo('example.com', 80)\nexcept OSError: pass"])
        u1 = sb.usage()
        assert u1["net_tx_bytes"] > u0["net_tx_bytes"] and u1["net_rx_bytes"] > u0["net_rx_bytes"], (u0, u1)


def test_the_stream_ends_with_the_sandbox_and_keeps_its_last(daemon):
    sb = Sandbox.create(endpoint=daemon.endpoint, timeout_s=2)
    try:
        assert sb.exec(BURN).exit_code == 0
        t0 = time.time()
        lines = list(sb.usage_stream(interval_s=0.5))  # ends when the sandbox does
        assert time.time() - t0 < 10 and len(lines) >= 2, lines
        assert lines[-1]["cpu_ms"] >= 450, lines[-1]
        info = wait_for(lambda: "ended_at" in sb.info() and sb.info(), timeout=10, what="the end")
        assert info["usage"]["cpu_ms"] == lines[-1]["cpu_ms"], (info["usage"], lines[-1])
        assert sb.usage() == info["usage"]  # an ended one's: its last
        assert list(sb.usage_stream()) == [info["usage"]]
    finally:
        sb.kill()


def test_async_usage_and_bad_queries(daemon):
    async def main():
        sb = await AsyncSandbox.create(endpoint=daemon.endpoint)
        try:
            assert set(await sb.usage()) == KEYS
            n = 0
            async for u in sb.usage_stream(interval_s=0.1):
                n += 1
                if n == 3:
                    break
            assert n == 3
        finally:
            await sb.kill()
    asyncio.run(main())
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        for q, field in (("follow=maybe", "follow"), ("follow=true&interval_s=0", "interval_s"),
                         ("interval_s=x", "interval_s"), ("every=1", "every")):
            status, body = daemon.http("GET", f"/v1/sandboxes/{sb.id}/usage?{q}")
            assert status == 400 and body["error"]["field"] == field, (q, body)


def test_metrics_sum_without_a_label_per_sandbox(daemon):
    with Sandbox.create(endpoint=daemon.endpoint) as a, Sandbox.create(endpoint=daemon.endpoint) as b:
        assert a.exec("true").exit_code == 0 and b.exec("true").exit_code == 0
        status, body = daemon.http("GET", "/metrics")
        text = body.decode()
        vals = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
                if ln.startswith("cordon_sandboxes_") and " " in ln}
        mem = a.usage()["memory_bytes"] + b.usage()["memory_bytes"]
        assert 0 < vals["cordon_sandboxes_memory_bytes"] and abs(vals["cordon_sandboxes_memory_bytes"] - mem) < mem, vals
        assert vals["cordon_sandboxes_pids"] >= 2, vals
        assert a.id not in text and b.id not in text


def test_cli_stats(daemon):
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        p = subprocess.run([CORDON_BIN, "stats", sb.id], env=dict(os.environ, CORDON_SOCKET=daemon.socket),
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert set(json.loads(p.stdout)) == KEYS, p.stdout
