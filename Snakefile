# unie: regenerate the tables and figures of "Unified Energy for Invariant and Independent Decoding
# in Diffusion Language Models".  This file is the table of contents; each stage is one .smk file.
#
#   snakemake --cores 2                                      # default profile (toy world, CPU)
#   snakemake --cores 2 results/tables/table2_genppl.tex     # one table
#   snakemake --profile slurm all                            # paper profile on a Slurm cluster


import os

from snakemake.utils import min_version, validate

min_version("9.0")


from unie.pipeline.profile import resolve_config
from unie.pipeline.run import StopReport, remake_before_planning


# WHAT is run (config/experiments.yaml, the grid) under HOW BIG (a profile: config/config.yaml unless the command
# line names config files, which then replace it so no toy-world key leaks into another profile), then
# `--config key=value` overrides (nested values read as YAML: snakemake -n --config seed=1).  One function does the
# merge (unie.pipeline.profile.resolve_config, also behind `unie check-config --resolved`); the result is validated.
_resolved = resolve_config(
    workflow.overwrite_configfiles or [os.path.join(workflow.basedir, "config", "config.yaml")],
    dict(workflow.config_settings.config),
    grid=os.path.join(workflow.basedir, "config", "experiments.yaml"),
)
config.clear()
config.update(_resolved)
validate(config, os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml"))

# Before the jobs are planned, a damaged file (weights, tokens, a result whose bytes differ from the hash recorded
# when they were written) is set aside as NAME.damaged and remade in the same run, whatever the target, with what is
# made from it; so is a file set aside earlier and not remade; an input replaced by one with an old modification
# time gets the current one (unie.pipeline.damage, unie.pipeline.run).  A dry run plans the same jobs and renames
# nothing.  Only in the run that plans the jobs, never inside a cluster job or beside another run.  After a SIGTERM
# the run says what happened (jobs finished, none failed, rerun to continue).
STOP = StopReport()
if workflow.is_main_process:
    remake_before_planning(workflow)


onstart:
    STOP.started()


onerror:
    STOP.ended(workflow)


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
include: "workflow/rules/bench.smk"
include: "workflow/rules/docs.smk"
include: "workflow/rules/prefetch.smk"


# The named targets (unie/pipeline/targets.py, the README's "Targets" table): `all` here, every other one the rule
# that writes its files (table1, table2, table3, fig2, fig3, fig4, cases, partition_check, table_app_dllm_full,
# table_app_selection, table_app_k, table_app_w, paper_vs_ours, bench, prefetch), so that `snakemake --cores 2 -f table2` reruns the table.


rule all:
    default_target: True
    input:
        final_outputs(),
