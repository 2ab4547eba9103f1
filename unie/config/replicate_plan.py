"""The ``replicates`` target's plan: the whole run once per seed, and where the aggregate goes.

``snakemake --cores 2 replicates`` runs the workflow once per seed of ``replicates.seeds`` (config/experiments.yaml:
0, 1, 2), each as its own ``snakemake ... --config seed=S`` in its own run directory (``runs/toy``,
``runs/toy+seed-1``, ``runs/toy+seed-2``: every model trained again from its seed, :mod:`unie.config.seeds`), then
writes one aggregate page beside them, ``runs/<base>+replicates/`` (:func:`aggregate_dir`).  On a machine the runs
go one after another, each with every core; under a cluster executor (``--profile slurm``) they run side by side,
each submitting its own jobs (:func:`replicate_command`).

Nothing here runs anything; :mod:`unie.pipeline.replicate_runs` does.
"""

from __future__ import annotations

import copy
import os
import shlex

import yaml

from .profile import coerce_cli_config

AGGREGATE_SUFFIX = "+replicates"


def aggregate_dir(run_dir: str, cli_overrides: dict | None, base_dir=None) -> str:
    """The aggregate's directory: the run directory without its seed, then ``+replicates``.  ``run_dir`` is the
    directory of the run as invoked; when ``--config`` set ``seed``, ``base_dir()`` gives the directory without it
    (resolving a configuration costs a second, so only then)."""
    base = base_dir() if cli_overrides and "seed" in cli_overrides and base_dir is not None else run_dir
    return f"{base.rstrip('/')}{AGGREGATE_SUFFIX}"


def _config_words(cli_overrides: dict, seed: int) -> list[str]:
    """``--config`` words for the overrides as given, with ``seed`` replaced (nested values as YAML flow)."""
    given = copy.deepcopy({k: v for k, v in cli_overrides.items() if k != "seed"})
    coerce_cli_config(given, copy.deepcopy(given))  # nested leaves as YAML read them ('30' -> 30), as the run did
    words = []
    for key, value in {**given, "seed": seed}.items():
        text = value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
        if text.endswith("\n..."):
            text = text[:-4]
        words.append(f"{key}={text}")
    return words


def given_profile(argv: list[str], environ=os.environ) -> str | None:
    """The Snakemake profile the outer run was started with (``--profile P``, ``--profile=P``, or
    ``$SNAKEMAKE_PROFILE``), so each seed's run submits its jobs as the outer one would."""
    for i, word in enumerate(argv):
        if word == "--profile" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--profile="):
            return word.split("=", 1)[1]
    return environ.get("SNAKEMAKE_PROFILE") or None


def replicate_command(
    python: str,
    snakefile: str,
    workdir: str,
    config_files: list[str],
    cli_overrides: dict,
    seed: int,
    targets: list[str],
    cores: int | None,
    profile: str | None,
) -> list[str]:
    """The command of one seed's run: the same Snakefile, working directory, config files and ``--config``
    overrides as the outer run, ``seed`` replaced, building ``targets``.  ``cores``: a local run's ``--cores``
    (``None`` under a cluster executor); ``profile``: the outer run's Snakemake profile, passed on (its executor,
    resources and Slurm settings)."""
    cmd = [python, "-m", "snakemake", "-s", snakefile, "-d", workdir]
    if profile:
        cmd += ["--profile", profile]
    if cores is not None:
        cmd += ["--cores", str(cores)]
    if config_files:
        cmd += ["--configfile", *config_files]
    cmd += ["--config", *_config_words(cli_overrides, seed), "--", *targets]
    return cmd


def shown(cmd: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in cmd)


__all__ = ["AGGREGATE_SUFFIX", "aggregate_dir", "given_profile", "replicate_command", "shown"]
