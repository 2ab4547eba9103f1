"""What a run remakes before it plans its jobs: damaged outputs, outputs whose inputs were replaced or deleted, and
outputs set aside earlier and not remade.  Snakemake alone would take a damaged file (a truncated or changed file
keeps its modification time or looks newer) as up to date and use it, would not notice a file replaced by one with
an old modification time (``cp -p``, ``rsync -a``), and does not remake a missing file whose consumers are up to
date.

:func:`plan_rebuilds` (called by the Snakefile before the DAG is built) returns the files the run must remake, which
the Snakefile adds to the run's forced files (Snakemake's ``--forcerun``: a forced file is also a target), so that
whatever the target (``all``, one table, a figure) the file is made again in the same run, with everything made
from it; a dry run plans the same jobs and only reports.

**Damaged** (:func:`find_damaged`): a file whose bytes differ from their record, set aside as ``NAME.damaged``:

* a model: its ``config.json`` against its own content hash and the network its weights' header records (a
  ``config.json`` without its hash beside weights written with one is refused; weights without that record predate
  it and are said to), the weights ``model.safetensors`` against the config's ``weights`` record, the folder's other
  files (the training history, the DLLM models' tokenizer) against its ``files`` record (a damaged or missing
  ``config.json`` sets the weights aside too; weights missing beside their ``config.json`` are remade);
* token files ``resources/tokenized/*/*.parquet`` against the content hash in their own metadata (the decoded
  values, pages checked against their CRCs: :mod:`unie.data.tokens`); an unreadable footer (a truncated file), no
  ``unie.tokens`` metadata (not a file rule tokenize wrote), or metadata naming another dataset or split than the
  file's place (another token file copied over it) is damage too;
* the DLLM training tensors ``resources/dllm/*.pt`` against ``resources/dllm/meta.json`` (rule ``dllm_data``
  remakes them);
* every result JSON under ``results/`` (:func:`unie.core.integrity.write_json`: Table 1's, Table 2's, the timing,
  effect, sweep, map and bench files, the figures' JSONs, the tables' and figures' records) against its content
  hash, and its numbers that must agree (:func:`unie.core.integrity.check_numbers`); one of these without its hash
  is damage (every rule that writes them writes it: :func:`hash_required`), only lm-eval's own files and a model
  folder's are written without one; the files such a JSON vouches for (its ``records``: the samples of a Gen PPL,
  lm-eval's results and samples of a Table 3 row, a sweep's or the map's points, the bench's Markdown, a table or
  figure, :func:`unie.core.integrity.record_path`); lm-eval results without a record are checked for their numbers
  (:func:`unie.eval.metrics.lmeval_numbers_problem`); any JSON under ``results/`` that does not parse;
* a table or figure (``results/{tables,figures,report,docs}/``: CSV, LaTeX, Markdown, PNG, PDF, HTML) without its
  record.

A file is hashed only when its size, modification or change time or inode changed since it was last verified
(``.snakemake/unie/verified/<run>.json``): an edit that restores the modification time still changes the change
time (``ctime``, which no program can set back), so a rerun costs a ``stat`` per file (result JSONs, small, are
parsed each time); a file above ``HASH_LIMIT`` (2 GiB: OpenWebText's tokens) is only checked for its size here and
hashed by the job that reads it.  Damage that leaves all of these as they were (bit rot) is found by the job that
reads the file: it fails naming the file, and records it (:func:`report_damaged`, ``.snakemake/unie/damaged.txt``)
so that the next run sets it aside and remakes it.

**Replaced inputs** (:func:`find_stale`): a model's ``config.json``, a result JSON and a table's or figure's record
list every file they were made from with its identity (``made_from``: :func:`identity`, a content hash read from
the file's own record where it has one, else the SHA-256 of its bytes, kept in ``.snakemake/unie/identities/`` by
size and times).  An input whose identity changed since, and that is not newer than what was made from it
(``cp -p``, ``rsync -a`` keep an old modification time), gets the current time (a dry run does this too: it is
then true), so that Snakemake remakes what was made from it, as for any changed input, when the targets need it.

**Deleted inputs** (:func:`find_missing`): a file of the run that something was made from and that is gone is
made again, with what is made from it (Snakemake would not remake it while what reads it is up to date).

**Set aside earlier** (:func:`find_orphans`): ``NAME.damaged`` without ``NAME`` (a run that was stopped before it
remade it) is remade, unless the file that remakes it (a file a job writes beside its outputs, such as lm-eval's
timestamped results, is remade with them) was made again after it was set aside (a set-aside file's modification
time is when it was set aside).

A damaged file no rule makes itself is remade by the rule of the nearest folder above it, or of a file beside it
or in a folder above, that a rule makes (:func:`_remade_by`): lm-eval's files of a Table 3 row, a sweep or a map
point, at any depth.  Nothing is touched while another Snakemake run holds the directory's lock (its jobs may be
writing these files): the run says so in one line.

**Run directories** (:mod:`unie.config.rundir`): every function takes ``run``, the run's directory relative to
``root`` (``runs/toy``; ``"."`` for a tree laid out as one run at the top level).  The paths above are then below
``run`` (``runs/toy/results/models/*``, ``runs/toy/resources/tokenized/...``), files set aside earlier are also
looked for in the shared downloads (``resources/hf``, ...), and only the files a job reported under ``run`` are
this run's; every path named or returned is relative to ``root``, as the workflow's rules name them.  Other runs'
directories are never looked at.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError
from ..core.integrity import (
    HASH_KEY,
    MADE_FROM,
    NO_HASH,
    PAGE_SUFFIXES,
    RECORDS,
    DamagedFileError,
    check_json,
    covered_by_record,
    file_sha256,
    is_record,
    json_digest,
    record_path,
)
from ..models.checkpoint import config_problem

CACHE = Path(".snakemake/unie/verified.json")  # a run directory's: .snakemake/unie/verified/<name>.json
REPORTED = Path(".snakemake/unie/damaged.txt")  # files a job found damaged (one relative path per line)
HASH_LIMIT = 2 << 30  # bytes; larger files: size here, hash in the job that reads them
JSON_LIMIT = 64 << 20  # result JSONs above this are left to the job that reads them
IDENTITY_LIMIT = 64 << 20  # a file without a record of its own: hashed up to this size, else its size and mtime
MODEL_DIRS = ("results/models/*", "results/dllm/models/*")
PAGE_DIRS = ("results/tables", "results/figures", "results/report", "results/docs")  # every table and figure
LMEVAL_DIRS = (("dllm", "rows"), ("dllm", "sweeps"), ("dllm", "map"))  # lm-eval's files below a row's or point's
# the files there this workflow writes (with a hash; effect.json, a sweep's lmeval.json, a map job's points.json record
# the rest)
HOLDERS = ("effect.json", "lmeval.json", "points.json")


class SetAsideError(InputError, OSError):
    """A damaged file that cannot be renamed (a read-only or immutable folder): one line naming it and the fix."""


@dataclass(frozen=True)
class Damaged:
    path: str  # the damaged file (set aside as path.damaged)
    problem: str
    output: str  # the declared output to remake (its job rewrites the damaged file)
    alt: str | None = None  # what to remake when no rule makes ``output`` (the file holding its record)


@dataclass(frozen=True)
class Stale:
    output: str  # a file made from ``source``
    source: str
    was: str  # the identity ``source`` had when ``output`` was made
    now: str


# ---------------------------------------------------------------------- identities of inputs
_ABSOLUTE_DATA_FILE = re.compile(rb'"(/[^"\n]+)"')


def _task_yaml_identity(p: Path, cache: dict | None = None) -> str | None:
    """An lm-eval task YAML's identity wherever its run directory lies: its text with every absolute path it quotes
    (its ``data_files``, :mod:`unie.pipeline.task_files` writes them absolute for lm-eval) replaced by that file's
    name and content identity, hashed.  So the same tasks written in two working directories (a local run and a
    cluster run, a moved run) are the same input, and a replaced data file is a changed one.  None for a YAML that
    quotes no absolute path (its bytes are its identity).  ``cache``: :func:`identity`'s, for the data files."""
    if p.stat().st_size > JSON_LIMIT:
        return None
    text = p.read_bytes()
    if b"data_files:" not in text or not _ABSOLUTE_DATA_FILE.search(text):
        return None

    def named(m: re.Match) -> bytes:
        f = Path(m.group(1).decode(errors="surrogateescape"))
        if f.is_dir():
            return m.group(0)  # a folder is not a data file: its path stays as written
        return f'"{f.name}@{identity(f, cache) or "missing"}"'.encode()

    return "task " + hashlib.sha256(_ABSOLUTE_DATA_FILE.sub(named, text)).hexdigest()


