"""Monte-Carlo likelihood estimates for Table 1 (the loop; the per-sequence estimators live with their method).

A diffusion model's NELBO is a single-sample estimate per sequence (one ``t``, one mask draw); Table 1
averages ``n_mc`` passes over the split.  Within a batch the times are antithetic (stratified), so the
estimate depends on which sequences share a batch: see :func:`mc_nll`.
"""

from __future__ import annotations

import zlib

import torch


def mc_nll(x: torch.Tensor, nll_fn, n_mc: int, batch_size: int, seed: int, domain: str, device: str = "cpu"):
    """Per-sequence NLL ``(N,)`` averaged over ``n_mc`` Monte-Carlo passes of ``nll_fn(x_batch, generator) -> (b,)``;
    pass ``mc`` of ``domain`` draws from its own seeded generator, so every estimator sees the same seeds."""
    nll = torch.zeros(len(x), dtype=torch.float64)
    for mc in range(n_mc):
        g = torch.Generator(device=device).manual_seed(zlib.crc32(f"{seed}/{domain}/{mc}".encode()))
        for s in range(0, len(x), batch_size):
            nll[s:s + batch_size] += nll_fn(x[s:s + batch_size].to(device), g).double().cpu()
    return nll / n_mc
