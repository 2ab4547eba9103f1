"""Rule fig3: Figure 3 (K and w sweeps, Gen PPL / entropy vs wall-clock) from results/genppl/ and
results/timing/, and the summary of the paper's three claims."""

import matplotlib

matplotlib.use("Agg")  # files only: the backend is chosen here, not in the library (notebooks plot inline)

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.tables_figures import fig3

    o = snakemake.output
    df, summary = fig3(
        dict(snakemake.params.fig),
        list(snakemake.input.genppl),
        list(snakemake.input.timing),
        o.pdf,
        o.png,
        o.csv,
        o.summary,
    )
    log(df.to_string())
    log(str(summary))
    if "timing_trusted" in df and not df.timing_trusted.dropna().astype(bool).all():
        bad = df[df.timing_trusted.eq(False)]
        log(
            f"WARNING: {len(bad)} wall-clock points flagged (hollow markers; machine busy?): "
            + ", ".join(f"{r.run} steps {r.steps}" for r in bad.itertuples())
        )
