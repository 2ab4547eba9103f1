"""Token files: fixed-length token sequences in Parquet, and the zero-copy view that training reads.

**Layout.**  One column ``input_ids`` of type ``fixed_size_list<int32>[L]``, one row per sequence (a chunk of a
tokenised corpus, or a sample).  Token files (:func:`write_token_file`, called by
:func:`unie.data.corpus.tokenize_corpus`) are zstd-compressed (plain values: dictionary pages made GPT-2 ids no
smaller and cost the writer memory) with page CRCs, in row groups of ``row_group_rows`` rows
(:data:`ROW_GROUP_TOKENS` tokens: 4,096 rows of 32, 128 of 1,024), written one row group at a time, so writing holds
one row group and reading one holds one.

**Metadata.**  The key ``unie.tokens`` (:data:`META_KEY`) of the file's key-value metadata, a JSON object:
``format`` (``unie-tokens/2``), ``column``, ``dtype``, ``rows``, ``seq_len``, ``row_group_rows``, ``max_id`` (the
largest token id), ``tokenizer`` (its fingerprint) and ``vocab_size``, ``wrap`` (``rule: mdlm``, ``insert_eos``,
``chunk_specials``, ``max_chunks``), ``source`` (the raw file's path and SHA-256, and what the caller adds: dataset, split) and
``content_sha256``: the SHA-256 of the token values as little-endian int32, row after row (the bytes of the
``(N, L)`` array in C order, so :func:`content_sha256` of any reader's copy gives it).  The content hash is the
data's identity: the resume check of training and the tokenizer-mismatch and vocabulary checks read this metadata
(:func:`token_file_info`), not the tokens.  pyarrow keeps the Arrow schema (with its metadata) in the key
``ARROW:schema``; the writer puts the final metadata there too, so ``pq.read_table(path).schema.metadata`` has it.

**Reading.**  :func:`load_tokens` decodes the first rows (evaluation, samples, page CRCs checked).  Training reads
:func:`token_view`: the file decoded once, a row group at a time, into an uncompressed Arrow IPC file (one record
batch, in a cache directory, named by the content hash) that is memory-mapped: its values buffer is an ``(N, L)``
int32 array with no copy, whose row ``i`` is the file's row ``i``, so a batch of row indices is the same batch as
the ``.npy`` memory map gave before (same rows, same order, any seed and shard count).  :class:`TokenRows` hands
training int64 batches of it.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import mmap
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.integrity import DamagedFileError, atomic_write

if TYPE_CHECKING:  # torch is imported where a tensor is made: a tokenize job imports none (1.4 s a job)
    import torch

TOKEN_DTYPE = np.dtype("<i4")  # every vocabulary here (GPT-2: 50,258) fits; half the bytes of int64
COLUMN = "input_ids"  # Hugging Face's name for token ids
META_KEY = "unie.tokens"
FORMAT = "unie-tokens/2"  # /1 was the raw int32 .npy with a .meta.json beside it
ROW_GROUP_TOKENS = 1 << 17  # 512 KB of int32 per row group
_BLOCK = 1 << 22  # bytes hashed per read


def token_schema(seq_len: int) -> pa.Schema:
    return pa.schema([(COLUMN, pa.list_(pa.int32(), seq_len))])


def _as_list_array(x: np.ndarray) -> pa.FixedSizeListArray:
    """An ``(n, L)`` int32 array as Arrow fixed-size lists (no copy)."""
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(x, TOKEN_DTYPE).reshape(-1)), x.shape[1])


def _values(col: pa.Array, seq_len: int) -> np.ndarray:
    """The ``(n, L)`` int32 values of a fixed-size-list column (a view when Arrow's buffer allows it)."""
    return col.flatten().to_numpy(zero_copy_only=False).astype(TOKEN_DTYPE, copy=False).reshape(-1, seq_len)


def content_sha256(x: np.ndarray) -> str:
    """The content hash of token rows: SHA-256 of their values as little-endian int32, row after row."""
    return hashlib.sha256(memoryview(np.ascontiguousarray(x, TOKEN_DTYPE))).hexdigest()


def _row_groups(chunks: Iterable[np.ndarray], rows: int) -> Iterator[np.ndarray]:
    """``chunks`` (arrays of ``(n_i, L)``) re-cut into int32 arrays of exactly ``rows`` rows (the last one shorter), so
    the file's row groups do not depend on how the chunks arrived; holds about one group (as int32) and one chunk."""
    pending, held = [], 0
    for c in chunks:
        if not len(c):
            continue
        pending.append(np.asarray(c, TOKEN_DTYPE))
        held += len(c)
        if held >= rows:
            block, pending = np.concatenate(pending), []
            full = held // rows * rows
            rest = block[full:]
            pending, held = ([rest.copy()] if len(rest) else []), len(rest)  # a copy: the block is freed
            for i in range(0, full, rows):
                yield block[i : i + rows]
            del block
    if held:
        yield np.concatenate(pending)


def write_token_file(
    path, chunks: Iterable[np.ndarray], seq_len: int, meta: dict, row_group_rows: int | None = None
) -> dict:
    """Stream ``chunks`` (int arrays ``(n_i, seq_len)``) into the Parquet token file ``path`` (module doc), a row
    group at a time, and finish its metadata: ``meta`` plus ``format``, ``column``, ``dtype``, ``rows``, ``seq_len``,
    ``row_group_rows``, ``max_id`` and ``content_sha256``.  Returns the metadata.  Written atomically: if ``chunks``
    raises, nothing is left at ``path``.  An empty file (no rows) is an error."""
    rows_per_group = row_group_rows or max(1, ROW_GROUP_TOKENS // seq_len)
    schema = token_schema(seq_len)
    out = {}

    def write(tmp):
        h, n, top = hashlib.sha256(), 0, -1
        # 64 KB pages: the writer buffers a page before compressing it (1 MB pages cost tokenisation ~10 MB more)
        with pq.ParquetWriter(
            tmp,
            schema,
            compression="zstd",
            use_dictionary=False,
            write_statistics=False,
            data_page_size=1 << 16,
            write_page_checksum=True,
        ) as writer:
            for group in _row_groups(chunks, rows_per_group):
                group = np.ascontiguousarray(group, TOKEN_DTYPE)
                if group.ndim != 2 or group.shape[1] != seq_len:
                    raise ValueError(f"{path}: chunks of shape {group.shape}, expected (n, {seq_len})")
                writer.write_table(pa.table({COLUMN: _as_list_array(group)}), row_group_size=rows_per_group)
                h.update(memoryview(group))
                n += len(group)
                top = max(top, int(group.max()))
            if n == 0:
                raise ValueError(f"{path}: no token rows to write")
            out.update(
                {
                    "format": FORMAT,
                    "column": COLUMN,
                    "dtype": "int32",
                    "rows": n,
                    "seq_len": seq_len,
                    "row_group_rows": rows_per_group,
                    "max_id": top,
                    **meta,
                    "content_sha256": h.hexdigest(),
                }
            )
            text = json.dumps(out, sort_keys=True)
            # the metadata is known once every row is written; pyarrow serialised the Arrow schema (base64 of its
            # IPC form, under ARROW:schema) when the writer opened, so the final one replaces it there too
            arrow_schema = base64.b64encode(schema.with_metadata({META_KEY: text}).serialize().to_pybytes())
            writer.add_key_value_metadata({META_KEY: text, "ARROW:schema": arrow_schema.decode()})

    atomic_write(path, write)
    return out


def write_tokens(x: torch.Tensor, path, extra: dict | None = None) -> None:
    """Save token sequences ``(N, L)`` (e.g. samples) as Parquet ``input_ids`` in one go (+ optional scalar
    metadata, as strings in the schema's metadata)."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({COLUMN: _as_list_array(x.to(torch.int32).numpy())})
    if extra:
        table = table.replace_schema_metadata({k: str(v) for k, v in extra.items()})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))


def _unreadable(path, e: Exception) -> DamagedFileError:
    return DamagedFileError(path, f"pyarrow cannot read it ({str(e).splitlines()[0]})")


def read_token_meta(path) -> dict | None:
    """The ``unie.tokens`` metadata of a token file (read from its footer only), or None for a Parquet file without
    it (e.g. samples).  An unreadable footer (a truncated file) is a :class:`DamagedFileError`."""
    try:
        kv = pq.read_metadata(path).metadata or {}
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise _unreadable(path, e) from None
    if META_KEY.encode() not in kv:
        return None
    try:
        return json.loads(kv[META_KEY.encode()])
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise DamagedFileError(path, f"its {META_KEY} metadata is not valid JSON") from None


class TokenFileError(DamagedFileError):
    """A Parquet file read as a token file that is not the one the rule expects: no ``unie.tokens`` metadata (not
    written by rule tokenize), or metadata naming another dataset, split or tokenizer (another file copied over
    it).  The message names the file, what it holds and what was expected."""


def token_place(path) -> tuple[str, str]:
    """``(dataset, split)`` a token file's place says it holds: ``.../tokenized/{dataset}/{split}.parquet``."""
    p = Path(path)
    return p.parent.name, p.stem


def check_token_file(
    path, dataset: str | None = None, split: str | None = None, tokenizer: str | None = None, meta: dict | None = None
) -> dict:
    """The metadata of token file ``path`` once it is known to be the file a rule expects: written by rule
    tokenize (its ``unie.tokens`` metadata) for ``dataset`` and ``split`` (its ``source``) with the tokenizer of
    fingerprint ``tokenizer`` (each checked when given).  Anything else is a one-line :class:`TokenFileError`.
    ``meta``: the metadata, when already read."""
    meta = read_token_meta(path) if meta is None else meta
    if meta is None:
        raise TokenFileError(
            path,
            f"it has no {META_KEY} metadata: not a token file written by rule tokenize (a "
            "Parquet file of other tokens copied over it?)",
        )
    source = meta.get("source") if isinstance(meta.get("source"), dict) else {}
    holds = {"dataset": source.get("dataset"), "split": source.get("split"), "tokenizer": meta.get("tokenizer")}
    expected = {"dataset": dataset, "split": split, "tokenizer": tokenizer}
    wrong = [k for k, v in expected.items() if v is not None and holds[k] is not None and holds[k] != v]
    if wrong:
        said = ", ".join(f"{k} {holds[k]!r}" for k in wrong)
        wanted = ", ".join(f"{k} {expected[k]!r}" for k in wrong)
        raise TokenFileError(
            path, f"its metadata says it holds {said}, where {wanted} is expected (another token file copied over it?)"
        )
    return meta


def load_expected_tokens(
    path, tokenizer: str | None, dataset: str | None = None, limit: int | None = None
) -> torch.Tensor:
    """:func:`load_tokens` of a rule's token input, once :func:`check_token_file` found it to be what the rule
    expects: the dataset (``dataset``, else the one its place names: :func:`token_place`), the split its place names
    and the tokenizer of fingerprint ``tokenizer``."""
    place = token_place(path)
    check_token_file(path, dataset or place[0], place[1], tokenizer)
    return load_tokens(path, limit)


def _open_parquet(path) -> pq.ParquetFile:
    # without pre_buffer pyarrow would cache every row group's compressed bytes as it goes (the whole file)
    return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20, page_checksum_verification=True)


def _seq_len_of(f: pq.ParquetFile, path) -> int:
    schema = f.schema_arrow
    if COLUMN not in schema.names or not pa.types.is_fixed_size_list(schema.field(COLUMN).type):
        raise ValueError(f"{path}: not a token file (no fixed-size-list column {COLUMN!r}: {schema})")
    return schema.field(COLUMN).type.list_size


def iter_token_groups(path) -> Iterator[np.ndarray]:
    """The rows of a token file, a row group at a time (``(n_g, L)`` int32, page CRCs checked)."""
    try:
        with _open_parquet(path) as f:
            L = _seq_len_of(f, path)
            for g in range(f.num_row_groups):
                yield _values(f.read_row_group(g, columns=[COLUMN], use_threads=False).column(0).combine_chunks(), L)
    except (OSError, pa.ArrowException) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise _unreadable(path, e) from None


def token_content_sha256(path) -> tuple[str, int]:
    """``(content hash, rows)`` of a token file's decoded values (streamed a row group at a time)."""
    h, n = hashlib.sha256(), 0
    for group in iter_token_groups(path):
        h.update(memoryview(np.ascontiguousarray(group)))
        n += len(group)
    return h.hexdigest(), n


def token_file_info(path) -> dict:
    """``{"sha256", "shape", "max_id", "tokenizer"}`` of a token file, from its metadata (content hash, ``[N, L]``,
    the largest id, the tokenizer's fingerprint): the identity of a training set for the resume check and what the
    vocabulary checks need, without reading the tokens.  A Parquet file without metadata is decoded and hashed
    (tokenizer None)."""
    meta = read_token_meta(path)
    if meta is not None:
        return {
            "sha256": meta["content_sha256"],
            "shape": [meta["rows"], meta["seq_len"]],
            "max_id": meta["max_id"],
            "tokenizer": meta.get("tokenizer"),
        }
    x = load_tokens(path)
    return {
        "sha256": content_sha256(x.numpy()),
        "shape": list(x.shape),
        "max_id": int(x.max()) if x.numel() else -1,
        "tokenizer": None,
    }


def load_tokens(path, limit: int | None = None) -> torch.Tensor:
    """Token sequences as stored: an int32 tensor ``(N, L)`` in memory (the first ``limit`` rows when given; only the
    row groups holding them are read).  int32 is the storage type; losses and ``gather`` want int64, so convert with
    ``.long()``.  Training on a whole corpus reads :class:`TokenRows` instead (no copy of the corpus).

    Pages are checked against their CRCs; when every row is read, the rows' count and content hash are checked
    against the metadata.  A damaged file raises :class:`DamagedFileError` naming it."""
    import torch

    path = Path(path)
    meta = read_token_meta(path)
    try:
        with _open_parquet(path) as f:
            L = _seq_len_of(f, path)
            total = f.metadata.num_rows
            n = total if limit is None else min(limit, total)
            x = np.empty((n, L), dtype=TOKEN_DTYPE)
            at = 0
            for batch in f.iter_batches(batch_size=min(max(n, 1), 1 << 16), columns=[COLUMN]) if n else ():
                part = _values(batch.column(0), L)[: n - at]
                x[at : at + len(part)] = part
                at += len(part)
                if at >= n:
                    break
    except (OSError, pa.ArrowException) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise _unreadable(path, e) from None
    if at != n:
        raise DamagedFileError(path, f"{at} rows, its footer says {n}")
    if meta is not None and n == total:
        if n != meta["rows"] or L != meta["seq_len"]:
            raise DamagedFileError(
                path, f"shape ({n}, {L}) differs from the ({meta['rows']}, {meta['seq_len']}) written"
            )
        if content_sha256(x) != meta["content_sha256"]:
            raise DamagedFileError(path, "its content hash differs from the one in its metadata (changed tokens)")
    return torch.from_numpy(x)


# ---------------------------------------------------------------------- the zero-copy view training reads
_verified: set[tuple] = set()  # the views whose values this process has hashed (path, size, times, inode)


def view_path(path, meta: dict, cache_dir=None) -> Path:
    """Where :func:`token_view` keeps the Arrow view of token file ``path``: ``cache_dir`` (default: beside it),
    named by the file's stem and content hash."""
    path = Path(path)
    return Path(cache_dir or path.parent) / f"{path.stem}.{meta['content_sha256'][:16]}.arrow"


def _stamp(path: Path) -> tuple:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def _sha256_range(path: Path, offset: int, length: int) -> str:
    """SHA-256 of ``length`` bytes of ``path`` from ``offset``, read (not mapped: hashing adds no resident pages)."""
    h = hashlib.sha256()
    block = memoryview(bytearray(min(_BLOCK, length)))
    with open(path, "rb") as f:
        f.seek(offset)
        while length > 0:
            got = f.readinto(block[: min(len(block), length)])
            if not got:
                break
            h.update(block[:got])
            length -= got
    return h.hexdigest()


def map_view(view: Path) -> tuple[dict, np.ndarray, int]:
    """``(metadata, (N, L) read-only array, the values' byte offset in the file)`` of an Arrow view
    (:func:`token_view`); the array is a view of a memory map of the file."""
    source = pa.memory_map(str(view), "r")
    whole = source.read_buffer()  # the whole mapping, zero-copy: its address is the file's offset 0
    reader = pa.ipc.open_file(source)
    meta = json.loads(reader.schema.metadata[META_KEY.encode()])
    if reader.num_record_batches != 1:
        raise ValueError(f"{reader.num_record_batches} record batches")
    values = reader.get_batch(0).column(0).flatten()
    x = values.to_numpy().reshape(-1, meta["seq_len"])  # zero_copy_only: a view of the mapping
    return meta, x, values.buffers()[1].address - whole.address


def _open_view(view: Path, meta: dict) -> np.ndarray | None:
    """The view's array if it holds exactly the token file's values (its metadata, shape and, once per process and
    file, the hash of its values), else None (missing, stale or damaged: it is rebuilt)."""
    if not view.exists():
        return None
    try:
        theirs, x, offset = map_view(view)
    except (OSError, pa.ArrowException, KeyError, TypeError, ValueError):
        return None
    if theirs.get("content_sha256") != meta["content_sha256"] or x.shape != (meta["rows"], meta["seq_len"]):
        return None
    stamp = _stamp(view)
    if stamp not in _verified:
        if _sha256_range(view, offset, x.nbytes) != meta["content_sha256"]:
            return None
        _verified.add(stamp)
    return x


def _write_view(path: Path, view: Path, meta: dict) -> None:
    """Decode token file ``path`` into the Arrow IPC file ``view`` (one uncompressed record batch).

    Arrow writes a record batch from buffers it holds, so the file is first written with a values buffer of zeros
    that costs no memory (a read-only anonymous mapping: every page is the kernel's zero page), then its values are
    overwritten in place, a decoded row group at a time; the values are hashed on the way and must give the
    metadata's content hash (else the token file is damaged)."""
    n, L = meta["rows"], meta["seq_len"]
    schema = token_schema(L).with_metadata({META_KEY: json.dumps(meta, sort_keys=True)})

    def template(tmp):
        zeros = mmap.mmap(
            -1, n * L * TOKEN_DTYPE.itemsize, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ
        )
        values = pa.Array.from_buffers(pa.int32(), n * L, [None, pa.py_buffer(zeros)])
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            writer.write_batch(pa.record_batch([pa.FixedSizeListArray.from_arrays(values, L)], schema=schema))

    def write(tmp):
        template(tmp)
        offset = map_view(tmp)[2]
        h, rows = hashlib.sha256(), 0
        with open(tmp, "r+b") as f:
            f.seek(offset)
            for group in iter_token_groups(path):
                group = np.ascontiguousarray(group)
                f.write(memoryview(group))
                h.update(memoryview(group))
                rows += len(group)
        if rows != n or h.hexdigest() != meta["content_sha256"]:
            raise DamagedFileError(path, "its tokens differ from the content hash in its metadata (changed tokens)")

    atomic_write(view, write)
    pa.default_memory_pool().release_unused()  # the decoded row groups' memory, which the allocator would keep
    _verified.add(_stamp(view))
    for old in view.parent.glob(f"{Path(path).stem}.*.arrow"):  # views of earlier contents of this file
        if old != view and len(old.suffixes) == 2 and len(old.suffixes[0]) == 17:
            old.unlink(missing_ok=True)


@contextmanager
def _locked(lock: Path):
    """An exclusive ``flock`` on ``lock``: one process (rank, job) builds a view, the others wait for it."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def token_view(path, cache_dir=None) -> np.ndarray:
    """The rows of token file ``path`` as a read-only ``(N, L)`` int32 array that copies nothing: a memory map of its
    Arrow view (module doc), built on first use (:func:`view_path`; about the speed of reading the file) and
    reused while the token file's content hash is the same.  Row ``i`` is the file's row ``i``."""
    path = Path(path)
    meta = read_token_meta(path)
    if meta is None:
        raise ValueError(f"{path}: no {META_KEY} metadata (not a token file written by tokenize_corpus)")
    view = view_path(path, meta, cache_dir)
    with _locked(view.with_name(f".{Path(path).stem}.lock")):
        x = _open_view(view, meta)
        if x is None:
            _write_view(path, view, meta)
            x = _open_view(view, meta)
    if x is None:
        raise DamagedFileError(view, "unreadable right after it was written")
    return x


class TokenRows:
    """Rows of an int32 token array ``(N, L)`` (a numpy array such as :func:`token_view`'s, or a tensor) read as
    int64 when indexed: ``rows[idx]`` is an int64 tensor of just those rows.

    Training takes ``data.shape``, ``len(data)`` and batches ``data[idx]`` (:func:`unie.core.train.train`);
    torch has no lazily converting tensor, and converting the whole corpus up front would copy it at twice its
    size (OpenWebText: ~9B tokens, 72 GB as int64).  This converts one batch at a time."""

    def __init__(self, x):
        import torch

        self.x = x
        self.shape = torch.Size(x.shape)
        self.dtype = torch.int64

    @classmethod
    def open(cls, path, cache_dir=None) -> "TokenRows":
        """The rows of a Parquet token file through its zero-copy view (:func:`token_view`)."""
        return cls(token_view(path, cache_dir))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> torch.Tensor:
        import torch

        if isinstance(self.x, torch.Tensor):
            return self.x[idx].long()
        if isinstance(idx, torch.Tensor):
            idx = idx.numpy()
        return torch.from_numpy(self.x[idx].astype(np.int64))  # a fresh (writable) copy of just these rows
