"""Streaming tokenisation and memory-mapped tokens (``unie/data/corpus.py``): the streamed chunks are exactly
MDLM's wrapping of the whole corpus, failures leave no output, training reads int64 batches of the map, and
tokenising a 200 MB corpus in a subprocess stays in bounded memory."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from unie.data.corpus import (TokenRows, load_tokens, tokenize_corpus, wrap_batches, wrap_chunks, write_text_parquet,
                              write_tokens)
from unie.data.toy_world import word_list

FLAGS = list(itertools.product([True, False], [True, False]))  # (insert_eos, chunk_specials)


def _reference(docs_ids, seq_len, eos, bos, insert_eos, chunk_specials) -> list[list[int]]:
    """MDLM's wrap in plain Python, the definition the array code must match."""
    stream = [i for ids in docs_ids for i in list(ids) + ([eos] if insert_eos else [])]
    body = seq_len - 2 if chunk_specials else seq_len
    pieces = [stream[k:k + body] for k in range(0, len(stream) // body * body, body)]
    return [[bos] + p + [eos] for p in pieces] if chunk_specials else pieces


def _texts(n: int = 41, seed: int = 0) -> list[str]:
    """Documents of 0 to 29 words (empty ones too, and longer than a chunk)."""
    words = np.array(word_list(), dtype=object)
    rng = np.random.default_rng(seed)
    return [" ".join(words[rng.integers(0, len(words), rng.integers(0, 30))]) for _ in range(n)]


@pytest.mark.parametrize("insert_eos, chunk_specials", FLAGS)
def test_wrap_batches_is_wrap_chunks_of_the_whole_corpus(insert_eos, chunk_specials):
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 50, rng.integers(0, 23)).tolist() for _ in range(37)]
    L, eos, bos = 10, 98, 99
    whole = wrap_chunks(docs, L, eos, bos, insert_eos, chunk_specials)
    assert whole.tolist() == _reference(docs, L, eos, bos, insert_eos, chunk_specials) and len(whole) > 5
    for bs in (1, 2, 5, 37, 100):
        batches = [docs[i:i + bs] for i in range(0, len(docs), bs)]
        streamed = np.concatenate(list(wrap_batches(batches, L, eos, bos, insert_eos, chunk_specials)))
        assert streamed.dtype == whole.dtype and np.array_equal(streamed, whole), bs


@pytest.mark.parametrize("insert_eos, chunk_specials", FLAGS)
def test_tokenize_corpus_streams_the_same_chunks(tok, tmp_path, insert_eos, chunk_specials):
    """Every batch size (1, one not dividing the corpus, the whole corpus) writes wrap_chunks' chunks as an
    int32 (N, L) .npy, memory-mapped by load_tokens."""
    texts = _texts()
    write_text_parquet(texts, tmp_path / "raw.parquet")
    L = 12
    want = wrap_chunks(tok.encode_batch(texts), L, tok.eos_id, tok.bos_id, insert_eos, chunk_specials)
    for bs in (1, 4, 41, 1024):
        out = tmp_path / f"tok{bs}.npy"
        n = tokenize_corpus(tmp_path / "raw.parquet", tok, out, L, insert_eos, chunk_specials, batch_size=bs)
        assert n == len(want) > 10
        assert np.load(out).dtype == np.int32 and np.array_equal(np.load(out), want), bs
        x = load_tokens(out)
        assert x.dtype == torch.int32 and x.shape == (n, L) and torch.equal(x.long(), torch.from_numpy(want))
    n = tokenize_corpus(tmp_path / "raw.parquet", tok, tmp_path / "cut.npy", L, insert_eos, chunk_specials,
                        max_chunks=7, batch_size=3)
    assert n == 7 and np.array_equal(np.load(tmp_path / "cut.npy"), want[:7])
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp" in p.name) == []


