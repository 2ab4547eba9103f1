"""Monte-Carlo likelihood estimates for Table 1 (the loop; the per-sequence estimators live with their method).

A diffusion model's NELBO is a single-sample estimate per sequence (one ``t``, one mask draw); Table 1
averages ``n_mc`` passes over the split.  Within a batch the times are antithetic (stratified: the
``i``-th of ``b`` sequences gets ``t`` in the band ``[i/b, (i+1)/b)``), so each pass visits the sequences
in its own random order: a sequence falls into a different band on every pass instead of being scored
at nearly the same ``t`` ``n_mc`` times.
"""

from __future__ import annotations

import zlib

import torch

from ..core.precision import autocast


def mc_nll(
    x: torch.Tensor,
    nll_fn,
    n_mc: int,
    batch_size: int,
    seed: int,
    domain: str,
    device: str = "cpu",
    precision: str = "fp32",
):
    """Per-sequence NLL ``(N,)`` averaged over ``n_mc`` Monte-Carlo passes of ``nll_fn(x_batch, generator) -> (b,)``.

    Pass ``mc`` of ``domain`` draws from its own seeded generator (so every estimator sees the same seeds)
    and visits the sequences in its own seeded random order (module doc).  ``nll_fn`` runs under
    :func:`~unie.core.precision.autocast` in ``precision``; its estimates are summed in float64."""
    nll = torch.zeros(len(x), dtype=torch.float64)
    for mc in range(n_mc):
        g = torch.Generator(device=device).manual_seed(zlib.crc32(f"{seed}/{domain}/{mc}".encode()))
        order = torch.randperm(
            len(x), generator=torch.Generator().manual_seed(zlib.crc32(f"{seed}/{domain}/{mc}/order".encode()))
        )
        for s in range(0, len(x), batch_size):
            idx = order[s : s + batch_size]
            with autocast(device, precision):
                part = nll_fn(x[idx].to(device), g)
            nll[idx] += part.double().cpu()
    return nll / n_mc
