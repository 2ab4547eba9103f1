"""Rule fig4: Figure 4 (accuracy vs throughput) from the fig4 sweep's lm-eval results."""

import matplotlib

matplotlib.use("Agg")  # files only: the backend is chosen here, not in the library (notebooks plot inline)

import os

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import fig4

    from unie.core.integrity import read_json

    o = snakemake.output
    log(fig4(os.path.dirname(snakemake.input[0]), o.pdf, o.png, o.csv))
    bad = [p["point"] for p in read_json(snakemake.input[0])["points"] if not p.get("trusted", True)]
    if bad:
        log(f"WARNING: throughput of {len(bad)} points flagged (hollow markers; machine busy?): {', '.join(bad)}")
