"""The two tiny DLLM backbones of Table 3 and their own decoders (``docs/baselines.md``, LLaDA and Dream).

* **LLaDA-like** (``llada``): a bidirectional mask predictor with SUBS, LLaDA's loss, normalised by ``B·L`` in
  pretraining and by the answer length in SFT (LLaDA's SFT: the prompt is never masked; the ``<eos>`` padding
  of the answer is trained), estimated in one of two forms (:class:`DLLMOptions`): ``time`` (``t ~ U(0, 1)``,
  ``p_mask = (1 - eps) t + eps``, each target masked independently, ``Σ_masked CE / p_mask``) or ``count``
  (``l ~ U{1..n}`` of a row's ``n`` targets masked, ``Σ_masked CE · n / l``; the toy profile's choice).
* **Dream-like** (``dream``): the same loss with Dream's *shifted* prediction: the network's output at
  position ``i`` predicts token ``i + 1`` (it is initialised from an AR checkpoint, whose head does exactly
  that); every caller re-aligns with ``logits <- [logits[:, :1], logits[:, :-1]]`` (Dream issue #31).

Decoding (:func:`decode`) is semi-autoregressive over blocks of ``block_length`` (TraceRL's static decoding,
the Uni-E paper's DLLM setting): inside a block, ``m = tokens_per_step`` masked positions are committed per
iteration, chosen by the backbone's confidence rule -- ``low_confidence`` (LLaDA: the probability of the
greedy token) or ``entropy`` (Dream: the negative entropy of the position's distribution) -- with greedy
tokens (temperature 0, LLaDA's and Dream's evaluation default).  Committed tokens are never revised.

:func:`mc_loglikelihood` is LLaDA's Monte-Carlo ELBO of a continuation (stratified masked counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.gumbel import uniform
from ..core.options import make_options
from ..core.registry import METHODS, register_dllm_sampler
from ..data.dllm_format import split_rows
from ..data.tokenizer import blocked_ids
from ..methods.mdlm import block_logits

CONFIDENCES = ("low_confidence", "entropy")


class DLLM:
    """A trained network as a :class:`~unie.core.protocols.DLLMBackbone`: ``logits(x)`` aligned (position ``i``
    predicts token ``i``), ``mask_id``, ``eos_id``, ``bos_id``; ``tokenizer`` is attached by the loader."""

    def __init__(self, net, tokenizer_info: dict, shift: bool):
        self.net, self.shift = net, shift
        self.mask_id, self.eos_id, self.bos_id = (tokenizer_info[k] for k in ("mask_id", "eos_id", "bos_id"))
        self.blocked = tuple(blocked_ids(tokenizer_info))
        self.vocab_size = net.cfg.vocab_size
        self.tokenizer = None

    def aligned(self, raw: torch.Tensor) -> torch.Tensor:
        return torch.cat([raw[:, :1], raw[:, :-1]], dim=1) if self.shift else raw

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.aligned(self.net(x.to(self.net.device))).float()

    @torch.no_grad()
    def logits_and_attention(self, x: torch.Tensor, n_layers: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass: aligned logits ``(B, T, V)`` (as :meth:`logits`) and the softmax attention
        probabilities of the last ``n_layers`` layers averaged over heads and layers, ``A`` ``(B, T, T)`` float32
        (row ``i`` = query, column ``j`` = key; rows sum to 1).  ``A`` is indexed by network positions, not
        re-aligned for a shifted (Dream-like) model, as DAWN's Dream code does."""
        raw, probs = self.net(x.to(self.net.device), return_attn=n_layers)
        return self.aligned(raw).float(), torch.stack(probs).mean(dim=(0, 2))


def normalise(logits: torch.Tensor, blocked) -> torch.Tensor:
    """``log p_theta(x0_i = v | xt)`` ``(B, L, V)`` with the ``blocked`` ids (mask, input-only ``<bos>``) at -inf."""
    return F.log_softmax(block_logits(logits, blocked), dim=-1)


ESTIMATORS = ("time", "count")


DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's HFLM default: the most tokens a request asks for when its task sets none


