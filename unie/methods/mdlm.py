"""MDLM: masked diffusion with the SUBS parameterisation, the continuous-time NELBO and the ancestral sampler.

Sahoo et al. 2024 (``docs/baselines.md``).

* **Forward process** ``q(xt | x0)``: each token of ``x0`` becomes the mask independently with probability
  ``1 - alpha_t`` (log-linear ``alpha_t = 1 - (1 - eps) t``).
* **SUBS**: the denoiser never predicts the mask (its logit is -inf) and unmasked positions copy their
  token (carry-over).  No time conditioning: with SUBS the mask fraction carries the time.
* **NELBO** per sequence: ``w(t) * sum_{i in M_t} -log p_theta(x0_i | xt)``, ``w(t) = -alpha'_t / (1 - alpha_t)``
  (= 1/t for the log-linear schedule), ``t ~ U[t_eps, 1]`` (antithetic over a batch).  It is an upper bound
  on ``-log p_theta(x0)`` only up to the terms the ``eps`` convention drops (the prior at ``alpha_1 = eps``
  and the reconstruction below ``t_eps``): with a *perfect* denoiser its expectation sits slightly below
  ``-log pi(x0)`` (an outside review measured up to ~0.4 % on the toy world), so a trained model's
  "bound" can undercut the data's exact perplexity by that much without any error.
* **Reverse kernel** ``q(xs | xt, x0)`` (Eq. mdlm_reverse_true): every masked position is revealed with
  probability ``(alpha_s - alpha_t) / (1 - alpha_t)`` and takes the token ``x0_i``; unmasked positions are
  carried over.  This is the same distribution as MDLM's ``p_v (alpha_s - alpha_t)`` / ``1 - alpha_s``
  mixture, and the form Algorithms 1-2 need (the step is taken with a chosen candidate ``x0``).
* **Ancestral sampler**: time grid ``t_k = linspace(1, eps, S + 1)``; one step from ``t`` to ``s``
  draws ``xs ~ q(xs | xt, x0)`` with ``x0 ~ p_theta(x0 | xt)``.  Caching: the denoiser has no time input, so
  a row whose state did not change keeps its ``log p_theta(x0 | xt)``; only rows that changed are
  re-evaluated (no forward pass when nothing changed).  After the last step any remaining masks are
  filled from ``p_theta`` (``alpha_s = 1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.gumbel import gumbel_argmax, uniform
from ..core.options import make_options
from ..core.registry import METHODS, register_sampler
from ..core.sampling import in_batches, time_grid
from ..core.schedule import Schedule, antithetic_t, make_schedule
from ..data.tokenizer import blocked_ids


# ---------------------------------------------------------------------- forward process, SUBS, NELBO
def q_xt(x0: torch.Tensor, mask_prob: torch.Tensor, mask_id: int, generator=None) -> torch.Tensor:
    """Forward process ``q(xt | x0)``: mask each token w.p. ``mask_prob`` ``(B,)`` or ``(B, L)``. Returns ``(B, L)``."""
    p = mask_prob if mask_prob.dim() == 2 else mask_prob[:, None]
    u = uniform(x0.shape, generator, x0.device)
    return torch.where(u < p.double(), torch.full_like(x0, mask_id), x0)


def block_logits(logits: torch.Tensor, ids) -> torch.Tensor:
    """Set the logits of ``ids`` to -inf (out of place)."""
    block = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
    block[list(ids)] = True
    return logits.float().masked_fill(block, -math.inf)


def subs_logp(logits: torch.Tensor, xt: torch.Tensor, mask_id: int, blocked=()) -> torch.Tensor:
    """SUBS log-probabilities ``log p_theta(x0 | xt)`` ``(B, L, V)`` from raw logits ``(B, L, V)``.

    Masked positions: log-softmax with the mask logit (and any other ``blocked`` id, e.g. an
    input-only ``<bos>``) at -inf.  Unmasked positions: log 1 = 0 on the carried token, -inf elsewhere
    (exact carry-over, never a finite penalty)."""
    logp = F.log_softmax(block_logits(logits, {mask_id, *blocked}), dim=-1)
    unmasked = (xt != mask_id)[..., None]
    carry = torch.full_like(logp, -math.inf).scatter_(-1, xt[..., None], 0.0)
    return torch.where(unmasked, carry, logp)


class MDLMDenoiser:
    """A trained network as a denoiser: ``logp_x0(xt) -> (B, L, V)`` (SUBS)."""

    def __init__(self, net, mask_id: int, blocked=()):
        self.net = net
        self.mask_id = mask_id
        self.blocked = tuple(blocked)
        self.vocab_size = net.cfg.vocab_size

    @torch.no_grad()
    def logp_x0(self, xt: torch.Tensor, sigma=None) -> torch.Tensor:
        xt = xt.to(self.net.device)
        return subs_logp(self.net(xt), xt, self.mask_id, self.blocked)


def masked_nll(logp_x0: torch.Tensor, x0: torch.Tensor, xt: torch.Tensor, mask_id: int) -> torch.Tensor:
    """``sum_{i in M_t} -log p_theta(x0_i | xt)`` per sequence ``(B,)``."""
    lp = logp_x0.gather(-1, x0[..., None]).squeeze(-1)
    masked = xt == mask_id
    return -(torch.where(masked, lp, torch.zeros_like(lp))).sum(-1)


def nelbo(
    denoiser, x0: torch.Tensor, t: torch.Tensor, schedule: Schedule, mask_id: int, generator=None
) -> torch.Tensor:
    """Single-sample continuous-time NELBO per sequence ``(B,)`` in nats (how tight it is: module doc).

    ``denoiser`` is anything with ``logp_x0`` (a trained MDLM or the toy world's oracle)."""
    xt = q_xt(x0, schedule.mask_prob(t.double()), mask_id, generator)
    logp = denoiser.logp_x0(xt)
    return schedule.weight(t.double()).to(logp.device) * masked_nll(
        logp.double(), x0.to(logp.device), xt.to(logp.device), mask_id
    )


@dataclass(frozen=True)
class MDLMOptions:
    """MDLM's training options: the noise ``schedule`` and its ``eps``, and the time floor ``t_eps``."""

    schedule: str = "loglinear"
    eps: float = 1e-3
    t_eps: float = 1e-3


@METHODS.register("mdlm")
class MDLM:
    """Training loss and NELBO of MDLM (options: :class:`MDLMOptions`)."""

    Options = MDLMOptions
    causal = False
    time_conditioned = False
    has_likelihood = True
    stochastic_nll = True

    def __init__(self, tokenizer_info: dict, options: MDLMOptions | dict | None = None, **kwargs):
        self.options = make_options(MDLMOptions, options, "mdlm options", **kwargs)
        self.mask_id = tokenizer_info["mask_id"]
        self.blocked = blocked_ids(tokenizer_info)
        self.schedule = make_schedule(self.options.schedule, self.options.eps)
        self.t_eps = self.options.t_eps

    @staticmethod
    def kind(options: MDLMOptions) -> str:
        return "absorbing"

    def loss(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Mean per-token NELBO over the batch (antithetic t)."""
        t = antithetic_t(x0.shape[0], generator, self.t_eps, x0.device)
        xt = q_xt(x0, self.schedule.mask_prob(t), self.mask_id, generator)
        logits = block_logits(net(xt), self.blocked)
        nll_tok = F.cross_entropy(logits.transpose(1, 2), x0, reduction="none")  # (B, L)
        nll_tok = torch.where(xt == self.mask_id, nll_tok, torch.zeros_like(nll_tok))
        return (self.schedule.weight(t)[:, None] * nll_tok).sum() / x0.numel()

    @torch.no_grad()
    def nll(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Per-sequence NELBO ``(B,)`` with antithetic t across the batch."""
        t = antithetic_t(x0.shape[0], generator, self.t_eps, x0.device)
        return nelbo(self.wrap(net), x0, t, self.schedule, self.mask_id, generator)

    def wrap(self, net) -> MDLMDenoiser:
        """The trained network as a sampler-facing denoiser."""
        return MDLMDenoiser(net, self.mask_id, self.blocked)


# ---------------------------------------------------------------------- reverse kernel and sampler
def reveal_mask(xt: torch.Tensor, alpha_t: float, alpha_s: float, mask_id: int, generator) -> torch.Tensor:
    """Positions revealed between t and s: masked in ``xt`` and ``U < (alpha_s - alpha_t)/(1 - alpha_t)``. ``(B, L)`` bool."""
    p = (alpha_s - alpha_t) / (1.0 - alpha_t)
    return (xt == mask_id) & (uniform(xt.shape, generator, xt.device) < p)


def mdlm_step(xt, logp, alpha_t, alpha_s, mask_id, generator):
    """One ancestral step ``xs ~ q(xs | xt, x0)``, ``x0 ~ p_theta``; tokens are drawn only where revealed. ``(B, L)``."""
    reveal = reveal_mask(xt, alpha_t, alpha_s, mask_id, generator)
    xs = xt.clone()
    if reveal.any():
        xs[reveal] = gumbel_argmax(logp[reveal], generator).to(xs.device)
    return xs


def transition(xt, x0, alpha_t, alpha_s, mask_id, generator):
    """``xs ~ q(xs | xt, x0)`` (Eq. mdlm_reverse_true) for a given clean ``x0``: every masked position of ``xt``
    is revealed, copying ``x0``, with probability ``(alpha_s - alpha_t) / (1 - alpha_t)``; the rest of ``xt``
    is kept.  This is how Algorithms 1-2 derive ``xs`` from a candidate and how the likelihood draws it.

    ``xt`` ``(B, L)``; ``x0`` ``(B, L)`` or candidates ``(B, K, L)`` (each with its own draw); ``alpha_t`` and
    ``alpha_s`` floats or per-row ``(B,)`` tensors.  Returns ``x0``'s shape."""
    p = (torch.as_tensor(alpha_s, dtype=torch.float64) - alpha_t) / (1.0 - alpha_t)  # () or (B,)
    if p.dim():
        p = p.reshape(-1, *([1] * (x0.dim() - 1)))
    xt = xt if x0.dim() == xt.dim() else xt[:, None, :].expand_as(x0)
    reveal = (xt == mask_id) & (uniform(x0.shape, generator, x0.device) < p.to(x0.device))
    return torch.where(reveal, x0, xt)


def fill_remaining(x, logp, mask_id, generator):
    """Noise removal: draw every still-masked position from ``p_theta`` (alpha_s = 1)."""
    m = x == mask_id
    if m.any():
        x = x.clone()
        x[m] = gumbel_argmax(logp[m], generator).to(x.device)
    return x


class CachedDenoiser:
    """Keeps ``log p_theta(x0 | x)`` per row and re-evaluates only rows whose state changed.

    ``evaluate(x_rows, rows)`` computes the log-probabilities of a subset of rows (``rows`` a bool ``(B,)``
    mask, ``None`` on the first call, which covers every row); the default is ``denoiser.logp_x0(x_rows)``.
    Block diffusion passes its own (prefix KV cache).  ``nfe`` counts network calls, ``rows_evaluated``
    the rows they covered."""

    def __init__(self, denoiser, evaluate=None):
        self.denoiser = denoiser
        self.evaluate = evaluate or (lambda x_rows, rows: denoiser.logp_x0(x_rows))
        self.x = None
        self.logp = None
        self.nfe = 0
        self.rows_evaluated = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.x is None:
            stale = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
        else:
            stale = (x != self.x).any(-1)
        if self.logp is not None:
            stale &= (x == self.denoiser.mask_id).any(-1)  # a row without masks needs no prediction
        if stale.any():
            fresh = self.evaluate(x[stale], None if self.logp is None else stale).to(x.device)
            if self.logp is None or bool(stale.all()):
                self.logp = fresh  # every row fresh: no copy of the old (B, L, V) table
            else:
                self.logp = self.logp.clone()
                self.logp[stale] = fresh
            self.nfe += 1
            self.rows_evaluated += int(stale.sum())
        self.x = x.clone()
        return self.logp


@dataclass(frozen=True)
class AncestralOptions:
    """MDLM's ancestral sampler: ``eps`` is the end of the time grid ``linspace(1, eps, S + 1)``."""

    eps: float = 1e-5


@torch.no_grad()
def sample_mdlm(
    denoiser,
    n: int,
    L: int,
    steps: int,
    generator: torch.Generator,
    options=None,
    *,
    schedule: Schedule | None = None,
    batch_size: int = 256,
    device="cpu",
    **kwargs,
) -> tuple[torch.Tensor, dict]:
    """Ancestral MDLM sampling of ``n`` sequences of length ``L`` in ``steps`` steps. Returns ``(x (n, L), stats)``.

    ``denoiser``: a :class:`~unie.core.protocols.Denoiser`; options: :class:`AncestralOptions` (or keywords)."""
    opts = make_options(AncestralOptions, options, "ancestral options", **kwargs)
    schedule = schedule or make_schedule("loglinear")
    mask_id = denoiser.mask_id
    ts = time_grid(steps, opts.eps)

    def one_batch(b):
        x = torch.full((b, L), mask_id, dtype=torch.long, device=device)
        cache = CachedDenoiser(denoiser)
        for k in range(steps):
            a_t, a_s = float(schedule.alpha(ts[k])), float(schedule.alpha(ts[k + 1]))
            logp = cache(x)
            x = mdlm_step(x, logp, a_t, a_s, mask_id, generator)
        if (x == mask_id).any():
            x = fill_remaining(x, cache(x), mask_id, generator)
        return x, {"nfe": cache.nfe, "rows_evaluated": cache.rows_evaluated}

    return in_batches(n, batch_size, one_batch)


@register_sampler("ancestral", AncestralOptions, roles={"dlm": ("absorbing",)})
def ancestral_sampler(
    models: dict, n: int, L: int, steps: int, generator, options: AncestralOptions, batch_size: int, device
):
    """Registry entry: ``models['dlm']`` is the denoiser."""
    return sample_mdlm(models["dlm"], n, L, steps, generator, options, batch_size=batch_size, device=device)
