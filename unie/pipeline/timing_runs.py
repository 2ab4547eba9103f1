"""Rule ``timing``: the wall-clock of one sampling run per step count (:func:`unie.eval.timing.time_generation`),
written with its identity and the machine it ran on (Figure 3's panels 3-4), each point checked
(:class:`~unie.eval.timing.TimingChecks`: spread of the repeats, CPU / wall, seconds per model call across the
step counts), a flagged point measured again up to ``checks.reruns`` times and, if still flagged, kept with
``"trusted": false`` and a warning in the log."""

from __future__ import annotations

import dataclasses
import platform

import torch

from ..core.precision import autocast
from ..data.tokenizer import load_tokenizer
from ..eval.timing import TimingChecks, check_calls, checks_record, describe, time_generation
from .sample import SampleJob, load_models


def cpu_isa() -> str:
    """The widest x86 vector extension of this CPU (``AVX-512``, ``AVX2``, ...): what decides how matrix products
    are blocked and rounded, so two CPUs of one model name can still train different bits."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX")):
                    if flag in flags:
                        return name
                return "no AVX"
    except OSError:
        pass
    return platform.machine()


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_run(
    job: SampleJob,
    steps: list[int],
    *,
    warmup: int,
    repeats: int,
    threads: int,
    log=print,
    checks: TimingChecks | None = None,
) -> dict:
    """Time ``job``'s run at each of ``steps`` on ``threads`` torch threads, one batch of ``job.batch_size``
    sequences per generation (:func:`~unie.eval.timing.time_generation`); returns the result record.

    Every point carries its checks (``flags``, ``trusted``, ``spread``, ``cpu_ratio``, ``seconds_per_call``, ...);
    a point flagged by its own checks is measured again inside :func:`time_generation`, one whose seconds per
    call is off the run's median (:func:`~unie.eval.timing.check_calls`) is measured again here, up to
    ``checks.reruns`` times each.  The record's ``flags`` are the union over its points, ``trusted`` whether none
    was flagged."""
    checks = checks or TimingChecks()
    torch.set_num_threads(threads)
    entry, opts = job.entry, job.sampler_options()
    models = load_models(job, load_tokenizer(job.inputs["tokenizer"]))

    def measure(s: int, warm: int) -> dict:
        with autocast(job.device, job.precision):  # the job's precision, as its sampling job ran (fp32: no-op)
            return time_generation(
                entry,
                models,
                opts,
                job.seq_len,
                s,
                batch_size=job.batch_size,
                warmup=warm,
                repeats=repeats,
                seed=job.seed_at(s),
                device=job.device,
                threads=threads,
                checks=checks,
                reruns=checks.reruns,
            )

    points = [measure(int(s), warmup) for s in steps]
    for _ in range(checks.reruns):  # a point off the run's per-call median: once more (already warm)
        off = check_calls(points, checks)
        for i in off:
            again = measure(int(steps[i]), 0)
            again["warmup"], again["attempts"] = warmup, again["attempts"] + points[i]["attempts"]
            points[i] = again
        if not off:
            break
    check_calls(points, checks)
    for p in points:
        ratio = "n/a" if p["cpu_ratio"] is None else f"{p['cpu_ratio']:.2f}"
        log(
            f"{job.run} steps {p['steps']}: {p['seconds']:.4f} s per batch of {job.batch_size} (median of {repeats}; "
            f"spread {p['spread']:.2f}, CPU/wall {ratio} on {threads} threads, NFE {p['nfe']})"
        )
        if not p["trusted"]:
            log(f"WARNING: {job.run} steps {p['steps']}: {describe(p)}")
    device = job.device
    device_name = torch.cuda.get_device_name(device) if str(device).startswith("cuda") else cpu_name()
    flags = sorted({f for p in points for f in p["flags"]})
    return {
        "run": job.run,
        "sampler": job.sampler,
        "models": job.models,
        "options": dataclasses.asdict(opts),
        "seq_len": job.seq_len,
        "threads": threads,
        "device": str(device),
        "device_name": device_name,
        "torch": torch.__version__,
        "points": points,
        "checks": checks_record(checks),
        "flags": flags,
        "trusted": not flags,
    }


def time_runs(
    runs: dict,
    out_paths,
    timing: dict,
    *,
    seq_len: int,
    domain: str,
    seed: int,
    device: str,
    threads: int,
    log=print,
    precision: str = "fp32",
) -> list[dict]:
    """Rules ``timing`` / ``timing_fig3``: :func:`time_run` of each run of ``runs`` (name -> ``spec``, ``inputs``,
    ``steps``), one after the other, each written to its path of ``out_paths`` (in the runs' order).  ``timing``:
    ``batch_size`` (one batch is timed), ``warmup``, ``repeats`` and ``checks`` (:class:`TimingChecks`' fields;
    absent: its defaults).  Returns the records."""
    from .rule import write_json

    batch_size = timing["batch_size"]
    out = []
    for (run, r), path in zip(runs.items(), out_paths):  # the outputs are in the runs' order
        sampling = SampleJob.from_spec(
            run,
            r["spec"],
            inputs=r["inputs"],
            seq_len=seq_len,
            n_samples=batch_size,  # one batch is timed
            batch_size=batch_size,
            domain=domain,
            seed=seed,
            device=device,
            precision=precision,
        )
        result = time_run(
            sampling,
            steps=list(r["steps"]),
            warmup=timing["warmup"],
            repeats=timing["repeats"],
            threads=threads,
            log=log,
            checks=TimingChecks(**timing.get("checks", {})),
        )
        write_json(result, path)
        out.append(result)
    return out
