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

EOS, BOS, MASK = "<eos>", "<bos>", "<mask>"
HF_MASK = "<|mask|>"  # the mask token appended to a Hugging Face vocabulary that has none
META = "unie_tokenizer.json"  # which kind of tokenizer a directory holds (word or hf)


class Tokenizer:
    """``encode``/``decode`` text, ``vocab_size``, ``mask_id``, ``bos_id``, ``eos_id`` over a fast HF tokenizer.

    ``kind`` is ``word`` (the toy world) or ``hf`` (a pretrained tokenizer).  ``bos_id`` is the tokenizer's
    BOS, or its EOS when it has none (GPT-2's BOS is its EOS)."""

    def __init__(self, hf, kind: str):
        if hf.mask_token_id is None:
            raise ValueError("the tokenizer has no mask token (use word_tokenizer or hf_tokenizer)")
        if hf.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token")
        self.hf, self.kind = hf, kind
        self.mask_id = hf.mask_token_id
        self.eos_id = hf.eos_token_id
        self.bos_id = hf.bos_token_id if hf.bos_token_id is not None else self.eos_id
        self.vocab_size = len(hf)

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text (no special tokens added); an out-of-vocabulary word is a ``ValueError`` naming it."""
        try:
            return self.hf(list(texts), add_special_tokens=False)["input_ids"]
        except Exception as e:  # WordLevel without an unknown token refuses unknown words
            if self.kind != "word":
                raise
            vocab = self.hf.get_vocab()
            unknown = sorted({w for t in texts for w in t.split() if w not in vocab})
            raise ValueError(f"word {unknown[0]!r} is not in the vocabulary" if unknown else str(e)) from None

    def decode(self, ids) -> str:
        """Text of ``ids``; mask ids are dropped (a finished sample has none)."""
        return self.hf.decode([int(i) for i in ids if int(i) != self.mask_id], clean_up_tokenization_spaces=False)

    @property
    def tokens(self) -> list[str]:
        """Every token string in id order."""
        return self.hf.convert_ids_to_tokens(list(range(self.vocab_size)))

    def info(self) -> dict:
        fp = hashlib.sha256(json.dumps(sorted(self.hf.get_vocab().items())).encode()).hexdigest()[:16]
        return dict(kind=self.kind, vocab_size=self.vocab_size, mask_id=self.mask_id, bos_id=self.bos_id,
                    eos_id=self.eos_id, fingerprint=fp)

    def save(self, out_dir) -> None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.hf.save_pretrained(out)
        (out / META).write_text(json.dumps({"kind": self.kind}))

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, mask={self.mask_id}, eos={self.eos_id})"


def word_tokenizer(words: list[str]) -> Tokenizer:
    """The toy world's word-level tokenizer: ``words`` in id order, then ``<eos>``, ``<bos>``, ``<mask>``."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = {EOS, BOS, MASK}
    if any(w in specials for w in words):
        raise ValueError("word list must not contain the special tokens")
    if len(set(words)) != len(words):
        raise ValueError("word list has duplicates")
    if any(not w or w.split() != [w] for w in words):
        raise ValueError("words must be non-empty and contain no whitespace")
    vocab = {w: i for i, w in enumerate(list(words) + [EOS, BOS, MASK])}
    rust = RustTokenizer(models.WordLevel(vocab, unk_token=None))
    rust.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf = PreTrainedTokenizerFast(tokenizer_object=rust, eos_token=EOS, bos_token=BOS, mask_token=MASK,
                                 clean_up_tokenization_spaces=False)
    return Tokenizer(hf, "word")


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
    tok = Tokenizer(hf, "hf")
    tok.path = str(p)
    return tok


def load_tokenizer(path) -> Tokenizer:
    """Load a tokenizer directory written by :meth:`Tokenizer.save` (or any local HF tokenizer directory)."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"tokenizer directory {p} does not exist")
    kind = json.loads((p / META).read_text())["kind"] if (p / META).exists() else "hf"
    if kind == "word":
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer(PreTrainedTokenizerFast.from_pretrained(str(p), local_files_only=True), "word")
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