@dataclass(frozen=True)
class DLLMOptions:
    """LLaDA's loss and which of its two Monte-Carlo forms estimates it.

    ``estimator="time"``: ``t ~ U(0, 1)``, each target position masked with ``p_mask = (1 - eps) t + eps``,
    weight ``1 / p_mask`` (LLaDA's Eq. 3 / its SFT loss).  ``"count"``: ``l ~ U{1, ..., n}`` of a row's ``n``
    target positions masked uniformly at random, weight ``n / l`` (the equivalent lower-variance form LLaDA
    gives for its likelihood: for ``eps -> 0`` both equal ``sum_k g(k) / k`` with ``g(k)`` the expected summed
    cross-entropy of ``k`` masked positions, since ``int_0^1 C(n,k) t^k (1-t)^(n-k) / t dt = 1 / k``).  The
    ``"time"`` form's ``1/t`` lets a row with small ``t`` dominate a batch's gradient; the ``"count"`` form
    bounds the weight by ``n``."""

    eps: float = 1e-3
    estimator: str = "time"

    def __post_init__(self):
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown loss estimator {self.estimator!r}; known: {', '.join(ESTIMATORS)}")


class _MaskPredictor:
    Options = DLLMOptions
    causal = False
    time_conditioned = False
    has_likelihood = False
    shift = False

    def __init__(self, tokenizer_info: dict, options: DLLMOptions | dict | None = None, **kwargs):
        self.options = make_options(DLLMOptions, options, f"{type(self).__name__.lower()} options", **kwargs)
        self.info = tokenizer_info
        self.mask_id = tokenizer_info["mask_id"]
        self.blocked = tuple(blocked_ids(tokenizer_info))

    @staticmethod
    def kind(options) -> str:
        return "dllm"

    def wrap(self, net) -> DLLM:
        return DLLM(net, self.info, self.shift)

    def loss(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """LLaDA's loss on pretraining rows ``(B, L)`` (per ``B·L``) or SFT rows ``(B, 2, L)`` (per answer token)."""
        sft = x0.dim() == 3
        x0, target = split_rows(x0)
        if self.options.estimator == "time":
            eps = self.options.eps
            t = uniform((x0.shape[0], 1), generator, x0.device)
            p_mask = (1 - eps) * t + eps
            masked = (uniform(x0.shape, generator, x0.device) < p_mask) & target
        else:  # "count": l ~ U{1..n} of the n target positions, the l with the smallest uniform keys
            n = target.sum(-1, keepdim=True)
            l = (uniform((x0.shape[0], 1), generator, x0.device) * n).floor().long() + 1  # u < 1: l <= max(n, 1)
            keys = uniform(x0.shape, generator, x0.device).masked_fill(~target, 2.0)  # targets first
            rank = keys.argsort(-1).argsort(-1)
            masked = (rank < l) & target
            p_mask = l / n.clamp(min=1)  # weight n / l
        xt = torch.where(masked, torch.full_like(x0, self.mask_id), x0)
        logp = normalise(self.wrap(net).aligned(net(xt)), self.blocked)
        ce = -logp.gather(-1, x0[..., None]).squeeze(-1)
        per_token = torch.where(masked, ce / p_mask.float(), torch.zeros_like(ce))
        if sft:
            return (per_token.sum(-1) / target.sum(-1).clamp(min=1)).mean()
        return per_token.sum() / x0.numel()


@METHODS.register("llada")
class LLaDA(_MaskPredictor):
    """LLaDA-like mask predictor (options: :class:`DLLMOptions`)."""


@METHODS.register("dream")
class Dream(_MaskPredictor):
    """Dream-like mask predictor with shifted prediction (options: :class:`DLLMOptions`)."""

    shift = True


# ---------------------------------------------------------------------- decoding
@dataclass(frozen=True)
class DecodeOptions:
    """The backbone's own decoder: ``gen_length`` new tokens in blocks of ``block_length``, ``tokens_per_step``
    (the paper's static ``m = 4``) committed per iteration by the ``confidence`` rule.

    ``early_exit``: stop once every row is :func:`settled` (a committed ``<eos>`` with no mask before it) and fill
    the rest with ``<eos>``.  Exact for the completions: a completion is the text before its first ``<eos>``, and
    a sampler that never revises a committed token (every one here; CoRe checks after a block's revision) cannot
    change it afterwards; only the forward count falls (the iterations that would decode ``<eos>`` padding).
    The paper's grid and Algorithm 3's window still count the ``N = gen_length / m`` iterations.

    ``horizon``: the network sees the prompt, the decoded blocks, the current block and at most ``horizon``
    positions beyond it (TraceRL's ``further_horizon``, the released Uni-E code's setting: 128 beyond a block of
    32); positions further on are read as ``<eos>`` padding (:class:`Horizon`).  None: the whole canvas (LLaDA's
    and Dream's own ``generate``)."""

    gen_length: int = 16
    block_length: int = 8
    tokens_per_step: int = 4
    confidence: str = "low_confidence"
    early_exit: bool = True
    horizon: int | None = None

    def __post_init__(self):
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"unknown confidence rule {self.confidence!r}; known: {', '.join(CONFIDENCES)}")
        if self.horizon is not None and (isinstance(self.horizon, bool) or self.horizon < 0):
            raise ValueError(f"horizon must be None or >= 0, got {self.horizon!r}")
        if self.gen_length % self.block_length or self.block_length % self.tokens_per_step:
            raise ValueError(
                f"gen_length ({self.gen_length}) must be a multiple of block_length ({self.block_length}) "
                f"and block_length of tokens_per_step ({self.tokens_per_step})"
            )

    @property
    def iterations(self) -> int:
        """Decoding iterations ``N = gen_length / m`` (the paper's grid ``t = 1, 1 - m/L, ..., m/L``)."""
        return self.gen_length // self.tokens_per_step


