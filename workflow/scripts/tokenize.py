"""Rule tokenize: fixed-length wrapped chunks (MDLM's ``wrap``), streamed into an int32 ``.npy`` (N, L), and its
metadata (``.meta.json``: the tokenizer, L, the wrapping, the raw file's hash, the tokens' size and SHA-256)."""

from unie.data.corpus import tokenize_corpus
from unie.data.tokenizer import load_tokenizer
from unie.pipeline.rule import job

with job(snakemake) as log:
    tok = load_tokenizer(snakemake.input.tokenizer)
    n = tokenize_corpus(snakemake.input.raw, tok, snakemake.output.tokens, snakemake.params.seq_len,
                        insert_eos=snakemake.params.insert_eos, chunk_specials=snakemake.params.chunk_specials)
    log(f"{n} chunks of {snakemake.params.seq_len} tokens -> {snakemake.output.tokens}")
