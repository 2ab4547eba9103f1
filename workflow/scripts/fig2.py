"""Rule fig2: Figure 2 (energy ablation per AR context) from results/genppl/."""

import matplotlib

matplotlib.use("Agg")  # files only: the backend is chosen here, not in the library (notebooks plot inline)

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import fig2

    o = snakemake.output
    log(fig2(dict(snakemake.params.fig), list(snakemake.input.genppl), o.pdf, o.png, o.csv).to_string())