def confidence(logp: torch.Tensor, tokens: torch.Tensor, rule: str) -> torch.Tensor:
    """Confidence ``(..., L)`` of committing ``tokens`` ``(..., L)`` under ``logp`` ``(B, L, V)``.

    ``low_confidence``: ``p_theta(token)`` (LLaDA); ``entropy``: ``-H(p_theta)`` of the position (Dream; the same
    for every candidate token)."""
    if tokens.dim() == 3:  # (B, K, L) candidates
        logp_k = logp[:, None].expand(-1, tokens.shape[1], -1, -1)
    else:
        logp_k = logp
    if rule == "low_confidence":
        return logp_k.gather(-1, tokens[..., None]).squeeze(-1).exp()
    p = logp.exp()
    neg_h = torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1)
    return neg_h[:, None].expand_as(tokens) if tokens.dim() == 3 else neg_h


def settled(x: torch.Tensor, prompt_len: int, eos_id: int, mask_id: int) -> torch.Tensor:
    """Per row ``(B,)``: the generation region ``x[:, prompt_len:]`` holds a committed ``<eos>`` with no mask before
    it, so the completion (the text before the first ``<eos>``) is final for a decoder that never revises."""
    gen = x[:, prompt_len:]
    before_mask = (gen == mask_id).long().cumsum(-1) == 0
    return ((gen == eos_id) & before_mask).any(-1)


def exit_early(x: torch.Tensor, prompt_len: int, options: DecodeOptions, backbone) -> torch.Tensor | None:
    """With ``options.early_exit`` and every row :func:`settled`: ``x`` with its remaining masks set to ``<eos>`` (the
    DLLM layout's answer padding), else None (decode on)."""
    eos_id = getattr(backbone, "eos_id", None)
    if not options.early_exit or eos_id is None or not bool(settled(x, prompt_len, eos_id, backbone.mask_id).all()):
        return None
    return torch.where(x == backbone.mask_id, torch.full_like(x, eos_id), x)


