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


# ---------------------------------------------------------------------- the DLLM half (Table 3)
@runtime_checkable
class DLLMBackbone(Protocol):
    """A diffusion LLM (LLaDA-like, Dream-like, or a Hugging Face checkpoint) as Algorithm 3 reads it.

    ``logits(x)`` is *aligned*: position ``i``'s logits predict token ``i`` (a Dream-style model's shifted
    logits are re-aligned inside); the mask is never predicted by the caller's normalisation."""

    mask_id: int
    eos_id: int
    tokenizer: object  # unie.data.tokenizer.Tokenizer

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` int64 (masks included) -> ``(B, L, V)`` float32."""


@runtime_checkable
class CausalLM(Protocol):
    """An autoregressive LM (the proxy, or an AR row of Table 3): Hugging Face's causal convention."""

    bos_id: int
    eos_id: int
    tokenizer: object  # unie.data.tokenizer.Tokenizer

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, L)`` -> ``(N, L, V)``: ``logits[:, i]`` scores token ``i + 1`` given ``x[:, :i+1]``."""


@runtime_checkable
class TextDecoder(Protocol):
    """What the lm-eval adapter (:mod:`unie.dllm.lmeval`) drives: prompts in, completions out.

    ``generate`` returns the completion texts (cut at the model's end of sequence, not yet at lm-eval's
    ``until`` strings) and counters ``{"nfe": int, "generated_tokens": int}`` for that call;
    ``loglikelihood`` returns ``log p(continuation | context)`` per pair (an MC-ELBO for a DLLM)."""

    name: str

    def generate(self, prompts: list[str], max_new_tokens: int) -> tuple[list[str], dict]: ...

    def loglikelihood(self, contexts: list[str], continuations: list[str]) -> list[float]: ...
