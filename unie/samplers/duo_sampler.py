"""Duo's ancestral sampler for uniform-state diffusion (``notes/baselines.md`` §3.3).

Start from uniform random real tokens (the prior of the uniform-state process); time grid
``t_k = linspace(1, eps, S + 1)``.  One step ``t -> s`` (``alpha_s > alpha_t``, ``alpha_ts = alpha_t/alpha_s``)
draws every position from, in float64,

    q(xs | xt, x_theta) ∝ alpha_t V x_theta ⊙ xt + (alpha_ts - alpha_t) xt + (alpha_s - alpha_t) x_theta
                          + (1 - alpha_ts)(1 - alpha_s)/V,
    normaliser            alpha_t V x_theta[xt] + (1 - alpha_t),

i.e. ``q(xt | xs) q(xs | x_theta) / q(xt | x_theta)`` with ``x_theta`` as a soft ``x0``.  Any token can
change at any step (no carry-over), and there is no caching: the denoiser is time-conditioned, so
every step is one network evaluation.  Final noise removal at ``t = eps``: ``ancestral`` (default,
the same posterior with ``alpha_s = 1``) or ``greedy`` (``argmax x_theta``).  Every draw is float64
Gumbel-max (:func:`unie.gumbel.gumbel_argmax`); the uniform start is ``floor(V U)`` with float64 ``U``
(:func:`unie.duo.uniform_tokens`).  Distillation (§3.4), nucleus filtering and the Ψ-samplers are
left out.

The denoiser is a :class:`unie.duo.DuoDenoiser` (or anything with ``x_theta(xt, t) -> (B, L, V)``
probabilities over the real tokens, ``V``, ``sub_to_tok`` and ``schedule``); samples are returned as
tokenizer ids (never the mask or an input-only ``<bos>``).
"""

from __future__ import annotations

import torch

from ..duo import uniform_tokens
from ..gumbel import gumbel_argmax
from ..registry import SAMPLERS
from ..schedule import make_schedule
from .ancestral import in_batches, time_grid

NOISE_REMOVAL = ("ancestral", "greedy")


def duo_posterior(x_theta: torch.Tensor, xt: torch.Tensor, alpha_t: float, alpha_s: float) -> torch.Tensor:
    """``q(xs | xt, x_theta)`` ``(B, L, V)`` float64 (rows sum to 1) for ``x_theta (B, L, V)`` and ``xt (B, L)``."""
    p = x_theta.double()
    V = p.shape[-1]
    a_t, a_s = float(alpha_t), float(alpha_s)
    a_ts = a_t / a_s
    q = (a_s - a_t) * p + (1.0 - a_ts) * (1.0 - a_s) / V
    p_xt = p.gather(-1, xt[..., None])  # (B, L, 1)
    q = q.scatter_add(-1, xt[..., None], a_t * V * p_xt + (a_ts - a_t))
    return q / (a_t * V * p_xt + (1.0 - a_t))


def duo_step(x_theta: torch.Tensor, xt: torch.Tensor, alpha_t: float, alpha_s: float, generator) -> torch.Tensor:
    """One ancestral step: ``xs ~ q(xs | xt, x_theta)`` at every position (float64 Gumbel-max). ``(B, L)``."""
    return gumbel_argmax(torch.log(duo_posterior(x_theta, xt, alpha_t, alpha_s)), generator).to(xt.device)


@torch.no_grad()
def sample_duo(denoiser, n: int, L: int, steps: int, generator: torch.Generator, batch_size: int = 256,
               eps: float = 1e-5, noise_removal: str = "ancestral", device="cpu") -> tuple[torch.Tensor, dict]:
    """Sample ``n`` sequences of length ``L`` in ``steps`` steps. Returns ``(x (n, L) tokenizer ids, stats)``.

    ``stats["nfe"]``: network evaluations summed over batches (``steps + 1`` per batch)."""
    if noise_removal not in NOISE_REMOVAL:
        raise ValueError(f"noise_removal {noise_removal!r}: expected one of {NOISE_REMOVAL}")
    schedule = getattr(denoiser, "schedule", None) or make_schedule("loglinear")
    V = denoiser.V
    ts = time_grid(steps, eps)

    def one_batch(b):
        x = uniform_tokens((b, L), V, generator, device)
        for k in range(steps):
            a_t, a_s = float(schedule.alpha(ts[k])), float(schedule.alpha(ts[k + 1]))
            p = denoiser.x_theta(x, ts[k].expand(b)).to(x.device)
            x = duo_step(p, x, a_t, a_s, generator)
        p = denoiser.x_theta(x, ts[-1].expand(b)).to(x.device)
        if noise_removal == "ancestral":
            x = duo_step(p, x, float(schedule.alpha(ts[-1])), 1.0, generator)
        else:
            x = p.argmax(-1)
        return denoiser.sub_to_tok.to(x.device)[x], {"nfe": steps + 1}

    return in_batches(n, batch_size, one_batch)


@SAMPLERS.register("duo")
def duo_sampler(models: dict, n: int, L: int, steps: int, generator, batch_size: int = 256, device="cpu",
                eps: float = 1e-5, noise_removal: str = "ancestral", **_):
    """Registry entry: ``models['dlm']`` is a Duo denoiser (``Duo.wrap``)."""
    return sample_duo(models["dlm"], n, L, steps, generator, batch_size=batch_size, eps=eps,
                      noise_removal=noise_removal, device=device)
