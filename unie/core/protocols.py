"""The contracts between the layers, as ``typing.Protocol`` classes (structural: nothing inherits them).

Shapes: tokens ``(B, L)`` int64; candidates ``(B, K, L)``; log-probabilities float, ``(B, L, V)``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Denoiser(Protocol):
    """A masked diffusion model: ``log p_theta(x0_i = v | xt)`` under SUBS (unmasked positions copy their
    token; the mask is never predicted)."""

    mask_id: int

    def logp_x0(self, xt: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` -> ``(B, L, V)``."""


@runtime_checkable
class Proxy(Protocol):
    """An autoregressive proxy (or evaluator): conditionals of tokens given a context, left to right."""

    def token_logp(self, ctx: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """``log p_AR(tokens[n, m, i] | ctx[n, :i])``: ``ctx (N, L)``, ``tokens (N, M, L)`` -> ``(N, M, L)``."""


@runtime_checkable
class Method(Protocol):
    """A training method (MDLM, AR, SEDD, ...): its options, its loss, its likelihood and the object
    samplers use.  ``Options`` is a frozen dataclass (the single source of the method's defaults)."""

    Options: type
    causal: bool
    time_conditioned: bool
    has_likelihood: bool

    def loss(self, net: torch.nn.Module, x0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Scalar training loss on clean data ``x0 (B, L)``."""

    def wrap(self, net: torch.nn.Module):
        """The trained network as the object samplers and estimators use (a :class:`Denoiser`, a :class:`Proxy`, ...)."""
