"""Token files as Parquet (``unie/data/tokens.py``): the metadata round trip, pandas / pyarrow / Hugging Face
``datasets`` open them, training from the zero-copy view gives exactly the batches and weights of the memory-mapped
``.npy`` it replaced (one process, two shards), and the view is a cache: reused, rebuilt when damaged or stale."""

from __future__ import annotations

import hashlib
import json
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import unie.data.tokens as tokens
from unie.core.options import ModelConfig, TrainConfig
from unie.core.train import train
from unie.data.corpus import tokenize_corpus, wrap_chunks, write_text_parquet
from unie.data.tokens import META_KEY, TokenRows, load_tokens, read_token_meta, token_file_info, token_view, view_path
from unie.data.toy_world import generate_corpus
from unie.methods.mdlm import MDLM
from unie.models.transformer import Transformer

L = 8


@pytest.fixture(scope="module")
def files(tmp_path_factory, tok):
    """A toy corpus tokenised into a Parquet token file with small row groups (so several of them)."""
    root = tmp_path_factory.mktemp("tokens")
    texts = generate_corpus("owt", "train", 300, L, seed=0)
    write_text_parquet(texts, root / "raw.parquet")
    n = tokenize_corpus(
        root / "raw.parquet",
        tok,
        root / "train.parquet",
        L,
        insert_eos=False,
        chunk_specials=False,
        source={"dataset": "owt", "split": "train"},
        row_group_rows=64,
    )
    want = wrap_chunks(tok.encode_batch(texts), L, tok.eos_id, tok.bos_id, False, False)
    assert n == len(want) == 300
    return root, want


def test_metadata_round_trip(files, tok):
    root, want = files
    path = root / "train.parquet"
    meta = read_token_meta(path)
    assert meta == {
        "format": "unie-tokens/2",
        "column": "input_ids",
        "dtype": "int32",
        "rows": 300,
        "seq_len": L,
        "row_group_rows": 64,
        "max_id": int(want.max()),
        "tokenizer": tok.info()["fingerprint"],
        "vocab_size": tok.vocab_size,
        "wrap": {"rule": "mdlm", "insert_eos": False, "chunk_specials": False, "max_chunks": None},
        "source": {
            "path": str(root / "raw.parquet"),
            "sha256": hashlib.sha256((root / "raw.parquet").read_bytes()).hexdigest(),
            "dataset": "owt",
            "split": "train",
        },
        "content_sha256": hashlib.sha256(want.astype("<i4").tobytes()).hexdigest(),
    }
    # the same JSON in the file's key-value metadata and in the Arrow schema pyarrow reads back
    assert json.loads(pq.read_metadata(path).metadata[META_KEY.encode()]) == meta
    assert json.loads(pq.read_table(path).schema.metadata[META_KEY.encode()]) == meta
    assert pq.ParquetFile(path).num_row_groups == 5  # 64 rows each, the last one 44
    assert token_file_info(path) == {
        "sha256": meta["content_sha256"],
        "shape": [300, L],
        "max_id": meta["max_id"],
        "tokenizer": tok.info()["fingerprint"],
    }


def test_pandas_pyarrow_and_datasets_open_it(files, tmp_path):
    root, want = files
    path = root / "train.parquet"
    table = pq.read_table(path)
    assert table.schema.field("input_ids").type == pa.list_(pa.int32(), L)
    assert np.array_equal(np.stack(table.column("input_ids").to_pylist()), want)
    df = pytest.importorskip("pandas").read_parquet(path)
    assert list(df.columns) == ["input_ids"] and np.array_equal(np.stack(df["input_ids"]), want)
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert ds.num_rows == 300 and ds.features["input_ids"].length == L
    assert np.array_equal(np.array(ds.with_format("numpy")["input_ids"]), want)


