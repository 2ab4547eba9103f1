"""Corpora and tokenised chunks.

Raw corpora are Parquet files with one ``text`` column (a document per row): the toy world writes
its generated windows there, the paper profile writes Hugging Face datasets there (``hf_data``).
Tokenisation follows MDLM's ``wrap`` (``docs/baselines.md``, the shared protocols): documents are encoded without
special tokens, an ``<eos>`` is appended to each (``insert_eos``), everything is concatenated and cut
into chunks; with ``chunk_specials`` each chunk is ``[bos] + (L - 2) tokens + [eos]``.  The trailing
remainder is dropped.  The toy world uses ``insert_eos: false, chunk_specials: false`` on documents
that are already stationary windows of exactly ``L`` words, which makes every chunk one window (so
``pi`` of a chunk stays exact).

Everything scales to OpenWebText in bounded memory: :func:`tokenize_corpus` streams the raw corpus in
record batches (:func:`wrap_batches` carries the unfinished tail from batch to batch) and writes the chunks a
row group at a time into a Parquet token file whose metadata says what made it (:mod:`unie.data.tokens`, which
also reads token files: :func:`~unie.data.tokens.load_tokens`, and for training the zero-copy
:class:`~unie.data.tokens.TokenRows`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.integrity import DamagedFileError, atomic_write, atomic_write_text, file_sha256
from .tokens import write_token_file


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
    return chunks, stream[n * body :]


def _body(seq_len: int, chunk_specials: bool) -> int:
    body = seq_len - 2 if chunk_specials else seq_len
    if body <= 0:
        raise ValueError(f"seq_len={seq_len} is too short for chunk specials")
    return body


def wrap_chunks(
    docs_ids, seq_len: int, eos_id: int, bos_id: int, insert_eos: bool = True, chunk_specials: bool = True
) -> np.ndarray:
    """MDLM's wrapping: concatenate documents (+ eos) and cut into ``(N, seq_len)`` chunks; remainder dropped."""
    body = _body(seq_len, chunk_specials)
    stream = _concat_docs(np.zeros(0, dtype=np.int64), docs_ids, eos_id, insert_eos)
    return _cut(stream, body, eos_id, bos_id, chunk_specials)[0]


