"""Timings that can be trusted (:mod:`unie.eval.timing`): the spread of the repeats, the process's CPU time
against the wall clock, the seconds per model call across a run's step counts; injected clocks for the exact
flag logic, then a real tiny model timed beside busy processes (flagged) and alone (not flagged)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest
import torch

from unie.eval.timing import TimingChecks, check_calls, summarise, time_generation, time_passes, timed


def fake_clocks(monkeypatch, wall: list[float], cpu: list[float]):
    """Each timed stretch ``i`` lasts ``wall[i]`` s of wall clock and ``cpu[i]`` s of process CPU."""

    def ticks(durations):
        t, out = 0.0, []
        for d in durations:
            out += [t, t + d]
            t += d + 1.0
        return iter(out)

    w, c = ticks(wall), ticks(cpu)
    monkeypatch.setattr("unie.eval.timing.time.perf_counter", lambda: next(w))
    monkeypatch.setattr("unie.eval.timing.time.process_time", lambda: next(c))


def entry(models, n, L, steps, g, options, batch_size, device):
    return torch.zeros(n, L, dtype=torch.long), {"nfe": steps}


def test_a_steady_fed_timing_is_trusted(monkeypatch):
    fake_clocks(monkeypatch, [1.0, 1.1, 1.05], [2.0, 2.2, 2.1])  # CPU/wall 2 on 2 threads
    p = time_generation(entry, {}, None, 8, 4, batch_size=2, repeats=3, threads=2)
    assert p["trusted"] and p["flags"] == [] and p["attempts"] == 1
    assert p["seconds"] == pytest.approx(1.05) and (p["seconds_min"], p["seconds_max"]) == pytest.approx((1.0, 1.1))
    assert p["spread"] == pytest.approx(0.1 / 1.05) and p["cpu_ratio"] == pytest.approx(2.0)
    assert p["seconds_per_call"] == pytest.approx(1.05 / 4) and p["cpu_seconds_all"] == pytest.approx([2, 2.2, 2.1])


def test_starved_and_scattered_timings_are_flagged(monkeypatch):
    # 2 threads but 0.5 s of CPU per second of wall (< 0.6 x 2): starved; 1 s vs 3 s repeats: spread 2/1.5
    fake_clocks(monkeypatch, [1.0, 3.0, 1.5], [0.5, 1.5, 0.75])
    p = time_generation(entry, {}, None, 8, 4, batch_size=2, repeats=3, threads=2)
    assert p["flags"] == ["spread", "cpu_starved"] and p["trusted"] is False
    # the same numbers on a GPU: CPU / wall is not checked there
    s = summarise([1.0, 1.1, 1.0], [0.1, 0.1, 0.1], threads=2, device="cuda:0")
    assert s["flags"] == [] and s["cpu_checked"] is False
    # thresholds are the dataclass's
    s = summarise([1.0, 1.4, 1.2], [1.0, 1.4, 1.2], threads=1, device="cpu", checks=TimingChecks(max_spread=0.5))
    assert s["trusted"]
    with pytest.raises(ValueError, match="bad timing checks"):
        TimingChecks(max_spread=0)


def test_a_flagged_timing_is_measured_again_and_the_best_attempt_kept(monkeypatch):
    # first attempt starved (CPU 0.1 per s), the rerun fed: the rerun is kept, the first attempt's flags recorded
    fake_clocks(monkeypatch, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [0.1, 0.1, 0.1, 1.0, 1.0, 1.0])
    calls = []
    p = time_generation(
        lambda *a, **k: calls.append(1) or entry(*a, **k),
        {},
        None,
        8,
        4,
        batch_size=2,
        warmup=1,
        repeats=3,
        threads=1,
        reruns=2,
    )
    assert p["trusted"] and p["attempts"] == 2 and p["earlier_flags"] == [["cpu_starved"]]
    assert len(calls) == 1 + 6  # one warm-up, two attempts of three repeats, no third attempt


def test_seconds_per_call_off_the_runs_median_is_flagged():
    # a busy run (docs/timing.md): MDLM 2.30 / 4.60 / 6.74 / 0.48 s at 4 / 8 / 16 / 32 steps
    points = [
        {"steps": s, "seconds_per_call": sec / s, "flags": [], "trusted": True}
        for s, sec in ((4, 2.30), (8, 4.60), (16, 6.74), (32, 0.48))
    ]
    assert check_calls(points) == [3]
    assert points[3]["flags"] == ["seconds_per_call"] and not points[3]["trusted"]
    assert all(p["trusted"] for p in points[:3])
    steady = [{"seconds_per_call": v, "flags": []} for v in (0.10, 0.12, 0.09, 0.11)]
    assert check_calls(steady) == [] and all(p["trusted"] for p in steady)
    assert check_calls([{"seconds_per_call": 1.0, "flags": []}]) == []  # one point: nothing to compare


def test_time_passes_takes_the_median_rate(monkeypatch):
    fake_clocks(monkeypatch, [1.0, 2.0, 0.5], [1.0, 2.0, 0.5])

    def generate(prompts, max_new):
        return prompts, {"nfe": 2, "generated_tokens": 4 * len(prompts)}

    p = time_passes(
        generate, [(["a", "b"], 4), (["c"], 4)], repeats=3, warmup=1, threads=1, checks=TimingChecks(max_spread=10)
    )
    assert p["tokens_per_s_all"] == [12.0, 6.0, 24.0] and p["tokens_per_s"] == 12.0
    assert p["seconds"] == 1.0 and p["nfe_all"] == [4, 4, 4] and p["requests"] == 3 and p["trusted"]


# ---------------------------------------------------------------------- real clocks, a tiny model
def _busy(stop):
    x = 0
    while not stop.is_set():
        for _ in range(10_000):
            x += 1


@pytest.fixture
def tiny_model(net_factory):
    net = net_factory(d_model=64, n_layers=2, max_len=32)

    def forward(models, n, L, steps, g, options, batch_size, device):
        x = torch.randint(0, 50, (n, L), generator=g)
        with torch.no_grad():
            for _ in range(steps):
                models["net"](x)
        return x, {"nfe": steps}

    return forward, {"net": net}


def test_a_timing_beside_busy_processes_is_flagged(tiny_model):
    """Two busy processes per core beside a one-thread timing: it gets well under 0.6 of a core."""
    forward, models = tiny_model
    cores = _cores()
    stop = mp.Event()
    procs = [mp.Process(target=_busy, args=(stop,), daemon=True) for _ in range(2 * cores + 1)]
    for p in procs:
        p.start()
    try:
        time.sleep(0.3)
        p = time_generation(forward, models, None, 32, 20, batch_size=16, warmup=1, repeats=3, threads=1)
    finally:
        stop.set()
        for q in procs:
            q.join(5)
    assert "cpu_starved" in p["flags"] and not p["trusted"], p


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _stat() -> tuple[float, float, float]:
    """Seconds since boot the machine's cores spent busy (steal included: a VM's host ran something else) and in
    total, from the first line of ``/proc/stat``, and this process's own CPU seconds."""
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    own = os.times()
    return (sum(v) - v[3] - v[4]) / hz, sum(v) / hz, own.user + own.system


