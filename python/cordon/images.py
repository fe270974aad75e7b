"""OCI images in cordond's store (docs/sdk-python.md, docs/images.md).

    import cordon
    cordon.images.pull("registry.example:5000/team/task:7")       # {"ref", "digest", "size", "layers", …}
    for ev in cordon.images.pull("python:3.12", stream=True):    # progress, then {"status": "done", …}
        print(ev["status"], ev.get("digest"), ev.get("done"), ev.get("total"))
    cordon.images.list()        # [{"refs", "digest", "size", "layers", "created", "platform", "in_use"}]
    cordon.images.get(ref)      # the same, with "layers" and the image "config"
    cordon.images.remove(ref)   # ImageInUse while a sandbox runs on it
    cordon.images.prune()       # {"freed_bytes", "store_size"}

cordon.images.aio has the same calls as coroutines (`async for` over pull(ref, stream=True)).
Every call takes endpoint= (an Endpoint; default: $CORDON_SOCKET or /run/cordon/cordond.sock)."""

import json
import urllib.parse

from ._http import Endpoint, alines, error_from

__all__ = ["pull", "list", "get", "remove", "prune", "aio"]

_PULL = "/v1/images/pull"


def _path(ref):
    if not isinstance(ref, str) or not ref:
        raise ValueError(f"ref: expected an image reference, got {ref!r}")
    return "/v1/images/" + urllib.parse.quote(ref, safe="")


def _body(ref, stream):
    if not isinstance(ref, str) or not ref:
        raise ValueError(f"ref: expected an image reference, got {ref!r}")
    return {"ref": ref, "stream": bool(stream)}


_STATUS = {"image_not_found": 404, "invalid_ref": 400, "stopping": 503}


def _event(line):
    """One NDJSON line of a streamed pull; its last line, when an error, is raised as cordond's error."""
    ev = json.loads(line)
    if ev.get("status") == "error":
        code = (ev.get("error") or {}).get("code", "pull_failed")
        raise error_from(_STATUS.get(code, 502), json.dumps({"error": ev.get("error") or {}}).encode())
    return ev


def pull(ref, stream=False, endpoint=None):
    """Pull ref into the store (or join the pull of it that runs) and return the image:
    {"ref", "digest", "size", "layers", "bytes_pulled", …}. With stream=True an iterator of the
    progress events ({"status": "resolved"|"fetch"|"cached"|"unpacked", "digest", "done", "total",
    "layer", "layers"}) whose last one is {"status": "done", "digest", …}; a failed pull raises."""
    ep = endpoint or Endpoint()
    if not stream:
        return ep.json("POST", _PULL, _body(ref, False))
    return _pull_stream(ep, ref)


def _pull_stream(ep, ref):
    _, resp = ep.request("POST", _PULL, _body(ref, True), stream=True)
    lines = ep.lines(resp)
    try:
        for line in lines:
            yield _event(line)
    finally:
        lines.close()


def list(endpoint=None):  # noqa: A001 (the API's noun)
    """The stored images: [{"refs", "digest", "size", "layers", "created", "platform", "in_use"}]."""
    return (endpoint or Endpoint()).json("GET", "/v1/images")["images"]


def get(ref, endpoint=None):
    """One image (NotFound if it is not stored), with its "layers" and "config"."""
    return (endpoint or Endpoint()).json("GET", _path(ref))


def remove(ref, endpoint=None):
    """Drop the reference (and the image with its last reference; prune frees the bytes).
    ImageInUse while a sandbox runs on the image."""
    return (endpoint or Endpoint()).json("DELETE", _path(ref))


def prune(endpoint=None):
    """Remove what no image and no live sandbox references: {"freed_bytes", "store_size"}."""
    return (endpoint or Endpoint()).json("POST", "/v1/images/prune")


class _Aio:
    """The same calls for asyncio: `await aio.pull(ref)`, `async for ev in aio.pull(ref, stream=True)`."""

    def pull(self, ref, stream=False, endpoint=None):
        ep = endpoint or Endpoint()
        if stream:
            return self._pull_stream(ep, ref)
        return ep.ajson("POST", _PULL, _body(ref, False))

    async def _pull_stream(self, ep, ref):
        lines = alines(ep.astream("POST", _PULL, _body(ref, True)))
        try:
            async for line in lines:
                yield _event(line)
        finally:
            await lines.aclose()

    async def list(self, endpoint=None):
        return (await (endpoint or Endpoint()).ajson("GET", "/v1/images"))["images"]

    async def get(self, ref, endpoint=None):
        return await (endpoint or Endpoint()).ajson("GET", _path(ref))

    async def remove(self, ref, endpoint=None):
        return await (endpoint or Endpoint()).ajson("DELETE", _path(ref))

    async def prune(self, endpoint=None):
        return await (endpoint or Endpoint()).ajson("POST", "/v1/images/prune")


aio = _Aio()
