"""Rule tokenize: fixed-length wrapped chunks (MDLM's ``wrap``), streamed into a Parquet token file (a row of L int32
per chunk) whose metadata says what made it (the tokenizer, L, the wrapping, the source and its hash) and the tokens'
count and content hash (unie.data.tokens).  The work is kept in parts under the run's resources/cache/tokenize/, so
a job stopped by its time limit resumes after its last part when Slurm's retry starts it again (unie.data.corpus)."""

from unie.data.corpus import tokenize_corpus
from unie.data.tokenizer import load_tokenizer
from unie.pipeline.rule import job

with job(snakemake) as log:
    from pathlib import Path

    out = Path(snakemake.output.tokens)  # <run>/resources/tokenized/{domain}/{split}.parquet
    parts = out.parents[2] / "cache" / "tokenize" / snakemake.wildcards.domain / snakemake.wildcards.split
    tok = load_tokenizer(snakemake.input.tokenizer)
    n = tokenize_corpus(
        snakemake.input.raw,
        tok,
        out,
        snakemake.params.seq_len,
        insert_eos=snakemake.params.insert_eos,
        chunk_specials=snakemake.params.chunk_specials,
        source=snakemake.params.source,
        resume_dir=parts,
        log=log,
    )
    log(f"{n} chunks of {snakemake.params.seq_len} tokens -> {out}")
