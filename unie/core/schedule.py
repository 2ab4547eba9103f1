"""Noise schedules for masked (absorbing) and uniform-state diffusion.

``alpha(t)`` is the probability that a token is still clean at time ``t`` in [0, 1].  The masking
probability is ``1 - alpha(t)`` and the continuous-time NELBO weight is ``-alpha'(t) / (1 - alpha(t))``
(MDLM, Sahoo et al. 2024, Eq. 10).  For the log-linear schedule ``alpha_t = 1 - (1 - eps) t`` this
weight is exactly ``1 / t``.
"""

from __future__ import annotations

import torch

from .registry import SCHEDULES


class Schedule:
    eps: float = 0.0

    def alpha(self, t: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def dalpha(self, t: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sigma(self, t: torch.Tensor) -> torch.Tensor:
        """Total noise ``sigma(t) = -log alpha(t)`` (what SEDD and time-conditioned nets take)."""
        return -torch.log(self.alpha(t))

    def dsigma(self, t: torch.Tensor) -> torch.Tensor:
        return -self.dalpha(t) / self.alpha(t)

    def mask_prob(self, t: torch.Tensor) -> torch.Tensor:
        return 1.0 - self.alpha(t)

    def weight(self, t: torch.Tensor) -> torch.Tensor:
        """NELBO weight ``-alpha'(t) / (1 - alpha(t))`` (positive)."""
        return -self.dalpha(t) / (1.0 - self.alpha(t))


@SCHEDULES.register("loglinear")
class LogLinear(Schedule):
    """``alpha_t = 1 - (1 - eps) t``: MDLM/SEDD/EDLM/ReMDM's default (sigma(t) = -log(1 - (1-eps) t))."""

    def __init__(self, eps: float = 1e-3):
        self.eps = float(eps)

    def alpha(self, t):
        return 1.0 - (1.0 - self.eps) * t

    def dalpha(self, t):
        return torch.full_like(t, -(1.0 - self.eps)) if torch.is_tensor(t) else -(1.0 - self.eps)

    def weight(self, t):
        """``-alpha'/(1 - alpha) = 1/t`` exactly (computed directly, no cancellation at small t)."""
        return 1.0 / t


@SCHEDULES.register("linear")
class Linear(Schedule):
    """``alpha_t = 1 - t`` (BD3-LM, LLaDA)."""

    def __init__(self, eps: float = 0.0):
        self.eps = 0.0

    def alpha(self, t):
        return 1.0 - t

    def dalpha(self, t):
        return torch.full_like(t, -1.0) if torch.is_tensor(t) else -1.0


def make_schedule(name: str = "loglinear", eps: float = 1e-3) -> Schedule:
    return SCHEDULES[name](eps=eps)


def antithetic_t(n: int, generator: torch.Generator | None = None, eps: float = 1e-3, device=None) -> torch.Tensor:
    """Stratified times ``t_i = (u/n + i/n) mod 1`` mapped to ``[eps, 1]`` (MDLM's antithetic sampling). Shape (n,)."""
    gdev = generator.device if generator is not None else device
    u = torch.rand((), generator=generator, dtype=torch.float64, device=gdev)
    t = (u / n + torch.arange(n, dtype=torch.float64, device=gdev) / n) % 1.0
    t = (1.0 - eps) * t + eps
    return t.to(device=device, dtype=torch.float32)
