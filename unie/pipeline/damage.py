"""Damaged outputs are treated as missing: before Snakemake plans the jobs, the workflow checks the files whose
size and SHA-256 were recorded when they were written, and sets a damaged one aside (``NAME.damaged``) so that
Snakemake sees it missing and rebuilds it (a truncated or changed file keeps its modification time or looks
newer, so Snakemake alone would take it as up to date and use it).

Checked (the files the workflow records a hash for, :mod:`unie.core.integrity`):

* model weights ``results/models/*/model.safetensors`` and ``results/dllm/models/*/model.safetensors`` against
  their ``config.json``'s ``weights`` record (a damaged ``config.json`` sets the weights aside too);
* token files ``resources/tokenized/*/*.parquet`` against the content hash in their own metadata (the decoded
  values, pages checked against their CRCs: :mod:`unie.data.tokens`); an unreadable footer (a truncated file) is
  damage too;
* the DLLM training tensors ``resources/dllm/*.pt`` against ``resources/dllm/meta.json`` (which is set aside: it
  is the rule's declared output, and its rule rewrites every tensor).

A file is hashed only when its size, modification or change time or inode changed since it was last verified
(``.snakemake/unie/verified.json``), so a rerun costs a ``stat`` per file; a file above ``HASH_LIMIT`` (2 GiB:
OpenWebText's tokens) is only checked for its size here and hashed by the job that reads it.  Damage that leaves
all of these as they were (bit rot) is found by the job that reads the file: it fails naming the file, and records
it (:func:`report_damaged`, ``.snakemake/unie/damaged.txt``) so that the next run sets it aside and rebuilds it.

A dry run (``snakemake -n``) only reports.  Nothing is touched while another Snakemake run holds the directory's
lock (its jobs may be writing these files).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.integrity import DamagedFileError, file_sha256
from ..data.tokens import read_token_meta, token_content_sha256

CACHE = Path(".snakemake/unie/verified.json")
REPORTED = Path(".snakemake/unie/damaged.txt")  # files a job found damaged (one relative path per line)
HASH_LIMIT = 2 << 30  # bytes; larger files: size here, hash in the job that reads them


@dataclass(frozen=True)
class Damaged:
    path: str  # the damaged file
    problem: str
    output: str  # the declared output to set aside so that its rule reruns


def _token_digest(path: Path) -> str:
    """A token file's content hash, decoded (its record counts rows, not bytes)."""
    return token_content_sha256(path)[0]


def _record_checks(root: Path):
    """``(file, record, output, digest)`` for every file with a recorded hash under ``root``: ``record`` has the
    ``sha256`` that ``digest(file)`` must give (and ``bytes``, the size, where recorded), None when unreadable."""
    for cfg in sorted([*root.glob("results/models/*/config.json"), *root.glob("results/dllm/models/*/config.json")]):
        weights = cfg.parent / "model.safetensors"
        if not weights.exists():
            continue
        try:
            meta = json.loads(cfg.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            yield cfg, None, weights, file_sha256
            continue
        if isinstance(meta, dict) and isinstance(meta.get("weights"), dict):
            yield weights, meta["weights"], weights, file_sha256
    for tokens in sorted(root.glob("resources/tokenized/*/*.parquet")):
        try:
            meta = read_token_meta(tokens)
        except DamagedFileError:
            yield tokens, None, tokens, _token_digest
            continue
        if meta is not None:
            yield tokens, {"sha256": meta.get("content_sha256")}, tokens, _token_digest
    dllm_meta = root / "resources/dllm/meta.json"
    if dllm_meta.exists():
        try:
            files = json.loads(dllm_meta.read_text()).get("files", {})
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            yield dllm_meta, None, dllm_meta, file_sha256
            return
        for name, record in sorted(files.items()):
            yield dllm_meta.parent / name, record, dllm_meta, file_sha256


def _stamp(st, record: dict) -> list:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, record.get("sha256")]


def report_damaged(path, root=".") -> None:
    """Record that a job found ``path`` damaged (its bytes differ from their record although its size and times
    do not), for the next run's :func:`set_aside_damaged`.  Only files under ``root`` (the working directory)."""
    root = Path(root).resolve()
    try:
        rel = Path(path).resolve().relative_to(root)
        with open(root / REPORTED, "a") as f:  # one short line: appends from parallel jobs do not interleave
            f.write(f"{rel}\n")
    except (ValueError, OSError):
        pass  # outside the working directory, or no .snakemake/ (not a workflow run)


def find_damaged(root=".", cache_path: Path | None = CACHE, hash_limit: int = HASH_LIMIT) -> list[Damaged]:
    """The recorded files under ``root`` whose bytes differ from their record (or whose record is unreadable), and
    the recorded files a job reported damaged."""
    root = Path(root)
    cache_file = root / cache_path if cache_path is not None else None
    try:
        cache = json.loads(cache_file.read_text()) if cache_file and cache_file.exists() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        cache = {}
    reported = set()
    if (root / REPORTED).exists():
        reported = {line.strip() for line in (root / REPORTED).read_text().splitlines() if line.strip()}
    found, verified = [], {}
    for path, record, output, digest in _record_checks(root):
        rel, out = os.path.relpath(path, root), os.path.relpath(output, root)
        if record is None:
            what = "its footer cannot be read" if path.suffix == ".parquet" else "its metadata is not valid JSON"
            found.append(Damaged(rel, what, out))
            continue
        try:
            st = path.stat()
        except FileNotFoundError:
            found.append(Damaged(rel, "missing although its metadata lists it", out))
            continue
        if record.get("bytes") is not None and st.st_size != int(record["bytes"]):
            found.append(Damaged(rel, f"{st.st_size} bytes, {record['bytes']} when written", out))
            continue
        if rel in reported:
            found.append(Damaged(rel, "a job found its content hash different from the one recorded", out))
            continue
        stamp = _stamp(st, record)
        if cache.get(rel) == stamp or st.st_size > hash_limit:
            verified[rel] = stamp
            continue
        try:
            same = not record.get("sha256") or digest(path) == record["sha256"]
        except DamagedFileError as e:  # a token file whose pages fail their CRC
            found.append(Damaged(rel, e.problem, out))
            continue
        if not same:
            found.append(Damaged(rel, "content hash differs from the one recorded when it was written", out))
            continue
        verified[rel] = stamp
    if cache_file is not None:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            cache_file.write_text(json.dumps(verified))
        except OSError:
            pass  # a read-only checkout: verify again next time
    return found


def another_run_active(root=".") -> bool:
    """Whether a Snakemake run holds this directory's lock (``.snakemake/locks/``)."""
    locks = Path(root) / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


def set_aside_damaged(root=".", log=print, dry_run: bool = False) -> list[Damaged]:
    """Rename every damaged recorded output (:func:`find_damaged`) to ``NAME.damaged`` so that Snakemake rebuilds
    it, with one line each on ``log``; a dry run only says what the run will set aside.  Nothing while another
    run is active.  Returns the damaged files."""
    root = Path(root)
    if another_run_active(root):
        return []
    damaged = find_damaged(root)
    for d in damaged:
        out = root / d.output
        if dry_run:
            log(f"unie: {DamagedFileError(d.path, d.problem, f'the run will set it aside as {d.output}.damaged and rebuild it')}")
            continue
        if out.exists():
            os.replace(out, out.with_name(out.name + ".damaged"))
        log(f"unie: {DamagedFileError(d.path, d.problem, f'set aside as {d.output}.damaged; this run rebuilds it')}")
    if not dry_run:
        (root / REPORTED).unlink(missing_ok=True)
    return damaged
