"""One tokenizer class for both profiles: a Hugging Face fast tokenizer plus the ids diffusion models need.

* The toy world's word-level vocabulary (words, then ``<eos>``, ``<bos>``, ``<mask>``) is a ``tokenizers``
  ``WordLevel`` model with a whitespace pre-tokenizer, wrapped in ``PreTrainedTokenizerFast``
  (:func:`word_tokenizer`).
* A Hugging Face tokenizer saved locally (GPT-2 for the paper profile) gets a mask token appended after
  its vocabulary when it has none, as MDLM does (GPT-2: 50,257 tokens + mask = 50,258, BOS = EOS = 50256)
  (:func:`hf_tokenizer`).

Both are saved with ``save_pretrained`` and loaded back by :func:`load_tokenizer` (one loading path);
``info()`` is the fingerprint stored in every checkpoint, so a mismatch is caught on load.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

EOS, BOS, MASK, UNK = "<eos>", "<bos>", "<mask>", "<unk>"
HF_MASK = "<|mask|>"  # the mask token appended to a Hugging Face vocabulary that has none
META = "unie_tokenizer.json"  # which kind of tokenizer a directory holds (word or hf)


class Tokenizer:
    """``encode``/``decode`` text, ``vocab_size``, ``mask_id``, ``bos_id``, ``eos_id`` over a fast HF tokenizer.

    ``kind`` is ``word`` (the toy world) or ``hf`` (a pretrained tokenizer).  ``bos_id`` is the tokenizer's
    BOS, or its EOS when it has none (GPT-2's BOS is its EOS).  ``hf`` is the ``PreTrainedTokenizerFast``.
    A word-level tokenizer encodes and decodes with its Rust ``tokenizers`` model directly and builds the
    ``PreTrainedTokenizerFast`` only when asked for it (importing ``transformers`` costs ~1 s in every
    workflow job, and the two give the same ids and text: a test checks it)."""

    def __init__(self, kind: str, hf=None, rust=None, specials: dict | None = None):
        if hf is None and rust is None:
            raise ValueError("give a PreTrainedTokenizerFast (hf) or a word-level Rust tokenizer and its specials")
        self.kind, self._hf, self._rust = kind, hf, rust
        if hf is not None:
            if hf.mask_token_id is None:
                raise ValueError("the tokenizer has no mask token (use word_tokenizer or hf_tokenizer)")
            if hf.eos_token_id is None:
                raise ValueError("the tokenizer has no EOS token")
            self.specials = {"mask_token": hf.mask_token, "eos_token": hf.eos_token, "bos_token": hf.bos_token}
            self.mask_id, self.eos_id = hf.mask_token_id, hf.eos_token_id
            self.bos_id = hf.bos_token_id if hf.bos_token_id is not None else self.eos_id
            self.vocab_size = len(hf)
        else:
            self.specials = dict(specials)
            self.mask_id, self.eos_id, self.bos_id = (
                rust.token_to_id(self.specials[k]) for k in ("mask_token", "eos_token", "bos_token")
            )
            self.vocab_size = rust.get_vocab_size()

    @property
    def hf(self):
        """The ``transformers.PreTrainedTokenizerFast`` (built on first use for a word-level tokenizer)."""
        if self._hf is None:
            from transformers import PreTrainedTokenizerFast

            self._hf = PreTrainedTokenizerFast(
                tokenizer_object=self._rust, clean_up_tokenization_spaces=False, **self.specials
            )
        return self._hf

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text (no special tokens added); an out-of-vocabulary word is a ``ValueError`` naming it."""
        try:
            if self._rust is not None:
                # without character offsets (tokenizers >= 0.21): the same ids, 1.8x faster on the toy world's text
                encode = getattr(self._rust, "encode_batch_fast", self._rust.encode_batch)
                return [e.ids for e in encode(list(texts), add_special_tokens=False)]
            return self.hf(list(texts), add_special_tokens=False)["input_ids"]
        except Exception as e:  # WordLevel without an unknown token refuses unknown words
            if self.kind != "word":
                raise ValueError(f"cannot encode with the {self.kind} tokenizer: {e}") from None
            vocab = self._rust.get_vocab()
            unknown = sorted({w for t in texts for w in t.split() if w not in vocab})
            raise ValueError(f"word {unknown[0]!r} is not in the vocabulary" if unknown else str(e)) from None

    def encode_with_offsets(self, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """``(ids, char offsets)`` of each text (no special tokens): token ``k`` covers ``text[a:b]``."""
        if self._rust is not None:
            try:
                encodings = self._rust.encode_batch(list(texts), add_special_tokens=False)
            except Exception:
                self.encode_batch(texts)  # raises the clear error (an out-of-vocabulary word named)
                raise
            return [(e.ids, list(e.offsets)) for e in encodings]
        enc = self.hf(list(texts), add_special_tokens=False, return_offsets_mapping=True)
        return [(ids, [tuple(o) for o in offs]) for ids, offs in zip(enc["input_ids"], enc["offset_mapping"])]

    def surfaces(self) -> list[str]:
        """The text each id adds when it follows another token (``" word"``, ``" ba"``, ``"k"``): decoding is the
        concatenation of surfaces, less the first one's leading space (cached)."""
        if getattr(self, "_surfaces", None) is None:
            anchor = next(i for i in range(self.vocab_size) if i not in (self.eos_id, self.bos_id, self.mask_id))
            base = self.decode([anchor])
            self._surfaces = [self.decode([anchor, i])[len(base) :] for i in range(self.vocab_size)]
        return self._surfaces

    def decode(self, ids, as_text: dict[int, str] | None = None) -> str:
        """Text of ``ids``; mask ids are dropped (a finished sample has none).  ``as_text``: ids written as the
        given text instead (a released Duo's ``[PAD]``, a state of its process at our mask id, which upstream's
        ``batch_decode`` writes as the string ``[PAD]``); the runs between them are decoded as usual."""
        ids = [int(i) for i in ids]
        if as_text:
            out, run = [], []
            for i in ids + [None]:
                if i is None or i in as_text:
                    out.append(self.decode(run))
                    run = []
                    if i is not None:
                        out.append(as_text[i])
                else:
                    run.append(i)
            return "".join(out)
        ids = [i for i in ids if i != self.mask_id]
        if self._rust is not None:
            return self._rust.decode(ids, skip_special_tokens=False)
        return self.hf.decode(ids, clean_up_tokenization_spaces=False)

    @property
    def tokens(self) -> list[str]:
        """Every token string in id order."""
        if self._rust is not None:
            return [self._rust.id_to_token(i) for i in range(self.vocab_size)]
        return self.hf.convert_ids_to_tokens(list(range(self.vocab_size)))

    def info(self) -> dict:
        vocab = self._rust.get_vocab() if self._rust is not None else self.hf.get_vocab()
        fp = hashlib.sha256(json.dumps(sorted(vocab.items())).encode()).hexdigest()[:16]
        return dict(
            kind=self.kind,
            vocab_size=self.vocab_size,
            mask_id=self.mask_id,
            bos_id=self.bos_id,
            eos_id=self.eos_id,
            fingerprint=fp,
        )

    def save(self, out_dir) -> None:
        """``save_pretrained`` (``tokenizer.json`` + configs) and the kind and special tokens (``unie_tokenizer.json``)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.hf.save_pretrained(out)
        (out / META).write_text(json.dumps({"kind": self.kind, "specials": self.specials}))

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, mask={self.mask_id}, eos={self.eos_id})"


def word_tokenizer(words: list[str], unk: bool = False) -> Tokenizer:
    """The toy world's word-level tokenizer: ``words`` in id order, then ``<eos>``, ``<bos>``, ``<mask>`` (and
    ``<unk>`` with ``unk=True``: the DLLM half's proxy must read any text a DLLM with another tokenizer writes,
    including words that do not exist; without it an unknown word is an error)."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import models, pre_tokenizers

    specials = {EOS, BOS, MASK, UNK}
    if any(w in specials for w in words):
        raise ValueError("word list must not contain the special tokens")
    if len(set(words)) != len(words):
        raise ValueError("word list has duplicates")
    if any(not w or w.split() != [w] for w in words):
        raise ValueError("words must be non-empty and contain no whitespace")
    extra = [EOS, BOS, MASK] + ([UNK] if unk else [])
    vocab = {w: i for i, w in enumerate(list(words) + extra)}
    rust = RustTokenizer(models.WordLevel(vocab, unk_token=UNK if unk else None))
    rust.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    rust.add_special_tokens(extra)
    return Tokenizer("word", rust=rust, specials={"eos_token": EOS, "bos_token": BOS, "mask_token": MASK})


def bpe_tokenizer(texts, vocab_size: int) -> Tokenizer:
    """A byte-pair-encoding tokenizer trained with the ``tokenizers`` library on ``texts`` (the LLaDA-like
    model's: it splits words differently from the word-level one, so Algorithm 3 must bridge the two).

    Metaspace pre-tokenisation (a piece never crosses a space; ``▁`` marks a word start), the three
    specials ``<eos>``, ``<bos>``, ``<mask>`` first; deterministic for the same texts."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    rust = RustTokenizer(models.BPE(unk_token=None))
    rust.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    rust.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, BOS, MASK], show_progress=False)
    rust.train_from_iterator(texts, trainer=trainer)
    return Tokenizer("bpe", rust=rust, specials={"eos_token": EOS, "bos_token": BOS, "mask_token": MASK})


def hf_tokenizer(path) -> Tokenizer:
    """A local Hugging Face fast tokenizer (never downloads), with a mask token appended if it has none."""
    from transformers import AutoTokenizer

    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"tokenizer directory {p} does not exist")
    hf = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    if not getattr(hf, "is_fast", False):
        raise ValueError(f"tokenizer at {p} is not a fast (Rust) tokenizer")
    if hf.mask_token_id is None:
        hf.add_special_tokens({"mask_token": HF_MASK})
    tok = Tokenizer("hf", hf=hf)
    tok.path = str(p)
    return tok


def load_tokenizer(path) -> Tokenizer:
    """Load a tokenizer directory written by :meth:`Tokenizer.save` (or any local HF tokenizer directory)."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"tokenizer directory {p} does not exist")
    meta = json.loads((p / META).read_text()) if (p / META).exists() else {"kind": "hf"}
    if meta["kind"] in ("word", "bpe"):
        from tokenizers import Tokenizer as RustTokenizer

        tok = Tokenizer(
            meta["kind"], rust=RustTokenizer.from_file(str(p / "tokenizer.json")), specials=meta["specials"]
        )
        tok.path = str(p)
        return tok
    return hf_tokenizer(p)


def blocked_ids(info: dict) -> list[int]:
    """Ids a model must never predict: the mask, and ``<bos>`` when it is a separate input-only token
    (the toy world's; GPT-2's BOS is its EOS, a real data token)."""
    ids = [info["mask_id"]]
    if info["bos_id"] != info["eos_id"]:
        ids.append(info["bos_id"])
    return ids