def _own_identity(p: Path, cache: dict | None = None) -> str | None:
    """A file's identity from its own record, without hashing it: a token file's content hash (its metadata), model
    weights' SHA-256 (their ``config.json``), a result JSON's content hash, a table's or figure's SHA-256 (its
    record, :func:`unie.core.integrity.record_path`), an lm-eval task YAML's location-free digest
    (:func:`_task_yaml_identity`); None for a file without one."""
    if p.suffix in (".yaml", ".yml"):
        return _task_yaml_identity(p, cache)
    if p.suffix == ".parquet":
        from ..data.tokens import read_token_meta  # pyarrow: only for a token file not seen before

        meta = read_token_meta(p)
        return meta.get("content_sha256") if meta else None
    if p.suffix == ".safetensors":
        meta = _load_json(p.parent / "config.json")[0]
        record = meta.get("weights") if isinstance(meta, dict) else None
        return record.get("sha256") if isinstance(record, dict) and record.get("file") == p.name else None
    if p.suffix == ".json" and p.stat().st_size <= JSON_LIMIT:
        obj = _load_json(p)[0]
        if isinstance(obj, dict) and obj.get(HASH_KEY):
            return obj[HASH_KEY]
    if p.suffix in PAGE_SUFFIXES and record_path(p).exists():
        obj = _load_json(record_path(p))[0]
        records = obj.get(RECORDS) if isinstance(obj, dict) else None
        record = next((r for k, r in (records or {}).items() if Path(k).name == p.name), None)
        return record.get("sha256") if isinstance(record, dict) else None
    return None


