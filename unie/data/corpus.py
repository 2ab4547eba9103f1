"""Corpora and tokenised chunks.

Raw corpora are Parquet files with one ``text`` column (a document per row): the toy world writes
its generated windows there, the paper profile writes Hugging Face datasets there (``hf_data``).
Tokenisation follows MDLM's ``wrap`` (``notes/baselines.md`` §0): documents are encoded without
special tokens, an ``<eos>`` is appended to each (``insert_eos``), everything is concatenated and cut
into chunks; with ``chunk_specials`` each chunk is ``[bos] + (L - 2) tokens + [eos]``.  The trailing
remainder is dropped.  The toy world uses ``insert_eos: false, chunk_specials: false`` on documents
that are already stationary windows of exactly ``L`` words, which makes every chunk one window (so
``pi`` of a chunk stays exact).

Everything scales to OpenWebText in bounded memory: :func:`tokenize_corpus` streams the raw corpus in
record batches (:func:`wrap_batches` carries the unfinished tail from batch to batch) and appends chunks
to an int32 ``.npy`` file; :func:`load_tokens` memory-maps it, and :class:`TokenRows` hands training
int64 batches of it without ever copying the corpus.

Beside each token file, ``{name}.meta.json`` (:func:`token_meta_path`) says what made it (the tokenizer's
fingerprint, ``L``, the wrapping rule, the raw file and its hash) and records the file's size and SHA-256:
:func:`load_tokens` refuses a token file whose bytes differ from the ones written, and the resume check of
training reads the hash as the identity of the data (:func:`token_file_info`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ..core.integrity import DamagedFileError, atomic_write, file_record, file_sha256, verify_file, write_json


def write_text_parquet(texts: list[str], path) -> None:
    """``texts`` as Parquet ``text`` (one batch of :func:`write_text_batches`)."""
    write_text_batches([texts], path)


def write_text_batches(batches: Iterable[list[str]], path) -> int:
    """Stream batches of documents into Parquet ``text`` (one row group per non-empty batch, so writing holds
    one batch and reading it back with :func:`read_text_batches` holds about one row group); returns the
    number of documents.  Nothing is left at ``path`` if the batches raise.  Pages carry CRC checksums
    (verified by :func:`read_text_batches`)."""
    n = 0

    def write(tmp):
        nonlocal n
        with pq.ParquetWriter(tmp, pa.schema([("text", pa.string())]), write_page_checksum=True) as writer:
            for texts in batches:
                if texts:
                    writer.write_table(pa.table({"text": pa.array(texts, pa.string())}))
                    n += len(texts)

    atomic_write(path, write)
    return n


def read_texts(path) -> list[str]:
    return pq.read_table(path, columns=["text"]).column("text").to_pylist()


def read_text_batches(path, batch_size: int) -> Iterator[list[str]]:
    """The documents of a Parquet ``text`` file, ``batch_size`` at a time (pyarrow record batches).

    ``pre_buffer`` (pyarrow's default) would cache every row group's compressed bytes as it goes, i.e. the
    whole file; without it, and with a buffered stream, the reader holds about one page."""
    try:
        with pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20, page_checksum_verification=True) as f:
            for batch in f.iter_batches(batch_size=batch_size, columns=["text"]):
                yield batch.column(0).to_pylist()
    except (OSError, pa.ArrowException) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise DamagedFileError(path, f"pyarrow cannot read it ({str(e).splitlines()[0]})") from None


def _concat_docs(head: np.ndarray, docs_ids, eos_id: int, insert_eos: bool) -> np.ndarray:
    """``head`` followed by each document's ids (and an ``eos`` after each with ``insert_eos``), int64."""
    parts = [head]
    for ids in docs_ids:
        parts.append(np.asarray(ids, dtype=np.int64))
        if insert_eos:
            parts.append(np.array([eos_id], dtype=np.int64))
    return np.concatenate(parts)


def _cut(stream: np.ndarray, body: int, eos_id: int, bos_id: int, chunk_specials: bool):
    """``(chunks (n, L), rest)``: the whole ``body``-token pieces of ``stream`` (with ``[bos] ... [eos]``
    around each under ``chunk_specials``) and the unfinished rest."""
    n = len(stream) // body
    chunks = stream[: n * body].reshape(n, body)
    if chunk_specials:
        chunks = np.concatenate([np.full((n, 1), bos_id), chunks, np.full((n, 1), eos_id)], axis=1)
    return chunks, stream[n * body:]


def _body(seq_len: int, chunk_specials: bool) -> int:
    body = seq_len - 2 if chunk_specials else seq_len
    if body <= 0:
        raise ValueError(f"seq_len={seq_len} is too short for chunk specials")
    return body


def wrap_chunks(docs_ids, seq_len: int, eos_id: int, bos_id: int, insert_eos: bool = True,
                chunk_specials: bool = True) -> np.ndarray:
    """MDLM's wrapping: concatenate documents (+ eos) and cut into ``(N, seq_len)`` chunks; remainder dropped."""
    body = _body(seq_len, chunk_specials)
    stream = _concat_docs(np.zeros(0, dtype=np.int64), docs_ids, eos_id, insert_eos)
    return _cut(stream, body, eos_id, bos_id, chunk_specials)[0]


def wrap_batches(batches, seq_len: int, eos_id: int, bos_id: int, insert_eos: bool = True,
                 chunk_specials: bool = True) -> Iterator[np.ndarray]:
    """:func:`wrap_chunks` over a stream of document batches (each a list of id lists): yields the chunks
    each batch completes, carrying the unfinished tail (< one chunk) into the next batch, so the yielded
    chunks, concatenated, are exactly ``wrap_chunks`` of all the documents while memory holds one batch."""
    body = _body(seq_len, chunk_specials)
    tail = np.zeros(0, dtype=np.int64)
    for docs_ids in batches:
        chunks, rest = _cut(_concat_docs(tail, docs_ids, eos_id, insert_eos), body, eos_id, bos_id, chunk_specials)
        tail = rest.copy()  # not a view: the batch's stream is freed
        yield chunks


TOKEN_DTYPE = np.dtype("<i4")  # every vocabulary here (GPT-2: 50,258) fits; half the bytes of int64


def _npy_header(f, n: int, seq_len: int) -> int:
    """Write the ``.npy`` header of an ``(n, seq_len)`` int32 array at ``f``'s position; returns its length.
    numpy pads the header so its length does not depend on ``n`` (it is meant to be rewritten in place when
    an array grows), which lets :func:`tokenize_corpus` write the count once it is known."""
    start = f.tell()
    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(TOKEN_DTYPE),
                                             "fortran_order": False, "shape": (n, seq_len)})
    return f.tell() - start


