"""Generative-perplexity evaluators, loaded once per job.

Every evaluator takes *text* (samples are decoded with the generator's tokenizer and re-encoded with
the evaluator's own) and returns per-sequence NLLs and token counts, which are pooled over all
samples.  Kinds:

* ``exact``: the toy world's true distribution ``pi`` (the "Data distribution itself").
* ``model``: one of our trained AR checkpoints (the toy profile's GPT-2-size proxy and large AR).
* ``hf``: a local Hugging Face causal LM (GPT-2-large, Llama-2/3 in the paper profile).

EOS rule (``eos_rule``): ``all`` scores every token, including each ``<eos>`` and all text after the
first one (the toy world's windows are stationary streams whose ``<eos>`` tokens are document
boundaries); ``first`` follows MDLM: ``<eos>`` targets after the first one get weight 0, non-EOS text
after it is still scored.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..core.registry import Registry


EVALUATORS = Registry("evaluator")


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

    def __init__(self, tokenizer, domain: str = "owt", eos_rule: str = "all", **_):
        from ..data.toy_world import HMM

        if eos_rule != "all":
            raise ValueError("the exact evaluator scores whole windows: eos_rule must be 'all'")
        self.tok = tokenizer
        self.hmm = HMM(domain)
        if tokenizer.vocab_size != self.hmm.V + 2:
            raise ValueError("the exact evaluator needs the toy world's word tokenizer")

    def score(self, texts: list[str], batch_size: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
        nll, ntok = [], []
        for group, idx in _by_length([self.tok.encode(t) for t in texts]):
            x = torch.tensor(group)
            if (x >= self.hmm.V).any():
                raise ValueError("a sample contains <bos>/<mask>: it is not a finished sequence")
            for s in range(0, len(x), batch_size):
                nll.append((idx[s:s + batch_size], -self.hmm.log_marginal(x[s:s + batch_size])))
                ntok.append((idx[s:s + batch_size], torch.full((len(x[s:s + batch_size]),), x.shape[1], dtype=torch.float64)))
        return _reorder(nll, len(texts)), _reorder(ntok, len(texts))


@EVALUATORS.register("model")
class ModelEvaluator:
    """One of our AR checkpoints (with its own tokenizer directory)."""

    def __init__(self, tokenizer, path: str, tokenizer_dir: str | None = None, eos_rule: str = "all",
                 device: str = "cpu", **_):
        from ..methods.ar import ARModel
        from ..models.checkpoint import load_model
        from ..data.tokenizer import load_tokenizer

        self.tok = load_tokenizer(tokenizer_dir) if tokenizer_dir else tokenizer
        net, meta = load_model(path, device=device, tokenizer_info=self.tok.info(), expect_method="ar")
        self.model = ARModel(net, self.tok.bos_id, self.tok.mask_id)
        self.eos_rule = eos_rule

    @torch.no_grad()
    def score(self, texts: list[str], batch_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
        nll, ntok = [], []
        for group, idx in _by_length([self.tok.encode(t) for t in texts]):
            x = torch.tensor(group)
            for s in range(0, len(x), batch_size):
                xb = x[s:s + batch_size]
                lp = self.model.logp_next(xb).gather(-1, xb[..., None].to(self.model.net.device)).squeeze(-1).double().cpu()
                w = eos_weights(xb, self.tok.eos_id, self.eos_rule)
                nll.append((idx[s:s + batch_size], -(lp * w).sum(-1)))
                ntok.append((idx[s:s + batch_size], w.sum(-1)))
        return _reorder(nll, len(texts)), _reorder(ntok, len(texts))


@EVALUATORS.register("hf")
class HFEvaluator:
    """A local Hugging Face causal LM (never downloads).  Texts are encoded with its tokenizer, a BOS is
    prepended when the tokenizer has one (else EOS, as for GPT-2) so the first token is scored too, and
    sequences are truncated to ``max_length`` tokens (MDLM's protocol truncates at 1024)."""

    def __init__(self, tokenizer, path: str, eos_rule: str = "first", device: str = "cpu",
                 max_length: int = 1024, dtype: str = "float32", **_):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not Path(path).exists():
            raise FileNotFoundError(f"evaluator {path} does not exist locally (the workflow never downloads it)")
        self.tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                          dtype=getattr(torch, dtype)).to(device).eval()
        self.device = device
        self.max_length = max_length
        self.eos_rule = eos_rule
        self.start = self.tok.bos_token_id if self.tok.bos_token_id is not None else self.tok.eos_token_id

    @torch.no_grad()
    def score(self, texts: list[str], batch_size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
        nll = torch.zeros(len(texts), dtype=torch.float64)
        ntok = torch.zeros(len(texts), dtype=torch.float64)
        for i, text in enumerate(texts):
            ids = self.tok(text, add_special_tokens=False)["input_ids"][: self.max_length - 1]
            x = torch.tensor([[self.start] + ids], device=self.device)
            logits = self.model(x).logits.float()
            lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, x[:, 1:, None]).squeeze(-1).double().cpu()
            w = eos_weights(x[:, 1:].cpu(), self.tok.eos_token_id, self.eos_rule)
            nll[i] = -(lp * w).sum()
            ntok[i] = w.sum()
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


def make_evaluator(spec: dict, tokenizer, device: str = "cpu"):
    """Build an evaluator from a config entry ``{kind: exact|model|hf, ...}``."""
    spec = dict(spec)
    kind = spec.pop("kind")
    spec.pop("label", None)
    return EVALUATORS[kind](tokenizer, device=device, **spec)