class Horizon:
    """A backbone that sees at most ``options.horizon`` positions past the current block (:class:`DecodeOptions`).

    ``logits(x)`` ``(B, T, V)``: the network runs on ``x[:, :cut]`` with ``cut`` = the end of the furthest current
    block over the rows (a row's current block: the block of its first masked position; rows that decode their own
    blocks, DAWN and Fast-dLLM, may differ) plus ``horizon``; positions from ``cut`` on get the logits of a
    certain ``<eos>`` (0 there, -1e4 elsewhere), so they read as the layout's answer padding and are the same for
    every candidate.  ``logits_and_attention`` pads the attention ``(B, T, T)`` with zeros.  Decoding only ever
    commits positions of the current block, all before ``cut``."""

    def __init__(self, backbone, options: DecodeOptions):
        self.backbone, self.options = backbone, options
        for name in ("mask_id", "eos_id", "bos_id", "blocked", "vocab_size", "tokenizer", "net", "shift"):
            if hasattr(backbone, name):
                setattr(self, name, getattr(backbone, name))

    def cut(self, x: torch.Tensor) -> int:
        T, G, bl = x.shape[1], self.options.gen_length, self.options.block_length
        P = T - G
        masked = x[:, P:] == self.backbone.mask_id
        rows = masked.any(-1)
        if not bool(rows.any()):
            return T
        first = masked.float().argmax(-1)[rows]  # each unfinished row's first masked position
        end = P + int(((first // bl + 1) * bl).max())
        return min(T, end + self.options.horizon)

    def _pad(self, logits: torch.Tensor, T: int) -> torch.Tensor:
        B, cut, V = logits.shape
        if cut == T:
            return logits
        rest = torch.full((B, T - cut, V), -1e4, dtype=logits.dtype, device=logits.device)
        rest[..., self.backbone.eos_id] = 0.0
        return torch.cat([logits, rest], dim=1)

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self._pad(self.backbone.logits(x[:, : self.cut(x)]), x.shape[1])

    @torch.no_grad()
    def logits_and_attention(self, x: torch.Tensor, n_layers: int) -> tuple[torch.Tensor, torch.Tensor]:
        cut, T = self.cut(x), x.shape[1]
        logits, A = self.backbone.logits_and_attention(x[:, :cut], n_layers)
        return self._pad(logits, T), F.pad(A, (0, T - cut, 0, T - cut))


def with_horizon(backbone, options: DecodeOptions):
    """``backbone`` behind a :class:`Horizon` when ``options.horizon`` is set (and it can be honoured: the backbone
    names its ``<eos>``), else ``backbone`` itself."""
    if options.horizon is None or getattr(backbone, "eos_id", None) is None:
        return backbone
    return Horizon(backbone, options)


def block_bounds(prompt_len: int, options: DecodeOptions, n: int) -> tuple[int, int]:
    """``[start, end)`` of the block decoded at iteration ``n``."""
    per_block = options.block_length // options.tokens_per_step
    start = prompt_len + (n // per_block) * options.block_length
    return start, start + options.block_length


def commit_top(
    x: torch.Tensor, tokens: torch.Tensor, conf: torch.Tensor, allowed: torch.Tensor, m: int
) -> torch.Tensor:
    """Commit ``tokens`` at the ``m`` ``allowed`` positions of highest ``conf`` (ties: lowest index), per row.

    ``x``, ``tokens``, ``conf``, ``allowed``: ``(..., L)``; returns the new state (out of place)."""
    conf = torch.where(allowed, conf.double(), torch.full_like(conf, -math.inf, dtype=torch.float64))
    k = torch.minimum(allowed.sum(-1), torch.tensor(m, device=x.device))
    order = conf.argsort(dim=-1, descending=True, stable=True)
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(x.shape[-1], device=x.device).expand_as(order))
    pick = (rank < k[..., None]) & allowed
    return torch.where(pick, tokens, x)


@torch.no_grad()
def decode(backbone, x: torch.Tensor, options: DecodeOptions) -> tuple[torch.Tensor, dict]:
    """The backbone's own semi-autoregressive decoder.

    ``x`` ``(B, T)``: prompts in the DLLM layout followed by ``gen_length`` masks.  Per iteration: one forward
    pass, greedy ``x0_hat``, commit ``m`` positions of the current block by confidence (until
    :func:`exit_early`).  Returns the final ``(B, T)`` and ``{"nfe": forwards}``."""
    x = x.clone()
    prompt_len = x.shape[1] - options.gen_length
    blocked = (backbone.mask_id, *getattr(backbone, "blocked", ()))
    pos = torch.arange(x.shape[1], device=x.device)
    nfe = 0
    for n in range(options.iterations):
        start, end = block_bounds(prompt_len, options, n)
        logp = normalise(backbone.logits(x), blocked).to(x.device)
        nfe += 1
        x0_hat = logp.argmax(-1)
        allowed = (x == backbone.mask_id) & (pos >= start) & (pos < end)
        x = commit_top(x, x0_hat, confidence(logp, x0_hat, options.confidence), allowed, options.tokens_per_step)
        done = exit_early(x, prompt_len, options, backbone)
        if done is not None:
            x = done
            break
    return x, {"nfe": nfe}


@dataclass(frozen=True)
class PlainOptions:
    """The backbone's own decoder has no options beyond the shared :class:`DecodeOptions`."""


@register_dllm_sampler("plain", PlainOptions)
def plain(
    backbone, x: torch.Tensor, decoding: DecodeOptions, options: PlainOptions, proxy=None, generator=None
) -> tuple[torch.Tensor, dict]:
    """Registered form of :func:`decode` (the rows LLaDA-like and Dream-like of Table 3)."""
    return decode(backbone, x, decoding)


# ---------------------------------------------------------------------- likelihood (lm-eval's loglikelihood)
MC_NUM = 128  # LLaDA's and Dream's eval default (eval_llada.py, eval/eval.py); LLaDA's MMLU run: 1 (one-token answers)


def model_device(model) -> torch.device:
    """The device a wrapped model computes on (``model.device``, a Hugging Face wrapper's; else ``model.net.device``,
    a toy :class:`DLLM`'s or AR's; CPU if neither): where :func:`~unie.core.precision.autocast` applies, and where
    the likelihood passes build their inputs, so the logits never travel to the host."""
    for obj in (model, getattr(model, "net", None)):
        device = getattr(obj, "device", None)
        if device is not None:
            return torch.device(device)
    return torch.device("cpu")


@torch.no_grad()
def mc_loglikelihood(
    backbone, prefix: list[int], target: list[int], mc_num: int = MC_NUM, batch_size: int = 32, generator=None
) -> float:
    """LLaDA's Monte-Carlo ELBO of ``log p(target | prefix)`` (``eval_llada.py::get_loglikelihood``, ``cfg=0``).

    ``b = batch_size`` copies per pass: ``k ~ U{1..T}``, masked counts ``n_j = round(linspace(k, k + (b-1) T/b))``
    wrapped into ``[1, T]``; exactly ``n_j`` target positions masked (random permutation); the prefix is never
    masked; ``loss_j = Σ_masked CE / (n_j / T)``; the estimate is ``-mean_j loss_j`` over ``mc_num`` copies.
    A one-token target (``T = 1``: MMLU's letter) has a single masking, so every copy is the same and the estimate
    is the exact ``log p(target | prefix)`` for any ``mc_num``: one pass of one row (LLaDA's MMLU run, ``mc_num=1``).
    ``mc_num`` must be a multiple of ``batch_size`` (``mc_num / batch_size`` passes, as LLaDA's ``eval_llada.py``
    asserts): anything else is a ValueError, never fewer copies than asked."""
    if mc_num < 1 or batch_size < 1 or mc_num % batch_size:
        raise ValueError(
            f"mc_num={mc_num} is not a positive multiple of batch_size={batch_size}: the estimate would "
            f"not use mc_num copies"
        )
    T = len(target)
    if T == 0:
        return 0.0
    if T == 1:
        mc_num = batch_size = 1
    dev = model_device(backbone)
    seq = torch.tensor(prefix + target, dtype=torch.long, device=dev)
    blocked = (backbone.mask_id, *getattr(backbone, "blocked", ()))
    losses = []
    for _ in range(mc_num // batch_size):
        k = int(torch.randint(1, T + 1, (1,), generator=generator))
        n = torch.linspace(k, k + (batch_size - 1) * T / batch_size, batch_size).round().long()
        n = ((n - 1) % T) + 1
        perm = torch.stack([torch.randperm(T, generator=generator) for _ in range(batch_size)])
        masked_t = perm < n[:, None]
        x = seq.expand(batch_size, -1).clone()
        masked = torch.zeros_like(x, dtype=torch.bool)
        masked[:, len(prefix) :] = masked_t.to(dev)
        x[masked] = backbone.mask_id
        logp = normalise(backbone.logits(x), blocked)
        ce = -logp.gather(-1, seq.expand(batch_size, -1)[..., None]).squeeze(-1)
        loss = torch.where(masked, ce, torch.zeros_like(ce)).sum(-1) / (n.to(dev).float() / T)
        losses.append(loss)
    return -float(torch.cat(losses).mean())


@torch.no_grad()
def greedy_matches(backbone, prefix: list[int], target: list[int], rule: str = "low_confidence") -> bool:
    """Whether ``target`` is the backbone's greedy decode of ``len(target)`` masked positions after ``prefix``:
    LLaDA's ``is_check_greedy`` rule (lm-eval's ``is_greedy`` of a DLLM).  One token per step: the masked position
    of highest confidence (``rule``, :func:`confidence`; ties: lowest index) is committed with its greedy token;
    False at the first committed token that differs from ``target`` (so a mismatch usually costs one pass)."""
    T = len(target)
    if T == 0:
        return True
    dev = model_device(backbone)
    P = len(prefix)
    x = torch.tensor([prefix + [backbone.mask_id] * T], dtype=torch.long, device=dev)
    tgt = torch.tensor(target, dtype=torch.long)
    blocked = (backbone.mask_id, *getattr(backbone, "blocked", ()))
    for _ in range(T):
        logp = normalise(backbone.logits(x), blocked)[:, P:].cpu()
        x0 = logp.argmax(-1)
        conf = confidence(logp, x0, rule)[0].double()
        conf = conf.masked_fill(x[0, P:].cpu() != backbone.mask_id, -math.inf)
        j = int(conf.argmax())
        if int(x0[0, j]) != int(tgt[j]):
            return False
        x[0, P + j] = int(x0[0, j])
    return True
