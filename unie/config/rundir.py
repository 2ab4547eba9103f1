"""Where a run writes: its own directory, named by the profile and by every setting that changes its results.

Every file a run makes is under ``runs/<name>/`` (:func:`run_directory`), laid out as the repository's top level
was before run directories: ``results/`` (models, samples, tables, figures, ...), ``resources/`` (the run's data:
the toy world's corpora or a download's Parquet copy, the tokenizer, token files, the DLLM half's tasks and
tensors), ``logs/`` and ``benchmarks/``.  So the default run, the paper profile and a retraining with another seed
never write the same file, and each can be read, copied or deleted as one folder.  Only downloads that do not
depend on the run stay shared, at the top level's ``resources/`` (:data:`SHARED_RESOURCES`: Hugging Face model
snapshots, released checkpoints, the release files of the paper's local lm-eval tasks), so a second run does not
fetch 60 GB again.

The name (:func:`run_name`) is the profile (``config['profile']``: ``toy``, ``smoke``, ``paper``, ``gpu-smoke``),
then one ``+key-value`` per setting in which the run's configuration differs from that profile's own file in
``config/`` (``--config seed=1`` -> ``toy+seed-1``; an extra config file is compared the same way), in the order
of the keys.  A value that is not a short plain word or number is written as the first 8 hex digits of its
SHA-256 (``toy+sampling.steps-1f0c3a2b``); more than :data:`MAX_PARTS` settings, or a name longer than
:data:`MAX_NAME`, become ``<profile>+`` and one such digest of them all.  Settings that change how a run executes
but not its numbers are left out (:data:`EXECUTION_KEYS`: threads, Slurm resources and partitions, the time limit,
how samples and lm-eval rows are grouped into jobs), so ``--config threads=2`` reuses the run's directory.

A tree from before run directories (``results/``, ``logs/``, ``benchmarks/`` and the run's parts of
``resources/`` at the top level: :func:`earlier_layout`) is neither read nor moved: the run builds its own
directory from the start, and the Snakefile says so in one line.  Its JSON records and Snakemake's metadata name
the old paths, so a moved tree would be remade anyway.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

from .profile import REPO, leaves, profile_files_by_name, resolve_config
from .seeds import sub_seeds

RUNS = "runs"  # every run's directory is below this one (relative to the working directory)

# downloads that do not depend on the run: shared by every run (relative to the working directory)
SHARED_RESOURCES = ("resources/hf", "resources/released", "resources/paper_tasks")

# settings that change how a run executes, not what it computes (dotted paths; a path covers what is below it)
EXECUTION_KEYS = (
    "threads",
    "resources",
    "slurm_partitions",
    "max_runtime",
    "cluster",
    "sampling.job",
    "dllm.eval_job",
    "replicates",
)

MAX_PARTS = 3
MAX_NAME = 80
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,23}$")

# what a run wrote at the top level before run directories; logs/slurm is the Slurm executor's own
EARLIER = (
    "results",
    "logs",
    "benchmarks",
    "resources/tokenizer",
    "resources/tokenized",
    "resources/raw",
    "resources/cache",
    "resources/dllm",
    "resources/standins",
    "resources/prefetch",
)


def _leaves(node) -> dict[tuple, object]:
    """:func:`~unie.config.profile.leaves` with each key as text (the dotted names of the run directory)."""
    return {tuple(map(str, path)): value for path, value in leaves(node).items()}


def _execution(path: tuple) -> bool:
    return any(path[: len(k.split("."))] == tuple(k.split(".")) for k in EXECUTION_KEYS)


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:8]


def _word(value) -> str:
    """A value as it reads in a directory name: a short plain word or number as written, else its digest."""
    if isinstance(value, bool) or value is None:
        text = json.dumps(value)
    elif isinstance(value, (int, float, str)):
        text = str(value)
    else:
        text = ""
    return text if _PLAIN.match(text) else _digest(value)


_DERIVED = "(the top-level seed)"


def _seeds_as_derived(config: dict) -> dict:
    """``config`` with every sub-seed that equals its top-level ``seed`` written as :data:`_DERIVED`: a sub-seed the
    top-level seed fills (:mod:`unie.config.seeds`) is not a setting of its own, so ``--config seed=1`` differs in
    ``seed`` alone (``toy+seed-1``), and only a sub-seed set apart from it names itself."""
    derived = [path for path, value in sub_seeds(config).items() if value == config.get("seed")]
    if not derived:
        return config
    out = copy.deepcopy(config)
    for path in derived:
        *parents, leaf = path.split(".")
        node = out
        for key in parents:
            node = node[key]
        node[leaf] = _DERIVED
    return out


def differences(config: dict, base: dict) -> dict[str, object]:
    """``{dotted key: value in config}`` for every leaf in which ``config`` differs from ``base`` (a key ``base``
    has and ``config`` lacks: ``None``), less :data:`EXECUTION_KEYS` and the sub-seeds that follow the top-level
    seed, in key order."""
    a, b = _leaves(_seeds_as_derived(config)), _leaves(_seeds_as_derived(base))
    out = {}
    for path in sorted(set(a) | set(b)):
        if _execution(path) or path == ("profile",):
            continue
        if a.get(path, _MISSING) != b.get(path, _MISSING):
            out[".".join(path)] = a.get(path)
    return out


_MISSING = object()


def name_from(profile: str, diffs: dict) -> str:
    """The directory name of a run of ``profile`` that differs from it in ``diffs`` (:func:`differences`)."""
    profile = profile if _PLAIN.match(profile) else _digest(profile)
    parts = [f"{key}-{_word(value)}" for key, value in diffs.items()]
    name = "+".join([profile, *parts])
    if len(parts) > MAX_PARTS or len(name) > MAX_NAME:
        name = f"{profile}+{_digest(diffs)}"
    return name


def run_name(profile_files=None, cli_overrides: dict | None = None, grid=None, config_dir=None) -> str:
    """The name of the run directory of a configuration given as the Snakefile gets it: its config files
    (``config/config.yaml`` when none) and ``--config`` overrides (module doc)."""
    files = [Path(f) for f in (profile_files or [])] or [REPO / "config" / "config.yaml"]
    as_given = resolve_config(files, None, grid=grid)
    profile = str(as_given.get("profile", "run"))
    own = profile_files_by_name(config_dir).get(profile)
    same = own is not None and [f.resolve() for f in files] == [own.resolve()]
    base = resolve_config([own], None, grid=grid) if own is not None and not same else as_given
    config = resolve_config(files, cli_overrides, grid=grid) if cli_overrides else as_given
    diffs = differences(config, base)
    if config.get("profile", profile) != profile:  # --config profile=...: a run of neither profile's own
        diffs = {"profile": config.get("profile"), **diffs}
    return name_from(profile, diffs)


def run_directory(profile_files=None, cli_overrides: dict | None = None, grid=None, config_dir=None) -> str:
    """``runs/<name>`` (:func:`run_name`), relative to the working directory."""
    return f"{RUNS}/{run_name(profile_files, cli_overrides, grid, config_dir)}"


def earlier_layout(root=".") -> list[str]:
    """The paths of a tree from before run directories that exist under ``root`` (:data:`EARLIER`; the Slurm
    executor's ``logs/slurm`` is not one)."""
    root = Path(root)
    found = []
    for p in EARLIER:
        path = root / p
        if p == "logs" and path.is_dir():
            if any(q.name != "slurm" for q in path.iterdir()):
                found.append(p)
        elif path.exists():
            found.append(p)
    return found


def earlier_layout_notice(run_dir: str, root=".") -> str | None:
    """One line on a tree from before run directories, or None when there is none."""
    old = earlier_layout(root)
    if not old:
        return None
    listed = ", ".join(f"{p}/" for p in old)
    return (
        f"unie: {listed} {'is' if len(old) == 1 else 'are'} from before run directories and not read: this run "
        f"builds {run_dir}/ from the start (delete them when you no longer need them; docs/runs.md)"
    )


__all__ = [
    "EARLIER",
    "EXECUTION_KEYS",
    "RUNS",
    "SHARED_RESOURCES",
    "differences",
    "earlier_layout",
    "earlier_layout_notice",
    "name_from",
    "profile_files_by_name",
    "run_directory",
    "run_name",
]
