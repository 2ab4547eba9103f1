"""Categorical sampling by Gumbel-max in float64 (for every method).

Float32 Gumbel noise truncates the low-probability tail, which lowers both sample entropy and
generative perplexity (Zheng et al., arXiv 2409.02908); the project fixes float64 for all samplers.
"""

from __future__ import annotations

import torch


def gumbel_noise(shape, generator: torch.Generator | None, device=None) -> torch.Tensor:
    """Standard Gumbel noise in float64, ``-log(-log U)`` with ``U ~ U(0, 1)``."""
    dev = generator.device if generator is not None else device
    u = torch.rand(shape, generator=generator, dtype=torch.float64, device=dev)
    u = u.clamp_(min=torch.finfo(torch.float64).tiny, max=1.0 - torch.finfo(torch.float64).eps)
    return u.log_().neg_().log_().neg_()  # -log(-log u), in place (no copies of a (..., V) float64 tensor)


def gumbel_argmax(logp: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw from ``Categorical(softmax(logp))`` along the last axis. ``(..., V) -> (...)`` int64.

    ``logp`` may be a broadcast view (e.g. ``(B, 1, L, V)`` expanded to ``K`` candidates): it is added to the
    noise in place, never materialised in float64."""
    g = gumbel_noise(logp.shape, generator, logp.device)
    return g.add_(logp).argmax(-1)


def uniform(shape, generator: torch.Generator | None, device=None) -> torch.Tensor:
    dev = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, dtype=torch.float64, device=dev)
