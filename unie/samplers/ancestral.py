"""MDLM's ancestral sampler with caching (Sahoo et al. 2024; ``notes/baselines.md`` §1.5).

Time grid ``t_k = linspace(1, eps, S + 1)``.  One step from ``t`` to ``s`` draws from the reverse kernel
``q(xs | xt, x0)`` with ``x0 ~ p_theta(x0 | xt)`` (Eq. mdlm_reverse_true): every masked position is
revealed with probability ``(alpha_s - alpha_t) / (1 - alpha_t)`` and takes the token ``x0_i``; unmasked
positions are carried over.  This factorisation is the same distribution as MDLM's
``p_v (alpha_s - alpha_t)`` / ``1 - alpha_s`` mixture, and it is the form Algorithm 2 needs (the step is
taken with a chosen candidate ``x0``).

Caching: the denoiser has no time input, so a row whose state did not change keeps its
``log p_theta(x0 | xt)``; only rows that changed are re-evaluated (no forward pass when nothing
changed).  After the last step any remaining masks are filled from ``p_theta`` (alpha_s = 1).
"""

from __future__ import annotations

import torch

from ..gumbel import gumbel_argmax, uniform
from ..registry import SAMPLERS
from ..schedule import Schedule, make_schedule


def time_grid(steps: int, eps: float = 1e-5) -> torch.Tensor:
    return torch.linspace(1.0, eps, steps + 1, dtype=torch.float64)


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
    """``q(xs | xt, x0)`` for a given clean ``x0`` ``(B, L)`` (the step Algorithm 2 takes with the chosen candidate)."""
    reveal = reveal_mask(xt, alpha_t, alpha_s, mask_id, generator)
    return torch.where(reveal, x0, xt)


class CachedDenoiser:
    """Keeps ``log p_theta(x0 | x)`` per row and re-evaluates only rows whose state changed.

    ``nfe`` counts network calls, ``rows_evaluated`` the rows they covered."""

    def __init__(self, denoiser):
        self.denoiser = denoiser
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
            fresh = self.denoiser.logp_x0(x[stale]).to(x.device)
            if self.logp is None:
                self.logp = fresh
            else:
                self.logp = self.logp.clone()
                self.logp[stale] = fresh
            self.nfe += 1
            self.rows_evaluated += int(stale.sum())
        self.x = x.clone()
        return self.logp


def fill_remaining(x, logp, mask_id, generator):
    """Noise removal: draw every still-masked position from ``p_theta`` (alpha_s = 1)."""
    m = x == mask_id
    if m.any():
        x = x.clone()
        x[m] = gumbel_argmax(logp[m], generator).to(x.device)
    return x


@torch.no_grad()
def sample_mdlm(
    denoiser,
    n: int,
    L: int,
    steps: int,
    generator: torch.Generator,
    schedule: Schedule | None = None,
    batch_size: int = 256,
    eps: float = 1e-5,
    device="cpu",
) -> tuple[torch.Tensor, dict]:
    """Ancestral MDLM sampling of ``n`` sequences of length ``L`` in ``steps`` steps. Returns ``(x (n, L), stats)``."""
    schedule = schedule or make_schedule("loglinear")
    mask_id = denoiser.mask_id
    ts = time_grid(steps, eps)
    out, nfe, rows = [], 0, 0
    for start in range(0, n, batch_size):
        b = min(batch_size, n - start)
        x = torch.full((b, L), mask_id, dtype=torch.long, device=device)
        cache = CachedDenoiser(denoiser)
        for k in range(steps):
            a_t, a_s = float(schedule.alpha(ts[k])), float(schedule.alpha(ts[k + 1]))
            logp = cache(x)
            x = mdlm_step(x, logp, a_t, a_s, mask_id, generator)
        if (x == mask_id).any():
            x = fill_remaining(x, cache(x), mask_id, generator)
        nfe, rows = nfe + cache.nfe, rows + cache.rows_evaluated
        out.append(x.cpu())
    return torch.cat(out), {"nfe": nfe, "rows_evaluated": rows}


@SAMPLERS.register("ancestral")
def ancestral_sampler(models: dict, n: int, L: int, steps: int, generator, batch_size: int = 256, device="cpu",
                      eps: float = 1e-5, **_):
    """Registry entry: ``models['dlm']`` is the denoiser."""
    return sample_mdlm(models["dlm"], n, L, steps, generator, batch_size=batch_size, eps=eps, device=device)
