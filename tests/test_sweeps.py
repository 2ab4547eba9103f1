"""The DLLM sweeps (Figure 4, the appendix k/w tables): their points and the config checks, before any job."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from unie.core.options import ConfigError
from unie.config.checks import check_dllm
from unie.dllm.rows import row_model_args, sweep_points
from unie.config.profile import resolve_config

SMOKE = resolve_config([Path(__file__).parents[1] / "config" / "smoke.yaml"])


def test_points_vary_one_option_of_their_curve():
    d = SMOKE["dllm"]
    pts = sweep_points(d, "app_w")
    assert [p["name"] for p in pts] == ["uni__w_0.2", "uni__w_1.0"]
    for p, w in zip(pts, (0.2, 1.0)):
        args = row_model_args(
            p["name"], p["row"], d, {"model": "m/model.safetensors", "proxy": "p/model.safetensors"}, "cpu"
        )
        # the shared energy options, then the curve's own, then the varied value
        assert args["w"] == w and args["K"] == d["energy"]["K"] and args["energy"] == "uni"
        assert args["pretrained"] == "m" and args["proxy"] == "p" and args["name"] == p["name"]
    fig4 = sweep_points(d, "fig4")
    fast = [p for p in fig4 if p["curve"] == "fast_dllm"]
    args = row_model_args(fast[0]["name"], fast[0]["row"], d, {"model": "m/model.safetensors"}, "cpu")
    assert args["sampler"] == "fast_dllm" and "K" not in args and "proxy" not in args  # no energy options leak


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda s: s.__setitem__("task", "toy_maths"), r"dllm.sweeps.task'.*toy_maths"),
        (
            lambda s: s["sets"]["app_k"]["uni"].__setitem__("vary", {"K": [2], "w": [0.1]}),
            r"app_k.uni.vary'.*exactly one",
        ),
        (
            lambda s: s["sets"]["fig4"]["fast_dllm"].__setitem__("vary", {"K": [2]}),
            r"fig4.fast_dllm \(K=2\).options'.*unknown option.*'K'.*fast_dllm",
        ),
        (
            lambda s: s["sets"]["fig4"]["llada"].__setitem__("vary", {"tokens_per_step": [3]}),
            r"fig4.llada \(tokens_per_step=3\).options'.*multiple",
        ),
        (lambda s: s["sets"]["app_w"]["uni"].__setitem__("vary", {"w": [1.5]}), r"app_w.uni \(w=1.5\).options'"),
        (lambda s: s["sets"]["app_k"]["uni"].pop("proxy"), r"app_k.uni \(K=2\).proxy'.*needs a proxy"),
    ],
)
def test_bad_sweep_names_the_key(mutate, expected):
    cfg = copy.deepcopy(SMOKE)
    check_dllm(cfg)
    mutate(cfg["dllm"]["sweeps"])
    with pytest.raises(ConfigError, match=expected):
        check_dllm(cfg)


def test_sweep_timing_batches_and_defaults(tmp_path):
    import json

    from unie.eval.timing import TimingChecks
    from unie.pipeline.dllm_runs import SweepTiming, sweep_batches

    docs = [
        {"doc_id": i, "arguments": {"gen_args_0": {"arg_0": f"q{i}", "arg_1": {"until": ["\n"], "max_gen_toks": 16}}}}
        for i in (2, 0, 1, 3, 4)
    ]
    path = tmp_path / "samples_toy_math_x.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in docs))
    assert sweep_batches(path, 2, None) == [(["q0", "q1"], 16), (["q2", "q3"], 16), (["q4"], 16)]  # document order
    assert sweep_batches(path, 2, 1) == [(["q0", "q1"], 16)]
    # batched as the adapter batches: the same length key together, keys in sorted order, document order inside
    assert sweep_batches(path, 2, None, batch_key=lambda p: int(p[1:]) % 2) == [
        (["q0", "q2"], 16),
        (["q4"], 16),
        (["q1", "q3"], 16),
    ]
    t = SweepTiming.from_config({"repeats": 5, "checks": {"max_spread": 0.5}})
    # every prompt by default: the first batches alone would be the shortest prompts
    assert (t.repeats, t.warmup, t.batches) == (5, 1, None) and t.checks == TimingChecks(max_spread=0.5)
    assert SweepTiming.from_config(None) == SweepTiming() and SweepTiming().repeats >= 3


def test_a_sweep_started_again_keeps_its_finished_points(tmp_path, monkeypatch):
    """A sweep job killed by its time limit (here: lm-eval fails at the third point) keeps the points it finished;
    started again (Slurm's retry) it runs only the others and writes the points.json of one uninterrupted run; with
    another setting (the batch size) or another input file every point runs again."""
    import json

    import unie.pipeline.dllm_runs as runs

    points = [{"name": f"c__k_{v}", "curve": "c", "label": "C", "key": "k", "value": v, "row": {}} for v in (1, 2, 3)]
    monkeypatch.setattr(runs, "sweep_points", lambda dllm, sweep: points)
    monkeypatch.setattr(runs, "row_model_args", lambda name, row, dllm, inputs, device, precision: {"name": name})
    monkeypatch.setattr(
        runs, "time_sweep_point", lambda *a, **k: {"tokens_per_s": 7.0, "flags": [], "trusted": True, "spread": 0.0}
    )
    calls = []

    def evaluate(args, tasks, include, point_dir, batch_size, stop_at=None, **kw):
        calls.append(args["name"])
        if len(calls) == stop_at:
            raise TimeoutError("DUE TO TIME LIMIT")
        run = point_dir / "model"
        run.mkdir(parents=True)
        acc = 0.25 * int(args["name"][-1])
        (run / "results_t.json").write_text(json.dumps({"results": {"t": {"acc,none": acc, "acc_stderr,none": 0.1}}}))
        (run / "samples_t_t.jsonl").write_text(json.dumps({"doc_id": 0}) + "\n")
        (point_dir / "throughput.json").write_text(
            json.dumps({"nfe": 4, "seconds": 1.0, "requests": 1, "generated_tokens": 8, "tokens_per_s": 8.0})
        )
        return run / "results_t.json"

    model = tmp_path / "model.safetensors"
    model.write_bytes(b"weights")
    dllm = {"sweeps": {"task": "t"}, "tasks": {"metrics": {"t": "acc,none"}}, "batch_size": 2}
    inputs = {"c_model": str(model)}
    whole = runs.run_sweep("fig4", dllm, inputs, tmp_path / "whole", "cpu", evaluate, log=lambda m: None)
    calls.clear()
    out = tmp_path / "sweep"
    with pytest.raises(TimeoutError):
        runs.run_sweep(
            "fig4", dllm, inputs, out, "cpu", lambda *a, **k: evaluate(*a, stop_at=3, **k), log=lambda m: None
        )
    assert calls == ["c__k_1", "c__k_2", "c__k_3"] and not (out / "points.json").exists()
    calls.clear()
    again = runs.run_sweep("fig4", dllm, inputs, out, "cpu", evaluate, log=lambda m: None)
    assert calls == ["c__k_3"] and again == whole  # the same records as one uninterrupted run
    for changed_dllm, changed_inputs in (({**dllm, "batch_size": 4}, inputs), (dllm, {"c_model": str(tmp_path)})):
        calls.clear()
        runs.run_sweep("fig4", changed_dllm, changed_inputs, out, "cpu", evaluate, log=lambda m: None)
        assert calls == ["c__k_1", "c__k_2", "c__k_3"]