def _stamped(p: Path, cache: dict | None, compute: Callable[[], str | None]) -> str | None:
    """``compute()``, a function of the bytes of ``p``, remembered in ``cache`` by path, size, modification and change
    times and inode, so that it runs again only when one of them changed (rewriting bytes changes the change time,
    even when the modification time is put back)."""
    st = p.stat()
    stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    key = str(p)
    if cache is not None and cache.get(key, [None])[:-1] == stamp:
        return cache[key][-1]
    value = compute()
    if cache is not None and value is not None:
        cache[key] = [*stamp, value]
    return value


def _bytes_identity(p: Path, cache: dict | None) -> str:
    """The SHA-256 of a file's bytes (hashed again only when its size or times changed: :func:`_stamped`); above
    :data:`IDENTITY_LIMIT`, its size and modification time."""
    st = p.stat()
    if st.st_size > IDENTITY_LIMIT:
        return f"size {st.st_size}, mtime {st.st_mtime_ns}"
    return _stamped(p, cache, lambda: file_sha256(p))


def identity(path, cache: dict | None = None) -> str | None:
    """A file's content identity: read from its own record where it has one (:func:`_own_identity`), else the
    SHA-256 of its bytes (:func:`_bytes_identity`); a folder's (a tokenizer, a Hugging Face model): one digest of its
    files' names and identities (hidden files aside); None for a path that is not there or cannot be read."""
    p = Path(path)
    try:
        if p.is_dir():
            files = sorted(
                f
                for f in p.rglob("*")
                if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
            )
            h = hashlib.sha256()
            for f in files:
                h.update(f"{f.relative_to(p).as_posix()}\0{identity(f, cache)}\n".encode())
            return f"folder {h.hexdigest()}"
        if not p.is_file():
            return None
        if p.suffix == ".parquet":  # its own record is in its footer (pyarrow): read again only when it changed
            return _stamped(p, cache, lambda: _own_identity(p, cache) or _bytes_identity(p, None))
        return _own_identity(p, cache) or _bytes_identity(p, cache)
    except (OSError, ValueError, DamagedFileError):
        return None


def identities(paths) -> dict:
    """``{path: identity}`` of every one of ``paths`` that is there (:func:`identity`), whatever it holds: what a
    model or a result JSON records as ``made_from``."""
    out = {}
    for p in paths:
        if p is None:
            continue
        ident = identity(p)
        if ident:
            out[str(p)] = ident
    return out


# ---------------------------------------------------------------------- damaged files
def _token_digest(path: Path) -> str:
    """A token file's content hash, decoded (its record counts rows, not bytes)."""
    from ..data.tokens import token_content_sha256

    return token_content_sha256(path)[0]


def _json_files(root: Path, run: str = "."):
    """The JSON files under the run's ``results/`` (not the training checkpoints; the tables' and figures' records
    too) and the DLLM data description."""
    base = root / run
    out = [p for p in (base / "results").rglob("*.json") if "checkpoints" not in p.relative_to(base).parts[:2]]
    dllm_meta = base / "resources/dllm/meta.json"
    return sorted(out + ([dllm_meta] if dllm_meta.exists() else []))


def hash_required(path, base: Path) -> bool:
    """Whether a JSON file of the run in ``base`` is one the workflow always writes with its content hash: every
    one under ``results/`` and ``resources/dllm/meta.json``, except a model folder's (its ``config.json`` is checked
    as a model's, the rest by the config's ``files`` record) and lm-eval's own files below a Table 3 row, a sweep or
    a map job (their ``effect.json`` / ``lmeval.json`` / ``points.json`` record them)."""
    if _in_model_folder(path, base):
        return False
    parts = Path(path).relative_to(base / "results").parts if base / "results" in Path(path).parents else ()
    if parts[:2] in LMEVAL_DIRS:
        return len(parts) == 4 and parts[3] in HOLDERS
    return True


def _in_model_folder(path, base: Path) -> bool:
    """Whether ``path`` is in a model folder of the run (checked as a model: :func:`_model_checks`)."""
    rel = os.path.relpath(path, base).split(os.sep)
    return rel[:2] == ["results", "models"] or rel[:3] == ["results", "dllm", "models"]


_parsed: dict[tuple, tuple] = {}  # (path, size, times, inode) -> (object, problem): each file parsed once a process


