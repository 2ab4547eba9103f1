"""Rule table2_genppl: Table 2 (Gen PPL per step count and evaluator, entropy) from results/genppl/."""

from unie.pipeline.checks import job

with job(snakemake) as log:
    from unie.report.tables import table2

    p = snakemake.params
    h = None
    if any(ev["kind"] == "exact" for ev in p.evaluators.values()):  # once per table, not per sample file
        from unie.data.toy_world import HMM

        h, h_se = HMM(p.train_domain).entropy_rate(p.seq_len, n=8192, seed=0)
        log(f"entropy rate of pi ({p.train_domain}, L={p.seq_len}): {h:.4f} ± {h_se:.4f} nats/token (8192 samples)")
    table2(dict(p.rows), dict(p.runs), dict(p.evaluators), list(snakemake.input.genppl), snakemake.output.tex,
           snakemake.output.csv, entropy_rate=h)
    log(open(snakemake.output.tex).read())
