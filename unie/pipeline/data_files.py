"""Rules ``download``, ``tokenizer`` and ``tokenize``: the language-model half's data files.

* :func:`write_raw_corpus`: the raw corpus of one (domain, split) as Parquet ``text`` (toy world: generated, a pure
  function of seed, domain, split and size; paper profile: a Hugging Face dataset or a local file with the paper's
  detokeniser, written a batch of documents at a time, so OpenWebText never sits in memory).
* :func:`write_tokenizer`: the word-level toy vocabulary, or a Hugging Face tokenizer saved locally.
* :func:`tokenize_split`: fixed-length wrapped chunks of a raw file (:func:`unie.data.corpus.tokenize_corpus`),
  resumable after its last finished part.
"""

from __future__ import annotations

from pathlib import Path


def write_raw_corpus(data: dict, domain: str, split: str, out_path, seed: int, log=print) -> int:
    """Rule download: the documents of ``domain``/``split`` under ``data`` (config ``data``: ``source`` ``toy`` or
    ``hf``) at ``out_path``; returns their number."""
    if data["source"] == "toy":
        from ..data.corpus import write_text_parquet
        from ..data.toy_world import generate_corpus

        texts = generate_corpus(domain, split, data["splits"][split], data["seq_len"], seed=seed)
        write_text_parquet(texts, out_path)
        n = len(texts)
    else:
        from ..data.corpus import write_text_batches
        from ..data.hub import iter_documents

        n = write_text_batches(iter_documents(data["hf"][domain][split]), out_path)
    log(f"{domain}/{split}: {n} documents -> {out_path}")
    return n


def write_tokenizer(spec: dict, out_dir, log=print):
    """Rule tokenizer: the tokenizer of config ``tokenizer`` (``kind: word``: the toy world's vocabulary; else the
    Hugging Face tokenizer ``path``, fetched or loaded) saved at ``out_dir``; returns it."""
    if spec["kind"] == "word":
        from ..data.tokenizer import word_tokenizer
        from ..data.toy_world import word_list

        tok = word_tokenizer(word_list())
    else:
        from ..data.hub import fetch_tokenizer

        tok = fetch_tokenizer(spec["path"], out_dir)
    tok.save(out_dir)
    log(f"tokenizer {tok.info()}")
    return tok


def tokenize_split(
    raw_path,
    tokenizer_dir,
    out_path,
    seq_len: int,
    *,
    domain: str,
    split: str,
    insert_eos: bool,
    chunk_specials: bool,
    source: dict,
    log=print,
) -> int:
    """Rule tokenize: fixed-length wrapped chunks (MDLM's ``wrap``) of ``raw_path``, streamed into the Parquet token
    file ``out_path`` (``<run>/resources/tokenized/{domain}/{split}.parquet``: a row of ``seq_len`` int32 per
    chunk) whose metadata says what made it (the tokenizer, L, the wrapping, ``source`` and its hash) and the
    tokens' count and content hash (:mod:`unie.data.tokens`).  The work is kept in parts under the run's
    ``resources/cache/tokenize/{domain}/{split}/``, so a job stopped by its time limit resumes after its last part
    when Slurm's retry starts it again (:func:`unie.data.corpus.tokenize_corpus`).  Returns the number of chunks."""
    from ..data.corpus import tokenize_corpus
    from ..data.tokenizer import load_tokenizer

    out = Path(out_path)
    parts = out.parents[2] / "cache" / "tokenize" / domain / split
    n = tokenize_corpus(
        raw_path,
        load_tokenizer(tokenizer_dir),
        out,
        seq_len,
        insert_eos=insert_eos,
        chunk_specials=chunk_specials,
        source=source,
        resume_dir=parts,
        log=log,
    )
    log(f"{n} chunks of {seq_len} tokens -> {out}")
    return n
