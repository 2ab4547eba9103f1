# The replicates (not part of `all`): the whole run once per seed of `replicates.seeds` (three trainings of every
# model), each as its own `snakemake --config seed=S` in its own run directory, then one aggregate page beside them,
# runs/<base>+replicates/ (unie.config.replicate_plan, unie.pipeline.replicate_runs).  Locally the runs go one after
# another, each with every core; under a cluster executor (--profile slurm) side by side, each submitting its jobs.
#
#   snakemake --cores 2 replicates          # runs/toy, runs/toy+seed-1, runs/toy+seed-2 and runs/toy+replicates/

import sys

from unie.config.replicate_plan import aggregate_dir, given_profile, replicate_command
from unie.config.rundir import run_directory

REPLICATES = config.get("replicates") or {}
REPLICATE_SEEDS = list(REPLICATES.get("seeds", []))
REPLICATES_DIR = aggregate_dir(
    RUN_DIR,
    dict(workflow.config_settings.config),
    lambda: run_directory(
        _files,
        {k: v for k, v in workflow.config_settings.config.items() if k != "seed"},
        grid=os.path.join(workflow.basedir, "config", "experiments.yaml"),
        config_dir=os.path.join(workflow.basedir, "config"),
    ),
)


def replicate_commands(cores):
    """seed -> the command of its run (the outer run's config files, --config, profile; seed replaced)."""
    files = [str(f) for f in workflow.overwrite_configfiles]
    profile = (
        None
        if workflow.executor_plugin is None or workflow.executor_plugin.name in ("local", "dryrun")
        else given_profile(sys.argv)
    )
    return {
        s: replicate_command(
            sys.executable,
            workflow.main_snakefile,
            os.getcwd(),
            files,
            dict(workflow.config_settings.config),
            s,
            list(REPLICATES.get("targets", ["all"])),
            cores if profile is None else None,
            profile,
        )
        for s in REPLICATE_SEEDS
    }


rule replicate_runs:
    # every seed's whole run; it reruns at every `snakemake replicates` (its `check` param changes), so each run is
    # brought up to date (a run with nothing to do takes seconds) before the aggregate reads it
    output:
        [f"{REPLICATES_DIR}/runs/seed-{s}.json" for s in REPLICATE_SEEDS],
    log:
        f"{REPLICATES_DIR}/logs/runs.log",
    localrule: True
    threads: held_cores()
    params:
        commands=lambda wc, threads: replicate_commands(threads),
        side_by_side=lambda wc: workflow.executor_plugin is not None
        and workflow.executor_plugin.name not in ("local", "dryrun"),
        check=str(os.getpid()),
    script:
        "../scripts/replicate_runs.py"


rule replicates:
    input:
        rules.replicate_runs.output,
    output:
        f"{REPLICATES_DIR}/replicates.md",
        f"{REPLICATES_DIR}/claims.csv",
    log:
        f"{REPLICATES_DIR}/logs/aggregate.log",
    localrule: True
    script:
        "../scripts/replicates.py"
