"""Rule ``timing``: the wall-clock of one sampling run per step count (:func:`unie.eval.timing.time_generation`),
written with its identity and the machine it ran on (Figure 3's panels 3-4)."""

from __future__ import annotations

import dataclasses
import platform

import torch

from ..core.registry import SAMPLERS
from ..data.tokenizer import load_tokenizer
from ..eval.timing import time_generation
from .sample import load_models, sampling_seed


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_run(run: str, spec: dict, steps: list[int], inputs: dict, *, seq_len: int, batch_size: int, warmup: int,
             repeats: int, threads: int, domain: str, seed: int = 0, device: str = "cpu", log=print) -> dict:
    """Time sampling run ``run`` at each of ``steps`` on ``threads`` torch threads; returns the result record."""
    torch.set_num_threads(threads)
    entry = SAMPLERS[spec["sampler"]]
    opts = entry.options(spec.get("options", {}), where=f"sampling.runs.{run}.options")
    tok = load_tokenizer(inputs["tokenizer"])
    models = load_models(spec, inputs, tok, batch_size, domain=domain, device=device)
    points = []
    for s in steps:
        point = time_generation(entry, models, opts, seq_len, int(s), batch_size=batch_size, warmup=warmup,
                                repeats=repeats, seed=sampling_seed(seed, run, int(s)), device=device)
        log(f"{run} steps {s}: {point['seconds']:.4f} s per batch of {batch_size} (median of {repeats})")
        points.append(point)
    device_name = torch.cuda.get_device_name(device) if str(device).startswith("cuda") else cpu_name()
    return {"run": run, "sampler": spec["sampler"], "models": spec.get("models", {}),
            "options": dataclasses.asdict(opts), "seq_len": seq_len, "threads": threads, "device": str(device),
            "device_name": device_name, "torch": torch.__version__, "points": points}
