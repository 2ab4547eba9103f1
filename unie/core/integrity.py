"""Files that are written whole or not at all, and whose damage is caught when they are read.

* :func:`atomic_write`: every output and checkpoint is written to a temporary file beside its target, flushed to
  disk and renamed over it (``os.replace``), so a crash or a full disk leaves either the previous file or the new
  one, never a half-written one.  The new file gets the permissions of an ordinary new file (``0666 & ~umask``,
  ``0644`` under the usual umask), whatever the library that wrote it chose (safetensors writes ``0600``).
* :func:`file_record` / :func:`verify_file`: a content hash (SHA-256) and the size of a file, recorded in its
  metadata when it is written and checked when it is read (safetensors and ``torch.save`` files have no checksum of
  their own: a flipped byte would otherwise be used silently; token files carry page CRCs and a content hash in
  their Parquet metadata, :mod:`unie.data.tokens`).
* :func:`write_json` / :func:`read_json`: a result file (JSON object) carries its own content hash
  (``content_sha256``: the SHA-256 of its canonical JSON without that key, :func:`json_digest`) and, where it was
  written by a workflow job, the rule that made it (``made_by``), the identities of the files it was made from
  (``made_from``) and the size and SHA-256 of the files it vouches for (``records``: e.g. the samples a Gen PPL
  was computed on); :func:`read_json` checks the hash and the numbers that must agree (:func:`check_numbers`: a
  perplexity is the exponential of its NLL) before anything reads the values, and returns the object as its writer
  gave it (without these keys).
* :func:`write_page_record` / :func:`verify_page`: a table or figure (CSV, LaTeX, Markdown, PNG, PDF, HTML: files
  with no room for a hash of their own) is covered by a record beside it, ``.records/NAME.json`` (:func:`record_path`:
  a result JSON with ``made_by``, ``made_from`` and its ``records`` entry), written by the job that wrote the file
  (:func:`unie.pipeline.rule.job`); whatever reads the file for a page checks it there first (:func:`read_page_text`,
  :func:`read_page_bytes`), and a file without its record is refused as one without a hash.
* :class:`DamagedFileError`: the one-line error for a file that is missing a part, or whose bytes differ from
  the ones recorded; it names the file and what to do.

A content hash without a key tells a file changed by accident (bit rot, a truncation, an edit that did not
recompute it) from the file that was written; it is no signature: whoever edits a value can recompute the hash
(docs/reliability.md).
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

from .errors import InputError

_CHUNK = 1 << 22  # 4 MiB reads: hashing runs at disk speed without holding the file


class DamagedFileError(InputError, RuntimeError):
    """A file that cannot be used as it is (truncated, bytes changed, unreadable): the message names the path,
    what is wrong and what to do."""

    def __init__(self, path, problem: str, fix: str | None = None):
        self.path, self.problem = str(path), problem
        self.fix = fix or fix_by_rerun()
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
    return _compare(p, st.st_size, lambda: file_sha256(p), record, fix)


def _compare(p: Path, size: int, digest: Callable[[], str], record: dict, fix: str | None) -> str:
    """``digest()`` (the hash of ``p``'s bytes, ``size`` of them) after checking both against ``record``."""
    want_bytes = record.get("bytes")
    if want_bytes is not None and size != int(want_bytes):
        what = "truncated" if size < int(want_bytes) else "longer than written"
        raise DamagedFileError(p, f"{what} ({size} bytes, {int(want_bytes)} when written)", fix)
    got = digest()
    if record.get("sha256") and got != record["sha256"]:
        raise DamagedFileError(
            p,
            f"its content hash {got[:12]}... differs from the {record['sha256'][:12]}... "
            "recorded when it was written (changed or corrupted bytes)",
            fix,
        )
    return got


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
            raise OSError(
                errno.ENOSPC, f"no space left on device while writing {path} ({kept}); free space and rerun"
            ) from e
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


def atomic_save_torch(path, obj) -> Path:
    """:func:`atomic_write` of ``torch.save(obj)``, with bytes that depend on ``obj`` only: saved to a buffer, the
    zip archive's inner folder is ``archive`` instead of the name of the temporary file (which holds the pid), so
    the same object saved by two processes hashes the same."""
    import io

    import torch  # the core's file helpers stay importable without torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return atomic_write(path, lambda tmp: tmp.write_bytes(buf.getvalue()))


def atomic_write_text(path, text: str) -> Path:
    """:func:`atomic_write` of a text file (UTF-8)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


# the keys a result file's writer adds to its JSON object (:func:`write_json`); :func:`read_json` removes them
HASH_KEY = "content_sha256"  # SHA-256 of the object's canonical JSON without this key
MADE_BY = "made_by"  # the workflow rule that wrote it
MADE_FROM = "made_from"  # {input path: its identity (a content hash)} when it was made
RECORDS = "records"  # {path: {"sha256", "bytes"}} of files it vouches for (paths relative to the working directory)
ENVELOPE = (HASH_KEY, MADE_BY, MADE_FROM, RECORDS)


def code_digest(package=None) -> str:
    """The SHA-256 of a package's code (this one unless ``package`` names its folder): every ``**/*.py``, its path
    under the package and its bytes.  What a remembered result made by this code depends on: the Snakefile's
    configuration (:mod:`unie.config.cache`), a sweep point kept for a resumed job
    (:func:`unie.pipeline.dllm_runs.resume_stamp`)."""
    package = Path(package) if package is not None else Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for f in sorted(package.rglob("*.py")):
        data = f.read_bytes()
        h.update(f"{f.relative_to(package).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def json_digest(obj: dict) -> str:
    """The content hash of a JSON object: SHA-256 of its canonical form (keys sorted, no spaces, ASCII, the values as
    Python writes and reads them back: a float round-trips exactly) without :data:`HASH_KEY`.  Whitespace and key
    order do not count; any changed value, digit or key does."""
    body = {k: v for k, v in obj.items() if k != HASH_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def fix_by_rerun(made_by: str | None = None) -> str:
    job = f"rule {made_by} remakes it" if made_by else "the job that made it remakes it"
    return f"rerun the workflow: it sets the file aside before planning and {job} in the same run"


def write_json(
    obj, path, indent: int | None = 2, *, made_by: str | None = None, made_from: dict | None = None, records=None, **kw
) -> Path:
    """``obj`` as JSON at ``path``, atomically (never a half-written result file).  A JSON object gets its content
    hash (:data:`HASH_KEY`, :func:`json_digest`) and, when given, ``made_by`` (a rule), ``made_from`` (input
    identities) and ``records`` (files it vouches for: a list of paths, recorded with :func:`file_record`; they
    must be written before it)."""
    if isinstance(obj, dict):
        extra = {
            MADE_BY: made_by,
            MADE_FROM: made_from,
            RECORDS: {str(p): file_record(p) for p in records} if records else None,
        }
        body = {**obj, **{k: v for k, v in extra.items() if v}}
        body = json.loads(json.dumps(body, **kw))  # as a reader will see it (tuples as lists, keys as strings)
        obj = {**body, HASH_KEY: json_digest(body)}
    return atomic_write_text(path, json.dumps(obj, indent=indent, **kw))


def _ppl_mismatch(obj, where: str = "") -> str | None:
    """The first place in ``obj`` where a perplexity is not the exponential of its NLL per token."""
    if isinstance(obj, dict):
        ppl, nll = obj.get("ppl"), obj.get("nll_per_token")
        if isinstance(ppl, (int, float)) and isinstance(nll, (int, float)) and math.isfinite(nll):
            try:
                expected = math.exp(nll)
            except OverflowError:
                expected = math.inf
            if not (ppl == expected or math.isclose(ppl, expected, rel_tol=1e-9)):
                return f"{where or 'its'} ppl {ppl!r} is not exp(nll_per_token {nll!r}) = {expected!r}"
        for k, v in obj.items():
            found = _ppl_mismatch(v, f"{where}.{k}" if where else str(k))
            if found:
                return found
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found = _ppl_mismatch(v, f"{where}[{i}]")
            if found:
                return found
    return None


def check_numbers(obj) -> str | None:
    """The cheap internal checks of a result object: every perplexity equals the exponential of its NLL per token
    (``ppl`` beside ``nll_per_token``, Table 1's and Table 2's files).  Returns what disagrees, or None."""
    return _ppl_mismatch(obj)


NO_HASH = (
    "it carries no content hash, although every result file of this workflow is written with one (its "
    "hash fields were removed, or another program wrote it)"
)


def check_json(obj, path, hashed: bool = True):
    """``obj`` (parsed from ``path``) checked against its content hash and :func:`check_numbers`, without the
    writer's :data:`ENVELOPE` keys.  ``hashed``: the file is one this workflow writes with its hash (every result
    file: one without it is refused, :data:`NO_HASH`); ``hashed=False`` for a JSON another program writes (lm-eval's
    results, whose record is in another file), which is then only checked for its numbers.  Raises
    :class:`DamagedFileError` naming ``path``."""
    if not isinstance(obj, dict):
        if hashed:
            raise DamagedFileError(
                path,
                "not a JSON object (every result file of this workflow is one, carrying its content hash)",
                fix_by_rerun(),
            )
        return obj
    fix = fix_by_rerun(obj.get(MADE_BY) if isinstance(obj.get(MADE_BY), str) else None)
    if hashed and HASH_KEY not in obj:
        raise DamagedFileError(path, NO_HASH, fix)
    if HASH_KEY in obj and json_digest(obj) != obj[HASH_KEY]:
        raise DamagedFileError(
            path,
            "its values differ from the content hash it recorded when it was written (an edited or corrupted value)",
            fix,
        )
    problem = check_numbers(obj)
    if problem:
        raise DamagedFileError(path, f"its numbers disagree: {problem}", fix)
    return {k: v for k, v in obj.items() if k not in ENVELOPE} if HASH_KEY in obj else obj


def parse_json(path, what: str = "result file"):
    """A JSON file parsed as it is (no checks): a missing or unparsable one raises an error that names it."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"missing {what}: {p} does not exist (rerun the workflow: it remakes a missing result)"
        ) from None
    except UnicodeDecodeError:
        raise DamagedFileError(p, "not valid UTF-8 text", fix_by_rerun()) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DamagedFileError(p, f"not valid JSON ({e.msg} at line {e.lineno})", fix_by_rerun()) from None


