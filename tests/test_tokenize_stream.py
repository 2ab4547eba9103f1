"""Streaming tokenisation into Parquet token files (``unie/data/corpus.py``, ``unie/data/tokens.py``): the streamed
chunks are exactly MDLM's wrapping of the whole corpus, failures leave no output, training reads int64 batches of
the zero-copy view, and tokenising a 200 MB corpus and training on it, each in a subprocess, stay in bounded
memory."""

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

from unie.data.corpus import tokenize_corpus, wrap_batches, wrap_chunks, write_text_parquet
from unie.data.tokens import TokenRows, content_sha256, load_tokens, read_token_meta, token_view, write_tokens
from unie.data.toy_world import word_list

FLAGS = list(itertools.product([True, False], [True, False]))  # (insert_eos, chunk_specials)


def _reference(docs_ids, seq_len, eos, bos, insert_eos, chunk_specials) -> list[list[int]]:
    """MDLM's wrap in plain Python, the definition the array code must match."""
    stream = [i for ids in docs_ids for i in list(ids) + ([eos] if insert_eos else [])]
    body = seq_len - 2 if chunk_specials else seq_len
    pieces = [stream[k : k + body] for k in range(0, len(stream) // body * body, body)]
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
        batches = [docs[i : i + bs] for i in range(0, len(docs), bs)]
        streamed = np.concatenate(list(wrap_batches(batches, L, eos, bos, insert_eos, chunk_specials)))
        assert streamed.dtype == whole.dtype and np.array_equal(streamed, whole), bs


@pytest.mark.parametrize("insert_eos, chunk_specials", FLAGS)
def test_tokenize_corpus_streams_the_same_chunks(tok, tmp_path, insert_eos, chunk_specials):
    """Every batch size (1, one not dividing the corpus, the whole corpus) writes wrap_chunks' chunks as Parquet rows
    of L int32, in row groups of a fixed row count (the same file whatever the batch size)."""
    texts = _texts()
    write_text_parquet(texts, tmp_path / "raw.parquet")
    L = 12
    want = wrap_chunks(tok.encode_batch(texts), L, tok.eos_id, tok.bos_id, insert_eos, chunk_specials)
    files = set()
    for bs in (1, 4, 41, 1024):
        out = tmp_path / f"tok{bs}.parquet"
        n = tokenize_corpus(
            tmp_path / "raw.parquet", tok, out, L, insert_eos, chunk_specials, batch_size=bs, row_group_rows=5
        )
        assert n == len(want) > 10
        col = pq.read_table(out).column("input_ids")
        assert col.type == pa.list_(pa.int32(), L)
        assert np.array_equal(col.combine_chunks().flatten().to_numpy().reshape(-1, L), want), bs
        md = pq.ParquetFile(out).metadata
        assert [md.row_group(g).num_rows for g in range(md.num_row_groups)] == [5] * (n // 5) + (
            [n % 5] if n % 5 else []
        )
        x = load_tokens(out)
        assert x.dtype == torch.int32 and x.shape == (n, L) and torch.equal(x.long(), torch.from_numpy(want))
        assert read_token_meta(out)["content_sha256"] == content_sha256(want)
        files.add(out.read_bytes())
    assert len(files) == 1  # byte for byte the same file
    n = tokenize_corpus(
        tmp_path / "raw.parquet",
        tok,
        tmp_path / "cut.parquet",
        L,
        insert_eos,
        chunk_specials,
        max_chunks=7,
        batch_size=3,
    )
    assert n == 7 and torch.equal(load_tokens(tmp_path / "cut.parquet").long(), torch.from_numpy(want[:7]))
    assert read_token_meta(tmp_path / "cut.parquet")["wrap"]["max_chunks"] == 7
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp" in p.name) == []


@pytest.mark.parametrize("insert_eos, chunk_specials", FLAGS)
def test_tokenize_resumes_after_its_last_part_and_writes_one_pass_file(tok, tmp_path, insert_eos, chunk_specials):
    """A tokenize job stopped midway (a Slurm time limit: here the tokenizer fails at its 5th batch) keeps its parts;
    the next call resumes after the last one (the documents before it are not encoded again) and writes the same
    token file as one pass, byte for byte, then removes the parts.  Other inputs (another raw file) start over."""
    texts = _texts(n=60, seed=2)
    raw = tmp_path / "raw.parquet"
    write_text_parquet(texts, raw)
    L = 12
    one = tmp_path / "one.parquet"
    n = tokenize_corpus(raw, tok, one, L, insert_eos, chunk_specials, batch_size=4, row_group_rows=5)
    calls = []

    class Stopping:  # the tokenizer of a job killed at its 5th batch
        def __init__(self, stop_at):
            self.stop_at = stop_at

        def __getattr__(self, name):
            return getattr(tok, name)

        def encode_batch(self, batch):
            calls.append(len(batch))
            if len(calls) == self.stop_at:
                raise TimeoutError("DUE TO TIME LIMIT")
            return tok.encode_batch(batch)

    parts = tmp_path / "parts"
    out = tmp_path / "resumed.parquet"
    with pytest.raises(TimeoutError):
        tokenize_corpus(
            raw,
            Stopping(5),
            out,
            L,
            insert_eos,
            chunk_specials,
            batch_size=4,
            row_group_rows=5,
            resume_dir=parts,
            part_rows=3,
        )
    state = json.loads((parts / "state.json").read_text())
    assert not out.exists() and state["parts"] and not state["done"] and 0 < state["documents"] <= 16
    done_before = state["documents"]
    calls.clear()
    m = tokenize_corpus(
        raw,
        Stopping(0),
        out,
        L,
        insert_eos,
        chunk_specials,
        batch_size=4,
        row_group_rows=5,
        resume_dir=parts,
        part_rows=3,
    )
    assert m == n and sum(calls) == len(texts) - done_before  # only the documents after the last part
    assert out.read_bytes() == one.read_bytes() and not parts.exists()
    # parts of another raw file are not reused
    calls.clear()
    with pytest.raises(TimeoutError):
        tokenize_corpus(
            raw, Stopping(5), out, L, insert_eos, chunk_specials, batch_size=4, resume_dir=parts, part_rows=3
        )
    write_text_parquet(texts[::-1], tmp_path / "other.parquet")
    calls.clear()
    tokenize_corpus(
        tmp_path / "other.parquet",
        Stopping(0),
        tmp_path / "other_tokens.parquet",
        L,
        insert_eos,
        chunk_specials,
        batch_size=4,
        resume_dir=parts,
        part_rows=3,
    )
    assert sum(calls) == len(texts) and not parts.exists()


def test_tokenize_corpus_errors_leave_no_output(tok, tmp_path):
    words = word_list()
    write_text_parquet([" ".join(words[:3])] * 3, tmp_path / "short.parquet")
    with pytest.raises(ValueError, match="not enough text for a single chunk"):
        tokenize_corpus(tmp_path / "short.parquet", tok, tmp_path / "short_tokens.parquet", 64, batch_size=1)
    write_text_parquet([" ".join(words[:10])] * 50 + [" ".join(words[-1:] * 8)], tmp_path / "late.parquet")
    # the same ids, a vocabulary that ends before the last word: a mismatch found after chunks were written
    small = SimpleNamespace(
        eos_id=tok.eos_id, bos_id=tok.bos_id, vocab_size=len(words) - 1, encode_batch=tok.encode_batch, info=tok.info
    )
    with pytest.raises(ValueError, match=f"token id {len(words) - 1} >= vocab_size {len(words) - 1}"):
        tokenize_corpus(
            tmp_path / "late.parquet",
            small,
            tmp_path / "late_tokens.parquet",
            8,
            False,
            False,
            batch_size=4,
            row_group_rows=2,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.parquet", "short.parquet"]


def test_load_tokens_reads_rows_and_token_rows_read_int64_from_the_view(tok, tmp_path):
    texts = _texts(200, seed=3)
    write_text_parquet(texts, tmp_path / "raw.parquet")
    n = tokenize_corpus(tmp_path / "raw.parquet", tok, tmp_path / "t.parquet", 8, batch_size=16, row_group_rows=9)
    x = load_tokens(tmp_path / "t.parquet")
    assert x.shape == (n, 8) and torch.equal(load_tokens(tmp_path / "t.parquet", 5), x[:5])
    assert torch.equal(load_tokens(tmp_path / "t.parquet", 10 * n), x)
    view = token_view(tmp_path / "t.parquet")  # the Arrow view: read-only, zero-copy, row i = row i
    assert view.dtype == np.int32 and not view.flags.writeable and np.array_equal(view, x.numpy())
    rows = TokenRows.open(tmp_path / "t.parquet")
    idx = torch.tensor([3, 0, n - 1, 3])
    assert rows.shape == (n, 8) and len(rows) == n and rows[idx].dtype == torch.int64
    assert torch.equal(rows[idx], x[idx].long()) and torch.equal(rows[2:5], x[2:5].long())
    assert read_token_meta(tmp_path / "t.parquet")["max_id"] == int(x.max()) == tok.bos_id
    assert torch.equal(TokenRows(x)[idx], rows[idx])  # a tensor works too (tests, small data)
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

# Training on the corpus: a warm-up training on a tiny token file first (the view writer, pyarrow's reader, torch's
# autograd start lazily), then the 200 MB corpus's view is built (decoded a row group at a time) and a batch read,
# then a tiny network trains on the tiny file and on the corpus as train_from_spec does (the metadata, the view with
# its values hashed again as a new process would, unie.core.train.train).  The peak RSS of each phase is measured from
# the RSS at its start (writing 5 to /proc/self/clear_refs resets VmHWM); the RSS is split as the kernel counts it:
# anonymous memory is what a copy of the corpus would cost; file-backed pages (the map, the libraries) are page cache.
LOAD = textwrap.dedent("""
    import json, sys
    import numpy as np, torch
    import unie.data.tokens
    from unie.core.options import ModelConfig, TrainConfig
    from unie.core.train import train
    from unie.data.tokens import TokenRows, token_file_info
    from unie.models.transformer import Transformer

    def status():
        fields = dict(line.split(":") for line in open("/proc/self/status"))
        return {k: int(fields[k].split()[0]) for k in ("VmRSS", "RssAnon", "RssFile", "VmHWM")}

    def reset_peak():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return status()

    big, warm, cache, work, seq_len, vocab, out = sys.argv[1:]
    torch.set_num_threads(1)  # per-thread buffers would add noise to the peaks compared

    def training(path, ckpt):  # what train_from_spec does with the data, on a tiny network (plain cross-entropy)
        info = token_file_info(path)  # the data's identity and largest id, from the file's metadata
        rows = TokenRows.open(path, cache)
        net = Transformer(ModelConfig(vocab_size=int(vocab), d_model=16, n_layers=1, n_heads=2, max_len=int(seq_len)))
        loss = lambda net, x0, g: torch.nn.functional.cross_entropy(net(x0).flatten(0, 1), x0.flatten())
        train(net, loss, rows, TrainConfig(steps=3, batch_size=64, warmup=1, ckpt_every=3, log_every=3), ckpt,
              log=lambda msg: None, progress=False)
        return info

    training(warm, f"{work}/warm")
    before = reset_peak()
    rows = TokenRows.open(big, cache)  # builds the view
    after_open = status()
    idx = torch.from_numpy(np.random.default_rng(0).integers(0, len(rows), 64))
    batch = rows[idx]  # what training does at every step
    after_batch = status()
    n = len(rows)
    del rows
    unie.data.tokens._verified.clear()  # a training job is a new process: it hashes the view's values again
    before_small = reset_peak()
    training(warm, f"{work}/small")  # the same training on 25 rows: what the steps cost whatever the data
    after_small = status()
    unie.data.tokens._verified.clear()
    before_train = reset_peak()
    info = training(big, f"{work}/big")
    np.savez(out, idx=idx.numpy(), batch=batch.numpy())
    print(json.dumps({"before_small": before_small, "after_small": after_small, "before": before,
                      "after_open": after_open, "after_batch": after_batch,
                      "before_train": before_train, "after_train": status(), "max": info["max_id"],
                      "dtype": str(batch.dtype), "rows": n}))
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
            writer.write_table(pa.table({"text": [" ".join(vocab[ids[e - c : e]]) for c, e in zip(counts, ends)]}))
            size += int(nbytes[ids].sum() + (counts - 1).sum())
            streams.append(np.insert(ids, ends, eos_id))  # word i has id i (word_tokenizer)
    return size, np.concatenate(streams)


def _run(script: str, *args, env: dict | None = None) -> dict:
    # the tokenizer's Rust thread pool sizes itself to the machine; two threads keep the measurement comparable
    env = {**os.environ, "RAYON_NUM_THREADS": "2", **(env or {})}
    r = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_tokenize_200mb_in_bounded_memory(tok, tmp_path):
    """Tokenise >= 200 MB of text in a subprocess with the workflow's tokenizer: its peak RSS grows by far less
    than the corpus; the chunk count is (words + documents) // (L - 2).  Then, in another subprocess, training on
    it: building the zero-copy view and training steps raise the peak RSS by far less than the tokens, and the
    batches have the right values."""
    t0 = time.perf_counter()
    tok.save(tmp_path / "tokenizer")  # as rule tokenizer writes resources/tokenizer
    raw_bytes, stream = _write_corpus(tmp_path / "raw.parquet", tok.eos_id)
    generated = time.perf_counter() - t0
    out = tmp_path / "train.parquet"
    write_text_parquet([" ".join(word_list()[:50])] * 64, tmp_path / "warm.parquet")
    body = SEQ_LEN - 2  # insert_eos and chunk_specials: the paper's OpenWebText setting
    r = _run(
        TOKENIZE,
        tmp_path / "tokenizer",
        tmp_path / "warm.parquet",
        tmp_path / "raw.parquet",
        out,
        SEQ_LEN,
        len(stream) // body // 10,
    )
    grew = (r["peak_kb"] - r["baseline_kb"]) * 1024  # bytes over the baseline
    late = (r["peak_kb"] - r["tenth_kb"]) * 1024  # bytes added by the last 90% of the corpus
    tokens = r["chunks"] * SEQ_LEN * 4  # the tokens' bytes as int32 (the view's size)
    report = (
        f"corpus {raw_bytes / 1e6:.0f} MB of text ({len(stream) / 1e6:.1f}M tokens, generated in "
        f"{generated:.0f} s) -> {r['chunks']} chunks ({tokens / 1e6:.0f} MB as int32, a "
        f"{out.stat().st_size / 1e6:.0f} MB Parquet file) in {r['seconds']:.0f} s; "
        f"RSS {r['imports_kb'] / 1024:.0f} MB after imports, baseline {r['baseline_kb'] / 1024:.0f} MB after "
        f"a warm-up, peak {r['tenth_kb'] / 1024:.0f} MB after a tenth of the corpus and "
        f"{r['peak_kb'] / 1024:.0f} MB after all of it: +{grew / 1e6:.0f} MB = {100 * grew / raw_bytes:.1f}% "
        f"of the corpus, +{late / 1e6:.0f} MB over the last 90%"
    )
    print(report)
    assert raw_bytes >= RAW_BYTES
    assert r["chunks"] == len(stream) // body, report
    assert grew < 0.25 * raw_bytes and late < 0.05 * raw_bytes, report

    tokenize_corpus(tmp_path / "warm.parquet", tok, tmp_path / "warm_tokens.parquet", SEQ_LEN)
    t0 = time.perf_counter()
    # glibc returns freed blocks above 64 KB to the system at once (no adaptive threshold): the peaks of the two
    # trainings compared below then differ by what they hold, not by what the allocator kept from earlier phases
    m = _run(
        LOAD,
        out,
        tmp_path / "warm_tokens.parquet",
        tmp_path / "cache",
        tmp_path / "work",
        SEQ_LEN,
        tok.vocab_size,
        tmp_path / "batch.npz",
        env={"MALLOC_MMAP_THRESHOLD_": "65536"},
    )
    seconds = time.perf_counter() - t0
    idx, batch = np.load(tmp_path / "batch.npz")["idx"], np.load(tmp_path / "batch.npz")["batch"]
    want = np.stack([np.concatenate([[tok.bos_id], stream[i * body : (i + 1) * body], [tok.eos_id]]) for i in idx])
    assert m["dtype"] == "torch.int64" and m["rows"] == r["chunks"] and np.array_equal(batch, want)
    assert m["max"] == tok.bos_id  # <bos> is the largest id in these chunks
    (view,) = (tmp_path / "cache").glob("train.*.arrow")
    assert view.stat().st_size >= tokens
    mb = lambda key, at, since="before": (m[at][key] - m[since][key]) / 1024
    peak = lambda at, since: (m[at]["VmHWM"] - m[since]["VmRSS"]) / 1024  # the phase's peak over its start
    loading = (
        f"training on it ({seconds:.0f} s in all): building the view ({view.stat().st_size / 1e6:.0f} MB) "
        f"peak RSS +{peak('after_open', 'before'):.0f} MB, then RSS +{mb('VmRSS', 'after_open'):.1f} MB "
        f"(+{mb('RssAnon', 'after_open'):.1f} MB anonymous); a batch of 64: "
        f"+{mb('RssAnon', 'after_batch'):.1f} MB anonymous, +{mb('VmRSS', 'after_batch'):.1f} MB in all; "
        f"3 training steps (the view's values hashed): peak RSS +{peak('after_train', 'before_train'):.0f} MB "
        f"(on the 25-row file: +{peak('after_small', 'before_small'):.0f} MB), "
        f"+{mb('RssAnon', 'after_train', 'before_train'):.1f} MB anonymous and "
        f"+{mb('RssFile', 'after_train', 'before_train'):.1f} MB file-backed after"
    )
    print(loading)
    assert peak("after_open", "before") * 1e6 < 0.25 * tokens, loading
    assert mb("RssAnon", "after_batch") < 16 and mb("VmRSS", "after_batch") * 1e6 < 0.25 * tokens, loading
    # the difference: the 4 MB hashing buffer and the map's pages that the batches' page faults bring in (the kernel
    # maps 64 KB around each faulting row: file-backed, page cache)
    assert (peak("after_train", "before_train") - peak("after_small", "before_small")) * 1e6 < 0.25 * tokens, loading
    assert mb("RssAnon", "after_train", "before_train") < 16, loading
