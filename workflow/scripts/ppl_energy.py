"""Rule ppl_energy: Table 1 perplexity of an energy-corrected model (EDLM / Uni-EDLM rows)."""

from pathlib import Path

from unie.pipeline.rule import job, job_precision, write_json

with job(snakemake) as log:
    from unie.pipeline.ppl import energy_ppl

    p = snakemake.params
    dirs = {
        role: str(Path(snakemake.input[role][0]).parent)
        for role in ("dlm", "proxy", "ebm")
        if role in snakemake.input.keys()
    }
    result = energy_ppl(
        snakemake.wildcards.estimator,
        p.spec,
        dirs,
        snakemake.input.tokenizer,
        dict(zip(p.domains, snakemake.input.data)),
        n_mc=p.ppl["n_mc"],
        batch_size=p.ppl["batch_size"],
        max_sequences=p.ppl.get("max_sequences"),
        seed=p.seed,
        device=p.device,
        log=log,
        precision=job_precision(snakemake),
    )
    write_json(result, snakemake.output[0])
