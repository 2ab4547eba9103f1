"""What a run remakes before it plans its jobs: damaged outputs, outputs whose inputs were replaced, and outputs set
aside earlier and not remade.  Snakemake alone would take a damaged file (a truncated or changed file keeps its
modification time or looks newer) as up to date and use it, would not notice a file replaced by one with an old
modification time (``cp -p``, ``rsync -a``), and does not remake a missing file whose consumers are up to date.

:func:`plan_rebuilds` (called by the Snakefile before the DAG is built) returns the files the run must remake, which
the Snakefile adds to the run's forced files (Snakemake's ``--forcerun``: a forced file is also a target), so that
whatever the target (``all``, one table, a figure) the file is made again in the same run, with everything made
from it; a dry run plans the same jobs and only reports.

**Damaged** (:func:`find_damaged`): a file whose bytes differ from their record, set aside as ``NAME.damaged``:

* model weights ``results/models/*/model.safetensors`` and ``results/dllm/models/*/model.safetensors`` against
  their ``config.json``'s ``weights`` record (a damaged or missing ``config.json`` sets the weights aside too;
  weights missing beside their ``config.json`` are remade);
* token files ``resources/tokenized/*/*.parquet`` against the content hash in their own metadata (the decoded
  values, pages checked against their CRCs: :mod:`unie.data.tokens`); an unreadable footer (a truncated file) is
  damage too;
* the DLLM training tensors ``resources/dllm/*.pt`` against ``resources/dllm/meta.json`` (rule ``dllm_data``
  remakes them);
* every result JSON under ``results/`` that records its content hash (:func:`unie.core.integrity.write_json`:
  Table 1's, Table 2's, the timing, effect, sweep and bench files), and its numbers that must agree
  (:func:`unie.core.integrity.check_numbers`); the files such a JSON vouches for (its ``records``: the samples of
  a Gen PPL, lm-eval's results and samples of a Table 3 row, the bench's Markdown); lm-eval results without a
  record are checked for their numbers (:func:`unie.eval.metrics.lmeval_numbers_problem`); any JSON under
  ``results/`` that does not parse.

A file is hashed only when its size, modification or change time or inode changed since it was last verified
(``.snakemake/unie/verified.json``), so a rerun costs a ``stat`` per file (result JSONs, small, are parsed each
time); a file above ``HASH_LIMIT`` (2 GiB: OpenWebText's tokens) is only checked for its size here and hashed by
the job that reads it.  Damage that leaves all of these as they were (bit rot) is found by the job that reads the
file: it fails naming the file, and records it (:func:`report_damaged`, ``.snakemake/unie/damaged.txt``) so that
the next run sets it aside and remakes it.

**Replaced inputs** (:func:`find_stale`): a model's ``config.json`` and a result JSON record the identities of the
files they were made from (``made_from``: :func:`identity`, a content hash read from the file's own record).  An
input whose identity changed since, and that is not newer than what was made from it (``cp -p``, ``rsync -a``
keep an old modification time), gets the current time (a dry run does this too: it is then true), so that
Snakemake remakes what was made from it, as for any changed input, when the targets need it.

**Set aside earlier** (:func:`find_orphans`): ``NAME.damaged`` without ``NAME`` (a run that was stopped before it
remade it) is remade.

Nothing is touched while another Snakemake run holds the directory's lock (its jobs may be writing these files).

**Run directories** (:mod:`unie.config.rundir`): every function takes ``run``, the run's directory relative to
``root`` (``runs/toy``; ``"."`` for a tree laid out as one run at the top level).  The paths above are then below
``run`` (``runs/toy/results/models/*``, ``runs/toy/resources/tokenized/...``), files set aside earlier are also
looked for in the shared downloads (``resources/hf``, ...), and only the files a job reported under ``run`` are
this run's; every path named or returned is relative to ``root``, as the workflow's rules name them.  Other runs'
directories are never looked at.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.integrity import (HASH_KEY, MADE_FROM, RECORDS, DamagedFileError, check_json, file_sha256,
                              json_digest)
from ..data.tokens import read_token_meta, token_content_sha256

CACHE = Path(".snakemake/unie/verified.json")  # a run directory's: .snakemake/unie/verified/<name>.json
REPORTED = Path(".snakemake/unie/damaged.txt")  # files a job found damaged (one relative path per line)
HASH_LIMIT = 2 << 30  # bytes; larger files: size here, hash in the job that reads them
JSON_LIMIT = 64 << 20  # result JSONs above this are left to the job that reads them
MODEL_DIRS = ("results/models/*", "results/dllm/models/*")


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
def identity(path) -> str | None:
    """A file's content identity, read from its own record without hashing it: a token file's content hash (its
    metadata), model weights' SHA-256 (their ``config.json``), a result JSON's content hash; None for anything else
    (a directory, a file without a record: only its modification time counts) or an unreadable file."""
    p = Path(path)
    try:
        if not p.is_file():
            return None
        if p.suffix == ".parquet":
            meta = read_token_meta(p)
            return meta.get("content_sha256") if meta else None
        if p.suffix == ".safetensors":
            meta = json.loads((p.parent / "config.json").read_text())
            record = meta.get("weights") if isinstance(meta, dict) else None
            return record.get("sha256") if isinstance(record, dict) and record.get("file") == p.name else None
        if p.suffix == ".json" and p.stat().st_size <= JSON_LIMIT:
            obj = json.loads(p.read_text())
            return obj.get(HASH_KEY) if isinstance(obj, dict) else None
    except (OSError, ValueError, DamagedFileError):
        return None
    return None


def identities(paths) -> dict:
    """``{path: identity}`` of the ``paths`` that have one (:func:`identity`): what a model or a result JSON records
    as ``made_from``."""
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
    return token_content_sha256(path)[0]


def _json_files(root: Path, run: str = "."):
    """The JSON files under the run's ``results/`` (not the training checkpoints) and the DLLM data description."""
    base = root / run
    out = [p for p in (base / "results").rglob("*.json") if "checkpoints" not in p.relative_to(base).parts[:2]]
    dllm_meta = base / "resources/dllm/meta.json"
    return sorted(out + ([dllm_meta] if dllm_meta.exists() else []))