def token_meta_path(path) -> Path:
    """The metadata file beside a token file: ``train.npy`` -> ``train.meta.json``."""
    path = Path(path)
    return path.with_name(path.stem + ".meta.json")


def tokenize_corpus(raw_path, tokenizer, out_path, seq_len: int, insert_eos: bool = True,
                    chunk_specials: bool = True, max_chunks: int | None = None, batch_size: int = 256) -> int:
    """Encode ``raw_path`` (Parquet ``text``) into fixed-length chunks at ``out_path`` (``.npy``, int32
    ``(N, seq_len)``), streaming: ``batch_size`` documents are read, encoded with the tokenizer's batch
    encoder and wrapped at a time (:func:`wrap_batches`), and their chunks appended to the file, so memory is
    bounded by the batch, not the corpus.  The chunks are those of :func:`wrap_chunks` on the whole corpus
    (the first ``max_chunks`` of them when given).  A batch costs ~200 bytes per token while it is encoded
    (the tokenizer's encodings): 256 OpenWebText documents, ~60 MB.

    Then writes :func:`token_meta_path` (what made the file, its shape, size and SHA-256).  Returns the number of
    chunks.  Raises, leaving nothing at ``out_path``, if no full chunk can be formed or a token id is not below
    the tokenizer's ``vocab_size``."""
    out_path = Path(out_path)
    encoded = (tokenizer.encode_batch(texts) for texts in read_text_batches(raw_path, batch_size))
    n = 0

    def write(tmp):
        nonlocal n
        with open(tmp, "wb") as f:
            header = _npy_header(f, 0, seq_len)
            for chunks in wrap_batches(encoded, seq_len, tokenizer.eos_id, tokenizer.bos_id, insert_eos,
                                       chunk_specials):
                if max_chunks is not None:
                    chunks = chunks[: max_chunks - n]
                if len(chunks) and chunks.max() >= tokenizer.vocab_size:
                    raise ValueError(f"{raw_path}: token id {chunks.max()} >= vocab_size {tokenizer.vocab_size}")
                f.write(chunks.astype(TOKEN_DTYPE).tobytes())
                n += len(chunks)
                if max_chunks is not None and n >= max_chunks:
                    break
            if n == 0:
                raise ValueError(f"{raw_path}: not enough text for a single chunk of {seq_len} tokens")
            f.seek(0)
            if _npy_header(f, n, seq_len) != header:
                raise RuntimeError("this numpy's .npy header length depends on the array's length")

    token_meta_path(out_path).unlink(missing_ok=True)  # never a metadata file describing other tokens
    atomic_write(out_path, write)
    info = tokenizer.info()
    meta = {"format": "unie-tokens/1", "file": out_path.name, **file_record(out_path), "shape": [n, seq_len],
            "dtype": "int32", "seq_len": seq_len, "insert_eos": insert_eos, "chunk_specials": chunk_specials,
            "max_chunks": max_chunks, "tokenizer": info.get("fingerprint"), "vocab_size": tokenizer.vocab_size,
            "source": {"path": str(raw_path), "sha256": file_sha256(raw_path)}}
    write_json(meta, token_meta_path(out_path), indent=1)
    return n


