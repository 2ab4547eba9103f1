"""``scripts/dllm_sft_probe.py`` (the outside-the-workflow SFT probe of docs/dllm.md) still runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "dllm_sft_probe.py"


def _probe():
    spec = importlib.util.spec_from_file_location("dllm_sft_probe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probe_runs_and_its_task_variants_hold():
    import random

    from unie.data import tasks as T

    probe = _probe()
    out = probe.main(
        [
            "--tasks",
            "toy_math,toy_mbpp",
            "--steps",
            "2",
            "--n-train",
            "16",
            "--n-test",
            "4",
            "--list-lengths",
            "4",
            "--math",
            "aligned",
            "--estimator",
            "count",
            "--d-model",
            "16",
            "--layers",
            "1",
            "--buckets",
            "2",
        ]
    )
    assert set(out["accuracy"]) == {"toy_math", "toy_mbpp"} and len(out["digit_accuracy"]["toy_math"]) == 3
    rng = random.Random(0)
    assert probe.list_lengths("") == (T.LIST_LENGTH,) * 2 and probe.list_lengths("3-5") == (3, 5)
    old = probe.generators(["toy_math", "toy_gsm8k", "toy_lcb"], (3, 5), "profile", 999, 9)
    assert {len(old["toy_lcb"](rng)["program"].split("|")[1].split()) for _ in range(100)} == {3, 4, 5}
    maths = [old["toy_math"](rng)["question"].split() for _ in range(500)]  # "question : a op b = ? answer :"
    assert {int(q[q.index("=") - 1]) for q in maths} == set(range(1, 10)) and max(len(q) for q in maths) == 11
    profile = probe.generators(["toy_math", "toy_mbpp"])
    assert {len(profile["toy_mbpp"](rng)["program"].split("|")[1].split()) for _ in range(50)} == {T.LIST_LENGTH}
    assert max(len(profile["toy_math"](rng)["question"].split()) for _ in range(500)) == 12  # a up to 4 digits
    assert all(probe.math_format("aligned", 9)(rng)["answer"].count(" ") == 2 for _ in range(200))
    for bad in (["--list-lengths", "5-3"], ["--list-lengths", "x"], ["--max-addend", "0"]):
        with pytest.raises(SystemExit, match="list-lengths|max-addend"):
            probe.main(["--tasks", "toy_mbpp", "--steps", "1", *bad])
    with pytest.raises(SystemExit, match="toy_livebench"):
        probe.main(["--tasks", "toy_livebench", "--steps", "1"])
    with pytest.raises(SystemExit, match="cannot draw 3000 distinct"):  # 4 ops x 10^2 lists of two: 400
        probe.main(["--tasks", "toy_mbpp", "--list-lengths", "2", "--steps", "1"])
