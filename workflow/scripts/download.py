"""Rule download: the raw corpus of one (domain, split) as Parquet ``text``.

Toy world: generate stationary windows (a pure function of seed, domain, split, size).
Paper profile: a Hugging Face dataset (or a local file) with the paper's detokeniser."""

from unie.data.corpus import write_text_parquet
from unie.pipeline.rule import job

with job(snakemake) as log:
    data = snakemake.params.data
    domain, split = snakemake.wildcards.domain, snakemake.wildcards.split
    if data["source"] == "toy":
        from unie.data.toy_world import generate_corpus

        n = data["splits"][split]
        texts = generate_corpus(domain, split, n, data["seq_len"], seed=snakemake.params.seed)
    else:
        from unie.data.hf import load_documents

        texts = load_documents(data["hf"][domain][split])
    write_text_parquet(texts, snakemake.output[0])
    log(f"{domain}/{split}: {len(texts)} documents -> {snakemake.output[0]}")
