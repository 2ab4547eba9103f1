"""Tokenizers with one interface: ``encode``, ``decode``, ``vocab_size``, ``mask_id``, ``bos_id``, ``eos_id``.

* ``word``: the toy world's word-level vocabulary (words, then ``<eos>``, ``<bos>``, ``<mask>``).
* ``hf``: a Hugging Face tokenizer saved locally (GPT-2 for the paper profile) with a mask token
  appended as the last id, as MDLM does (GPT-2: 50,257 tokens + mask = 50,258, BOS = EOS = 50256).

A tokenizer is saved to a directory and loaded back with :func:`load_tokenizer`; ``info()`` is the
fingerprint stored in every checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..core.registry import TOKENIZERS


EOS, BOS, MASK = "<eos>", "<bos>", "<mask>"


@TOKENIZERS.register("word")
class WordTokenizer:
    kind = "word"

    def __init__(self, words: list[str]):
        specials = {EOS, BOS, MASK}
        if any(w in specials for w in words):
            raise ValueError("word list must not contain the special tokens")
        if len(set(words)) != len(words):
            raise ValueError("word list has duplicates")
        self.tokens = list(words) + [EOS, BOS, MASK]
        self.index = {w: i for i, w in enumerate(self.tokens)}
        self.eos_id, self.bos_id, self.mask_id = (self.index[s] for s in (EOS, BOS, MASK))
        self.vocab_size = len(self.tokens)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.index[w] for w in text.split()]
        except KeyError as e:
            raise ValueError(f"word {e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids) -> str:
        return " ".join(self.tokens[int(i)] for i in ids)

    def info(self) -> dict:
        fp = hashlib.sha256("\n".join(self.tokens).encode()).hexdigest()[:16]
        return dict(kind=self.kind, vocab_size=self.vocab_size, mask_id=self.mask_id, bos_id=self.bos_id,
                    eos_id=self.eos_id, fingerprint=fp)

    def save(self, out_dir) -> None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "tokenizer.json").write_text(json.dumps({"kind": "word", "tokens": self.tokens}, indent=0))

    @classmethod
    def from_dir(cls, path) -> "WordTokenizer":
        d = json.loads((Path(path) / "tokenizer.json").read_text())
        return cls([t for t in d["tokens"] if t not in (EOS, BOS, MASK)])


@TOKENIZERS.register("hf")
class HFTokenizer:
    """A local Hugging Face tokenizer plus an appended mask id (never downloads)."""

    kind = "hf"

    def __init__(self, path):
        from transformers import AutoTokenizer

        self.path = str(path)
        self.tok = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        eos = self.tok.eos_token_id
        if eos is None:
            raise ValueError(f"tokenizer at {path} has no EOS token")
        self.eos_id = eos
        self.bos_id = self.tok.bos_token_id if self.tok.bos_token_id is not None else eos
        self.mask_id = len(self.tok)  # one extra id after the tokenizer's own vocabulary
        self.vocab_size = self.mask_id + 1

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids if int(i) != self.mask_id]
        return self.tok.decode(ids)

    def info(self) -> dict:
        vocab = self.tok.get_vocab()
        fp = hashlib.sha256(json.dumps(sorted(vocab.items())).encode()).hexdigest()[:16]
        return dict(kind=self.kind, vocab_size=self.vocab_size, mask_id=self.mask_id, bos_id=self.bos_id,
                    eos_id=self.eos_id, fingerprint=fp)

    def save(self, out_dir) -> None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.tok.save_pretrained(out)
        (out / "tokenizer.json.unie").write_text(json.dumps({"kind": "hf"}))

    @classmethod
    def from_dir(cls, path) -> "HFTokenizer":
        return cls(path)


def blocked_ids(info: dict) -> list[int]:
    """Ids a denoiser must never predict: the mask, and ``<bos>`` when it is a separate input-only token
    (the toy world's; GPT-2's BOS is its EOS, a real data token)."""
    ids = [info["mask_id"]]
    if info["bos_id"] != info["eos_id"]:
        ids.append(info["bos_id"])
    return ids


def load_tokenizer(path):
    """Load a tokenizer directory written by ``save`` (word-level or Hugging Face)."""
    p = Path(path)
    if (p / "tokenizer.json").exists():
        try:
            d = json.loads((p / "tokenizer.json").read_text())
        except json.JSONDecodeError:
            d = {}
        if d.get("kind") == "word":
            return WordTokenizer.from_dir(p)
    if not p.exists():
        raise FileNotFoundError(f"tokenizer directory {p} does not exist")
    return HFTokenizer(p)
