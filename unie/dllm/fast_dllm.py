"""Fast-dLLM's confidence-threshold parallel decoder (``docs/baselines.md``; NVlabs/Fast-dLLM,
``llada/generate.py::get_transfer_index``), the fast decoder a DLLM user would pick: Figure 4's extra curve.

Semi-autoregressive over blocks of ``block_length`` as the backbone's own decoder
(:func:`~unie.dllm.backbone.decode`).  Each iteration does one forward pass; inside the current block,
``x0_hat = argmax p_theta`` and ``c_i = p_theta(x0_hat_i | xt)`` at the masked positions; commit **the top-1
always** plus every other masked position of the block with ``c_i >= threshold`` (``tau = 0.9``).  A block is
decoded until it holds no mask; there is no fixed step count (``tokens_per_step`` is not read).  Always
committing the top-1 guarantees progress (Fast-dLLM issue #42: a refactor without it loops forever).

Readings: Fast-dLLM's KV caches are not used (our sequences are ≤ 64 positions; they are an approximation
that changes the outputs, not the decoding rule); ties in ``c`` go to the lowest position
(:func:`~unie.dllm.backbone.commit_top`).  In a batch each row walks its own blocks (the current block of a row
is the first one still holding a mask), so a row's result does not depend on the other rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.registry import register_dllm_sampler
from .backbone import DecodeOptions, commit_top, confidence, exit_early, normalise


@dataclass(frozen=True)
class FastDLLMOptions:
    """``threshold``: the confidence ``tau`` above which a masked position of the block is committed together
    with the top-1 (Fast-dLLM's default 0.9; ``tau > 1`` commits exactly one token per iteration)."""

    threshold: float = 0.9

    def __post_init__(self):
        if not self.threshold > 0 or math.isnan(self.threshold):
            raise ValueError(f"Fast-dLLM threshold must be > 0, got {self.threshold!r}")


def current_block(
    x: torch.Tensor, mask_id: int, prompt_len: int, block_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, ``[start, end)`` ``(B,)`` of the first block of the generation region that still holds a mask
    (rows without a mask get an empty block at ``T``)."""
    B, T = x.shape
    gen = x[:, prompt_len:] == mask_id  # (B, G)
    first = torch.where(gen.any(-1), gen.float().argmax(-1), torch.full((B,), T - prompt_len, device=x.device))
    start = prompt_len + (first // block_length) * block_length
    return start, torch.clamp(start + block_length, max=T)


@register_dllm_sampler("fast_dllm", FastDLLMOptions)
@torch.no_grad()
def fast_dllm_decode(
    backbone, x: torch.Tensor, decoding: DecodeOptions, options: FastDLLMOptions, proxy=None, generator=None
) -> tuple[torch.Tensor, dict]:
    """Threshold decoding of prompts ``x`` ``(B, T)`` (DLLM layout, ``decoding.gen_length`` trailing masks).

    Returns the decoded ``(B, T)`` and ``{"nfe": forwards, "tokens_per_step": generated tokens / (B · nfe)}``
    (rows that finished early count as idle in the mean)."""
    x = x.clone()
    B, T = x.shape
    mask_id = backbone.mask_id
    prompt_len = T - decoding.gen_length
    blocked = (mask_id, *getattr(backbone, "blocked", ()))
    pos = torch.arange(T, device=x.device)
    nfe = 0
    while bool((x[:, prompt_len:] == mask_id).any()):
        start, end = current_block(x, mask_id, prompt_len, decoding.block_length)
        logp = normalise(backbone.logits(x), blocked).to(x.device)  # (B, T, V)
        nfe += 1
        x0_hat = logp.argmax(-1)
        allowed = (x == mask_id) & (pos >= start[:, None]) & (pos < end[:, None])
        c = confidence(logp, x0_hat, "low_confidence")  # p_theta(x0_hat_i | xt)
        # the top-1 always, plus every masked position of the block with c >= tau
        x = commit_top(x, x0_hat, c, allowed, 1)
        above = allowed & (c >= options.threshold)
        x = torch.where(above, x0_hat, x)
        done = exit_early(x, prompt_len, decoding, backbone)
        if done is not None:
            x = done
            break
    return x, {"nfe": nfe, "tokens_per_step": decoding.gen_length / max(nfe, 1)}
