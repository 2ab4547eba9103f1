"""Rule download: the raw corpus of one (domain, split) as Parquet ``text`` (unie.pipeline.data_files).

Toy world: generate stationary windows (a pure function of seed, domain, split, size).
Paper profile: a Hugging Face dataset (or a local file) with the paper's detokeniser, written a batch of
documents at a time (OpenWebText never sits in memory)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.data_files import write_raw_corpus

    write_raw_corpus(
        snakemake.params.data,
        snakemake.wildcards.domain,
        snakemake.wildcards.split,
        snakemake.output[0],
        snakemake.params.seed,
        log=log,
    )
