"""SEDD's analytic ("Tweedie tau-leaping") sampler for the absorbing graph (``notes/baselines.md`` §2.3).

Time grid ``t_k = linspace(1, eps, S + 1)`` with ``eps = 1e-5``; ``sigma_k = -log alpha(t_k)`` and
``dsigma = sigma_k - sigma_{k+1}``.  Start from all masks.  One step from ``t_k`` to ``t_{k+1}`` with
``s = exp(log s_theta(xt, sigma_k))`` (the current-token entry is 1):

* staggered score: every entry times ``e^{dsigma}``, plus ``(1 - e^{dsigma}) * sum_y s_y`` on the mask column;
* times the transposed transition row of the current token, ``exp(dsigma Q)^T[xt_i]``: for ``xt_i = m``,
  1 on the mask column and ``1 - e^{-dsigma}`` on every real token; for ``xt_i != m``, ``e^{-dsigma}`` on
  ``xt_i`` only (the token stays, so only masked positions are drawn).

On a masked position this leaves the unnormalised weights

    token y != m:  (e^{dsigma} - 1) * s_y
    mask m:        1 - (e^{dsigma} - 1) * sum_{y != m} s_y        (clipped at 0: an exact exclusion)

(with the true score, ``s = r p0``, these are exactly MDLM's ``p0(y) (alpha_s - alpha_t)`` and
``1 - alpha_s`` over ``1 - alpha_t``).  The reference draws with ``probs / Exp`` in float32 where a negative
mask weight simply loses; here each position is one float64 Gumbel-max over the log-weights, with ``-inf``
for a non-positive weight.  **Final denoise**: one analytic step from ``t = eps`` to ``sigma = 0`` with the
mask column dropped, i.e. every remaining mask is drawn from ``s_theta(x, sigma(eps))`` over real tokens.

No caching: the network is time-conditioned, so each step is one network call (a step is skipped, with no
call and no draw, only when no mask is left: then every later step is a carry-over, an exact saving).
"""

from __future__ import annotations

import math

import torch

from ..gumbel import gumbel_argmax
from ..registry import SAMPLERS
from ..schedule import Schedule, make_schedule
from .ancestral import in_batches, time_grid


def _without_mask(log_s: torch.Tensor, mask_id: int) -> torch.Tensor:
    """``log_s`` in float64 with the mask column at ``-inf`` (``(N, V)``)."""
    return log_s.double().index_fill(-1, torch.tensor([mask_id], device=log_s.device), -math.inf)


def tweedie_logits(log_s: torch.Tensor, dsigma: float, mask_id: int) -> torch.Tensor:
    """Unnormalised float64 log-weights ``(N, V)`` of one analytic step at masked positions (§2.3).

    ``log_s`` ``(N, V)``: the log-score rows of the masked positions (the mask column is ignored).
    Tokens: ``log(e^dsigma - 1) + log s_y``; mask: ``log(1 - (e^dsigma - 1) sum_{y != m} s_y)``, ``-inf``
    when that weight is not positive."""
    ls = _without_mask(log_s, mask_id)
    log_em1 = math.log(math.expm1(dsigma))
    stay = -torch.expm1(log_em1 + torch.logsumexp(ls, -1))  # 1 - (e^dsigma - 1) * sum_y s_y
    out = ls + log_em1
    out[:, mask_id] = torch.log(stay.clamp(min=0.0))
    return out


def tweedie_step(xt: torch.Tensor, log_s: torch.Tensor, dsigma: float, mask_id: int, generator) -> torch.Tensor:
    """One analytic step ``(B, L) -> (B, L)``: masked positions are drawn (float64 Gumbel-max), others stay."""
    masked = xt == mask_id
    xs = xt.clone()
    if masked.any():
        xs[masked] = gumbel_argmax(tweedie_logits(log_s[masked], dsigma, mask_id), generator).to(xs.device)
    return xs


def denoise_step(xt: torch.Tensor, log_s: torch.Tensor, mask_id: int, generator) -> torch.Tensor:
    """Final denoise (``noise_removal``): every masked position drawn from ``s_y`` over real tokens. ``(B, L)``."""
    masked = xt == mask_id
    xs = xt.clone()
    if masked.any():
        xs[masked] = gumbel_argmax(_without_mask(log_s[masked], mask_id), generator).to(xs.device)
    return xs


@torch.no_grad()
def sample_sedd(
    score_model,
    n: int,
    L: int,
    steps: int,
    generator: torch.Generator,
    schedule: Schedule | None = None,
    batch_size: int = 256,
    eps: float = 1e-5,
    device="cpu",
) -> tuple[torch.Tensor, dict]:
    """Analytic SEDD sampling of ``n`` sequences of length ``L`` in ``steps`` steps (+ the final denoise).

    ``score_model`` has ``mask_id`` and ``log_score(xt, sigma) -> (B, L, V)``.  Returns ``(x (n, L), stats)``;
    ``stats['nfe']`` counts network calls (at most ``steps + 1`` per batch)."""
    schedule = schedule or make_schedule("loglinear")
    mask_id = score_model.mask_id
    sig = schedule.sigma(time_grid(steps, eps))  # (S + 1,) float64, decreasing

    def one_batch(b):
        x = torch.full((b, L), mask_id, dtype=torch.long, device=device)
        nfe = 0
        for k in range(steps):
            if not (x == mask_id).any():
                break
            log_s = score_model.log_score(x, sig[k].expand(b)).to(x.device)
            x = tweedie_step(x, log_s, float(sig[k] - sig[k + 1]), mask_id, generator)
            nfe += 1
        if (x == mask_id).any():
            x = denoise_step(x, score_model.log_score(x, sig[-1].expand(b)).to(x.device), mask_id, generator)
            nfe += 1
        return x, {"nfe": nfe}

    return in_batches(n, batch_size, one_batch)


@SAMPLERS.register("sedd")
def sedd_sampler(models: dict, n: int, L: int, steps: int, generator, batch_size: int = 256, device="cpu",
                 eps: float = 1e-5, **_):
    """Registry entry: ``models['dlm']`` is the score model (``SEDD.wrap``); its schedule is used if it has one."""
    score_model = models["dlm"]
    return sample_sedd(score_model, n, L, steps, generator, schedule=getattr(score_model, "schedule", None),
                       batch_size=batch_size, eps=eps, device=device)
