"""Wall-clock of a sampler, one protocol for every method (Figure 3's panels 3-4, the bench, the Figure 4 sweep).

* the models are loaded before and outside the clock;
* ``warmup`` untimed generations first (allocator, kernels, lazy inits);
* ``repeats`` timed generations of **one batch** of ``batch_size`` sequences, each with its own seed; on a GPU
  the clock waits for the device (``torch.cuda.synchronize``) before it starts and stops;
* the result is the median (and every repeat), in seconds per batch.

A timing says whether it can be trusted.  Every timed stretch also reads the process's CPU time
(``time.process_time``: every thread of the process), and the checks of :class:`TimingChecks` flag it:

* ``spread``: the repeats disagree, ``(max - min) / median`` above ``max_spread``;
* ``cpu_starved`` (CPU only): the process got less CPU than the threads it was given could use, CPU / wall
  below ``min_cpu_ratio`` x threads.  A CPU-bound torch job on ``t`` threads shows a ratio near ``t`` (OpenMP
  workers spin between kernels), a starved one far less;
* ``seconds_per_call`` (across the points of one run, :func:`check_calls`): the seconds per model call
  (wall / NFE) of a point deviate from the run's median by more than ``max_call_deviation``.

On CUDA the CPU ratio says nothing (the host waits on the device), so ``cpu_starved`` is not checked there; the
clock is wall time around ``torch.cuda.synchronize``.  A flagged timing has ``"flags": [...]`` and
``"trusted": false`` in its record; the caller warns and may measure it again (``reruns``).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TimingChecks:
    """When a timing is flagged as untrustworthy (see the module docstring), and how often it is measured again.

    ``max_spread``: largest ``(max - min) / median`` of the repeats; ``min_cpu_ratio``: smallest process CPU /
    wall, as a fraction of the torch threads (CPU only); ``max_call_deviation``: largest relative deviation of
    a point's seconds per model call from its run's median; ``reruns``: how many more times a flagged timing is
    measured before it is kept flagged (the attempt with the fewest flags is kept, the first on a tie)."""

    max_spread: float = 0.25
    min_cpu_ratio: float = 0.6
    max_call_deviation: float = 0.5
    reruns: int = 1

    def __post_init__(self):
        if self.max_spread <= 0 or self.min_cpu_ratio < 0 or self.max_call_deviation <= 0 or self.reruns < 0:
            raise ValueError(
                f"bad timing checks {self}: need max_spread > 0, min_cpu_ratio >= 0, "
                f"max_call_deviation > 0, reruns >= 0"
            )


FLAG_TEXT = {
    "spread": "repeats disagree",
    "cpu_starved": "process starved of CPU",
    "seconds_per_call": "seconds per model call inconsistent with the same sampler elsewhere",
}


def _sync(device) -> None:
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def is_cuda(device) -> bool:
    return str(device).startswith("cuda")


def summarise(
    seconds: list[float],
    cpu_seconds: list[float],
    *,
    threads: int,
    device,
    nfe=None,
    checks: TimingChecks | None = None,
) -> dict:
    """The spread, CPU use and per-call cost of ``seconds`` (wall, one per repeat) and ``cpu_seconds`` (process
    CPU time over the same stretches), with the flags of ``checks`` (all but ``seconds_per_call``, which needs
    the other points of the run: :func:`check_calls`)."""
    checks = checks or TimingChecks()
    med = statistics.median(seconds)
    spread = (max(seconds) - min(seconds)) / med if med > 0 else 0.0
    wall = sum(seconds)
    ratio = sum(cpu_seconds) / wall if wall > 0 else None
    cpu_checked = not is_cuda(device)
    flags = []
    if spread > checks.max_spread:
        flags.append("spread")
    if cpu_checked and ratio is not None and ratio < checks.min_cpu_ratio * threads:
        flags.append("cpu_starved")
    return {
        "seconds_min": min(seconds),
        "seconds_max": max(seconds),
        "spread": spread,
        "cpu_seconds_all": cpu_seconds,
        "cpu_ratio": ratio,
        "cpu_checked": cpu_checked,
        "threads": threads,
        "seconds_per_call": med / nfe if nfe else None,
        "flags": flags,
        "trusted": not flags,
    }


def timed(fn, repeats: int, device="cpu") -> tuple[list[float], list[float], list]:
    """``fn(r)`` for ``r`` in ``range(repeats)``, each between two reads of the wall clock and the process CPU
    clock (after ``torch.cuda.synchronize`` on a GPU); returns ``(wall seconds, CPU seconds, fn's results)``."""
    seconds, cpu, out = [], [], []
    for r in range(repeats):
        _sync(device)
        c0, t0 = time.process_time(), time.perf_counter()
        out.append(fn(r))
        _sync(device)
        t1, c1 = time.perf_counter(), time.process_time()
        seconds.append(t1 - t0)
        cpu.append(c1 - c0)
    return seconds, cpu, out


def fewest_flags(attempts: list[dict]) -> dict:
    """The attempt to keep: the fewest flags, the first on a tie."""
    return min(attempts, key=lambda a: len(a["flags"]))


def time_generation(
    entry,
    models: dict,
    options,
    L: int,
    steps: int,
    *,
    batch_size: int,
    warmup: int = 1,
    repeats: int = 3,
    seed: int = 0,
    device="cpu",
    threads: int | None = None,
    checks: TimingChecks | None = None,
    reruns: int = 0,
) -> dict:
    """Seconds to generate one batch ``(batch_size, L)`` with registered sampler ``entry`` at ``steps`` steps.

    Returns ``{"steps", "batch_size", "warmup", "repeats", "seconds" (median), "seconds_all", "nfe"}`` plus the
    checks of :func:`summarise` (``threads``: torch's, unless given) and ``attempts``.  A flagged timing is
    measured again (the same seeds, no second warm-up) up to ``reruns`` times; the attempt with the fewest flags
    is kept, the others' flags are under ``earlier_flags``."""
    if repeats < 1 or warmup < 0 or reruns < 0:
        raise ValueError(
            f"need repeats >= 1, warmup >= 0 and reruns >= 0, got repeats={repeats}, warmup={warmup}, reruns={reruns}"
        )
    threads = threads or torch.get_num_threads()

    def once(i: int):
        g = torch.Generator(device=device).manual_seed(seed + i)
        return entry(models, batch_size, L, steps, g, options, batch_size=batch_size, device=device)

    for i in range(warmup):
        once(i)
    attempts = []
    for _ in range(1 + reruns):
        seconds, cpu, outs = timed(lambda r: once(warmup + r), repeats, device)
        nfe = outs[-1][1].get("nfe")
        attempts.append(
            {
                "steps": steps,
                "batch_size": batch_size,
                "warmup": warmup,
                "repeats": repeats,
                "seconds": statistics.median(seconds),
                "seconds_all": seconds,
                "nfe": nfe,
                **summarise(seconds, cpu, threads=threads, device=device, nfe=nfe, checks=checks),
            }
        )
        if attempts[-1]["trusted"]:
            break
    best = fewest_flags(attempts)
    return {**best, "attempts": len(attempts), "earlier_flags": [a["flags"] for a in attempts if a is not best]}


def check_calls(points: list[dict], checks: TimingChecks | None = None) -> list[int]:
    """Flag (in place) the points of one run whose ``seconds_per_call`` is off the run's median by more than
    ``checks.max_call_deviation`` (relative); returns their indices.  Points without a per-call time are
    skipped; fewer than two such points are never flagged."""
    checks = checks or TimingChecks()
    per_call = [(i, p["seconds_per_call"]) for i, p in enumerate(points) if p.get("seconds_per_call")]
    if len(per_call) < 2:
        return []
    med = statistics.median(v for _, v in per_call)
    off = [i for i, v in per_call if abs(v / med - 1) > checks.max_call_deviation]
    for i, p in enumerate(points):
        p["flags"] = [f for f in p.get("flags", []) if f != "seconds_per_call"]
        if i in off:
            p["flags"].append("seconds_per_call")
        p["trusted"] = not p["flags"]
    return off


def describe(point: dict) -> str:
    """One line on a flagged timing: its flags and the numbers behind them."""
    ratio = point.get("cpu_ratio")
    return (
        f"timing flagged ({', '.join(FLAG_TEXT.get(f, f) for f in point['flags'])}): spread "
        f"{point.get('spread', 0):.2f}, CPU/wall {'n/a' if ratio is None else f'{ratio:.2f}'} on "
        f"{point.get('threads')} threads, {point.get('seconds_per_call') or float('nan'):.4g} s per call; "
        f"the machine was probably busy"
    )


def checks_record(checks: TimingChecks) -> dict:
    return dataclasses.asdict(checks)


def time_passes(
    generate,
    batches: list[tuple[list[str], int]],
    *,
    repeats: int = 3,
    warmup: int = 1,
    threads: int | None = None,
    device="cpu",
    checks: TimingChecks | None = None,
    reruns: int = 0,
) -> dict:
    """The throughput of ``generate(prompts, max_new_tokens) -> (texts, {"nfe", "generated_tokens"})`` (a
    :class:`~unie.core.protocols.TextDecoder`'s ``generate``) over ``batches`` (``(prompts, max_new_tokens)``
    each): the first ``warmup`` batches generated untimed, then ``repeats`` timed passes over every batch.

    Returns ``tokens_per_s`` (the median over passes of generated tokens / seconds), ``seconds`` (the median
    pass), ``seconds_all``, ``tokens_per_s_all``, ``nfe_all``, ``generated_tokens``, ``requests`` and the checks
    of :func:`summarise`; a flagged measurement is repeated up to ``reruns`` times, as in
    :func:`time_generation`."""
    if repeats < 1 or warmup < 0 or reruns < 0 or not batches:
        raise ValueError(
            f"need batches, repeats >= 1, warmup >= 0 and reruns >= 0, got {len(batches)} batches, "
            f"repeats={repeats}, warmup={warmup}, reruns={reruns}"
        )
    threads = threads or torch.get_num_threads()
    for prompts, max_new in batches[:warmup]:
        generate(prompts, max_new)

    def one_pass(_):
        nfe = tokens = 0
        for prompts, max_new in batches:
            _, counters = generate(prompts, max_new)
            nfe += int(counters["nfe"])
            tokens += int(counters["generated_tokens"])
        return nfe, tokens

    attempts = []
    for _ in range(1 + reruns):
        seconds, cpu, outs = timed(one_pass, repeats, device)
        rates = [tok / s if s > 0 else None for s, (_, tok) in zip(seconds, outs)]
        nfe = statistics.median(n for n, _ in outs)
        attempts.append(
            {
                "tokens_per_s": statistics.median(r for r in rates if r is not None) if any(rates) else None,
                "seconds": statistics.median(seconds),
                "seconds_all": seconds,
                "tokens_per_s_all": rates,
                "nfe_all": [n for n, _ in outs],
                "generated_tokens": outs[0][1],
                "requests": sum(len(p) for p, _ in batches),
                "batches": len(batches),
                "warmup": warmup,
                "repeats": repeats,
                **summarise(seconds, cpu, threads=threads, device=device, nfe=nfe, checks=checks),
            }
        )
        if attempts[-1]["trusted"]:
            break
    best = fewest_flags(attempts)
    return {**best, "attempts": len(attempts), "earlier_flags": [a["flags"] for a in attempts if a is not best]}
