# unie: regenerate the tables and figures of "Unified Energy for Invariant and Independent Decoding
# in Diffusion Language Models".  This file is the table of contents; each stage is one .smk file.
#
#   snakemake --cores 2                                      # default profile (toy world, CPU)
#   snakemake --cores 2 results/tables/table2_genppl.tex     # one table
#   snakemake --profile slurm all                            # paper profile on a Slurm cluster


import os
import sys

from snakemake.utils import min_version

min_version("9.0")


from unie.core.config import ConfigError
from unie.pipeline.run import StopReport, remake_before_planning
from unie.pipeline.validate import error_text, workflow_config


# WHAT is run (config/experiments.yaml, the grid) under HOW BIG (a profile: config/config.yaml unless the command
# line names config files, which then replace it so no toy-world key leaks into another profile), then
# `--config key=value` overrides (nested values read as YAML: snakemake -n --config seed=1).  One function does the
# merge, the schema (workflow/schemas/config.schema.yaml), the figures' generated runs and the cross-checks
# (unie.pipeline.validate.workflow_config, also behind `unie check-config`); any error is one line naming the key,
# its file and a did-you-mean (`snakemake --verbose`: the schema's full report too).
try:
    _resolved = workflow_config(
        workflow.overwrite_configfiles or [os.path.join(workflow.basedir, "config", "config.yaml")],
        dict(workflow.config_settings.config),
        grid=os.path.join(workflow.basedir, "config", "experiments.yaml"),
        schema=os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml"),
    )
except ConfigError as e:
    print(error_text(e, verbose=workflow.output_settings.verbose), file=sys.stderr)
    sys.exit(1)
config.clear()
config.update(_resolved)

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


# A run that made something ends by naming what to read (unie.pipeline.targets.run_summary); not after a dry run
# or when nothing was to be done.
onsuccess:
    from unie.pipeline.targets import run_summary

    print(run_summary("."), file=sys.stderr)