def test_tokenize_corpus_errors_leave_no_output(tok, tmp_path):
    words = word_list()
    write_text_parquet([" ".join(words[:3])] * 3, tmp_path / "short.parquet")
    with pytest.raises(ValueError, match="not enough text for a single chunk"):
        tokenize_corpus(tmp_path / "short.parquet", tok, tmp_path / "short.npy", 64, batch_size=1)
    write_text_parquet([" ".join(words[:10])] * 50 + [" ".join(words[-1:] * 8)], tmp_path / "late.parquet")
    # the same ids, a vocabulary that ends before the last word: a mismatch found after chunks were written
    small = SimpleNamespace(eos_id=tok.eos_id, bos_id=tok.bos_id, vocab_size=len(words) - 1,
                            encode_batch=tok.encode_batch)
    with pytest.raises(ValueError, match=f"token id {len(words) - 1} >= vocab_size {len(words) - 1}"):
        tokenize_corpus(tmp_path / "late.parquet", small, tmp_path / "late.npy", 8, False, False, batch_size=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.parquet", "short.parquet"]


def test_load_tokens_maps_the_file_and_token_rows_read_int64(tok, tmp_path):
    texts = _texts(200, seed=3)
    write_text_parquet(texts, tmp_path / "raw.parquet")
    n = tokenize_corpus(tmp_path / "raw.parquet", tok, tmp_path / "t.npy", 8, batch_size=16)
    on_disk = np.load(tmp_path / "t.npy")
    x = load_tokens(tmp_path / "t.npy")
    assert torch.equal(load_tokens(tmp_path / "t.npy", 5), x[:5])
    x[0, 0] = 7  # copy-on-write: the tensor is writable, the file never changes
    assert np.array_equal(np.load(tmp_path / "t.npy"), on_disk)
    rows = TokenRows(load_tokens(tmp_path / "t.npy"))
    idx = torch.tensor([3, 0, n - 1, 3])
    assert rows.shape == (n, 8) and len(rows) == n and rows[idx].dtype == torch.int64
    assert torch.equal(rows[idx], torch.from_numpy(on_disk[idx.numpy()]).long())
    assert rows.max(block=7) == rows.max() == int(on_disk.max()) == tok.bos_id
    # samples (write_tokens' Parquet) come back the same way: int32 (N, L)
    s = torch.tensor([[1, 2, 3], [4, 5, 6]])
    write_tokens(s, tmp_path / "samples.parquet")
    back = load_tokens(tmp_path / "samples.parquet")
    assert back.dtype == torch.int32 and torch.equal(back.long(), s)


# --------------------------------------------------------------------------------------------------
# bounded memory on a 200 MB corpus

RAW_BYTES = 200_000_000
SEQ_LEN = 128

# Peak RSS is the process's VmHWM: unlike ru_maxrss, which keeps the forking pytest process's peak across exec,
# it counts this process's own memory only.  The baseline is taken after imports and a warm-up on a tiny corpus
# (native code paths and allocators start lazily: ~20 MB whatever the corpus).
TOKENIZE = textwrap.dedent("""
    import json, sys, time
    from unie.data.corpus import tokenize_corpus
    from unie.data.tokenizer import load_tokenizer

    def hwm():
        return int(next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")).split()[1])

    tokenizer, warm, raw, out, seq_len, first_tenth = sys.argv[1:]
    tok = load_tokenizer(tokenizer)
    imports = hwm()
    tokenize_corpus(warm, tok, out, int(seq_len))
    base = hwm()
    tokenize_corpus(raw, tok, out, int(seq_len), max_chunks=int(first_tenth))
    tenth = hwm()
    t0 = time.perf_counter()
    n = tokenize_corpus(raw, tok, out, int(seq_len))
    print(json.dumps({"chunks": n, "seconds": time.perf_counter() - t0, "imports_kb": imports, "baseline_kb": base,
                      "tenth_kb": tenth, "peak_kb": hwm()}))
""")

LOAD = textwrap.dedent("""
    import json, sys
    import numpy as np, torch
    from unie.data.corpus import TokenRows, load_tokens

    def rss():
        fields = dict(line.split(":") for line in open("/proc/self/status"))
        return {k: int(fields[k].split()[0]) for k in ("VmRSS", "RssAnon", "RssFile")}

    before = rss()
    rows = TokenRows(load_tokens(sys.argv[1]))
    idx = torch.from_numpy(np.random.default_rng(0).integers(0, len(rows), 64))
    batch = rows[idx]  # what training does at every step
    after_batch = rss()
    top = rows.max()  # the vocabulary check reads the whole map, a block at a time
    np.savez(sys.argv[2], idx=idx.numpy(), batch=batch.numpy())
    print(json.dumps({"before": before, "after_batch": after_batch, "after_max": rss(), "max": top,
                      "dtype": str(batch.dtype), "rows": len(rows)}))
""")


def _write_corpus(path, eos_id: int) -> tuple[int, np.ndarray]:
    """>= RAW_BYTES of toy-world text, 4096 documents of 20-399 words per row group, generated a row group at a
    time; returns its UTF-8 size and the token stream it must become (word ids, an eos after each document)."""
    words = word_list()
    vocab = np.array(words, dtype=object)
    nbytes = np.array([len(w.encode()) for w in words])
    rng = np.random.default_rng(0)
    size, streams = 0, []
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as writer:
        while size < RAW_BYTES:
            counts = rng.integers(20, 400, 4096)
            ids = rng.integers(0, len(words), counts.sum()).astype(np.uint8)
            ends = np.cumsum(counts)
            writer.write_table(pa.table({"text": [" ".join(vocab[ids[e - c:e]]) for c, e in zip(counts, ends)]}))
            size += int(nbytes[ids].sum() + (counts - 1).sum())
            streams.append(np.insert(ids, ends, eos_id))  # word i has id i (word_tokenizer)
    return size, np.concatenate(streams)


def _run(script: str, *args) -> dict:
    # the tokenizer's Rust thread pool sizes itself to the machine; two threads keep the measurement comparable
    env = {**os.environ, "RAYON_NUM_THREADS": "2"}
    r = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_tokenize_200mb_in_bounded_memory(tok, tmp_path):
    """Tokenise >= 200 MB of text in a subprocess with the workflow's tokenizer: its peak RSS grows by far less
    than the corpus; the chunk count is (words + documents) // (L - 2); training's batches of the memory map
    have the right values and cost no memory."""
    t0 = time.perf_counter()
    tok.save(tmp_path / "tokenizer")  # as rule tokenizer writes resources/tokenizer
    raw_bytes, stream = _write_corpus(tmp_path / "raw.parquet", tok.eos_id)
    generated = time.perf_counter() - t0
    out = tmp_path / "train.npy"
    write_text_parquet([" ".join(word_list()[:50])] * 64, tmp_path / "warm.parquet")
    body = SEQ_LEN - 2  # insert_eos and chunk_specials: the paper's OpenWebText setting
    r = _run(TOKENIZE, tmp_path / "tokenizer", tmp_path / "warm.parquet", tmp_path / "raw.parquet", out, SEQ_LEN,
             len(stream) // body // 10)
    grew = (r["peak_kb"] - r["baseline_kb"]) * 1024  # bytes over the baseline
    late = (r["peak_kb"] - r["tenth_kb"]) * 1024  # bytes added by the last 90% of the corpus
    report = (f"corpus {raw_bytes / 1e6:.0f} MB of text ({len(stream) / 1e6:.1f}M tokens, generated in "
              f"{generated:.0f} s) -> {r['chunks']} chunks ({out.stat().st_size / 1e6:.0f} MB) in {r['seconds']:.0f} s; "
              f"RSS {r['imports_kb'] / 1024:.0f} MB after imports, baseline {r['baseline_kb'] / 1024:.0f} MB after "
              f"a warm-up, peak {r['tenth_kb'] / 1024:.0f} MB after a tenth of the corpus and "
              f"{r['peak_kb'] / 1024:.0f} MB after all of it: +{grew / 1e6:.0f} MB = {100 * grew / raw_bytes:.1f}% "
              f"of the corpus, +{late / 1e6:.0f} MB over the last 90%")
    print(report)
    assert raw_bytes >= RAW_BYTES
    assert r["chunks"] == len(stream) // body, report
    assert grew < 0.25 * raw_bytes and late < 0.05 * raw_bytes, report

    m = _run(LOAD, out, tmp_path / "batch.npz")
    idx, batch = np.load(tmp_path / "batch.npz")["idx"], np.load(tmp_path / "batch.npz")["batch"]
    want = np.stack([np.concatenate([[tok.bos_id], stream[i * body:(i + 1) * body], [tok.eos_id]]) for i in idx])
    assert m["dtype"] == "torch.int64" and m["rows"] == r["chunks"] and np.array_equal(batch, want)
    assert m["max"] == tok.bos_id  # <bos> is the largest id in these chunks
    # anonymous memory is what a copy would cost; file-backed pages (the map, torch's code) are page cache
    mb = lambda key, at: (m[at][key] - m["before"][key]) / 1024
    loading = (f"load_tokens + a batch of 64: RSS +{mb('VmRSS', 'after_batch'):.0f} MB "
               f"(+{mb('RssAnon', 'after_batch'):.1f} MB anonymous); after the chunk-wise max: "
               f"+{mb('RssAnon', 'after_max'):.1f} MB anonymous, +{mb('RssFile', 'after_max'):.0f} MB file-backed "
               f"(the {out.stat().st_size / 1e6:.0f} MB map, read once)")
    print(loading)
    assert mb("RssAnon", "after_batch") < 16 and mb("RssAnon", "after_max") < 16, loading
    assert mb("VmRSS", "after_batch") * 1e6 < 0.5 * out.stat().st_size, loading