def _others_busy(before, after) -> float:
    """How many cores were kept busy by anything but this process between two :func:`_stat` readings."""
    busy, total, own = (b - a for a, b in zip(before, after))
    return _cores() * max(0.0, busy - own) / max(total, 1e-9)


@pytest.mark.alone  # under pytest-xdist no other test runs beside it (tests/conftest.py)
def test_a_timing_alone_is_not_flagged(tiny_model):
    """One thread, nothing started beside it (two more measurements allowed), each repeat 0.2-0.35 s here (at 20
    steps, 0.04-0.07 s, a quiet machine's repeats differed by up to 0.24 of their median, the limit being 0.25, and CI
    once saw 1.79 three times over).  Skipped, with the numbers, when a flagged timing had something beside it: other
    processes (or a VM host's steal time) keeping 0.3 of a core busy, or a fixed loop of matrix products timed right
    after it spreading as far (the machine itself unsteady): the flag is then right, and says nothing of our code."""
    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat: cannot tell whether the machine is quiet")
    before = _stat()
    time.sleep(1.0)
    idle = _stat()
    if _others_busy(before, idle) > _cores() - 0.5:
        pytest.skip(f"machine busy ({_others_busy(before, idle):.1f} of {_cores()} cores): no uncontended timing here")
    forward, models = tiny_model
    p = time_generation(forward, models, None, 32, 100, batch_size=16, warmup=1, repeats=3, threads=1, reruns=2)
    others = _others_busy(idle, _stat())
    if not p["trusted"] and others > 0.3:
        pytest.skip(f"other processes or the VM's host kept {others:.2f} cores busy during the timing: {p['flags']}")
    if not p["trusted"]:  # a control: fixed matrix products, timed at once, by the same clocks and flag logic

        def loop(_):
            a = torch.randn(192, 192, generator=torch.Generator().manual_seed(0))
            for _ in range(1500):
                a = torch.tanh(a @ a.T / 192)

        loop(0)  # warm-up
        seconds, cpu, _ = timed(loop, 3)
        control = summarise(seconds, cpu, threads=torch.get_num_threads(), device="cpu")
        if "spread" in control["flags"]:
            pytest.skip(
                f"the machine itself is unsteady now: a fixed loop's repeats {seconds} spread {control['spread']:.2f}"
            )
    assert p["trusted"], {k: p[k] for k in ("flags", "earlier_flags", "spread", "cpu_ratio", "seconds_all")} | {
        "others_busy": others
    }
    assert 0.6 <= p["cpu_ratio"] <= 1.5 and p["seconds_per_call"] == pytest.approx(p["seconds"] / 100)
