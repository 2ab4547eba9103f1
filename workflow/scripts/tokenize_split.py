"""Rule tokenize: fixed-length wrapped chunks (MDLM's ``wrap``), streamed into a Parquet token file (a row of L int32
per chunk) whose metadata says what made it (the tokenizer, L, the wrapping, the source and its hash) and the tokens'
count and content hash (unie.data.tokens).  The work is kept in parts under the run's resources/cache/tokenize/, so
a job stopped by its time limit resumes after its last part when Slurm's retry starts it again
(unie.pipeline.data_files.tokenize_split)."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    from unie.pipeline.data_files import tokenize_split

    tokenize_split(
        snakemake.input.raw,
        snakemake.input.tokenizer,
        snakemake.output.tokens,
        snakemake.params.seq_len,
        domain=snakemake.wildcards.domain,
        split=snakemake.wildcards.split,
        insert_eos=snakemake.params.insert_eos,
        chunk_specials=snakemake.params.chunk_specials,
        source=snakemake.params.source,
        log=log,
    )
