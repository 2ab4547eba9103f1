"""An oracle AR proxy for the toy tasks: it knows each test item's reference answer (beyond the paper).

Uni-E's Algorithm 3 is only as good as its proxy.  In the toy world every item's answer is known, so the best
proxy there is can be written down: an AR model that puts probability ``1 - eps`` on the reference answer's next
token and spreads ``eps`` uniformly over the other ``V - 1`` tokens,

    p_oracle(y_j | prompt, y_<j) = (1 - eps) 1[y_j = r_j] + eps / (V - 1) 1[y_j != r_j],   j = 0 .. |r|,

with ``r`` the reference answer's tokens followed by ``<eos>`` (position ``j`` of the answer region, whatever the
tokens before it: a product of per-position distributions, so the chain rule holds and every sequence has positive
probability).  ``eps = 0`` would be the point mass; the ``eps``-smoothed oracle is the upper end of the proxy-strength
map (``docs/findings.md``), where any energy that trusts the proxy can only be steered toward the right answer.
The prompt's tokens and everything after the reference's ``<eos>`` get the uniform distribution ``1 / V``.  A DLLM
whose first answer piece glues onto the prompt's last word (a BPE piece ``2`` right after ``:`` reads as one unknown
word ``:2``) has that word scored as answer position 0 (it is not the reference's first word: ``eps / (V - 1)``).

It is a :class:`~unie.core.protocols.CausalLM` over the word-level tokenizer, so it plugs in wherever a proxy does:
through :class:`~unie.dllm.bridge.ProxyBridge` for Algorithm 3 (both backbones) and APD.  An oracle *checkpoint* is
a directory holding ``oracle.json`` (``{"kind": "oracle", "eps": ..., "references": {prompt: answer}}``) and the
word tokenizer (``tokenizer/``); :func:`unie.dllm.decoder.load_proxy` loads it when a row's ``proxy`` names one.  A
prompt it has no reference for is an error naming it (the oracle answers only the items it was written for).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from ..data.tokenizer import load_tokenizer
from .bridge import logits_next_token_logp, next_token_scores

ORACLE_FILE = "oracle.json"


class OracleLM:
    """The ``eps``-smoothed oracle (module doc): ``logits(x)`` ``(N, L)`` -> ``(N, L, V)`` log-probabilities,
    index ``i`` scoring token ``i + 1`` (Hugging Face's causal convention).  ``references``: prompt text ->
    reference answer text; ``tokenizer``: a word-level :class:`~unie.data.tokenizer.Tokenizer`."""

    def __init__(self, references: dict[str, str], tokenizer, eps: float = 0.05, path: str | None = None):
        if not 0.0 < eps < 1.0:
            raise ValueError(f"the oracle's eps must be in (0, 1), got {eps!r}")
        if not references:
            raise ValueError("an oracle needs at least one reference answer")
        self.tokenizer, self.eps, self.path = tokenizer, float(eps), path
        self.bos_id, self.eos_id = tokenizer.bos_id, tokenizer.eos_id
        self.vocab_size = tokenizer.vocab_size
        self.device = torch.device("cpu")
        V = self.vocab_size
        self.right, self.wrong, self.uniform = math.log1p(-self.eps), math.log(self.eps / (V - 1)), -math.log(V)
        prompts = list(references)
        # prompt length n -> the prompt's first n - 1 ids -> (its last id, reference ids + <eos>): keyed without the
        # last token, which a DLLM's first answer piece can glue onto (BPE ":" + "2" reads as one unknown word)
        self._refs: dict[int, dict[tuple, tuple[int, list[int]]]] = {}
        for p, ids, ans in zip(
            prompts, tokenizer.encode_batch(prompts), tokenizer.encode_batch([references[p] for p in prompts])
        ):
            if not ids:
                raise ValueError("an oracle reference needs a non-empty prompt")
            self._refs.setdefault(len(ids), {})[tuple(ids[:-1])] = (ids[-1], ans + [self.eos_id])
        self._lengths = sorted(self._refs, reverse=True)

    @classmethod
    def load(cls, directory) -> OracleLM:
        """An oracle checkpoint directory (module doc)."""
        d = Path(directory)
        spec = json.loads((d / ORACLE_FILE).read_text())
        if spec.get("kind") != "oracle":
            raise ValueError(f"{d / ORACLE_FILE} is not an oracle (kind {spec.get('kind')!r})")
        return cls(spec["references"], load_tokenizer(d / "tokenizer"), spec["eps"], path=str(d))

    def reference(self, ids: list[int]) -> tuple[int, list[int]]:
        """``(start, reference ids + <eos>)`` of a row ``ids`` = ``[<bos>, prompt..., answer...]``: the longest known
        prompt the row starts with, and the row position after which its answer starts (``start`` = the prompt's
        length, or one less when the row's last prompt token differs from the prompt's: the first answer word glued
        onto it, so that token stands for answer position 0).  A ``KeyError`` naming the text when there is none."""
        body = ids[1:]
        for n in self._lengths:
            hit = self._refs[n].get(tuple(body[: n - 1]))
            if hit is not None:
                last, ref = hit
                return (n if len(body) >= n and body[n - 1] == last else n - 1), ref
        raise KeyError(f"the oracle has no reference answer for the prompt of {self.tokenizer.decode(body)[:120]!r}")

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, L, V)`` float64 log-probabilities of the next token (module doc's ``p_oracle``)."""
        N, L = x.shape
        out = torch.full((N, L, self.vocab_size), self.uniform, dtype=torch.float64)
        rows, at, tokens = [], [], []
        for r, row in enumerate(x.tolist()):
            n, ref = self.reference(row)
            for j, token in enumerate(ref):
                i = n + j  # logits[i] scores row token i + 1 = answer position j (position 0 is <bos>)
                if i >= L:
                    break
                rows.append(r)
                at.append(i)
                tokens.append(token)
        if rows:  # one indexed write each (the same values as element by element)
            rows_t, at_t = torch.tensor(rows), torch.tensor(at)
            out[rows_t, at_t] = self.wrong
            out[rows_t, at_t, torch.tensor(tokens)] = self.right
        return out.to(x.device)

    @torch.no_grad()
    def next_token_logp(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, L)`` -> ``(N, L - 1)`` float64 on the CPU: ``log p(x[:, k + 1] | x[:, :k + 1])``, the entries of
        :meth:`logits` at the row's own next tokens, without the ``(N, L, V)`` tensor (what
        :class:`~unie.dllm.bridge.ProxyBridge` reads with ``on_model=True``)."""
        N, L = x.shape
        out = []
        for row in x.tolist():
            n, ref = self.reference(row)
            lp = [self.uniform] * (L - 1)
            for j, token in enumerate(ref):
                i = n + j  # logits[i] scores row token i + 1 = answer position j
                if i >= L - 1:
                    break
                lp[i] = self.right if row[i + 1] == token else self.wrong
            out.append(lp)
        return torch.tensor(out, dtype=torch.float64).reshape(N, L - 1)


def write_oracle(docs: list[dict], tokenizer_dir, out_dir, eps: float = 0.05) -> Path:
    """An oracle checkpoint (module doc) in ``out_dir`` for ``docs`` (task documents with ``question`` and
    ``answer``), reading the word tokenizer saved at ``tokenizer_dir``.  Returns ``out_dir``.  Two documents with
    the same prompt and different answers are an error (the oracle would not know which)."""
    import shutil

    refs: dict[str, str] = {}
    for d in docs:
        if refs.setdefault(d["question"], d["answer"]) != d["answer"]:
            raise ValueError(f"two reference answers for the prompt {d['question'][:80]!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tokenizer_dir, out / "tokenizer", dirs_exist_ok=True)
    OracleLM(refs, load_tokenizer(out / "tokenizer"), eps)  # refuses what it could not load
    tmp = out / (ORACLE_FILE + ".tmp")
    tmp.write_text(json.dumps({"kind": "oracle", "eps": eps, "references": refs}, indent=0, sort_keys=True))
    tmp.replace(out / ORACLE_FILE)
    return out


class RememberedLM:
    """A causal LM whose ``logits`` remember the last few inputs (by their bytes): the map reads one proxy directly and
    inside each mixture of the continuum, on the same candidates, within an iteration.  ``share_prefixes``: its
    next-token scores read with each common prefix once (a prompt's candidates: :meth:`ARModel.logits
    <unie.methods.ar.ARModel.logits>`; the same to float rounding), for an ARModel over unie's Transformer."""

    def __init__(self, lm, keep: int = 4, share_prefixes: bool = False):
        self.lm, self.keep, self._seen, self._tokens = lm, keep, {}, {}
        # a model whose logits take share_prefixes: an ARModel over unie's Transformer (not the oracle, which has its
        # own next-token scores, nor a Hugging Face model)
        self.share_prefixes = bool(share_prefixes) and hasattr(getattr(lm, "net", None), "forward_shared")
        for name in ("tokenizer", "bos_id", "eos_id", "vocab_size", "device", "path"):
            if hasattr(lm, name):
                setattr(self, name, getattr(lm, name))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), x.cpu().numpy().tobytes())
        if key not in self._seen:
            if len(self._seen) >= self.keep:
                self._seen.pop(next(iter(self._seen)))
            self._seen[key] = self.lm.logits(x)
        return self._seen[key]

    @torch.no_grad()
    def next_token_logp(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, L)`` -> ``(N, L - 1)`` float64 on the CPU: ``log p(x[:, k + 1] | x[:, :k + 1])``, remembered for the
        last ``4 * keep`` inputs (the remembered tensor itself: callers read it, never change it in place).  The
        model's own where it has one; else :func:`~unie.dllm.bridge.logits_next_token_logp`, what
        :class:`~unie.dllm.bridge.ProxyBridge` reads from ``logits`` (the same numbers, bit for bit, a test checks;
        with ``share_prefixes``, to float rounding)."""
        key = (tuple(x.shape), x.cpu().numpy().tobytes())
        if key not in self._tokens:
            if len(self._tokens) >= 4 * self.keep:
                self._tokens.pop(next(iter(self._tokens)))
            self._tokens[key] = (
                logits_next_token_logp(self.lm, x, share_prefixes=True)
                if self.share_prefixes
                else next_token_scores(self.lm, x)
            )
        return self._tokens[key]  # shared with later calls: read it, do not change it in place


class MixtureLM:
    """A proxy between a learned AR and the oracle: ``p = λ · p_oracle + (1 − λ) · p_proxy`` token by token (a proper
    AR distribution: the mixture of two next-token distributions), the judgement continuum of the map (``λ = 0``: the
    learned proxy, ``λ = 1``: the oracle).  Both models must read the same tokenizer (the word-level one)."""

    def __init__(self, oracle, proxy, lam: float):
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"a mixture weight must be in [0, 1], got {lam!r}")
        if oracle.tokenizer.info()["fingerprint"] != proxy.tokenizer.info()["fingerprint"]:
            raise ValueError("the oracle and the proxy of a mixture must read the same tokenizer")
        self.oracle, self.proxy, self.lam = oracle, proxy, float(lam)
        self.tokenizer, self.bos_id, self.eos_id = proxy.tokenizer, proxy.bos_id, proxy.eos_id
        self.vocab_size = proxy.tokenizer.vocab_size
        self.device = getattr(proxy, "device", torch.device("cpu"))

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, L, V)`` float64 log-probabilities of the next token under the mixture."""
        lo = self.oracle.logits(x.cpu()).double()
        lp = self.proxy.logits(x).double().log_softmax(-1).cpu()
        if self.lam == 0.0:
            return lp.to(x.device)
        if self.lam == 1.0:
            return lo.to(x.device)
        out = torch.logaddexp(lo + math.log(self.lam), lp + math.log1p(-self.lam))
        return out.to(x.device)

    @torch.no_grad()
    def next_token_logp(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, L)`` -> ``(N, L - 1)`` float64 on the CPU: ``log(λ p_oracle + (1 − λ) p_proxy)`` of the row's own next
        tokens, from the two models' own (:meth:`OracleLM.next_token_logp`, the proxy's float64 log-softmax), without
        the ``(N, L, V)`` tensors of :meth:`logits` (the mixture is normalised: the same numbers up to rounding)."""
        lo = self.oracle.next_token_logp(x.cpu())
        lp = next_token_scores(self.proxy, x)
        if self.lam == 0.0:
            return lp
        if self.lam == 1.0:
            return lo
        return torch.logaddexp(lo + math.log(self.lam), lp + math.log1p(-self.lam))


class TextOracleLM:
    """The ``eps``-smoothed oracle over any tokenizer (a Hugging Face one: the paper's proxy's), for real tasks whose
    reference is a text (GSM8K's worked solution).  ``references``: prompt text -> the reference completion *as the
    row continues the prompt* (with its leading space or newline, e.g. lm-eval's ``target_delimiter`` + answer).

    Per item, ``R`` = the tokens of ``prompt + reference`` followed by ``<eos>`` (the reference in context: where the
    tokenizer merges the prompt's last piece with the answer's first, ``R`` holds the merged token) and
    ``s = min(c, |P| - 1)``, with ``P`` the prompt's own tokens and ``c`` the length of the common prefix of ``P``
    and ``R``: the first position an answer can change (the prompt's last token, onto which a first answer piece can
    glue, or earlier where a merge reaches further back).  For a row ``[<bos>, y_0, y_1, ...]`` that continues the
    prompt,

        p(y_k | <bos>, y_<k) = (1 - eps) 1[y_k = R_k] + eps / (V - 1) 1[y_k != R_k]   for s <= k < |R|,
        p(y_k | <bos>, y_<k) = 1 / V                                                  otherwise,

    a product of per-position distributions (the chain rule holds; every sequence has positive probability); ``V``
    is the tokenizer's size.  On a word-level tokenizer its answer positions are :class:`OracleLM`'s.  The item is
    the longest known prompt the row's text starts with (a ``KeyError`` naming the text when there is none).

    :meth:`next_token_logp` scores a row's own tokens without the ``(N, L, V)`` tensor of :meth:`logits` (1.2 GB per
    row of 1,000 tokens at Qwen2.5's 151,666 ids): what :class:`~unie.dllm.bridge.ProxyBridge` reads with
    ``on_model=True``."""

    def __init__(self, references: dict[str, str], tokenizer, eps: float = 0.05):
        if not 0.0 < eps < 1.0:
            raise ValueError(f"the oracle's eps must be in (0, 1), got {eps!r}")
        if not references:
            raise ValueError("an oracle needs at least one reference answer")
        self.tokenizer, self.eps = tokenizer, float(eps)
        self.bos_id, self.eos_id = tokenizer.bos_id, tokenizer.eos_id
        self.vocab_size = tokenizer.vocab_size
        self.device = torch.device("cpu")
        self.right, self.wrong = math.log1p(-self.eps), math.log(self.eps / (self.vocab_size - 1))
        self.uniform = -math.log(self.vocab_size)
        prompts = list(references)
        self._items: dict[str, tuple[int, list[int]]] = {}  # prompt text -> (s, R)
        for p, ids, whole in zip(
            prompts, tokenizer.encode_batch(prompts), tokenizer.encode_batch([p + references[p] for p in prompts])
        ):
            if not ids:
                raise ValueError("an oracle reference needs a non-empty prompt")
            c = next((k for k, (a, b) in enumerate(zip(ids, whole)) if a != b), min(len(ids), len(whole)))
            self._items[p] = (min(c, len(ids) - 1), whole + [self.eos_id])
        self._by_length = sorted(self._items, key=len, reverse=True)

    def reference(self, ids: list[int]) -> tuple[int, list[int]]:
        """``(s, R)`` of a row ``ids`` = ``[<bos>, y_0, ...]`` (class doc): the longest known prompt its text starts
        with; failing that, the known prompt that shares the longest beginning with it, if that covers 90 % of the
        prompt and no other prompt shares as much (the bridge rebuilds a row's text piece by piece, so a character
        that a byte-level tokenizer splits over two pieces can come back as U+FFFD: the item stays the same, its
        positions may shift)."""
        text = self.tokenizer.decode(ids[1:])
        for p in self._by_length:
            if text.startswith(p):
                return self._items[p]
        shared = sorted(((len(os.path.commonprefix([p, text])), p) for p in self._items), reverse=True)
        if shared and shared[0][0] >= 0.9 * len(shared[0][1]) and (len(shared) == 1 or shared[1][0] < shared[0][0]):
            return self._items[shared[0][1]]
        raise KeyError(f"the oracle has no reference answer for the prompt of {text[:120]!r}")

    def _row(self, ids: list[int]) -> list[float]:
        """``log p(y_k | <bos>, y_<k)`` of the row's own tokens ``y_k = ids[k + 1]``, ``k = 0 .. len(ids) - 2``."""
        s, R = self.reference(ids)
        body = ids[1:]
        return [
            self.uniform if k < s or k >= len(R) else (self.right if y == R[k] else self.wrong)
            for k, y in enumerate(body)
        ]

    @torch.no_grad()
    def next_token_logp(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, L)`` -> ``(N, L - 1)`` float64 on the CPU: ``log p(x[:, k + 1] | x[:, :k + 1])``."""
        return torch.tensor([self._row(row) for row in x.tolist()], dtype=torch.float64).reshape(x.shape[0], -1)

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, L, V)`` float64 log-probabilities of the next token (class doc), index ``i`` scoring token ``i + 1``
        (a small vocabulary's: the tests read it against :meth:`next_token_logp`)."""
        N, L = x.shape
        out = torch.full((N, L, self.vocab_size), self.uniform, dtype=torch.float64)
        for r, row in enumerate(x.tolist()):
            s, R = self.reference(row)
            for k in range(s, min(len(R), L)):
                out[r, k] = self.wrong
                out[r, k, R[k]] = self.right
        return out.to(x.device)
