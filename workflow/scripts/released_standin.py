"""Rule released_standin: a tiny random checkpoint in a released model's upstream format, sized to the project's
tokenizer (gpu-smoke profile and tests: the import path end to end with no download;
unie.pipeline.model_files.write_released_standin)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.model_files import write_released_standin

    p = snakemake.params
    write_released_standin(
        snakemake.output[0],
        p.kind,
        p.format,
        snakemake.input.tokenizer,
        seed=p.seed,
        block_size=p.block_size,
        log=log,
    )
