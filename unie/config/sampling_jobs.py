"""How the sampling runs are cut into jobs (config ``sampling.job``), so that a fresh run starts few processes and a
rerun is as small as the change.

* ``step``: one job per (run, step count) (rule ``sample``; the paper profile: hours per step count on a GPU).
* ``run``: one job per run for the runs on the standard step counts ``sampling.steps`` (rule ``sample_run``), one
  per (run, step count) for the others (rule ``sample``).
* ``table`` (the default and smoke profiles, where a run samples in seconds and starting Python, torch and the
  models costs ~3 s a job): the runs of one table or figure (Table 2's, those Figure 2 adds, ``fig2_*``, those
  Figure 3 adds, ``fig3_*``) that were never sampled in this run directory are sampled by one job
  (rules ``sample_table2``, ``sample_fig2``, ``sample_fig3``), so a fresh run starts one process per table; a run
  sampled before is resampled by its own job, as under ``run`` (``sample_run``, ``sample``), so that losing one of
  its files, or changing one of its models, reruns that run and not the table.

The files are the same whichever job writes them (a sample's generator is seeded by the seed, the run and the step
count: :func:`unie.pipeline.sample.sampling_seed`).  Under ``table``, every job of a table's runs takes the table
job's parameters and input files (all of its runs'), so that Snakemake sees the files a table job wrote as made by
the job that would make them now, and reruns nothing; a change to one run's settings reruns that table's runs.

Which runs were sampled before is recorded by a marker, ``results/samples/{run}/.made`` (:data:`MARKER`), that a
sampling job writes after a run's files: a file Snakemake deletes before rerunning a job, or that the damage check
sets aside, leaves the marker, so every process that reads the workflow for this run (the one that plans the jobs,
a cluster job) cuts the runs the same way; deleting a run's ``results/samples/{run}/`` folder makes it fresh again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

MARKER = ".made"
GROUPS = ("table2", "fig2", "fig3")  # a run named fig2_* / fig3_* is one Figure 2 / 3 adds; any other: Table 2's


def table_of(run: str) -> str:
    """The table or figure whose job samples run ``run`` under ``sampling.job: table``."""
    return next((g for g in GROUPS[1:] if run.startswith(f"{g}_")), GROUPS[0])


def marker_path(run_dir: str, run: str) -> str:
    return os.path.join(run_dir, "results", "samples", run, MARKER)


@dataclass(frozen=True)
class SamplingJobs:
    """The runs of each job shape (module doc).  ``tables``: table -> the runs its job samples (only tables with at
    least two fresh runs); ``per_run``: runs with one job each for all their step counts (``sample_run``);
    ``per_step``: runs with one job per step count (``sample``); ``table_runs``: table -> all of its runs (under
    ``table``: the parameters and inputs every job of its runs takes; else empty)."""

    tables: dict = field(default_factory=dict)
    per_run: list = field(default_factory=list)
    per_step: list = field(default_factory=list)
    table_runs: dict = field(default_factory=dict)

    def table_of(self, run: str) -> str | None:
        """The table whose parameters the jobs of ``run`` take (``table`` mode), else None."""
        return next((t for t, runs in self.table_runs.items() if run in runs), None)

    def job_runs(self, run: str) -> list:
        """The runs whose parameters and inputs every job of ``run`` takes (``table`` mode): its table's runs, or
        ``run`` alone when it is no table's."""
        table = self.table_of(run)
        return list(self.table_runs[table]) if table else [run]


def sampling_jobs(
    mode: str, runs: dict, standard_steps: list, run_dir: str, exists=os.path.exists, table2_runs=None
) -> SamplingJobs:
    """The job shape of every run.  ``runs``: run -> its step counts (``unie.config.expand.run_steps``);
    ``standard_steps``: ``sampling.steps``; ``run_dir``: the run directory the markers are in; ``exists``: how a
    marker is looked for (tests); ``table2_runs``: the runs Table 2 reads (its rows' sources), when given: a run
    that is neither one of them nor one a figure adds is no table's, and has jobs of its own (a profile that
    excludes Table 2 rows does not train and sample their models for the table's job; None: every such run is
    Table 2's)."""
    on_standard = [r for r, steps in runs.items() if list(steps) == list(standard_steps)]
    if mode == "step":
        return SamplingJobs(per_step=list(runs))
    if mode == "run":
        return SamplingJobs(per_run=on_standard, per_step=[r for r in runs if r not in on_standard])
    if mode != "table":
        raise ValueError(f"sampling.job: {mode!r} is not one of step, run, table")
    table_runs, tables = {}, {}
    for r in runs:
        table = table_of(r)
        if table == GROUPS[0] and table2_runs is not None and r not in table2_runs:
            continue  # no table's run: its own jobs, made only when something reads them
        table_runs.setdefault(table, []).append(r)
    for table, members in table_runs.items():
        fresh = [r for r in members if not exists(marker_path(run_dir, r))]
        if len(fresh) >= 2:  # one fresh run alone: its own job is the same process count
            tables[table] = fresh
    together = {r for fresh in tables.values() for r in fresh}
    return SamplingJobs(
        tables=tables,
        per_run=[r for r in on_standard if r not in together],
        per_step=[r for r in runs if r not in on_standard and r not in together],
        table_runs=table_runs,
    )


__all__ = ["GROUPS", "MARKER", "SamplingJobs", "marker_path", "sampling_jobs", "table_of"]
