"""Rule paper_vs_ours: the paper's numbers (config/paper_values.yaml) beside the regenerated tables."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.paper_vs_ours import paper_vs_ours

    p, i, o = snakemake.params, snakemake.input, snakemake.output
    paper_vs_ours(
        p.values,
        {k: i[k] for k in p.tables},
        profile=p.profile,
        evaluators=p.evaluators,
        steps=p.steps,
        md_path=o.md,
        tex_path=o.tex,
        csv_path=o.csv,
        log=log,
    )
