# unie: regenerate the tables and figures of "Unified Energy for Invariant and Independent Decoding
# in Diffusion Language Models".  This file is the table of contents; each stage is one .smk file.
#
#   snakemake --cores 2                                      # default profile (toy world, CPU): runs/toy/
#   snakemake --cores 2 table2                               # one table: runs/toy/results/tables/table2_genppl.*
#   snakemake --cores 2 --config seed=1                      # a retraining with another seed: runs/toy+seed-1/
#   snakemake --profile slurm all                            # paper profile on a Slurm cluster: runs/paper/


import os
import sys

from snakemake.utils import min_version

min_version("9.0")


from unie.config.validate import error_text, skip_iri_grammars

# jsonschema, whoever imports it first (Snakemake's notebook support does for every script job), without the IRI
# grammars that its optional rfc3987_syntax builds on import (3 s of CPU that no schema here uses)
skip_iri_grammars()

from unie.core.options import ConfigError
from unie.config.cache import configured

# WHAT is run (config/experiments.yaml, the grid) under HOW BIG (a profile: config/config.yaml unless the command
# line names config files, which then replace it so no toy-world key leaks into another profile), then
# `--config key=value` overrides (nested values read as YAML: snakemake -n --config seed=1).  One function does the
# merge, the schema (workflow/schemas/config.schema.yaml), the figures' generated runs and the cross-checks
# (unie.config.validate.workflow_config, also behind `unie check-config`); any error is one line naming the key,
# its file and a did-you-mean (`snakemake --verbose`: the schema's full report too).
# Every file this run makes is under its own directory, runs/<profile>[+<setting>-<value>...] (the settings in which
# it differs from the profile's own file, e.g. runs/toy+seed-1), laid out as results/, resources/, logs/,
# benchmarks/; only run-independent downloads stay in the shared resources/ (unie.config.rundir, docs/runs.md).
# What the rules read from the registries for this configuration (a run's step counts, the figures' runs, Table 1's
# sources, a model's partners) is computed once with it: FACTS (unie.config.expand.RuleFacts).  The three are
# remembered between runs, keyed by the bytes of every config file, the schema, --config and the package's code
# (unie.config.cache: .snakemake/unie/config/): a rerun of a checked configuration resolves and checks nothing and
# reads no registry (no torch import).
_files = workflow.overwrite_configfiles or [os.path.join(workflow.basedir, "config", "config.yaml")]
try:
    _resolved, RUN_DIR, FACTS = configured(
        _files,
        dict(workflow.config_settings.config),
        grid=os.path.join(workflow.basedir, "config", "experiments.yaml"),
        schema=os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml"),
        config_dir=os.path.join(workflow.basedir, "config"),
    )
except ConfigError as e:
    print(error_text(e, verbose=workflow.output_settings.verbose), file=sys.stderr)
    sys.exit(1)
config.clear()
config.update(_resolved)
# after the check: a configuration error is reported before these are imported
from unie.pipeline.run import StopReport, remake_before_planning
from unie.config.rundir import earlier_layout_notice

if workflow.is_main_process:
    print(f"unie: run directory {RUN_DIR}/", file=sys.stderr)
    _earlier = earlier_layout_notice(RUN_DIR)
    if _earlier:
        print(_earlier, file=sys.stderr)

# Before the jobs are planned, a damaged file (a model's weights or config.json, tokens, a result, a table or figure
# whose bytes differ from the hash recorded when they were written, or that lost its hash) is set aside as
# NAME.damaged and remade in the same run, whatever the target, with what is made from it; so is a file set aside
# earlier and not remade, and a deleted file something was made from; an input replaced by one with an old
# modification time gets the current one (unie.pipeline.damage, unie.pipeline.run).  A dry run plans the same jobs
# and renames nothing.  Only in the run that plans the jobs, never inside a cluster job; beside another run it says
# it skipped them.  After a SIGTERM the run says what happened (jobs finished, none failed, rerun to continue).
STOP = StopReport()
STARTED = __import__("time").time()  # this invocation's start: its timeline keeps the jobs that began after it
if workflow.is_main_process:
    remake_before_planning(workflow, RUN_DIR)


# A run on this machine starts its jobs from a warm server that imported torch once (unie.pipeline.warm: a job's
# script runs in a fork of it, not in a new Python that imports torch for 1.4-3 s); it ends with the run.
WARM = []


onstart:
    STOP.started()
    if workflow.local_exec and not workflow.remote_exec:
        from unie.pipeline.warm import start

        WARM.append(start(RUN_DIR, [job.rule.name for job in workflow.dag.needrun_jobs()]))


onerror:
    from unie.pipeline.warm import stop

    stop(WARM.pop() if WARM else None)
    STOP.ended(workflow)


# `snakemake --report report.html`: its landing page is every table and figure of the run, captions visible
# (results/report/paper.html, rule paper_page); each file is also in the menu with its caption (workflow/report/).
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/released.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/sample.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/hf.smk"
include: "workflow/rules/dllm.smk"
include: "workflow/rules/dllm_map.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/docs.smk"
include: "workflow/rules/prefetch.smk"
include: "workflow/rules/replicates.smk"


# Critical path first: every job's priority is its remaining chain, its expected seconds plus the longest chain of the
# jobs that read its outputs, over the DAG Snakemake builds; the seconds measured in this run directory's earlier
# jobs (benchmarks/jobs.jsonl), else in the profile's reference run (config/job_seconds/<profile>.tsv); a rule's own
# priority when nothing was measured (unie.config.priorities, unie.pipeline.run.chain_priorities).
if workflow.is_main_process and not workflow.remote_exec:
    from unie.pipeline.run import chain_priorities
    from unie.pipeline.job_records import expected_seconds

    chain_priorities(workflow, expected_seconds(RUN_DIR, config.get("profile"))[0])


# The named targets, in the order of unie/config/targets.py (the README's "Targets" table; tests/test_targets.py
# holds this list to it): `all` here, every other one the rule that writes its files, so that
# `snakemake --cores 2 -f table2` reruns the table.
#   all, table1, table2, table3, fig2, fig3, fig4, cases, partition_check, table_app_dllm_full, table_app_selection,
#   table_app_k, table_app_w, table_app_map, fig_app_map, paper_vs_ours, bench, bench_paper_scale, prefetch,
#   replicates, paper_page, docs


rule all:
    default_target: True
    input:
        final_outputs(),


# A run that made something ends by naming what to read (unie.config.targets.run_summary); not after a dry run
# or when nothing was to be done.
onsuccess:
    from unie.config.targets import run_summary
    from unie.pipeline.tables_figures import write_timeline
    from unie.pipeline.warm import stop

    stop(WARM.pop() if WARM else None)
    # where this run's time went: its jobs' own records, the idle core-time and the critical path (benchmarks/)
    try:
        cores = workflow.cores
    except Exception:  # a cluster executor: no --cores, its jobs at once
        cores = workflow.nodes
    write_timeline(RUN_DIR, STARTED, cores)
    print(run_summary(".", RUN_DIR), file=sys.stderr)