def _load_json(path: Path):
    """``(object, problem)``: the parsed JSON, or None and why it cannot be used (parsed once while unchanged)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if key not in _parsed:
        try:
            _parsed[key] = json.loads(path.read_text(encoding="utf-8")), None
        except UnicodeDecodeError:
            _parsed[key] = None, "not valid UTF-8 text"
        except json.JSONDecodeError as e:
            _parsed[key] = None, f"not valid JSON ({e.msg} at line {e.lineno})"
    return _parsed[key]


def _output_of(path: Path) -> Path:
    """The file whose job remakes ``path``: a table's or figure's record is remade with the table or figure."""
    return covered_by_record(path) if is_record(path) else path


def _model_checks(root: Path, base: Path, found: list, legacy: list):
    """The checks of every model folder of the run (module doc); see :func:`_record_checks`."""
    rel = lambda p: os.path.relpath(p, root)  # noqa: E731
    for d in sorted(q for pattern in MODEL_DIRS for q in base.glob(pattern) if q.is_dir()):
        cfg, weights = d / "config.json", d / "model.safetensors"
        if not cfg.exists():
            if weights.exists():
                found.append(
                    Damaged(
                        rel(weights),
                        "its config.json (the architecture, the size and hash of these weights) is missing",
                        rel(weights),
                    )
                )
            continue
        meta, problem = _load_json(cfg)
        if problem is not None:
            yield cfg, None, weights, file_sha256, None
            continue
        problem = config_problem(meta, weights)
        if problem is not None:
            found.append(Damaged(rel(cfg), problem, rel(weights)))
            continue
        if HASH_KEY not in meta:
            legacy.append(rel(cfg))
        record = meta.get("weights")
        if not isinstance(record, dict):
            if HASH_KEY in meta and weights.exists():
                found.append(Damaged(rel(weights), "its config.json records no size and hash of them", rel(weights)))
            continue
        if not weights.exists():
            found.append(Damaged(rel(weights), "missing although its config.json records it", rel(weights)))
            continue
        yield weights, record, weights, file_sha256, None
        for name, rec in sorted((meta.get("files") or {}).items()):
            yield d / name, rec, weights, file_sha256, cfg


def _token_checks(root: Path, base: Path, found: list, verified: dict):
    """The checks of every token file of the run (module doc); see :func:`_record_checks`.  A file verified before
    (``verified``: :func:`find_damaged`'s cache) whose size and times are unchanged yields its recorded hash without
    its footer being read (pyarrow is not imported for it)."""
    for tokens in sorted(base.glob("resources/tokenized/*/*.parquet")):
        known = verified.get(os.path.relpath(tokens, root))
        if known and known[-1] and known[:-1] == _stamp(tokens.stat(), {})[:-1]:
            yield tokens, {"sha256": known[-1]}, tokens, _token_digest, None  # checked then, unchanged since
            continue
        from ..data.tokens import TokenFileError, check_token_file, read_token_meta, token_place

        try:
            meta = read_token_meta(tokens)
        except DamagedFileError:
            yield tokens, None, tokens, _token_digest, None
            continue
        try:
            check_token_file(tokens, *token_place(tokens), meta=meta)
        except TokenFileError as e:
            found.append(Damaged(os.path.relpath(tokens, root), e.problem, os.path.relpath(tokens, root)))
            continue
        yield tokens, {"sha256": meta.get("content_sha256")}, tokens, _token_digest, None


def _record_checks(root: Path, found: list, run: str = ".", legacy: list | None = None, verified: dict | None = None):
    """``(file, record, output, digest, alt)`` for every file with a recorded hash under ``root``: ``record`` has the
    ``sha256`` that ``digest(file)`` must give (and ``bytes``, the size, where recorded), None when unreadable;
    ``output``: what to remake; ``alt``: the file holding the record.  Problems found without hashing (a missing
    ``config.json``, a result JSON whose values changed or that lost its hash, a table without its record) go to
    ``found``; model folders written before their config's hash to ``legacy``."""
    rel = lambda p: os.path.relpath(p, root)  # noqa: E731
    base = root / run
    yield from _model_checks(root, base, found, legacy if legacy is not None else [])
    yield from _token_checks(root, base, found, verified or {})
    dllm_meta = base / "resources/dllm/meta.json"
    if dllm_meta.exists():
        obj, _ = _load_json(dllm_meta)
        files = obj.get("files", {}) if isinstance(obj, dict) else None
        if isinstance(files, dict):
            for name, record in sorted(files.items()):
                yield dllm_meta.parent / name, record, dllm_meta, file_sha256, None
    parsed, recorded = [], set()
    for path in _json_files(root, run):
        if path.stat().st_size > JSON_LIMIT or _in_model_folder(path, base):
            continue
        obj, problem = _load_json(path)
        parsed.append((path, obj, problem))
        if isinstance(obj, dict) and HASH_KEY in obj and isinstance(obj.get(RECORDS), dict):
            recorded.update(os.path.normpath(n if Path(n).is_absolute() else root / n) for n in obj[RECORDS])
    for path, obj, problem in parsed:
        out = rel(_output_of(path))
        if problem is None and not (isinstance(obj, dict) and HASH_KEY in obj) and hash_required(path, base):
            problem = NO_HASH
        if problem is not None:
            found.append(Damaged(rel(path), problem, out))
            continue
        if not isinstance(obj, dict):
            continue
        if HASH_KEY not in obj:  # lm-eval's own files: their record is checked instead, else their numbers
            if os.path.normpath(path) in recorded:
                continue
            if "n-samples" in obj:
                from ..eval.metrics import lmeval_numbers_problem  # (torch)

                problem = lmeval_numbers_problem(obj)
            if problem is not None:
                found.append(Damaged(rel(path), f"its numbers disagree: {problem}", out))
            continue
        try:
            check_json(obj, path)
        except DamagedFileError as e:
            found.append(Damaged(rel(path), e.problem, out))
            continue
        for name, record in sorted((obj.get(RECORDS) or {}).items()):
            f = Path(name) if Path(name).is_absolute() else root / name
            yield f, record, f, file_sha256, path
    for folder in PAGE_DIRS:  # a table or figure without its record
        for f in sorted((base / folder).glob("*")) if (base / folder).is_dir() else []:
            if f.is_file() and f.suffix in PAGE_SUFFIXES and not record_path(f).exists():
                found.append(
                    Damaged(
                        rel(f),
                        f"it has no record of its content hash ({rel(record_path(f))} is "
                        "missing; every table and figure of this workflow is written with one)",
                        rel(f),
                    )
                )


def _stamp(st, record: dict) -> list:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, record.get("sha256")]


