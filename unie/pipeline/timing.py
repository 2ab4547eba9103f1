"""Rule ``timing``: the wall-clock of one sampling run per step count (:func:`unie.eval.timing.time_generation`),
written with its identity and the machine it ran on (Figure 3's panels 3-4)."""

from __future__ import annotations

import dataclasses
import platform

import torch

from ..data.tokenizer import load_tokenizer
from ..eval.timing import time_generation
from .sample import SampleJob, load_models


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_run(job: SampleJob, steps: list[int], *, warmup: int, repeats: int, threads: int, log=print) -> dict:
    """Time ``job``'s run at each of ``steps`` on ``threads`` torch threads, one batch of ``job.batch_size``
    sequences per generation (:func:`~unie.eval.timing.time_generation`); returns the result record."""
    torch.set_num_threads(threads)
    entry, opts = job.entry, job.sampler_options()
    models = load_models(job, load_tokenizer(job.inputs["tokenizer"]))
    points = []
    for s in steps:
        point = time_generation(entry, models, opts, job.seq_len, int(s), batch_size=job.batch_size, warmup=warmup,
                                repeats=repeats, seed=job.seed_at(int(s)), device=job.device)
        log(f"{job.run} steps {s}: {point['seconds']:.4f} s per batch of {job.batch_size} (median of {repeats})")
        points.append(point)
    device = job.device
    device_name = torch.cuda.get_device_name(device) if str(device).startswith("cuda") else cpu_name()
    return {"run": job.run, "sampler": job.sampler, "models": job.models, "options": dataclasses.asdict(opts),
            "seq_len": job.seq_len, "threads": threads, "device": str(device), "device_name": device_name,
            "torch": torch.__version__, "points": points}
