"""The Snakefile's configuration, run directory and rule facts, remembered between runs of the same configuration.

Resolving a profile, checking it against the schema and across keys (:func:`unie.config.validate.workflow_config`,
whose cross-checks read the registries and so import torch), naming its run directory
(:func:`unie.config.rundir.run_directory`, which resolves the profile up to three more times) and reading what the
rules need from the registries (:func:`unie.config.expand.rule_facts`) were 1.5 s of a no-op rerun's start-up, and the
torch import 3.7 s more.  The three results depend only on what :func:`cache_key` hashes:

* the bytes of the config files given (or ``config/config.yaml``) and of the base profiles they are written over
  (``base:``), of every ``*.yaml`` of the config folder (the grid, and the profile files the run directory's name is
  compared with), of the schema; the paths of these files and the working directory;
* the ``--config`` overrides;
* the code that resolves and checks them: every ``unie/**/*.py`` (the checks read the registries: a sampler's
  options, a method's kind), and the versions of Python and Snakemake (``snakemake.utils.validate`` fills in the
  schema's defaults).

:func:`configured` computes that key (about 1.5 MB read and hashed) and, when a configuration with the same key was
checked before, loads them from ``.snakemake/unie/config/<key>.pickle`` in the working directory: no resolution, no
schema (jsonschema is not imported), no cross-check, no registry read, no torch.  Otherwise it computes them as before and keeps them (the :data:`KEEP` most recently used entries).  A configuration with an error
is never kept: it is checked, and reported in one line, every time.  ``unie check-config`` always checks in full.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
from pathlib import Path
from typing import NamedTuple

from ..core.integrity import code_digest
from ..core.options import ConfigError
from .expand import RuleFacts, rule_facts
from .profile import DEFAULT_PROFILE, GRID, REPO, SCHEMA, profile_chain

CACHE_DIR = Path(".snakemake/unie/config")  # relative to the working directory
KEEP = 16  # entries kept (the most recently used)
STATS = {"hits": 0, "misses": 0}  # this process's lookups (the tests count them)


class Configured(NamedTuple):
    """What the Snakefile gets: the resolved configuration, its run directory (``runs/<name>``), the rules' facts."""

    config: dict
    run_dir: str
    facts: RuleFacts


def _chain(files: list[Path]) -> list[Path]:
    """The given profile files and the base profiles under them; a profile whose chain cannot be followed (an error
    the full check reports) adds only itself."""
    out = []
    for f in files:
        try:
            out += [p for p, _ in profile_chain(f)]
        except (ConfigError, OSError):
            out.append(f)
    return out


def cache_key(profile_files, cli_overrides: dict | None, grid=None, schema=None, config_dir=None) -> str:
    """The SHA-256 of everything the resolved configuration and the run directory depend on (module doc).  A file
    that cannot be read is an ``OSError``."""
    try:
        from snakemake import __version__ as snakemake_version
    except ImportError:  # outside the workflow extra
        snakemake_version = "-"
    h = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    files = [Path(f) for f in (profile_files or [])] or [DEFAULT_PROFILE]
    for f in _chain(files):
        add(f"profile {f.resolve()}", f.read_bytes())
    config_dir = Path(config_dir or REPO / "config")
    for f in sorted(config_dir.glob("*.yaml")):
        add(f"config {f.resolve()}", f.read_bytes())
    add(f"grid {Path(grid or GRID).resolve()}", Path(grid or GRID).read_bytes())
    for s in dict.fromkeys([Path(schema or SCHEMA).resolve(), SCHEMA.resolve()]):
        add(f"schema {s}", s.read_bytes())
    add("--config", json.dumps(cli_overrides or {}, sort_keys=True, default=repr).encode())
    add("code", code_digest(REPO / "unie").encode())
    add("context", f"{os.getcwd()}\0{sys.version}\0{snakemake_version}".encode())
    return h.hexdigest()


def configured(
    profile_files, cli_overrides: dict | None, grid=None, schema=SCHEMA, config_dir=None, cache_dir=CACHE_DIR
) -> Configured:
    """The Snakefile's :class:`Configured` (module doc): remembered when the same inputs were checked before, else
    :func:`~unie.config.validate.workflow_config`, :func:`~unie.config.rundir.run_directory` and
    :func:`~unie.config.expand.rule_facts` (a :class:`~unie.core.options.ConfigError` propagates, nothing kept)."""
    try:
        key = cache_key(profile_files, cli_overrides, grid, schema, config_dir)
    except OSError:  # a file that cannot be read: the full check names it, in one line
        key = None
    path = Path(cache_dir) / f"{key}.pickle" if key else None
    if path is not None and path.is_file():
        try:
            with open(path, "rb") as f:
                found = Configured(*pickle.load(f))
            STATS["hits"] += 1
            os.utime(path)  # recently used
            return found
        except Exception:  # noqa: BLE001 - an unreadable entry (a stopped write, another Python): compute it again
            pass
    from .rundir import run_directory
    from .validate import workflow_config

    STATS["misses"] += 1
    config = workflow_config(profile_files, cli_overrides, grid=grid, schema=schema)
    found = Configured(
        config, run_directory(profile_files, cli_overrides, grid=grid, config_dir=config_dir), rule_facts(config)
    )
    if path is not None:
        _keep(path, tuple(found))
    return found


def _keep(path: Path, value) -> None:
    """Write ``value`` to ``path`` atomically and drop all but the :data:`KEEP` most recently used entries; a
    read-only working directory keeps nothing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        entries = sorted(path.parent.glob("*.pickle"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


__all__ = ["CACHE_DIR", "KEEP", "STATS", "Configured", "cache_key", "configured"]
