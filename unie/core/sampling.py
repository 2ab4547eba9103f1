"""What every sampler shares: the reverse-time grid and the loop over sample batches."""

from __future__ import annotations

import torch


def time_grid(steps: int, eps: float = 1e-5) -> torch.Tensor:
    """The reverse-time grid ``t_k = linspace(1, eps, steps + 1)`` (float64, decreasing) of MDLM's samplers."""
    return torch.linspace(1.0, eps, steps + 1, dtype=torch.float64)


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
