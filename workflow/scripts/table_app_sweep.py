"""Rules table_app_k, table_app_w: an appendix k or w table from its sweep's lm-eval results."""

import os

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import sweep_table

    log(
        sweep_table(
            os.path.dirname(snakemake.input[0]), snakemake.params.caption, snakemake.output.tex, snakemake.output.csv
        )
    )
