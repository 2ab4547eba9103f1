"""Wall-clock of a sampler, one protocol for every method (Figure 3's panels 3-4 and the bench).

* the models are loaded before and outside the clock;
* ``warmup`` untimed generations first (allocator, kernels, lazy inits);
* ``repeats`` timed generations of **one batch** of ``batch_size`` sequences, each with its own seed; on a GPU
  the clock waits for the device (``torch.cuda.synchronize``) before it starts and stops;
* the result is the median (and every repeat), in seconds per batch.

The caller holds every core of its allocation (the workflow's ``timing`` rule), so nothing runs beside it.
"""

from __future__ import annotations

import statistics
import time

import torch


def _sync(device) -> None:
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def time_generation(entry, models: dict, options, L: int, steps: int, *, batch_size: int, warmup: int = 1,
                    repeats: int = 3, seed: int = 0, device="cpu") -> dict:
    """Seconds to generate one batch ``(batch_size, L)`` with registered sampler ``entry`` at ``steps`` steps.

    Returns ``{"steps", "batch_size", "warmup", "repeats", "seconds" (median), "seconds_all", "nfe"}``."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")

    def once(i: int):
        g = torch.Generator(device=device).manual_seed(seed + i)
        return entry(models, batch_size, L, steps, g, options, batch_size=batch_size, device=device)

    for i in range(warmup):
        once(i)
    seconds, stats = [], {}
    for r in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        _, stats = once(warmup + r)
        _sync(device)
        seconds.append(time.perf_counter() - t0)
    return {"steps": steps, "batch_size": batch_size, "warmup": warmup, "repeats": repeats,
            "seconds": statistics.median(seconds), "seconds_all": seconds, "nfe": stats.get("nfe")}