def _train(data, shards: int, seen: list, tok_info, steps: int = 6):
    """A tiny MDLM trained on ``data``; ``seen`` collects every micro-batch it read."""
    torch.manual_seed(0)
    net = Transformer(ModelConfig(vocab_size=tok_info["vocab_size"], d_model=16, n_layers=1, n_heads=2, max_len=L))
    cfg = TrainConfig(steps=steps, batch_size=8, lr=1e-3, warmup=1, ckpt_every=3, log_every=3, shards=shards, seed=3)

    def collate(x0):
        seen.append(x0.clone())
        return x0

    with tempfile.TemporaryDirectory() as ckpt:
        ema, _ = train(net, MDLM(tok_info).loss, data, cfg, ckpt, log=lambda m: None, progress=False, collate=collate)
    return ema.state_dict()


@pytest.mark.parametrize("shards", [1, 2])
def test_training_from_the_view_equals_training_from_the_npy_memory_map(files, tok, tmp_path, shards):
    """The batches (each micro-batch, as int64) and the final weights are those of the previous path: the same
    tokens in an int32 .npy, memory-mapped copy-on-write (np.load(mmap_mode="c")) and indexed as a tensor."""
    root, want = files
    np.save(tmp_path / "train.npy", want.astype(np.int32))
    old = TokenRows(torch.from_numpy(np.load(tmp_path / "train.npy", mmap_mode="c")))
    new = TokenRows.open(root / "train.parquet", tmp_path / "cache")
    seen_old, seen_new = [], []
    w_old = _train(old, shards, seen_old, tok.info())
    w_new = _train(new, shards, seen_new, tok.info())
    assert len(seen_new) == 6 * shards and all(b.dtype == torch.int64 for b in seen_new)
    assert all(torch.equal(a, b) for a, b in zip(seen_old, seen_new))
    assert w_old.keys() == w_new.keys() and all(torch.equal(w_old[k], w_new[k]) for k in w_old)


def test_the_view_is_a_cache_reused_rebuilt_when_damaged_and_replaced_when_stale(files, tok, tmp_path):
    root, want = files
    path = tmp_path / "train.parquet"
    path.write_bytes((root / "train.parquet").read_bytes())
    cache = tmp_path / "cache"
    x = token_view(path, cache)
    view = view_path(path, read_token_meta(path), cache)
    assert np.array_equal(x, want) and not x.flags.writeable
    # an uncompressed Arrow IPC file: one record batch, the token file's metadata; pyarrow reads it as it is
    with pa.memory_map(str(view)) as source:
        reader = pa.ipc.open_file(source)
        assert reader.num_record_batches == 1 and reader.schema.metadata == pq.read_table(path).schema.metadata
        assert np.array_equal(np.stack(reader.read_all().column("input_ids").to_pylist()), want)
    stamp = view.stat().st_mtime_ns
    assert np.array_equal(token_view(path, cache), want) and view.stat().st_mtime_ns == stamp  # reused
    # a flipped byte in the view's values (bit rot): a new process's hash check finds it, and the view is rebuilt
    data = bytearray(view.read_bytes())
    data[len(data) // 2] ^= 0x01
    view.write_bytes(bytes(data))
    tokens._verified.clear()
    assert np.array_equal(token_view(path, cache), want)
    # other tokens at the same path: a new view (named by the new content hash), the stale one removed
    write_text_parquet(generate_corpus("owt", "train", 100, L, seed=1), tmp_path / "raw1.parquet")
    tokenize_corpus(tmp_path / "raw1.parquet", tok, path, L, insert_eos=False, chunk_specials=False)
    y = token_view(path, cache)
    assert np.array_equal(y, load_tokens(path).numpy()) and len(y) == 100
    assert [p.name for p in cache.glob("*.arrow")] == [view_path(path, read_token_meta(path), cache).name]
    assert not view.exists()
    assert not list(cache.glob(".*.tmp"))


def test_load_tokens_reads_only_the_rows_asked_for(files):
    root, want = files
    for n in (0, 1, 63, 64, 65, 299, 300, 1000):
        x = load_tokens(root / "train.parquet", n)
        assert x.dtype == torch.int32 and np.array_equal(x.numpy(), want[:n]), n
