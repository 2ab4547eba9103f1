"""Rule fig4: Figure 4 (accuracy vs throughput) from the fig4 sweep's lm-eval results."""

import matplotlib

matplotlib.use("Agg")  # files only: the backend is chosen here, not in the library (notebooks plot inline)

import os

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import fig4

    o = snakemake.output
    fig4(os.path.dirname(snakemake.input[0]), o.pdf, o.png, o.csv, log=log)
