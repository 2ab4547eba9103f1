"""Files that are written whole or not at all, and whose damage is caught when they are read.

* :func:`atomic_write`: every output and checkpoint is written to a temporary file beside its target, flushed to
  disk and renamed over it (``os.replace``), so a crash or a full disk leaves either the previous file or the new
  one, never a half-written one.  The new file gets the permissions of an ordinary new file (``0666 & ~umask``,
  ``0644`` under the usual umask), whatever the library that wrote it chose (safetensors writes ``0600``).
* :func:`file_record` / :func:`verify_file`: a content hash (SHA-256) and the size of a file, recorded in its
  metadata when it is written and checked when it is read (safetensors and ``torch.save`` files have no checksum of
  their own: a flipped byte would otherwise be used silently; token files carry page CRCs and a content hash in
  their Parquet metadata, :mod:`unie.data.tokens`).
* :class:`DamagedFileError`: the one-line error for a file that is missing a part, or whose bytes differ from
  the ones recorded; it names the file and what to do.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

_CHUNK = 1 << 22  # 4 MiB reads: hashing runs at disk speed without holding the file


class DamagedFileError(RuntimeError):
    """A file that cannot be used as it is (truncated, bytes changed, unreadable): the message names the path,
    what is wrong and what to do."""

    def __init__(self, path, problem: str, fix: str | None = None):
        self.path, self.problem = str(path), problem
        self.fix = fix or "delete it and rerun the workflow: Snakemake rebuilds a missing file"
        super().__init__(f"{self.path} is damaged: {problem}; {self.fix}")


_hashed: dict[tuple, str] = {}  # (path, size, mtime_ns, ctime_ns, inode) -> sha256 of the files hashed here


def file_sha256(path) -> str:
    """The SHA-256 of a file's bytes (hex), read in 4 MiB chunks.  A file this process already hashed and that has
    not changed since (same size, modification and change times, inode) is not read again."""
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if key not in _hashed:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(_CHUNK), b""):
                h.update(block)
        _hashed[key] = h.hexdigest()
    return _hashed[key]


def file_record(path) -> dict:
    """``{"sha256": ..., "bytes": ...}`` of a file (what its metadata records when it is written)."""
    return {"sha256": file_sha256(path), "bytes": os.path.getsize(path)}


def verify_file(path, record: dict, fix: str | None = None) -> str:
    """Check ``path`` against its ``record`` (:func:`file_record`); returns its SHA-256.

    Raises :class:`DamagedFileError` (naming ``path``) when the file is missing, has another size (truncated or
    extended) or another hash (changed bytes).  An unchanged file is hashed once per process (:func:`file_sha256`)."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise DamagedFileError(p, "the file is missing although its metadata lists it", fix) from None
    want_bytes = record.get("bytes")
    if want_bytes is not None and st.st_size != int(want_bytes):
        what = "truncated" if st.st_size < int(want_bytes) else "longer than written"
        raise DamagedFileError(p, f"{what} ({st.st_size} bytes, {int(want_bytes)} when written)", fix)
    digest = file_sha256(p)
    if record.get("sha256") and digest != record["sha256"]:
        raise DamagedFileError(p, f"its content hash {digest[:12]}... differs from the {record['sha256'][:12]}... "
                                  "recorded when it was written (changed or corrupted bytes)", fix)
    return digest


def _new_file_mode() -> int:
    """``0666 & ~umask`` (the umask read from /proc where it can be, since reading it with ``os.umask`` sets it for a
    moment, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _disk_full(exc: BaseException, directory: Path) -> bool:
    """Whether a failed write ran out of space: an ``ENOSPC``/``EDQUOT`` anywhere in the exception's chain, the
    messages of writers that do not raise ``OSError`` (safetensors: "os error 28"), or no free space left now (torch:
    "unexpected pos 704 vs 598")."""
    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(seen) or "os error 28" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        st = os.statvfs(directory)
        return st.f_bavail * st.f_frsize < (1 << 20)
    except OSError:
        return False


def atomic_write(path, write: Callable[[Path], None], durable: bool = True) -> Path:
    """Write ``path`` whole or not at all: ``write(tmp)`` writes a temporary file in the same directory, which
    is then flushed to disk (``durable``: the file, then the directory's entry after the rename) and renamed over
    ``path``.

    If ``write`` raises (a full disk, a crash of the writer), the temporary file is removed and ``path`` is left as
    it was (an earlier version stays usable); a full disk becomes ``OSError(ENOSPC)`` in one line naming the file,
    whatever the writer raised.  The new file has the mode of an ordinary new file (``0666 & ~umask``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # unique per process: two writers never share it
    try:
        write(tmp)
        os.chmod(tmp, _new_file_mode())
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
        if durable:
            _fsync(path.parent)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, Exception) and _disk_full(e, path.parent):
            kept = "the previous version is unchanged" if path.exists() else "nothing was written"
            raise OSError(errno.ENOSPC, f"no space left on device while writing {path} ({kept}); free space and "
                                        "rerun") from e
        raise
    return path


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # a directory on a filesystem that cannot sync one
        if not path.is_dir():
            raise
    finally:
        os.close(fd)


def atomic_write_text(path, text: str) -> Path:
    """:func:`atomic_write` of a text file (UTF-8)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(obj, path, indent: int | None = 2, **kw) -> Path:
    """``obj`` as JSON at ``path``, atomically (never a half-written result file)."""
    return atomic_write_text(path, json.dumps(obj, indent=indent, **kw))


def read_json(path, what: str = "result file"):
    """A JSON file; a missing or unparsable one raises an error that names it and the fix."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"missing {what}: {p} does not exist (rerun the workflow: Snakemake rebuilds "
                                "a missing file)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DamagedFileError(p, f"not valid JSON ({e.msg} at line {e.lineno})") from None