def wrap_steps(
    batches, seq_len: int, eos_id: int, bos_id: int, insert_eos: bool = True, chunk_specials: bool = True, tail=None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`wrap_batches` that also yields, after each batch, the unfinished tail it carries into the next
    (``(chunks, tail)``), and starts from a given ``tail`` (a stream resumed after its last saved batch)."""
    body = _body(seq_len, chunk_specials)
    tail = np.zeros(0, dtype=np.int64) if tail is None else np.asarray(tail, dtype=np.int64)
    for docs_ids in batches:
        chunks, rest = _cut(_concat_docs(tail, docs_ids, eos_id, insert_eos), body, eos_id, bos_id, chunk_specials)
        tail = rest.copy()  # not a view: the batch's stream is freed
        yield chunks, tail


def wrap_batches(
    batches, seq_len: int, eos_id: int, bos_id: int, insert_eos: bool = True, chunk_specials: bool = True
) -> Iterator[np.ndarray]:
    """:func:`wrap_chunks` over a stream of document batches (each a list of id lists): yields the chunks
    each batch completes, carrying the unfinished tail (< one chunk) into the next batch, so the yielded
    chunks, concatenated, are exactly ``wrap_chunks`` of all the documents while memory holds one batch."""
    for chunks, _ in wrap_steps(batches, seq_len, eos_id, bos_id, insert_eos, chunk_specials):
        yield chunks


def tokenize_corpus(
    raw_path,
    tokenizer,
    out_path,
    seq_len: int,
    insert_eos: bool = True,
    chunk_specials: bool = True,
    max_chunks: int | None = None,
    batch_size: int = 256,
    source: dict | None = None,
    row_group_rows: int | None = None,
    resume_dir=None,
    part_rows: int = 1 << 14,
    log=None,
) -> int:
    """Encode ``raw_path`` (Parquet ``text``) into fixed-length chunks at ``out_path``, a Parquet token file
    (:mod:`unie.data.tokens`: one ``input_ids`` row of ``seq_len`` int32 per chunk), streaming: ``batch_size``
    documents are read, encoded with the tokenizer's batch encoder and wrapped at a time (:func:`wrap_batches`), and
    their chunks written a row group at a time, so memory is bounded by the batch and the row group, not the
    corpus.  The chunks are those of :func:`wrap_chunks` on the whole corpus (the first ``max_chunks`` of them when
    given).  A batch costs ~200 bytes per token while it is encoded (the tokenizer's encodings): 256 OpenWebText
    documents, ~60 MB.

    The file's metadata says what made it: the tokenizer's fingerprint and vocabulary size, ``seq_len``, the
    wrapping rule, the raw file and its hash (plus ``source``, e.g. the dataset and split), and the tokens' count and
    content hash.  Returns the number of chunks.  Raises, leaving nothing at ``out_path``, if no full chunk can be
    formed or a token id is not below the tokenizer's ``vocab_size``.

    ``resume_dir``: the work is kept there in parts (:class:`TokenizeParts`: every ``part_rows`` chunks, with the
    documents read so far and the wrap's unfinished tail), so that a job stopped midway (a Slurm time limit, a
    node failure) resumes after its last part instead of at the first document; the token file is the same as one
    pass's, byte for byte (tested), and the folder is removed once it is written."""
    if resume_dir is not None:
        return TokenizeParts(
            resume_dir, raw_path, tokenizer, seq_len, insert_eos, chunk_specials, max_chunks, batch_size, part_rows, log
        ).finish(out_path, source, row_group_rows)
    encoded = (tokenizer.encode_batch(texts) for texts in read_text_batches(raw_path, batch_size))

    def chunks():
        n = 0
        for c in wrap_batches(encoded, seq_len, tokenizer.eos_id, tokenizer.bos_id, insert_eos, chunk_specials):
            if max_chunks is not None:
                c = c[: max_chunks - n]
            if len(c) and c.max() >= tokenizer.vocab_size:
                raise ValueError(f"{raw_path}: token id {c.max()} >= vocab_size {tokenizer.vocab_size}")
            yield c
            n += len(c)
            if max_chunks is not None and n >= max_chunks:
                break
        if n == 0:
            raise ValueError(f"{raw_path}: not enough text for a single chunk of {seq_len} tokens")

    meta = token_meta(raw_path, tokenizer, insert_eos, chunk_specials, max_chunks, source)
    return write_token_file(out_path, chunks(), seq_len, meta, row_group_rows)["rows"]


def token_meta(
    raw_path,
    tokenizer,
    insert_eos: bool,
    chunk_specials: bool,
    max_chunks: int | None,
    source: dict | None,
    raw_sha256: str | None = None,
) -> dict:
    """What made a token file (:func:`tokenize_corpus`): the tokenizer, the wrapping, the raw file and its hash."""
    return {
        "tokenizer": tokenizer.info().get("fingerprint"),
        "vocab_size": tokenizer.vocab_size,
        "wrap": {"rule": "mdlm", "insert_eos": insert_eos, "chunk_specials": chunk_specials, "max_chunks": max_chunks},
        "source": {"path": str(raw_path), "sha256": raw_sha256 or file_sha256(raw_path), **(source or {})},
    }


class TokenizeParts:
    """:func:`tokenize_corpus` in parts that survive the job: ``resume_dir/part-NNNNN.npy`` (int32 chunks, about
    ``part_rows`` each, cut at document-batch boundaries) and ``resume_dir/state.json`` (what the parts were made
    from, the documents they cover, the wrap's unfinished tail after them), each written atomically after its part.
    A later call with the same raw file (its hash), tokenizer, length, wrapping and batch size continues after the
    last part; with anything else it starts over.  The chunks are those of one pass (:func:`wrap_steps` resumed
    from the saved tail), so the token file is too."""

    def __init__(
        self,
        resume_dir,
        raw_path,
        tokenizer,
        seq_len: int,
        insert_eos: bool,
        chunk_specials: bool,
        max_chunks: int | None,
        batch_size: int,
        part_rows: int,
        log=None,
    ):
        import json
        from pathlib import Path

        self.dir, self.raw, self.tok = Path(resume_dir), raw_path, tokenizer
        self.seq_len, self.insert_eos, self.chunk_specials = seq_len, insert_eos, chunk_specials
        self.max_chunks, self.batch_size, self.part_rows = max_chunks, batch_size, max(1, part_rows)
        self.log = log or (lambda m: None)
        self.key = {
            "raw_sha256": file_sha256(raw_path),
            "tokenizer": tokenizer.info().get("fingerprint"),
            "vocab_size": tokenizer.vocab_size,
            "seq_len": seq_len,
            "insert_eos": insert_eos,
            "chunk_specials": chunk_specials,
            "batch_size": batch_size,
            "max_chunks": max_chunks,
        }
        state_file = self.dir / "state.json"
        state = json.loads(state_file.read_text()) if state_file.exists() else None
        if state is not None and state.get("key") == self.key and all((self.dir / f).exists() for f in state["parts"]):
            self.state = state
            self.log(
                f"tokenize: resuming after {len(state['parts'])} parts ({state['rows']} chunks, "
                f"{state['documents']} documents) in {self.dir}"
            )
        else:
            if self.dir.exists():
                import shutil

                shutil.rmtree(self.dir)  # parts of other inputs, or of an unreadable state: start over
            self.state = {"key": self.key, "documents": 0, "rows": 0, "parts": [], "tail": [], "done": False}

    def _save(self, chunks: list[np.ndarray], documents: int, tail: np.ndarray, done: bool) -> None:
        import json

        st = self.state
        if chunks:
            block = np.ascontiguousarray(np.concatenate(chunks), dtype=np.int32)
            name = f"part-{len(st['parts']):05d}.npy"

            def write(tmp):
                with open(tmp, "wb") as f:
                    np.save(f, block)

            atomic_write(self.dir / name, write)
            st["parts"].append(name)
            st["rows"] += len(block)
        st.update(documents=documents, tail=[int(t) for t in tail], done=done)
        atomic_write_text(self.dir / "state.json", json.dumps(st))

    def _run(self) -> None:
        """Encode and wrap the documents after the saved ones, saving a part every ``part_rows`` chunks."""
        st = self.state
        skip = st["documents"]  # a multiple of batch_size: parts end at batch boundaries
        batches = read_text_batches(self.raw, self.batch_size)
        read = 0
        if skip:
            for texts in batches:
                read += len(texts)
                if read >= skip:
                    break
        encoded = (self.tok.encode_batch(texts) for texts in batches)
        pending, held, documents, tail = [], 0, read, np.asarray(st["tail"], dtype=np.int64)
        counted = _CountingBatches(encoded)
        for c, tail in wrap_steps(
            counted, self.seq_len, self.tok.eos_id, self.tok.bos_id, self.insert_eos, self.chunk_specials, tail=tail
        ):
            documents = read + counted.documents
            if len(c) and c.max() >= self.tok.vocab_size:
                raise ValueError(f"{self.raw}: token id {c.max()} >= vocab_size {self.tok.vocab_size}")
            if len(c):
                pending.append(c.astype(np.int32))  # ids < vocab_size (checked): a part holds part_rows x L x 4 B
                held += len(c)
            if held >= self.part_rows or (self.max_chunks is not None and st["rows"] + held >= self.max_chunks):
                self._save(pending, documents, tail, done=False)
                pending, held = [], 0
                if self.max_chunks is not None and st["rows"] >= self.max_chunks:
                    break
        self._save(pending, documents, tail, done=True)

    def finish(self, out_path, source: dict | None, row_group_rows: int | None) -> int:
        """Tokenise what is left, then write the token file from the parts and remove them."""
        if not self.state["done"]:
            self._run()
        if self.state["rows"] == 0:
            raise ValueError(f"{self.raw}: not enough text for a single chunk of {self.seq_len} tokens")

        def chunks():
            n = 0
            for name in self.state["parts"]:
                c = np.load(self.dir / name, mmap_mode="r")
                if self.max_chunks is not None:
                    c = c[: self.max_chunks - n]
                yield c
                n += len(c)
                if self.max_chunks is not None and n >= self.max_chunks:
                    break

        meta = token_meta(
            self.raw, self.tok, self.insert_eos, self.chunk_specials, self.max_chunks, source, self.key["raw_sha256"]
        )
        rows = write_token_file(out_path, chunks(), self.seq_len, meta, row_group_rows)["rows"]
        import shutil

        shutil.rmtree(self.dir)
        return rows


class _CountingBatches:
    """An iterator of encoded document batches that counts the documents it has handed out."""

    def __init__(self, batches):
        self.batches, self.documents = iter(batches), 0

    def __iter__(self):
        return self

    def __next__(self):
        b = next(self.batches)
        self.documents += len(b)
        return b
