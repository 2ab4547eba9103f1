"""``scripts/dllm_sft_probe.py`` (the README's outside-the-workflow SFT measurements) still runs."""

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

    probe = _probe()
    out = probe.main(["--tasks", "toy_math,toy_mbpp", "--steps", "2", "--n-train", "16", "--n-test", "4",
                      "--list-length", "4", "--math", "aligned", "--estimator", "count", "--d-model", "16",
                      "--layers", "1", "--buckets", "2"])
    assert set(out["accuracy"]) == {"toy_math", "toy_mbpp"} and len(out["digit_accuracy"]["toy_math"]) == 3
    rng = random.Random(0)
    docs = [probe.fixed_list(2, 5)(rng) for _ in range(50)]
    assert all(len(d["program"].split("|")[1].split()) == 5 for d in docs)
    assert all(probe.math_format("aligned")(rng)["answer"].count(" ") == 2 for _ in range(200))
    old = [probe.math_format("old", 3)(rng)["question"].split() for _ in range(300)]  # "question : a op b = ..."
    assert {int(q[q.index("=") - 1]) for q in old} == {1, 2, 3} and max(len(q) for q in old) == 11  # a up to 999
    with pytest.raises(SystemExit, match="max-addend"):
        probe.math_format("old", 0)
    with pytest.raises(SystemExit, match="toy_livebench"):
        probe.main(["--tasks", "toy_livebench", "--steps", "1"])
    with pytest.raises(SystemExit, match="cannot draw 3000 distinct"):  # 4 ops x 10^2 lists of two: 400
        probe.main(["--tasks", "toy_mbpp", "--list-length", "2", "--steps", "1"])