def report_damaged(path, root=".") -> None:
    """Record that a job found ``path`` damaged (its bytes differ from their record although its size and times
    do not), for the next run's :func:`plan_rebuilds`.  Only files under ``root`` (the working directory)."""
    root = Path(root).resolve()
    try:
        rel = Path(path).resolve().relative_to(root)
        with open(root / REPORTED, "a") as f:  # one short line: appends from parallel jobs do not interleave
            f.write(f"{rel}\n")
    except (ValueError, OSError):
        pass  # outside the working directory, or no .snakemake/ (not a workflow run)


def _cache_path(run: str, kind: str = "verified") -> Path:
    """Where the files verified in ``run`` (``kind`` ``identities``: the identities of its inputs) are remembered
    (:data:`CACHE` for a tree laid out at the top level)."""
    if os.path.normpath(run) == ".":
        return CACHE.with_name(f"{kind}.json")
    return CACHE.parent / kind / f"{os.path.normpath(run).replace(os.sep, '__')}.json"


def _load_cache(path: Path | None) -> dict:
    try:
        return json.loads(path.read_text()) if path is not None and path.exists() else {}
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}


def _save_cache(path: Path | None, cache: dict) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache))
    except OSError:
        pass  # a read-only checkout: verify again next time


def _mine(rel: str, run: str) -> bool:
    """Whether ``rel`` (relative to the root) is in ``run``'s directory, or in a tree laid out at the top level
    (``run`` ``"."``): every file."""
    run = os.path.normpath(run)
    return run == "." or os.path.normpath(rel).startswith(run + os.sep)


def _reported(root: Path, run: str) -> set[str]:
    if not (root / REPORTED).exists():
        return set()
    lines = {line.strip() for line in (root / REPORTED).read_text().splitlines() if line.strip()}
    return {line for line in lines if _mine(line, run)}


def find_damaged(
    root=".", cache_path: Path | None = CACHE, hash_limit: int = HASH_LIMIT, run: str = ".", legacy: list | None = None
) -> list[Damaged]:
    """The recorded files of the run in ``run`` (relative to ``root``) whose bytes differ from their record (or
    whose record is unreadable), the result JSONs whose values changed or that lost their hash, the tables and
    figures without their record, and the files a job reported damaged.  ``legacy`` collects the model folders
    whose ``config.json`` predates its content hash (and whose weights say so)."""
    root = Path(root)
    if cache_path is CACHE:
        cache_path = _cache_path(run)
    cache_file = root / cache_path if cache_path is not None else None
    cache = _load_cache(cache_file)
    reported = _reported(root, run)
    found, verified, seen = [], {}, set()
    for path, record, output, digest, alt in _record_checks(root, found, run, legacy, cache):
        rel, out = os.path.relpath(path, root), os.path.relpath(output, root)
        alt = os.path.relpath(alt, root) if alt is not None else None
        seen.add(rel)
        if record is None:
            what = "its footer cannot be read" if path.suffix == ".parquet" else "its metadata is not valid JSON"
            found.append(Damaged(rel, what, out, alt))
            continue
        try:
            st = path.stat()
        except FileNotFoundError:
            found.append(Damaged(rel, "missing although its record lists it", out, alt))
            continue
        if record.get("bytes") is not None and st.st_size != int(record["bytes"]):
            found.append(Damaged(rel, f"{st.st_size} bytes, {record['bytes']} when written", out, alt))
            continue
        if rel in reported:
            found.append(Damaged(rel, "a job found its content hash different from the one recorded", out, alt))
            continue
        stamp = _stamp(st, record)
        if cache.get(rel) == stamp or st.st_size > hash_limit:
            verified[rel] = stamp
            continue
        try:
            same = not record.get("sha256") or digest(path) == record["sha256"]
        except DamagedFileError as e:  # a token file whose pages fail their CRC
            found.append(Damaged(rel, e.problem, out, alt))
            continue
        if not same:
            found.append(Damaged(rel, "content hash differs from the one recorded when it was written", out, alt))
            continue
        verified[rel] = stamp
    named = {d.path for d in found}
    for rel in sorted(reported - seen - named):  # a file without a record of its own that a job could not use
        if (root / rel).exists():
            found.append(Damaged(rel, "a job that read it found it damaged", rel))
    _save_cache(cache_file, verified)
    return found