def read_token_meta(path) -> dict | None:
    """The metadata of a token file (:func:`token_meta_path`), or None for a file without one."""
    mp = token_meta_path(path)
    if not mp.exists():
        return None
    try:
        return json.loads(mp.read_text())
    except json.JSONDecodeError:
        raise DamagedFileError(mp, "not valid JSON") from None


def token_file_info(path) -> dict:
    """``{"sha256", "bytes", "shape", "tokenizer"}`` of a token file, its bytes checked against its metadata:
    the identity of a training set for the resume check (a file without metadata is hashed)."""
    meta = read_token_meta(path)
    if meta is None:
        rec = file_record(path)
        return {**rec, "shape": list(load_tokens(path).shape), "tokenizer": None}
    digest = verify_file(path, meta)
    return {"sha256": digest, "bytes": meta["bytes"], "shape": meta["shape"], "tokenizer": meta.get("tokenizer")}


def load_tokens(path, limit: int | None = None) -> torch.Tensor:
    """Token sequences as stored: an int32 tensor ``(N, L)`` (the first ``limit`` rows when given).

    A ``.npy`` file (:func:`tokenize_corpus`) is memory-mapped: the tensor is a view of the file and nothing
    is read until it is indexed, so an OpenWebText-size file costs no memory.  The mapping is copy-on-write
    (``mmap_mode="c"``): torch gets a writable array (no warning), and writing to the tensor never changes
    the file.  A Parquet file (:func:`write_tokens`: samples, small) is read whole.  int32 is the storage
    type; losses and ``gather`` want int64, so convert what you compute on with ``.long()``, a batch at a
    time for a large file (:class:`TokenRows` does that for training).

    A ``.npy`` with metadata (:func:`tokenize_corpus`) is checked against it first: its size and SHA-256 (hashed
    once per process and file).  A damaged file raises :class:`DamagedFileError` naming it."""
    path = Path(path)
    with open(path, "rb") as f:
        is_npy = f.read(6) == b"\x93NUMPY"
    if is_npy:
        meta = read_token_meta(path)
        if meta is not None:
            verify_file(path, meta)
        try:
            arr = np.load(path, mmap_mode="c")
        except (ValueError, OSError) as e:  # "mmap length is greater than file size", a broken header
            raise DamagedFileError(path, f"numpy cannot map it ({str(e).splitlines()[0]})") from None
        if arr.ndim != 2 or arr.dtype != TOKEN_DTYPE:
            raise DamagedFileError(path, f"expected an (N, L) int32 token array, found {arr.dtype} {arr.shape}")
        if meta is not None and list(arr.shape) != list(meta["shape"]):
            raise DamagedFileError(path, f"shape {list(arr.shape)} differs from the {meta['shape']} written")
        x = torch.from_numpy(arr)
    else:
        try:
            col = pq.read_table(path, columns=["input_ids"], page_checksum_verification=True).column(
                "input_ids").combine_chunks()
        except (OSError, pa.ArrowException) as e:
            raise DamagedFileError(path, f"pyarrow cannot read it ({str(e).splitlines()[0]})") from None
        flat = np.array(col.flatten().to_numpy(zero_copy_only=False), dtype=np.int32)
        x = torch.from_numpy(flat).view(-1, col.type.list_size)
    return x[:limit] if limit is not None else x


class TokenRows:
    """Rows of an int32 token tensor ``(N, L)`` (e.g. :func:`load_tokens`' memory map) read as int64 when
    indexed: ``rows[idx]`` is an int64 tensor of just those rows.

    Training takes ``data.shape``, ``len(data)`` and batches ``data[idx]`` (:func:`unie.core.train.train`);
    torch has no lazily converting tensor, and converting the whole map up front would copy the corpus at
    twice its size (OpenWebText: ~9B tokens, 72 GB as int64).  This converts one batch at a time."""

    def __init__(self, x: torch.Tensor):
        self.x = x
        self.shape = x.shape
        self.dtype = torch.int64

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> torch.Tensor:
        return self.x[idx].long()

    def max(self, block: int = 1 << 16) -> int:
        """The largest token id, ``block`` rows at a time (no int64 copy; a mapped file is read once)."""
        return max((int(self.x[i:i + block].max()) for i in range(0, len(self), block)), default=-1)


def write_tokens(x: torch.Tensor, path, extra: dict | None = None) -> None:
    """Save token sequences ``(N, L)`` (e.g. samples) as Parquet ``input_ids`` (+ optional scalar metadata)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    L = x.shape[1]
    arr = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1).to(torch.int32).numpy()), L)
    table = pa.table({"input_ids": arr})
    if extra:
        table = table.replace_schema_metadata({k: str(v) for k, v in extra.items()})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))
