"""ReMDM: remasking sampler on a trained MDLM denoiser (Wang et al. 2025; ``docs/baselines.md``).

The denoiser is the MDLM one, unchanged (``models['dlm']``: ``logp_x0(xt) -> (B, L, V)`` SUBS, ``mask_id``).
Time grid ``t_k = linspace(1, eps, S + 1)`` (as MDLM), ``alpha`` from the log-linear schedule.  One step
``t -> s`` with remasking probability ``sigma_t in [0, sigma_t^max]``, ``sigma_t^max = min(1, (1 - alpha_s)/alpha_t)``,
and ``p = p_theta(x0 | xt)`` (optionally nucleus-filtered):

* decoded position (``xt_i != m``): keep ``xt_i`` w.p. ``1 - sigma_t``, become ``m`` w.p. ``sigma_t``;
* masked position (``xt_i = m``): token ``v`` w.p. ``p_v (alpha_s - (1 - sigma_t) alpha_t) / (1 - alpha_t)``,
  ``m`` w.p. ``(1 - alpha_s - sigma_t alpha_t) / (1 - alpha_t)``.

``sigma_t <= sigma_t^max`` is exactly what keeps the masked-position probabilities in [0, 1]; the forward
marginals are those of MDLM, so the pretrained denoiser is reused as is.  With ``sigma_t = 0`` the step is
MDLM's.

**RNG layout.** Like :func:`unie.methods.mdlm.mdlm_step`, a step draws one float64 uniform ``U_i``
per position (shape ``(B, L)``) and then one float64 Gumbel-max per revealed position.  A masked position
is revealed iff ``U_i < (alpha_s - (1 - sigma_t) alpha_t) / (1 - alpha_t)``; a decoded one is remasked iff
``U_i < sigma_t`` (each position uses its own ``U_i`` once, so the decisions stay independent).  With
``sigma_t = 0`` the reveal threshold is bit-for-bit MDLM's and no position is remasked, so ``eta = 0``
reproduces :func:`~unie.methods.mdlm.sample_mdlm` exactly under the same seed.

**Schedules** (option ``strategy``):

* ``cap``:         ``sigma_t = min(eta_cap, sigma_t^max)``                     (ReMDM-cap)
* ``rescale``:     ``sigma_t = eta_rescale * sigma_t^max``                      (ReMDM-rescale)
* ``cap_rescale``: ``sigma_t = eta_rescale * min(eta_cap, sigma_t^max)``        (**default**)

The Uni-E paper says only "ReMDM-cap 0.05 and ReMDM-rescale 0.5" and reports one ReMDM row.  We read it
as one composed schedule (``cap_rescale`` with ``eta_cap = 0.05``, ``eta_rescale = 0.5``, i.e.
``sigma_t = 0.5 * min(0.05, sigma_t^max)``: each decoded token is remasked w.p. at most 2.5% per step).  A
composed schedule has precedent: the Duo repository's re-implementation of ReMDM (its Psi-samplers) has
"max-rescale-eta" = ``eta * min(eta, sigma^max)`` (one eta for both roles).  The alternative reading is two
separate runs of which one row was kept; each is one option away: ``strategy: cap, eta_cap: 0.05`` and
``strategy: rescale, eta_rescale: 0.5``.  The official OWT scripts use much smaller values
(``cap`` 0.008, ``rescale`` 0.015, with nucleus 0.9 and 1,024 steps).  ReMDM-conf and ReMDM-loop are not
implemented (the paper does not use them).

**Differences from the reference code**, all documented choices: ``alpha_t`` comes from our log-linear
schedule (the reference writes ``alpha_t = 1 - t``); the reference's last step takes the argmax of
``p_theta``, here the masks left after the last step are *drawn* from ``p_theta`` (nucleus-filtered when
``nucleus < 1``), like MDLM's :func:`~unie.methods.mdlm.fill_remaining`.  ``nucleus`` follows the
reference rule: keep the tokens whose sorted cumulative probability is ``<= nucleus`` plus always the most
likely one, renormalise (default 1.0 = off; the official ReMDM runs all use 0.9, the paper does not say).

Caching: as MDLM (``CachedDenoiser``): ``p`` is reused for a row only if the row did not change; with
remasking on, rows change at almost every step, so expect about one call per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.gumbel import gumbel_argmax, uniform
from ..core.options import ConfigError, make_options
from ..core.registry import register_sampler
from ..core.sampling import in_batches, time_grid
from ..core.schedule import Schedule, make_schedule
from .mdlm import CachedDenoiser, fill_remaining

STRATEGIES = ("cap", "rescale", "cap_rescale")


def sigma_max(alpha_t: float, alpha_s: float) -> float:
    """Largest admissible remasking probability ``min(1, (1 - alpha_s) / alpha_t)``."""
    return 1.0 if alpha_t <= 0.0 else min(1.0, (1.0 - alpha_s) / alpha_t)


def remask_sigma(
    strategy: str, alpha_t: float, alpha_s: float, eta_cap: float = 0.05, eta_rescale: float = 0.5
) -> float:
    """``sigma_t`` of a ReMDM schedule (option ``strategy``); always in ``[0, sigma_max(alpha_t, alpha_s)]``."""
    smax = sigma_max(alpha_t, alpha_s)
    if strategy == "cap":
        return min(eta_cap, smax)
    if strategy == "rescale":
        return eta_rescale * smax
    if strategy == "cap_rescale":
        return eta_rescale * min(eta_cap, smax)
    raise ValueError(f"unknown ReMDM strategy {strategy!r}; known: {', '.join(STRATEGIES)}")


@dataclass(frozen=True)
class ReMDMOptions:
    """The remasking schedule ``strategy`` with ``eta_cap`` / ``eta_rescale`` (module doc), top-p ``nucleus``
    (1 = off) and ``eps``, the end of the time grid."""

    strategy: str = "cap_rescale"
    eta_cap: float = 0.05
    eta_rescale: float = 0.5
    nucleus: float = 1.0
    eps: float = 1e-5

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown ReMDM strategy {self.strategy!r}; known: {', '.join(STRATEGIES)}")
        if self.eta_cap < 0.0 or not 0.0 <= self.eta_rescale <= 1.0:
            raise ConfigError(f"need eta_cap >= 0 and 0 <= eta_rescale <= 1, got {self.eta_cap}, {self.eta_rescale}")
        if not 0.0 < self.nucleus <= 1.0:
            raise ConfigError(f"need 0 < nucleus <= 1, got {self.nucleus}")


def nucleus_filter(logp: torch.Tensor, p: float) -> torch.Tensor:
    """Top-p filtering of log-probabilities ``(..., V)``: tokens outside the nucleus get ``-inf`` (not
    renormalised; Gumbel-max does not need it).  Keeps the sorted prefix with cumulative probability ``<= p``
    and always the top token (the ReMDM/MDLM rule)."""
    if p >= 1.0:
        return logp
    sorted_lp, idx = torch.sort(logp, dim=-1, descending=True)
    keep = torch.cumsum(sorted_lp.double().exp(), dim=-1) <= p
    keep[..., 0] = True
    drop = torch.zeros_like(keep).scatter(-1, idx, ~keep)
    return logp.masked_fill(drop, -math.inf)


def remdm_step(
    xt: torch.Tensor,
    logp: torch.Tensor,
    alpha_t: float,
    alpha_s: float,
    sigma_t: float,
    mask_id: int,
    generator,
    nucleus: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One ReMDM step (module doc). ``xt`` ``(B, L)``, ``logp`` ``(B, L, V)`` -> ``(xs (B, L), remasked (B, L) bool)``.

    Draw order as :func:`~unie.methods.mdlm.mdlm_step` (one uniform per position, then Gumbel at the
    revealed positions), so ``sigma_t = 0`` gives MDLM's step bit for bit."""
    u = uniform(xt.shape, generator, xt.device)
    masked = xt == mask_id
    reveal = masked & (u < (alpha_s - (1.0 - sigma_t) * alpha_t) / (1.0 - alpha_t))
    remask = ~masked & (u < sigma_t)
    xs = xt.clone()
    if reveal.any():
        xs[reveal] = gumbel_argmax(nucleus_filter(logp[reveal], nucleus), generator).to(xs.device)
    xs[remask] = mask_id
    return xs, remask


