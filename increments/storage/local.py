"""A Location on the local disk, through the OS.

Writes go to a temp file in the target directory, are fsynced, and are published by rename
(overwrite) or by hard link (create-only: link fails when the name exists, so exactly one of two
racing writers wins); the directory is fsynced after. Temp files start with ``.tmp-`` and are
never listed. A create-only write on Linux uses an unnamed temp file instead (``O_TMPFILE``, linked
to its name with ``linkat``): the same guarantees (the name appears only once the whole content is
fsynced; exactly one of two racing writers wins) with one directory change less per write (no
temp name to create and unlink: ~0.2 ms less per durable write on this disk), and a crash leaves
no temp file behind. Where the file system or kernel refuses ``O_TMPFILE`` the named temp file is
used.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile

from . import Location, ObjectInfo


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_TMPFILE = getattr(os, "O_TMPFILE", 0)
_tmpfile_ok = bool(_TMPFILE) and os.path.isdir("/proc/self/fd")
_root_fd: int | None = None


def _create_unnamed(directory: str, path: str, data: bytes) -> bool:
    """Create-only write of `path` through an unnamed temp file in `directory` (O_TMPFILE), fsynced,
    then linked to `path` (linkat follows /proc/self/fd/N to the open file; fails when the name
    exists). False when O_TMPFILE is not available here (the caller uses a named temp file);
    FileNotFoundError (NotADirectoryError) when `directory` does not exist (is not a directory). The directory is not fsynced here."""
    global _tmpfile_ok, _root_fd
    try:
        fd = os.open(directory, _TMPFILE | os.O_WRONLY, 0o600)
    except (FileNotFoundError, NotADirectoryError):
        raise                   # no such directory (yet): the caller creates it (or fails as makedirs) and calls again
    except OSError:
        _tmpfile_ok = False     # e.g. EOPNOTSUPP / EISDIR: this file system or kernel has no O_TMPFILE
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        if _root_fd is None:
            _root_fd = os.open("/", os.O_RDONLY)
        try:
            # src_dir_fd (ignored for an absolute path) makes os.link call linkat(AT_SYMLINK_FOLLOW)
            os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=_root_fd)
        except FileExistsError:
            raise FileExistsError(f"{path} already exists") from None
        except OSError:
            _tmpfile_ok = False     # no /proc link semantics here: the named temp file from now on
            return False
    finally:
        os.close(fd)
    return True


def _info(name: str, st: os.stat_result) -> ObjectInfo:
    return ObjectInfo(name, st.st_size, int(st.st_mtime_ns // 1_000_000), None)


class LocalLocation(Location):
    is_local = True

    def __init__(self, root: str):
        self.root = root
        self.url = root

    def _p(self, name: str) -> str:
        return os.path.join(self.root, *[p for p in name.split("/") if p]) if name else self.root

    def child(self, *parts: str) -> "LocalLocation":
        return LocalLocation(os.path.join(self.root, *[p for part in parts for p in str(part).split("/") if p]))

    def local_path(self, name: str = "") -> str:
        return self._p(name)

    def read_bytes(self, name: str) -> bytes:
        with open(self._p(name), "rb") as f:
            return f.read()

    def write_bytes(self, name: str, data: bytes, *, create_only: bool = False, sync_dir: bool = True) -> None:
        """Durable write (module doc). Missing parent directories are created (as os.makedirs) when
        the first open in the directory finds none: a write into an existing directory (every one
        after the first) makes no mkdir call. ``sync_dir=False`` (local locations only): the file's
        content is fsynced before its name appears, but the directory is not fsynced; for a caller
        that writes another file into the same directory right after and makes that one durable
        (its directory fsync covers both names)."""
        path = self._p(name)
        directory = os.path.dirname(path)
        if create_only and _tmpfile_ok:
            try:
                done = _create_unnamed(directory, path, data)
            except (FileNotFoundError, NotADirectoryError):    # no such directory yet (or a file in the way)
                os.makedirs(directory, exist_ok=True)
                done = _create_unnamed(directory, path, data)
            if done:
                if sync_dir:
                    _fsync_dir(directory)
                return
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        except (FileNotFoundError, NotADirectoryError):
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if create_only:
                try:
                    os.link(tmp, path)      # fails when the name is taken: exactly one writer wins
                except FileExistsError:
                    raise FileExistsError(f"{path} already exists") from None
            else:
                os.replace(tmp, path)
                tmp = None
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
        if sync_dir:
            _fsync_dir(directory)

    def head(self, name: str) -> ObjectInfo | None:
        try:
            st = os.stat(self._p(name))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return _info(name, st) if stat.S_ISREG(st.st_mode) else None

    def list(self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None) -> list[ObjectInfo]:
        base = self._p(prefix)
        out: list[ObjectInfo] = []
        pre = prefix.rstrip("/") + "/" if prefix else ""
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".tmp-")]
            rel = os.path.relpath(dirpath, base)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for fn in filenames:
                if fn.startswith(".tmp-"):
                    continue
                name = pre + rel + fn
                if start_after is not None and name <= start_after:
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, fn))
                except FileNotFoundError:
                    continue
                out.append(_info(name, st))
        out.sort(key=lambda o: o.name)
        return out[:limit] if limit else out

    def list_dir(self, prefix: str = "") -> tuple[list[ObjectInfo], list[str]]:
        base = self._p(prefix)
        pre = prefix.rstrip("/") + "/" if prefix else ""
        files, dirs = [], []
        try:
            entries = list(os.scandir(base))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        for e in entries:
            if e.name.startswith(".tmp-"):
                continue
            try:
                if e.is_dir():
                    dirs.append(pre + e.name)
                elif e.is_file():
                    files.append(_info(pre + e.name, e.stat()))
            except FileNotFoundError:
                continue
        files.sort(key=lambda o: o.name)
        dirs.sort()
        return files, dirs

    def delete(self, name: str) -> None:
        p = self._p(name)
        try:
            os.remove(p)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            shutil.rmtree(p, ignore_errors=True)

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._p(prefix), ignore_errors=True)