# ---------------------------------------------------------------------- replaced and deleted inputs, earlier set-asides
def _made_from(root: Path, run: str = "."):
    """``(output, {input: identity})`` of every model, result JSON and table or figure (its record) of the run that
    records what it was made from."""
    for d in sorted(q for pattern in MODEL_DIRS for q in (root / run).glob(pattern) if q.is_dir()):
        obj, _ = _load_json(d / "config.json") if (d / "config.json").exists() else (None, None)
        extra = obj.get("extra") if isinstance(obj, dict) else None
        if isinstance(extra, dict) and isinstance(extra.get(MADE_FROM), dict) and (d / "model.safetensors").exists():
            yield d / "model.safetensors", extra[MADE_FROM]
    for path in _json_files(root, run):
        if path.stat().st_size > JSON_LIMIT:
            continue
        obj, _ = _load_json(path)
        if isinstance(obj, dict) and isinstance(obj.get(MADE_FROM), dict) and obj.get(HASH_KEY) == json_digest(obj):
            output = _output_of(path)
            if output.exists():
                yield output, obj[MADE_FROM]


def _source(root: Path, source: str) -> Path:
    return Path(source) if Path(source).is_absolute() else root / source


def find_stale(root=".", run: str = ".", cache_path: Path | None = CACHE, made: list | None = None) -> list[Stale]:
    """The models, result JSONs, tables and figures of the run in ``run`` one of whose inputs now has another
    identity (:func:`identity`) than the one they recorded when they were made (a file replaced, whatever its
    modification time).  ``cache_path``: where the identities hashed from bytes are kept (by size and times);
    ``made``: :func:`_made_from`'s list, when already read."""
    root = Path(root)
    cache_file = (
        root / (_cache_path(run, "identities") if cache_path is CACHE else cache_path)
        if cache_path is not None
        else None
    )
    cache = _load_cache(cache_file)
    known, out = {}, []
    for output, made_from in _made_from(root, run) if made is None else made:
        for source, was in sorted(made_from.items()):
            f = _source(root, source)
            if f not in known:
                known[f] = identity(f, cache)
            now = known[f]
            if now is not None and now != was:
                out.append(Stale(os.path.relpath(output, root), source, was, now))
                break
    _save_cache(cache_file, cache)
    return out


def find_missing(root=".", run: str = ".", made: list | None = None) -> dict[str, list[str]]:
    """``{input: [what was made from it]}``: the files of the run that a model, result, table or figure was made
    from and that are gone (deleted; not set aside as damaged: :func:`find_orphans` has those).  ``made``:
    :func:`_made_from`'s list, when already read."""
    root = Path(root)
    out: dict[str, list[str]] = {}
    for output, made_from in _made_from(root, run) if made is None else made:
        for source in sorted(made_from):
            f = _source(root, source)
            if _mine(source, run) and not f.exists() and not f.with_name(f.name + ".damaged").exists():
                out.setdefault(source, []).append(os.path.relpath(output, root))
    return out


def find_orphans(root=".", run: str = ".") -> list[str]:
    """The files set aside earlier (``NAME.damaged``) in the run's ``results/`` and ``resources/`` and in the shared
    downloads, and not made again since (no ``NAME``)."""
    from ..config.rundir import SHARED_RESOURCES

    root = Path(root)
    tops = [os.path.join(run, "results"), os.path.join(run, "resources")]
    tops += [] if os.path.normpath(run) == "." else list(SHARED_RESOURCES)
    found = [p for top in tops for p in (root / top).rglob("*.damaged")]
    return sorted(os.path.relpath(p.with_suffix(""), root) for p in found if not p.with_suffix("").exists())


def _set_aside_at(path: Path) -> int:
    """When ``path`` (a ``NAME.damaged``) was set aside (ns): its modification time, set then
    (:func:`_set_aside`; kept by a copy, ``cp -a``)."""
    return path.stat().st_mtime_ns


def another_run_active(root=".", run: str = ".") -> bool:
    """Whether a Snakemake run holds a lock (``.snakemake/locks/``) on a file of the run directory ``run`` (any lock
    when ``run`` is the working directory): the runs of other seeds (target ``replicates``) hold locks on their own
    directories only, and the outer run of ``replicates`` on the aggregate's."""
    locks = Path(root) / ".snakemake" / "locks"
    if not locks.is_dir():
        return False
    files = [f for f in locks.iterdir() if f.is_file()]
    if os.path.normpath(run) == ".":
        return bool(files)
    top = os.path.normpath(run) + os.sep
    for f in files:
        try:
            lines = f.read_text().splitlines()
        except OSError:
            return True  # unreadable: assume it is ours
        if any(
            os.path.normpath(os.path.relpath(line, root) if os.path.isabs(line) else line).startswith(top)
            for line in lines
            if line.strip()
        ):
            return True
    return False


