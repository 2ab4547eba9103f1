"""Rule ppl_exact: the exact perplexity of the true distribution pi on each domain's evaluation split."""

from unie.pipeline.rule import job, write_json

with job(snakemake) as log:
    from unie.pipeline.ppl import exact_ppl

    p = snakemake.params
    result = exact_ppl(
        dict(zip(p.domains, snakemake.input.data)),
        snakemake.input.tokenizer,
        max_sequences=p.ppl.get("max_sequences"),
        log=log,
    )
    write_json(result, snakemake.output[0])