@torch.no_grad()
def sample_remdm(
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
    """ReMDM sampling of ``n`` sequences of length ``L`` in ``steps`` steps. Returns ``(x (n, L), stats)``.

    Options: :class:`ReMDMOptions` (or keywords).  ``stats``: ``nfe`` (network calls), ``rows_evaluated``,
    ``remasked`` (tokens remasked over the run)."""
    opts = make_options(ReMDMOptions, options, "remdm options", **kwargs)
    strategy, eta_cap, eta_rescale, nucleus = opts.strategy, opts.eta_cap, opts.eta_rescale, opts.nucleus
    schedule = schedule or make_schedule("loglinear")
    mask_id = denoiser.mask_id
    ts = time_grid(steps, opts.eps)

    def one_batch(b):
        x = torch.full((b, L), mask_id, dtype=torch.long, device=device)
        cache = CachedDenoiser(denoiser)
        remasked = 0
        for k in range(steps):
            a_t, a_s = float(schedule.alpha(ts[k])), float(schedule.alpha(ts[k + 1]))
            sigma_t = remask_sigma(strategy, a_t, a_s, eta_cap, eta_rescale)
            logp = cache(x)  # reused for rows that did not change (no time input)
            x, remask = remdm_step(x, logp, a_t, a_s, sigma_t, mask_id, generator, nucleus)
            remasked += int(remask.sum())
        if (x == mask_id).any():
            x = fill_remaining(x, nucleus_filter(cache(x), nucleus), mask_id, generator)
        return x, {"nfe": cache.nfe, "rows_evaluated": cache.rows_evaluated, "remasked": remasked}

    return in_batches(n, batch_size, one_batch)


@register_sampler("remdm", ReMDMOptions, roles={"dlm": ("absorbing",)})
def remdm_sampler(models: dict, n: int, L: int, steps: int, generator, options: ReMDMOptions, batch_size: int, device):
    """Registry entry: ``models['dlm']`` is a trained MDLM denoiser (``MDLM.wrap``)."""
    return sample_remdm(models["dlm"], n, L, steps, generator, options, batch_size=batch_size, device=device)