def records_of(holder) -> dict:
    """``{normalised path: {"sha256", "bytes"}}``: the files a result JSON (``holder``) vouches for (its
    :data:`RECORDS`), once the holder itself is checked (:func:`read_json`); paths relative to the working
    directory."""
    obj = parse_json(holder)
    check_json(obj, Path(holder))
    recs = obj.get(RECORDS) if isinstance(obj, dict) else None
    return {os.path.normpath(k): v for k, v in (recs or {}).items()}


def read_json(path, what: str = "result file", hashed: bool = True):
    """A JSON file, checked (:func:`check_json`: its content hash and numbers) before its values are used; a
    missing, unparsable or changed one, or one without its hash (unless ``hashed=False``: a file another program
    writes), raises an error that names it and the fix."""
    return check_json(parse_json(path, what), Path(path), hashed)


# ---------------------------------------------------------------------- tables and figures: a record beside each
PAGE_SUFFIXES = (".csv", ".tex", ".md", ".png", ".pdf", ".html")  # files with no room for a hash of their own
RECORD_DIR = ".records"


def record_path(path) -> Path:
    """Where the record of a table or figure is kept: ``DIR/.records/NAME.json`` beside ``DIR/NAME``."""
    p = Path(path)
    return p.parent / RECORD_DIR / f"{p.name}.json"


