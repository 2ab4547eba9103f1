"""Generative-perplexity evaluators (each built once per job by the pipeline and passed all samples).

Every evaluator takes *text* (samples are decoded with the generator's tokenizer and re-encoded with the
evaluator's own) and returns per-sequence NLLs and token counts, which are pooled over all samples
(:func:`unie.eval.metrics.ppl_with_se`).  Kinds (registry :data:`unie.core.registry.EVALUATORS`):

* ``exact``: the toy world's true distribution ``pi`` (the "Data distribution itself").
* ``model``: one of our trained AR checkpoints (the toy profile's GPT-2-size proxy and large AR).
* ``hf``: a Hugging Face causal LM (GPT-2-large, Llama-2/3 in the paper profile), scored in batches.

EOS rule (``eos_rule``): ``all`` scores every token, including each ``<eos>`` and all text after the first
one (the toy world's windows are stationary streams whose ``<eos>`` tokens are document boundaries);
``first`` follows MDLM: ``<eos>`` targets after the first one get weight 0, non-EOS text after it is
still scored.

Precision: the pipeline runs ``score`` under :func:`unie.core.precision.autocast`; the log-probabilities are taken
from float32 logits and summed in float64 whatever the precision (an ``hf`` evaluator's weights keep their
``dtype``).
"""

from __future__ import annotations

import torch

from ..core.registry import EVALUATORS


def eos_weights(ids: torch.Tensor, eos_id: int, rule: str) -> torch.Tensor:
    """Per-target weights ``(B, L)`` for the EOS rule."""
    if rule == "all":
        return torch.ones_like(ids, dtype=torch.float64)
    if rule == "first":
        is_eos = ids == eos_id
        later = is_eos & (is_eos.cumsum(-1) > 1)
        return (~later).double()
    raise ValueError(f"unknown eos_rule {rule!r}; known: all, first")


@EVALUATORS.register("exact")
class ExactEvaluator:
    """``-log pi(x)`` under the toy world's HMM for a domain."""

    def __init__(self, tokenizer, domain: str = "owt", eos_rule: str = "all"):
        from ..data.toy_world import HMM

        if eos_rule != "all":
            raise ValueError("the exact evaluator scores whole windows: eos_rule must be 'all'")
        self.tok = tokenizer
        self.hmm = HMM(domain)
        if tokenizer.vocab_size != self.hmm.V + 2:
            raise ValueError("the exact evaluator needs the toy world's word tokenizer")

    def score(self, texts: list[str], batch_size: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
        nll, ntok = [], []
        for group, idx in _by_length(self.tok.encode_batch(texts)):
            x = torch.tensor(group)
            if (x >= self.hmm.V).any():
                raise ValueError("a sample contains <bos>/<mask>: it is not a finished sequence")
            for s in range(0, len(x), batch_size):
                nll.append((idx[s : s + batch_size], -self.hmm.log_marginal(x[s : s + batch_size])))
                ntok.append(
                    (
                        idx[s : s + batch_size],
                        torch.full((len(x[s : s + batch_size]),), x.shape[1], dtype=torch.float64),
                    )
                )
        return _reorder(nll, len(texts)), _reorder(ntok, len(texts))


@EVALUATORS.register("model")
class ModelEvaluator:
    """One of our AR models (``model.logp_next``) with its own tokenizer."""

    def __init__(self, tokenizer, model, eos_rule: str = "all"):
        self.tok, self.model, self.eos_rule = tokenizer, model, eos_rule

    @torch.no_grad()
    def score(self, texts: list[str], batch_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
        nll, ntok = [], []
        for group, idx in _by_length(self.tok.encode_batch(texts)):
            x = torch.tensor(group)
            for s in range(0, len(x), batch_size):
                xb = x[s : s + batch_size]
                lp = (
                    self.model.logp_next(xb)
                    .gather(-1, xb[..., None].to(self.model.net.device))
                    .squeeze(-1)
                    .double()
                    .cpu()
                )
                w = eos_weights(xb, self.tok.eos_id, self.eos_rule)
                nll.append((idx[s : s + batch_size], -(lp * w).sum(-1)))
                ntok.append((idx[s : s + batch_size], w.sum(-1)))
        return _reorder(nll, len(texts)), _reorder(ntok, len(texts))


@EVALUATORS.register("hf")
class HFEvaluator:
    """A Hugging Face causal LM and its tokenizer.  Texts are encoded with its tokenizer, a BOS is prepended
    when the tokenizer has one (else EOS, as for GPT-2) so the first token is scored too, and sequences are
    truncated to ``max_length`` tokens (MDLM's protocol truncates at 1024).  ``batch_size`` texts go through
    one forward pass, right-padded with an attention mask (padding never changes a causal LM's scores of
    the real tokens; padded targets get weight 0)."""

    def __init__(self, model, hf_tokenizer, eos_rule: str = "first", max_length: int = 1024, batch_size: int = 8):
        self.model, self.tok = model.eval(), hf_tokenizer
        self.device = next(model.parameters()).device
        self.max_length, self.eos_rule, self.batch_size = max_length, eos_rule, batch_size
        self.start = self.tok.bos_token_id if self.tok.bos_token_id is not None else self.tok.eos_token_id

    @torch.no_grad()
    def score(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = [
            [self.start] + ids[: self.max_length - 1]
            for ids in self.tok(list(texts), add_special_tokens=False)["input_ids"]
        ]
        nll = torch.zeros(len(texts), dtype=torch.float64)
        ntok = torch.zeros(len(texts), dtype=torch.float64)
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))  # similar lengths share a batch
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            width = max(len(seqs[i]) for i in idx)
            x = torch.zeros(len(idx), width, dtype=torch.long)
            real = torch.zeros(len(idx), width, dtype=torch.bool)
            for r, i in enumerate(idx):
                x[r, : len(seqs[i])] = torch.tensor(seqs[i])
                real[r, : len(seqs[i])] = True
            logits = self.model(x.to(self.device), attention_mask=real.long().to(self.device)).logits.float()
            lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, x[:, 1:, None].to(self.device)).squeeze(-1)
            w = eos_weights(x[:, 1:], self.tok.eos_token_id, self.eos_rule) * real[:, 1:].double()
            nll[idx] = -(lp.double().cpu() * w).sum(-1)
            ntok[idx] = w.sum(-1)
        return nll, ntok


def _by_length(seqs: list[list[int]]):
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(seqs):
        groups.setdefault(len(s), []).append(i)
    for _, idx in sorted(groups.items()):
        yield [seqs[i] for i in idx], idx


def _reorder(parts, n):
    out = torch.zeros(n, dtype=torch.float64)
    for idx, vals in parts:
        out[torch.tensor(idx)] = vals.double()
    return out
