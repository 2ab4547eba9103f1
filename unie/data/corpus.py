"""Corpora and tokenised chunks.

Raw corpora are Parquet files with one ``text`` column (a document per row): the toy world writes
its generated windows there, the paper profile writes Hugging Face datasets there (``hf_data``).
Tokenisation follows MDLM's ``wrap`` (``notes/baselines.md`` §0): documents are encoded without
special tokens, an ``<eos>`` is appended to each (``insert_eos``), everything is concatenated and cut
into chunks; with ``chunk_specials`` each chunk is ``[bos] + (L - 2) tokens + [eos]``.  The trailing
remainder is dropped.  The toy world uses ``insert_eos: false, chunk_specials: false`` on documents
that are already stationary windows of exactly ``L`` words, which makes every chunk one window (so
``pi`` of a chunk stays exact).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch


def write_text_parquet(texts: list[str], path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.parquet")
    pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), tmp)
    os.replace(tmp, path)


def read_texts(path) -> list[str]:
    return pq.read_table(path, columns=["text"]).column("text").to_pylist()


def wrap_chunks(docs_ids, seq_len: int, eos_id: int, bos_id: int, insert_eos: bool = True,
                chunk_specials: bool = True) -> np.ndarray:
    """MDLM's wrapping: concatenate documents (+ eos) and cut into ``(N, seq_len)`` chunks; remainder dropped."""
    body = seq_len - 2 if chunk_specials else seq_len
    if body <= 0:
        raise ValueError(f"seq_len={seq_len} is too short for chunk specials")
    parts = []
    for ids in docs_ids:
        parts.append(np.asarray(ids, dtype=np.int64))
        if insert_eos:
            parts.append(np.array([eos_id], dtype=np.int64))
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    n = len(stream) // body
    chunks = stream[: n * body].reshape(n, body)
    if chunk_specials:
        chunks = np.concatenate([np.full((n, 1), bos_id), chunks, np.full((n, 1), eos_id)], axis=1)
    return chunks


def tokenize_corpus(raw_path, tokenizer, out_path, seq_len: int, insert_eos: bool = True,
                    chunk_specials: bool = True, max_chunks: int | None = None) -> int:
    """Encode ``raw_path`` (Parquet ``text``) into fixed-length chunks at ``out_path`` (Parquet ``input_ids``).

    Returns the number of chunks.  Raises if no full chunk can be formed."""
    texts = read_texts(raw_path)
    ids = tokenizer.encode_batch(texts)
    chunks = wrap_chunks(ids, seq_len, tokenizer.eos_id, tokenizer.bos_id, insert_eos, chunk_specials)
    if max_chunks is not None:
        chunks = chunks[:max_chunks]
    if len(chunks) == 0:
        raise ValueError(f"{raw_path}: not enough text for a single chunk of {seq_len} tokens")
    if chunks.max() >= tokenizer.vocab_size:
        raise ValueError(f"{raw_path}: token id {chunks.max()} >= vocab_size {tokenizer.vocab_size}")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(".tmp.parquet")
    arr = pa.FixedSizeListArray.from_arrays(pa.array(chunks.reshape(-1).astype(np.int32)), seq_len)
    pq.write_table(pa.table({"input_ids": arr}), tmp)
    os.replace(tmp, out_path)
    return len(chunks)


def load_tokens(path, limit: int | None = None) -> torch.Tensor:
    """Chunks written by :func:`tokenize_corpus` as an int64 tensor ``(N, L)``."""
    col = pq.read_table(path, columns=["input_ids"]).column("input_ids").combine_chunks()
    L = col.type.list_size
    flat = col.flatten().to_numpy(zero_copy_only=False)
    x = torch.from_numpy(flat.astype(np.int64)).view(-1, L)
    return x[:limit] if limit is not None else x


def write_tokens(x: torch.Tensor, path, extra: dict | None = None) -> None:
    """Save token sequences ``(N, L)`` (e.g. samples) as Parquet ``input_ids`` (+ optional scalar metadata)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    L = x.shape[1]
    arr = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1).to(torch.int32).numpy()), L)
    table = pa.table({"input_ids": arr})
    if extra:
        table = table.replace_schema_metadata({k: str(v) for k, v in extra.items()})
    tmp = path.with_suffix(".tmp.parquet")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