def covered_by_record(record) -> Path:
    """The file a record (:func:`record_path`) covers: ``DIR/.records/NAME.json`` -> ``DIR/NAME``."""
    r = Path(record)
    return r.parent.parent / r.name[: -len(".json")]


def is_record(path) -> bool:
    p = Path(path)
    return p.parent.name == RECORD_DIR and p.name.endswith(".json")


def write_page_record(path, made_by: str | None = None, made_from: dict | None = None) -> Path:
    """Record the size and SHA-256 of the table or figure ``path`` (written just before) in its record
    (:func:`record_path`), with the rule that made it and the identities of what it was made from."""
    return write_json(
        {"file": Path(path).name}, record_path(path), made_by=made_by, made_from=made_from, records=[path]
    )


def _page_record(path) -> tuple[dict, str | None]:
    """``(record, fix)`` of the table or figure ``path`` from its record file (checked itself first)."""
    p, holder = Path(path), record_path(path)
    if not holder.exists():
        if not p.exists():
            raise FileNotFoundError(f"missing table or figure: {p} does not exist (rerun the workflow: it remakes it)")
        raise DamagedFileError(
            p,
            f"it has no record of its content hash ({holder} is missing; every table and "
            "figure of this workflow is written with one)",
            fix_by_rerun(),
        )
    obj = parse_json(holder, "record")
    check_json(obj, holder)
    fix = fix_by_rerun(obj.get(MADE_BY) if isinstance(obj.get(MADE_BY), str) else None)
    record = next((r for k, r in (obj.get(RECORDS) or {}).items() if Path(k).name == p.name), None)
    if record is None:
        raise DamagedFileError(holder, f"it does not record {p.name}", fix)
    return record, fix


def verify_page(path) -> str:
    """Check the table or figure ``path`` against its record (:func:`record_path`); returns its SHA-256.  A missing,
    edited or truncated file, a missing or edited record: a :class:`DamagedFileError` naming the file (or the
    record) and the rule that remakes it."""
    record, fix = _page_record(path)
    return verify_file(path, record, fix)


def read_page_bytes(path) -> bytes:
    """A table's or figure's bytes, checked against its record (:func:`verify_page`) as they are read (the bytes
    returned are the bytes checked)."""
    record, fix = _page_record(path)
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise DamagedFileError(p, "the file is missing although its record lists it", fix) from None
    _compare(p, len(data), lambda: hashlib.sha256(data).hexdigest(), record, fix)
    return data


def read_page_text(path) -> str:
    """A table's text (CSV, LaTeX, Markdown, HTML), checked against its record as it is read
    (:func:`read_page_bytes`)."""
    return read_page_bytes(path).decode("utf-8")