# ---------------------------------------------------------------------- what the run remakes
def _remade_by(path: str, producer, root: Path | None = None, run: str = ".") -> tuple[str, str] | None:
    """``(file, rule)``: what remakes ``path``: ``path`` itself or the nearest folder above it that a rule of the
    workflow makes (a file inside a ``directory()`` output); for a table's or figure's record, the table or figure;
    else (with ``root``) a file a rule makes beside it or in the nearest folder above it, within the run's
    ``results/`` or ``resources/``, the one whose ``records`` vouch for it first (lm-eval's files of a row, a sweep or
    a map point, at any depth, are remade by the job that writes the row's or the points' files); None when none
    does.  Without a ``producer``: ``path`` itself, by its job."""
    if producer is None:
        return path, "its job"
    p = Path(path)
    if is_record(p):
        p = covered_by_record(p)
    for candidate in [p, *list(p.parents)[:-1]]:
        rule = producer(str(candidate))
        if rule:
            return str(candidate), f"rule {rule}"
    if root is None:
        return None
    tops = [Path(run, "results"), Path(run, "resources")]
    for folder in p.parents:
        if not any(top in folder.parents for top in tops):
            break
        here = root / folder
        made = []  # (file, rule) of each file a rule makes here
        for f in sorted(here.iterdir()) if here.is_dir() else []:
            if f.is_file() and not f.name.startswith(".") and f.suffix != ".damaged":
                rule = producer(os.path.relpath(f, root))
                if rule:
                    made.append((os.path.relpath(f, root), rule))
        if made:  # the one whose record vouches for the file first (a map backbone's lmeval.json, not its points.json)
            file, rule = next((m for m in made if _vouches_for(root / m[0], path)), made[0])
            return file, f"rule {rule}"
    return None


def _vouches_for(json_file: Path, path: str) -> bool:
    """Whether ``json_file`` (a result JSON) records ``path`` among the files it vouches for (its ``records``)."""
    if json_file.suffix != ".json" or json_file.stat().st_size > JSON_LIMIT:
        return False
    obj = _load_json(json_file)[0]
    records = obj.get(RECORDS) if isinstance(obj, dict) else None
    return isinstance(records, dict) and any(os.path.normpath(k) == os.path.normpath(path) for k in records)


def _set_aside(root: Path, d: Damaged, how: str | None) -> str:
    """Rename a damaged file ``NAME.damaged``; a folder that refuses it (read-only, immutable) is a
    :class:`SetAsideError` naming the file, the folder and the fix."""
    f = root / d.path
    try:
        os.replace(f, f.with_name(f.name + ".damaged"))
        os.utime(f.with_name(f.name + ".damaged"))  # when it was set aside (find_orphans: remade since?)
    except OSError as e:
        folder = os.path.dirname(d.path) or "."
        raise SetAsideError(
            f"{d.path} is damaged: {d.problem}; it cannot be set aside as {d.path}.damaged "
            f"({e.strerror}: its folder {folder} is read-only or immutable): make it writable "
            "(chmod u+w, chattr -i) and rerun, and the run remakes it"
        ) from None
    if how is None:
        return f"set aside as {d.path}.damaged; no rule of this workflow makes it"
    return f"set aside as {d.path}.damaged; this run {'rebuilds' if how.startswith('it (') else 'remakes'} {how}"


