"""Watching a directory (issue 21, point 5): the changes below a directory as NDJSON events, as they
happen — made, written, removed, renamed, chmod — recursively with new subdirectories, through the
SDK (sync and async); the watch of a symlink into a protected path is refused and counts."""

import asyncio
import threading
import time

import pytest

import cordon
from cordon import AsyncSandbox, Sandbox
from test_files_api import ws  # noqa: F401 (the protected workspace fixture)


def collect(sb, path, until, recursive=False, timeout=30):
    """Events of a watch of path, from a thread, until one satisfies until (or the timeout)."""
    got, ready = [], threading.Event()

    def run():
        gen = sb.files.watch(path, recursive=recursive)
        try:
            for ev in gen:
                got.append(ev)
                if ev["type"] == "start":
                    ready.set()
                if until(ev) or ev["type"] == "gone":
                    break
        finally:
            gen.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(timeout), got
    return got, t


def test_a_watch_reports_what_happens_in_a_directory(daemon, tier):
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        sb.files.mkdir("/tmp/w")
        got, t = collect(sb, "/tmp/w", lambda ev: ev["type"] == "remove" and ev["path"] == "b.txt")
        sb.exec("echo hi > /tmp/w/a.txt && mv /tmp/w/a.txt /tmp/w/b.txt && chmod 600 /tmp/w/b.txt && "
                "mkdir /tmp/w/sub && rm /tmp/w/b.txt")
        t.join(30)
        kinds = [(e["type"], e.get("path"), e.get("dir")) for e in got]
        assert kinds[0] == ("start", None, None), kinds
        for want in [("create", "a.txt", False), ("write", "a.txt", False), ("rename_from", "a.txt", False),
                     ("rename_to", "b.txt", False), ("chmod", "b.txt", False), ("create", "sub", True),
                     ("remove", "b.txt", False)]:
            assert want in kinds, (want, kinds)
        renames = [e for e in got if e["type"].startswith("rename")]
        assert renames[0]["cookie"] == renames[1]["cookie"] != 0


def test_a_recursive_watch_follows_new_subdirectories_and_ends_with_the_directory(daemon):
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        sb.exec("mkdir -p /tmp/r/old/deep")
        got, t = collect(sb, "/tmp/r", lambda ev: False, recursive=True)
        sb.exec("touch /tmp/r/old/deep/x; mkdir /tmp/r/new; sleep 0.5; touch /tmp/r/new/y; "
                "printf 'bad\\377name' | xargs -0 -I{} touch '/tmp/r/{}'; sleep 0.5; rm -rf /tmp/r")
        t.join(30)
        paths = {(e["type"], e.get("path")) for e in got}
        assert ("create", "old/deep/x") in paths and ("create", "new") in paths, paths
        assert ("create", "new/y") in paths, paths  # a subdirectory made after the watch began
        assert got[-1]["type"] == "gone", got[-3:]
        odd = [e for e in got if "path_b64" in e]
        assert odd and odd[0]["path"].startswith("bad") and odd[0]["path_b64"] == "YmFk/25hbWU=", odd


def test_watch_errors_name_the_path(daemon, tmp_path):
    with Sandbox.create(endpoint=daemon.endpoint) as sb:
        with pytest.raises(cordon.NotFound) as e:
            next(sb.files.watch("/no/such/dir"))
        assert e.value.field == "path"
        sb.files.write("/tmp/file", b"x")
        with pytest.raises(cordon.CordonError) as e:
            next(sb.files.watch("/tmp/file"))
        assert e.value.status in (400, 404) and e.value.field == "path", e.value
        status, body = daemon.http("GET", f"/v1/sandboxes/{sb.id}/watch?path=/tmp&recursive=maybe")
        assert status == 400 and body["error"]["field"] == "recursive", body
        # a client that goes away ends its watch: 20 in turn never reach the limit of 16
        for _ in range(20):
            gen = sb.files.watch("/tmp")
            assert next(gen)["type"] == "start"
            gen.close()


def test_watching_a_symlink_into_a_protected_path_is_refused(daemon, ws, tier):
    """The agent's symlink to the protected tests, handed to the operator's watch, would tell the
    agent which hidden tests exist and when they change: refused (403) and counted, as any files
    request through such a link is (init-watch.c judges the path as init-resolve.c does)."""
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier, mounts=[{"source": ws, "target": "/workspace"}],
                        protect=["/workspace/answer.key", "/workspace/tests/**"]) as sb:
        assert sb.exec("ln -s /workspace/tests /workspace/t").exit_code == 0
        with pytest.raises(cordon.Forbidden) as e:
            next(sb.files.watch("/workspace/t"))
        assert e.value.code == "protected_path", e.value
        assert sb.violations()["counts"]["protect"] == 1
        # named directly by the operator: trusted, never a violation (seen failing before
        # supervise/session.c let init's own inotify_add_watch through: 403 and a second count)
        gen = sb.files.watch("/workspace/tests")
        assert next(gen)["type"] == "start"
        gen.close()
        assert sb.violations()["counts"]["protect"] == 1


def test_async_watch(daemon):
    async def main():
        async with await AsyncSandbox.create(endpoint=daemon.endpoint) as sb:
            await sb.files.mkdir("/tmp/aw")
            gen = sb.files.watch("/tmp/aw")
            assert (await gen.__anext__())["type"] == "start"
            await sb.exec("touch /tmp/aw/z")
            ev = await asyncio.wait_for(gen.__anext__(), 30)
            assert (ev["type"], ev["path"]) == ("create", "z")
            await gen.aclose()
    asyncio.run(main())


def test_a_users_recursive_watch_stays_the_users(daemon, tier):
    """A recursive watch as a user (files.as_user) watches the directories made later as that user
    too: one of root's that the user may not read stays unwatched. What this catches: init watched
    the later ones as root (the first as the user), so what root did in its 0700 directory reached
    the user's watch ("priv/inside" among the events)."""
    with Sandbox.create(endpoint=daemon.endpoint, tier=tier) as sb:
        sb.exec("mkdir -m 777 /tmp/u")
        u = sb.files.as_user("user")
        got, ready = [], threading.Event()

        def run():
            gen = u.watch("/tmp/u", recursive=True)
            try:
                for ev in gen:
                    got.append(ev)
                    if ev["type"] == "start":
                        ready.set()
                    if ev.get("path") == "end":
                        break
            finally:
                gen.close()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        assert ready.wait(30), got
        sb.exec("mkdir -m 700 /tmp/u/priv; mkdir -m 755 /tmp/u/open; sleep 0.5; touch /tmp/u/priv/inside "
                "/tmp/u/open/seen; sleep 0.5; touch /tmp/u/end")
        t.join(30)
        paths = {(e["type"], e.get("path")) for e in got}
        assert ("create", "priv") in paths and ("create", "open/seen") in paths, paths
        assert ("create", "priv/inside") not in paths, paths
