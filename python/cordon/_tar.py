"""Directories and several files as one tar stream (PUT|GET …/archive, docs/cordond.md).

Packing is the caller's own tree. Unpacking takes what came out of a sandbox, which is the agent's:
every name stays beneath the destination, nothing is written through a symlink (one the archive made
or one that was there), links are made as links and never followed, devices and FIFOs are left out,
and no set-uid bit or owner is kept. Python's tarfile has no "data" filter before 3.11.4 (Debian 12
ships 3.11.2), so this does that itself."""

import io
import os
import posixpath
import stat
import tarfile


def pack_dir(local):
    """The contents of the directory local (not local itself), symlinks kept as links."""
    if not os.path.isdir(local):
        raise NotADirectoryError(local)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name in sorted(os.listdir(local)):  # FIFOs, sockets, devices left out (cordond refuses them)
            t.add(os.path.join(local, name), arcname=name, recursive=True,
                  filter=lambda i: i if i.isfile() or i.isdir() or i.issym() or i.islnk() else None)
    return buf.getvalue()


def pack_files(files):
    """{name: bytes or str} as an archive of plain files (names relative, parents implied)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in files.items():
            data = data.encode() if isinstance(data, str) else bytes(data)
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def split_files(files):
    """{path: data} → {root: {name: data}}: absolute paths under "/", relative ones under the workdir."""
    out = {}
    for path, data in files.items():
        path = str(path)
        root, name = ("/", path.lstrip("/")) if path.startswith("/") else (".", path)
        name = posixpath.normpath(name)
        if name in ("", ".") or name.startswith("../") or name == "..":
            raise ValueError(f"{path!r}: names no file")
        out.setdefault(root, {})[name] = data
    return out


def _parents(root, parts, entry):
    """Make root/parts[0]/…/parts[-2], each one a directory and none a symlink (one the archive
    made would lead the entries after it wherever it points)."""
    cur = root
    for part in parts[:-1]:
        cur = os.path.join(cur, part)
        if os.path.islink(cur):
            raise ValueError(f"archive entry {entry!r}: a symlink on its way ({cur}) is not followed")
        if not os.path.exists(cur):
            os.mkdir(cur, 0o755)
        elif not os.path.isdir(cur):
            raise ValueError(f"archive entry {entry!r}: {cur} is not a directory")
    return cur


def _write_file(dest, src, mode):
    if os.path.lexists(dest) and not os.path.isdir(dest) or os.path.islink(dest):
        os.unlink(dest)  # replaced, never written through
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as f:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            f.write(chunk)


def unpack(fileobj, local, stream=True):
    """Extract the archive read from fileobj into the directory local (made if missing). Returns the
    number of entries written. ValueError names an entry that would leave local."""
    os.makedirs(local, exist_ok=True)
    root = os.path.realpath(local)
    n = 0
    with tarfile.open(fileobj=fileobj, mode="r|" if stream else "r:") as t:
        for m in t:
            name = None if m.name.startswith("/") else posixpath.normpath(m.name)
            if not name or name == "." or name == ".." or name.startswith("../"):
                raise ValueError(f"archive entry {m.name!r}: not beneath the destination")
            if not (m.isfile() or m.isdir() or m.issym()):
                continue  # devices, FIFOs, hard links: left out
            parts = name.split("/")
            dest = os.path.join(_parents(root, parts, m.name), parts[-1])
            mode = stat.S_IMODE(m.mode) & 0o777
            if m.isdir():
                if os.path.islink(dest):
                    os.unlink(dest)
                os.makedirs(dest, exist_ok=True)
                os.chmod(dest, mode | 0o700)
            elif m.issym():
                if os.path.lexists(dest) and not os.path.isdir(dest) or os.path.islink(dest):
                    os.unlink(dest)
                os.symlink(m.linkname, dest)
            else:
                _write_file(dest, t.extractfile(m), mode or 0o600)
            n += 1
    return n
