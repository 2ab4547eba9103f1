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
            if self.logp is None:
                self.logp = fresh
            else:
                self.logp = self.logp.clone()
                self.logp[stale] = fresh
            self.nfe += 1
            self.rows_evaluated += int(stale.sum())
        self.x = x.clone()
        return self.logp


def in_batches(n: int, batch_size: int, sample_batch) -> tuple[torch.Tensor, dict]:
    """Run ``sample_batch(b) -> (x (b, L), stats)`` over consecutive batches of at most ``batch_size`` rows;
    returns the rows concatenated on the CPU and every stat summed over the batches."""
    out, total = [], {}
    for start in range(0, n, batch_size):
        x, stats = sample_batch(min(batch_size, n - start))
        out.append(x.cpu())
        for key, value in stats.items():
            total[key] = total.get(key, 0) + value
    return torch.cat(out), total


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


@SAMPLERS.register("ancestral")
def ancestral_sampler(models: dict, n: int, L: int, steps: int, generator, batch_size: int = 256, device="cpu",
                      eps: float = 1e-5, **_):
    """Registry entry: ``models['dlm']`` is the denoiser."""
    return sample_mdlm(models["dlm"], n, L, steps, generator, batch_size=batch_size, eps=eps, device=device)
