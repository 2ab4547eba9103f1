"""Rule ppl: a model's perplexity (bound) on the evaluation split of every domain (Table 1)."""

from unie.pipeline.rule import job, job_precision, write_json

with job(snakemake) as log:
    from unie.pipeline.ppl import model_ppl

    p = snakemake.params
    result = model_ppl(
        source=snakemake.wildcards.ppl_model,
        model_dir=snakemake.input.model[0].rsplit("/", 1)[0],
        tokenizer_dir=snakemake.input.tokenizer,
        data_paths=dict(zip(p.domains, snakemake.input.data)),
        n_mc=p.ppl["n_mc"],
        batch_size=p.ppl["batch_size"],
        max_sequences=p.ppl.get("max_sequences"),
        seed=p.seed,
        device=p.device,
        log=log,
        precision=job_precision(snakemake),
    )
    write_json(result, snakemake.output[0])
