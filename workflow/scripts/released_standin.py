"""Rule released_standin: a tiny random checkpoint in a released model's upstream format, sized to the project's
tokenizer (gpu-smoke profile and tests: the import path end to end with no download)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.data.tokenizer import load_tokenizer
    from unie.models.standins import write_standin

    info = load_tokenizer(snakemake.input.tokenizer).info()
    path = write_standin(
        snakemake.output[0],
        snakemake.params.kind,
        snakemake.params.format,
        info,
        seed=snakemake.params.seed,
        block_size=snakemake.params.block_size,
    )
    log(f"stand-in {snakemake.params.kind} ({snakemake.params.format}) for vocab {info['vocab_size']} -> {path}")
