"""Registry entries for the reference rows of Table 2: the AR model and the data itself."""

from __future__ import annotations

from ..registry import SAMPLERS


@SAMPLERS.register("ar")
def ar_sampler(models: dict, n: int, L: int, steps: int, generator, batch_size: int = 256, **_):
    """Left-to-right sampling with a KV cache; always ``L`` steps (``steps`` must equal ``L``)."""
    if steps != L:
        raise ValueError(f"the AR sampler decodes one token per step: steps must be L={L}, got {steps}")
    x = models["ar"].sample(n, L, generator, batch_size=batch_size)
    return x, {"nfe": L * ((n + batch_size - 1) // batch_size)}


@SAMPLERS.register("data")
def data_sampler(models: dict, n: int, L: int, steps: int, generator, **_):
    """Real held-out sequences (the "Data" row): the first ``n`` rows of ``models['data']`` ``(N, L)``."""
    data = models["data"]
    if data.shape[0] < n:
        raise ValueError(f"the data split has {data.shape[0]} sequences, {n} requested")
    if data.shape[1] != L:
        raise ValueError(f"data sequences have length {data.shape[1]}, expected {L}")
    return data[:n].clone(), {"nfe": 0}
