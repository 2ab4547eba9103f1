"""The "Data" row of Table 2 as a sampler: real held-out sequences, scored like every sampler's output."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.registry import register_sampler


@dataclass(frozen=True)
class DataOptions:
    """The data "sampler" has no options: it returns the first ``n`` held-out sequences."""


@register_sampler("data", DataOptions, roles={}, fixed_steps=True)
def data_sampler(models: dict, n: int, L: int, steps: int, generator, options: DataOptions, batch_size: int, device):
    """Real held-out sequences (the "Data" row): the first ``n`` rows of ``models['data']`` ``(N, L)``
    (the pipeline puts the train domain's evaluation split there)."""
    if "data" not in models:
        raise ValueError("the data sampler needs the held-out sequences as models['data']")
    data = models["data"]
    if data.shape[0] < n:
        raise ValueError(f"the data split has {data.shape[0]} sequences, {n} requested")
    if data.shape[1] != L:
        raise ValueError(f"data sequences have length {data.shape[1]}, expected {L}")
    return data[:n].clone(), {"nfe": 0}
