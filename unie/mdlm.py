"""MDLM: masked diffusion with the SUBS parameterisation and the continuous-time NELBO.

Sahoo et al. 2024 (``notes/baselines.md`` §1).  Forward process: each token of ``x0`` is replaced by
the mask independently with probability ``1 - alpha_t``.  SUBS: the denoiser never predicts the mask
(its logit is -inf) and unmasked positions copy their token (carry-over).  NELBO per sequence:
``w(t) * sum_{i in M_t} -log p_theta(x0_i | xt)`` with ``w(t) = -alpha'_t / (1 - alpha_t)`` (= 1/t for
the log-linear schedule).  No time conditioning: with SUBS the mask fraction carries the time.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .gumbel import uniform
from .registry import METHODS
from .schedule import Schedule, antithetic_t, make_schedule
from .tokenizer import blocked_ids


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


def nelbo(denoiser, x0: torch.Tensor, t: torch.Tensor, schedule: Schedule, mask_id: int, generator=None) -> torch.Tensor:
    """Single-sample continuous-time NELBO per sequence ``(B,)`` in nats (an upper bound on -log p in expectation).

    ``denoiser`` is anything with ``logp_x0`` (a trained MDLM or the toy world's oracle)."""
    xt = q_xt(x0, schedule.mask_prob(t.double()), mask_id, generator)
    logp = denoiser.logp_x0(xt)
    return schedule.weight(t.double()).to(logp.device) * masked_nll(logp.double(), x0.to(logp.device), xt.to(logp.device), mask_id)


@METHODS.register("mdlm")
class MDLM:
    """Training loss and likelihood bound of MDLM.  Options: ``schedule``, ``eps`` (schedule), ``t_eps`` (time floor)."""

    causal = False
    time_conditioned = False
    has_likelihood = True
    stochastic_nll = True

    def __init__(self, tokenizer_info: dict, schedule: str = "loglinear", eps: float = 1e-3, t_eps: float = 1e-3):
        self.mask_id = tokenizer_info["mask_id"]
        self.blocked = blocked_ids(tokenizer_info)
        self.schedule = make_schedule(schedule, eps)
        self.t_eps = t_eps

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