def _plan(root: Path, producer, log, dry_run: bool, run: str = ".") -> tuple[list[Damaged], list[str]]:
    if another_run_active(root, run):
        log(
            "unie: the checks for damaged, replaced and deleted files were skipped: another snakemake run holds this "
            "directory's lock (.snakemake/locks); rerun when it has ended (or `snakemake --unlock` if none runs)"
        )
        return [], []
    will = "the run will remake" if dry_run else "this run remakes"
    orphans = find_orphans(root, run)
    legacy = []
    found = find_damaged(root, run=run, legacy=legacy)
    seen = set(orphans)  # a file set aside earlier and still missing: said once, as such
    damaged = [d for d in found if not (d.path in seen or seen.add(d.path))]  # one line per file
    made = list(_made_from(root, run))  # read once for both
    missing = find_missing(root, run, made=made)
    stale = find_stale(root, run, made=made)
    remake = []
    for d in damaged:
        by = next((b for b in (_remade_by(o, producer, root, run) for o in (d.output, d.alt) if o) if b), None)
        if by:
            remake.append(by[0])
        how = f"{'it' if by[0] == d.path else f'it with {by[0]}'} ({by[1]})" if by else None
        if not (root / d.path).exists():  # recorded, and gone
            log(f"unie: {d.path} is {d.problem}; {f'{will} {how}' if by else 'no rule of this workflow makes it'}")
            continue
        if dry_run:
            fix = (
                f"the run will set it aside as {d.path}.damaged and {'rebuild' if by[0] == d.path else 'remake'} {how}"
                if by
                else f"the run will set it aside as {d.path}.damaged; no rule of this workflow makes it"
            )
        else:
            fix = _set_aside(root, d, how)
        log(f"unie: {DamagedFileError(d.path, d.problem, fix)}")
    named = {d.path for d in damaged} | set(remake)
    folders = {os.path.dirname(d.path) for d in damaged}
    for source, outs in missing.items():
        by = _remade_by(source, producer, root, run)
        if by and not {source, by[0]} & named and os.path.dirname(source) not in folders:  # (a model's other file)
            remake.append(by[0])
            made = ", ".join(outs[:3]) + (f" and {len(outs) - 3} more" if len(outs) > 3 else "")
            log(
                f"unie: {source} is missing (deleted?), and {made} {'was' if len(outs) == 1 else 'were'} made from "
                f"it: {will} {'it' if by[0] == source else by[0]} ({by[1]}) and what is made from it"
            )
    by_source = {}
    for s in stale:
        if s.source not in named:  # a damaged input (a token file copied over another): set aside and remade above
            by_source.setdefault(s.source, []).append(s)
    for source, outs in by_source.items():
        src = _source(root, source)
        made = ", ".join(s.output for s in outs)
        try:
            if all(src.stat().st_mtime_ns > (root / s.output).stat().st_mtime_ns for s in outs):
                continue  # Snakemake sees it newer already
            os.utime(src)  # its content changed: now Snakemake sees it newer than what was made from it
        except OSError as e:
            for s in outs:
                if by := _remade_by(s.output, producer):
                    remake.append(by[0])
            log(
                f"unie: {made} {'was' if len(outs) == 1 else 'were'} made from {source}, which was replaced since "
                f"(its modification time cannot be set: {e.strerror}); "
                f"{will} {'it' if len(outs) == 1 else 'them'}"
            )
            continue
        log(
            f"unie: {source} was replaced (content {outs[0].was[:12]}... -> {outs[0].now[:12]}..., its modification "
            f"time kept) after {made} {'was' if len(outs) == 1 else 'were'} made from it: its modification time is "
            f"set to now, so {will} what was made from it"
        )
    for o in orphans:
        by = _remade_by(o, producer, root, run)
        if not by:
            continue
        made_again = root / by[0]
        if by[0] != o and made_again.exists() and made_again.stat().st_mtime_ns > _set_aside_at(root / f"{o}.damaged"):
            continue  # written beside a file that was made again since it was set aside
        remake.append(by[0])
        log(
            f"unie: {o} was set aside as {o}.damaged and not made again since; {will} "
            f"{'it' if by[0] == o else f'it with {by[0]}'} ({by[1]})"
        )
    if legacy:
        log(
            f"unie: {len(legacy)} model folder{'s' if len(legacy) > 1 else ''} ({', '.join(legacy[:2])}"
            f"{', ...' if len(legacy) > 2 else ''}) predate config hashes (their weights record no network): their "
            "weights are checked, their config.json is taken as it is; delete a model's folder to have it retrained "
            "with both checked"
        )
    if not dry_run:
        _forget_reported(root, run)
    return damaged, sorted(set(remake))


def _forget_reported(root: Path, run: str) -> None:
    """Drop the run's lines from the jobs' reports (:data:`REPORTED`), keeping other runs'."""
    path = root / REPORTED
    if not path.exists():
        return
    others = [line for line in path.read_text().splitlines() if line.strip() and not _mine(line.strip(), run)]
    try:
        if others:
            path.write_text("".join(f"{line}\n" for line in others))
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only .snakemake/: the next run reads the same lines again


def plan_rebuilds(
    root=".", producer: Callable[[str], str | None] | None = None, log=print, dry_run: bool = False, run: str = "."
) -> list[str]:
    """Before the jobs are planned: set every damaged file aside (:func:`find_damaged`; renamed ``NAME.damaged``)
    and return what the run must remake, with one line each on ``log``: the outputs whose jobs rewrite the damaged
    files, and the files set aside earlier and not made again (:func:`find_orphans`).  An input replaced by another
    with an older modification time (:func:`find_stale`) gets the current time, so that Snakemake remakes what was
    made from it, as for any changed input.  ``producer(path)``: the name of the rule that makes ``path``, or None
    (a damaged file no rule of this workflow makes is set aside, not remade).  A dry run renames nothing and returns
    the same files.  Nothing while another run is active.  ``run``: the run's directory (module doc)."""
    return _plan(Path(root), producer, log, dry_run, run)[1]


def set_aside_damaged(root=".", log=print, dry_run: bool = False, run: str = ".") -> list[Damaged]:
    """:func:`plan_rebuilds` without a workflow (each damaged file remade by its own job); returns the damaged
    files."""
    return _plan(Path(root), None, log, dry_run, run)[0]