def _load_json(path: Path):
    """``(object, problem)``: the parsed JSON, or None and why it cannot be used."""
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except UnicodeDecodeError:
        return None, "not valid UTF-8 text"
    except json.JSONDecodeError as e:
        return None, f"not valid JSON ({e.msg} at line {e.lineno})"


def _record_checks(root: Path, found: list, run: str = "."):
    """``(file, record, output, digest, alt)`` for every file with a recorded hash under ``root``: ``record`` has the
    ``sha256`` that ``digest(file)`` must give (and ``bytes``, the size, where recorded), None when unreadable.
    Problems found without hashing (a missing ``config.json``, a result JSON whose values changed) go to ``found``."""
    rel = lambda p: os.path.relpath(p, root)  # noqa: E731
    base = root / run
    for d in sorted(q for pattern in MODEL_DIRS for q in base.glob(pattern) if q.is_dir()):
        cfg, weights = d / "config.json", d / "model.safetensors"
        if not cfg.exists():
            if weights.exists():
                found.append(Damaged(rel(weights), "its config.json (the architecture, the size and hash of these "
                                                   "weights) is missing", rel(weights)))
            continue
        try:
            meta = json.loads(cfg.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            yield cfg, None, weights, file_sha256, None
            continue
        record = meta.get("weights") if isinstance(meta, dict) else None
        if not isinstance(record, dict):
            continue
        if not weights.exists():
            found.append(Damaged(rel(weights), "missing although its config.json records it", rel(weights)))
            continue
        yield weights, record, weights, file_sha256, None
    for tokens in sorted(base.glob("resources/tokenized/*/*.parquet")):
        try:
            meta = read_token_meta(tokens)
        except DamagedFileError:
            yield tokens, None, tokens, _token_digest, None
            continue
        if meta is not None:
            yield tokens, {"sha256": meta.get("content_sha256")}, tokens, _token_digest, None
    dllm_meta = base / "resources/dllm/meta.json"
    if dllm_meta.exists():
        obj, _ = _load_json(dllm_meta)
        files = obj.get("files", {}) if isinstance(obj, dict) else None
        if isinstance(files, dict):
            for name, record in sorted(files.items()):
                yield dllm_meta.parent / name, record, dllm_meta, file_sha256, None
    from ..eval.metrics import lmeval_numbers_problem

    for path in _json_files(root, run):
        if path.stat().st_size > JSON_LIMIT:
            continue
        obj, problem = _load_json(path)
        if problem is not None:
            found.append(Damaged(rel(path), problem, rel(path)))
            continue
        if not isinstance(obj, dict):
            continue
        if HASH_KEY not in obj:  # lm-eval's own results (their record is in the row's effect.json), older files
            problem = lmeval_numbers_problem(obj) if "n-samples" in obj and not _recorded(root, path) else None
            problem = f"its numbers disagree: {problem}" if problem else None
            if problem is None:
                try:
                    check_json(obj, path)
                except DamagedFileError as e:
                    problem = e.problem
            if problem is not None:
                found.append(Damaged(rel(path), problem, rel(path)))
            continue
        try:
            check_json(obj, path)
        except DamagedFileError as e:
            found.append(Damaged(rel(path), e.problem, rel(path)))
            continue
        for name, record in sorted((obj.get(RECORDS) or {}).items()):
            f = Path(name) if Path(name).is_absolute() else root / name
            yield f, record, f, file_sha256, path


def _recorded(root: Path, path: Path) -> bool:
    """Whether an lm-eval results file has a record in its row's ``effect.json`` (then its hash is checked instead
    of its numbers)."""
    effect = path.parent / "effect.json"
    obj, _ = _load_json(effect) if effect.exists() else (None, None)
    names = (obj or {}).get(RECORDS) or {} if isinstance(obj, dict) else {}
    return any(os.path.normpath(root / n if not Path(n).is_absolute() else n) == os.path.normpath(path)
               for n in names)


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


def _cache_path(run: str) -> Path:
    """Where the files verified in ``run`` are remembered (:data:`CACHE` for a tree laid out at the top level)."""
    if os.path.normpath(run) == ".":
        return CACHE
    return CACHE.parent / "verified" / f"{os.path.normpath(run).replace(os.sep, '__')}.json"


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


def find_damaged(root=".", cache_path: Path | None = CACHE, hash_limit: int = HASH_LIMIT, run: str = ".") -> list[Damaged]:
    """The recorded files of the run in ``run`` (relative to ``root``) whose bytes differ from their record (or
    whose record is unreadable), the result JSONs whose values changed, and the files a job reported damaged."""
    root = Path(root)
    if cache_path is CACHE:
        cache_path = _cache_path(run)
    cache_file = root / cache_path if cache_path is not None else None
    try:
        cache = json.loads(cache_file.read_text()) if cache_file and cache_file.exists() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        cache = {}
    reported = _reported(root, run)
    found, verified, seen = [], {}, set()
    for path, record, output, digest, alt in _record_checks(root, found, run):
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
    if cache_file is not None:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            cache_file.write_text(json.dumps(verified))
        except OSError:
            pass  # a read-only checkout: verify again next time
    return found


# ---------------------------------------------------------------------- replaced inputs, earlier set-asides
def _made_from(root: Path, run: str = "."):
    """``(output, {input: identity})`` of every model and result JSON of the run that records what it was made
    from."""
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
            yield path, obj[MADE_FROM]


def find_stale(root=".", run: str = ".") -> list[Stale]:
    """The models and result JSONs of the run in ``run`` one of whose inputs now has another identity
    (:func:`identity`) than the one they recorded when they were made (a file replaced, whatever its modification
    time)."""
    root = Path(root)
    known, out = {}, []
    for output, made_from in _made_from(root, run):
        for source, was in sorted(made_from.items()):
            f = Path(source) if Path(source).is_absolute() else root / source
            if f not in known:
                known[f] = identity(f)
            now = known[f]
            if now is not None and now != was:
                out.append(Stale(os.path.relpath(output, root), source, was, now))
                break
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
        if any(os.path.normpath(os.path.relpath(line, root) if os.path.isabs(line) else line).startswith(top)
               for line in lines if line.strip()):
            return True
    return False


# ---------------------------------------------------------------------- what the run remakes
def _remade_by(path: str, producer) -> tuple[str, str] | None:
    """``(file, rule)``: ``path`` or the nearest folder above it that a rule of the workflow makes (a file inside a
    ``directory()`` output), or None when none does.  Without a ``producer``: ``path`` itself, by its job."""
    if producer is None:
        return path, "its job"
    p = Path(path)
    for candidate in [p, *list(p.parents)[:-1]]:
        rule = producer(str(candidate))
        if rule:
            return str(candidate), f"rule {rule}"
    return None


def _plan(root: Path, producer, log, dry_run: bool, run: str = ".") -> tuple[list[Damaged], list[str]]:
    if another_run_active(root, run):
        return [], []
    orphans = find_orphans(root, run)
    found = find_damaged(root, run=run)
    seen = set(orphans)  # a file set aside earlier and still missing: said once, as such
    damaged = [d for d in found if not (d.path in seen or seen.add(d.path))]  # one line per file
    stale = find_stale(root, run)
    remake = []
    for d in damaged:
        by = next((b for b in (_remade_by(o, producer) for o in (d.output, d.alt) if o) if b), None)
        if by:
            remake.append(by[0])
        how = f"{'it' if by[0] == d.path else f'it with {by[0]}'} ({by[1]})" if by else None
        f = root / d.path
        if not f.exists():  # recorded, and gone
            todo = ((f"the run will remake {how}" if dry_run else f"this run remakes {how}") if by else
                    "no rule of this workflow makes it")
            log(f"unie: {d.path} is {d.problem}; {todo}")
            continue
        if dry_run:
            fix = (f"the run will set it aside as {d.path}.damaged and {'rebuild' if by[0] == d.path else 'remake'} "
                   f"{how}" if by else f"the run will set it aside as {d.path}.damaged; no rule of this workflow "
                   "makes it")
        else:
            os.replace(f, f.with_name(f.name + ".damaged"))
            fix = (f"set aside as {d.path}.damaged; this run {'rebuilds' if by[0] == d.path else 'remakes'} {how}"
                   if by else f"set aside as {d.path}.damaged; no rule of this workflow makes it")
        log(f"unie: {DamagedFileError(d.path, d.problem, fix)}")
    by_source = {}
    for s in stale:
        by_source.setdefault(s.source, []).append(s)
    for source, outs in by_source.items():
        src = Path(source) if Path(source).is_absolute() else root / source
        made = ", ".join(s.output for s in outs)
        try:
            if all(src.stat().st_mtime_ns > (root / s.output).stat().st_mtime_ns for s in outs):
                continue  # Snakemake sees it newer already
            os.utime(src)  # its content changed: now Snakemake sees it newer than what was made from it
        except OSError as e:
            for s in outs:
                if (by := _remade_by(s.output, producer)):
                    remake.append(by[0])
            log(f"unie: {made} {'was' if len(outs) == 1 else 'were'} made from {source}, which was replaced since "
                f"(its modification time cannot be set: {e.strerror}); "
                f"{'the run will remake' if dry_run else 'this run remakes'} {'it' if len(outs) == 1 else 'them'}")
            continue
        log(f"unie: {source} was replaced (content {outs[0].was[:12]}... -> {outs[0].now[:12]}..., its modification "
            f"time kept) after {made} {'was' if len(outs) == 1 else 'were'} made from it: its modification time is "
            f"set to now, so {'the run will remake' if dry_run else 'this run remakes'} what was made from it")
    for o in orphans:
        by = _remade_by(o, producer)
        if by:
            remake.append(by[0])
            log(f"unie: {o} was set aside as {o}.damaged and not made again since; "
                f"{'the run will remake' if dry_run else 'this run remakes'} it ({by[1]})")
    if not dry_run:
        _forget_reported(root, run)
    return damaged, sorted(set(remake))


def _forget_reported(root: Path, run: str) -> None:
    """Drop the run's lines from the jobs' reports (:data:`REPORTED`), keeping other runs'."""
    path = root / REPORTED
    if not path.exists():
        return
    others = [line for line in path.read_text().splitlines() if line.strip() and not _mine(line.strip(), run)]
    if others:
        path.write_text("".join(f"{line}\n" for line in others))
    else:
        path.unlink(missing_ok=True)


def plan_rebuilds(root=".", producer: Callable[[str], str | None] | None = None, log=print,
                  dry_run: bool = False, run: str = ".") -> list[str]:
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
