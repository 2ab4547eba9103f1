"""CoRe, context-robust remasking (``docs/baselines.md``; Zhai et al., arXiv 2602.04096): a Table 3
baseline, **our reading** (no public code and no paper body were available; the Uni-E paper calls it a
"neighbour stability test" and runs it with 4 tokens decoded per step, the re-decoded ones included).

Per block ``[s, e)`` of the semi-autoregressive decoder (:func:`~unie.dllm.backbone.decode`), with the backbone's
confidence rule and ``m = tokens_per_step``:

1. **Decode** the block as the backbone does: ``block_length / m`` iterations, each one forward pass, commit
   ``m`` masked positions of the block by confidence with greedy ``x0_hat``.  At commit, record the committed
   token's probability ``p_commit_i = p_theta(x_i | xt)`` and its margin ``p(top-1) - p(top-2)``.
2. **Probe** (one extra forward pass, the "neighbour stability test"), once the block holds no mask: the
   ``candidates`` committed positions of the block with the lowest commit margin (CoRe pre-filters by margin;
   never a position revised before), and the probe state ``x_probe`` = the state with every candidate *and*
   its neighbours within ``radius`` (generated positions only, never the prompt) masked, jointly.  A
   candidate's instability is the drop of the model's support for its token when its context is perturbed::

       drop_i = log p_commit_i - log p_theta(x_i | x_probe)

3. **Remask** the ``remask`` candidates with the largest drop, provided ``drop_i > min_drop``.
4. **Re-decode**: iterations as in 1 (``m`` tokens per step, the remasked ones counted among them) until the
   block holds no mask again; a remasked token is re-predicted with the whole block as its context.  Then the
   next block.

A position is revised at most once, so each block costs ``block_length / m`` iterations, one probe and at most
``ceil(remask / m)`` re-decoding iterations.  ``remask = 0`` (or ``min_drop = inf``) skips the probe and
reproduces the backbone's decoder bit for bit.

Batch: rows move through blocks in lockstep (a row with nothing remasked idles through the re-decoding
iteration, committing nothing); every choice of a row reads only its own logits, so a row's result does not
depend on the other rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.registry import register_dllm_sampler
from .backbone import DecodeOptions, commit_top, confidence, exit_early, normalise


@dataclass(frozen=True)
class CoReOptions:
    """CoRe's revision knobs (the single source of their defaults; our reading, see the module docstring).

    * ``remask`` 1: tokens remasked per block at most (0: no revision, the backbone's decoder).
    * ``candidates`` 2: committed positions of the block probed, the lowest-margin ones.
    * ``radius`` 1: neighbours on each side masked with each candidate in the probe.
    * ``min_drop`` 0.0: a candidate is remasked only if its support drops by more than this (nats)."""

    remask: int = 1
    candidates: int = 2
    radius: int = 1
    min_drop: float = 0.0

    def __post_init__(self):
        for name in ("remask", "candidates", "radius"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"CoRe option {name} must be an integer >= 0, got {v!r}")
        if self.remask > self.candidates:
            raise ValueError(f"CoRe option remask ({self.remask}) cannot exceed candidates ({self.candidates})")
        if math.isnan(self.min_drop):
            raise ValueError("CoRe option min_drop must be a number, got nan")


def probe_state(x: torch.Tensor, cand: torch.Tensor, radius: int, prompt_len: int, mask_id: int) -> torch.Tensor:
    """``x`` ``(B, T)`` with every ``cand`` ``(B, T)`` position and its neighbours within ``radius`` masked
    (positions ``>= prompt_len`` only)."""
    hit = cand.clone()
    for d in range(1, radius + 1):
        hit[:, d:] |= cand[:, :-d]
        hit[:, :-d] |= cand[:, d:]
    hit[:, :prompt_len] = False
    return torch.where(hit, torch.full_like(x, mask_id), x)


def lowest(score: torch.Tensor, allowed: torch.Tensor, k: int) -> torch.Tensor:
    """``(B, T)`` bool: per row the ``k`` ``allowed`` positions of lowest ``score`` (ties: lowest position)."""
    return commit_top(torch.zeros_like(allowed), torch.ones_like(allowed), -score, allowed, k).bool()


@register_dllm_sampler("core", CoReOptions)
@torch.no_grad()
def core_decode(
    backbone, x: torch.Tensor, decoding: DecodeOptions, options: CoReOptions, proxy=None, generator=None
) -> tuple[torch.Tensor, dict]:
    """CoRe decoding of prompts ``x`` ``(B, T)`` (DLLM layout, ``decoding.gen_length`` trailing masks).

    Returns the decoded ``(B, T)`` and ``{"nfe": forwards (probes included), "probes", "remasked": tokens
    remasked summed over rows, "changed": of those, re-decoded to another token}``."""
    x = x.clone()
    B, T = x.shape
    mask_id, m = backbone.mask_id, decoding.tokens_per_step
    prompt_len = T - decoding.gen_length
    blocked = (mask_id, *getattr(backbone, "blocked", ()))
    pos = torch.arange(T, device=x.device)
    p_commit = torch.ones(B, T, dtype=torch.float64, device=x.device)  # p_theta(x_i | xt) when i was committed
    margin = torch.full((B, T), math.inf, dtype=torch.float64, device=x.device)
    revised = torch.zeros(B, T, dtype=torch.bool, device=x.device)
    nfe = probes = remasked = changed = 0

    def step(x, start, end):
        """One decoding iteration: forward, commit ``m`` masked positions of ``[start, end)`` by confidence."""
        logp = normalise(backbone.logits(x), blocked).to(x.device)  # (B, T, V)
        top2 = logp.topk(2, dim=-1).values.exp().double()
        x0_hat = logp.argmax(-1)
        allowed = (x == mask_id) & (pos >= start) & (pos < end)
        new = commit_top(x, x0_hat, confidence(logp, x0_hat, decoding.confidence), allowed, m)
        fresh = (x == mask_id) & (new != mask_id)
        p_commit.copy_(torch.where(fresh, top2[..., 0], p_commit))
        margin.copy_(torch.where(fresh, top2[..., 0] - top2[..., 1], margin))
        return new

    for b in range(decoding.gen_length // decoding.block_length):
        start = prompt_len + b * decoding.block_length
        end = start + decoding.block_length
        in_block = (pos >= start) & (pos < end)
        # 1. decode the block as the backbone does
        for _ in range(decoding.block_length // m):
            x = step(x, start, end)
            nfe += 1
        if options.remask == 0 or options.min_drop == math.inf:
            done = exit_early(x, prompt_len, decoding, backbone)
            if done is not None:
                x = done
                break
            continue
        # 2. probe: the lowest-margin committed positions of the block, their neighbourhoods masked jointly
        cand = lowest(margin, in_block & ~revised & (x != mask_id), options.candidates)
        logp = normalise(backbone.logits(probe_state(x, cand, options.radius, prompt_len, mask_id)), blocked)
        nfe += 1
        probes += 1
        logp_probe = logp.to(x.device).gather(-1, x[..., None]).squeeze(-1).double()
        drop = torch.where(cand, p_commit.log() - logp_probe, torch.full_like(logp_probe, -math.inf))
        # 3. remask the most unstable candidates (drop > min_drop)
        out = lowest(-drop, cand & (drop > options.min_drop), options.remask)
        before = x.clone()
        x = torch.where(out, torch.full_like(x, mask_id), x)
        revised |= out
        remasked += int(out.sum())
        # 4. re-decode, m tokens per step, until the block holds no mask
        while bool(((x == mask_id) & in_block).any()):
            x = step(x, start, end)
            nfe += 1
        changed += int((out & (x != before)).sum())
        done = exit_early(x, prompt_len, decoding, backbone)  # after the block's revision: nothing is revised later
        if done is not None:
            x = done
            break
    return x, {"nfe": nfe, "probes": probes, "remasked": remasked, "changed": changed}
