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


def _stand_ins(monkeypatch, tmp_path):
    """A sweep of three points whose lm-eval runs (``evaluate``, recording its calls) and timings (recording theirs)
    are stand-ins: the sweep's files as the two rules leave them, in a second."""
    import json

    import unie.pipeline.dllm_runs as runs

    points = [{"name": f"c__k_{v}", "curve": "c", "label": "C", "key": "k", "value": v, "row": {}} for v in (1, 2, 3)]
    monkeypatch.setattr(runs, "sweep_points", lambda dllm, sweep: points)
    monkeypatch.setattr(runs, "row_model_args", lambda name, row, dllm, inputs, device, precision: {"name": name})
    calls, timed = [], []

    def time_point(args, samples, batch_size, timing, tp, log=print, lmeval_threads=None):
        timed.append(args["name"])
        if len(timed) == time_point.stop_at:
            raise TimeoutError("DUE TO TIME LIMIT")
        return {"tokens_per_s": 7.0, "flags": [], "trusted": True, "spread": 0.0, "threads_lmeval": lmeval_threads}

    time_point.stop_at = None
    monkeypatch.setattr(runs, "time_sweep_point", time_point)

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
    return runs, evaluate, time_point, calls, timed, dllm, {"c_model": str(model)}


def test_a_sweep_started_again_keeps_its_finished_points(tmp_path, monkeypatch):
    """A sweep's lm-eval job killed by its time limit (here: lm-eval fails at the third point) keeps the points it
    finished; started again (Slurm's retry) it runs only the others and writes the lmeval.json of one uninterrupted
    run; with another setting (the batch size) or another input file every point runs again."""
    import json

    runs, evaluate, _, calls, _, dllm, inputs = _stand_ins(monkeypatch, tmp_path)
    quiet = dict(log=lambda m: None)
    whole = runs.evaluate_sweep("fig4", dllm, inputs, tmp_path / "whole", "cpu", evaluate, **quiet)
    calls.clear()
    out = tmp_path / "sweep"
    with pytest.raises(TimeoutError):
        runs.evaluate_sweep("fig4", dllm, inputs, out, "cpu", lambda *a, **k: evaluate(*a, stop_at=3, **k), **quiet)
    assert calls == ["c__k_1", "c__k_2", "c__k_3"] and not (out / runs.LMEVAL_RECORD).exists()
    calls.clear()
    again = runs.evaluate_sweep("fig4", dllm, inputs, out, "cpu", evaluate, **quiet)
    assert calls == ["c__k_3"] and again == whole  # the same records as one uninterrupted run
    record = json.loads((out / runs.LMEVAL_RECORD).read_text())
    assert record["points"] == whole and record["threads"] >= 1
    assert {str(out / p / "throughput.json") for p in ("c__k_1", "c__k_2", "c__k_3")} <= set(record["records"])
    for changed_dllm, changed_inputs in (({**dllm, "batch_size": 4}, inputs), (dllm, {"c_model": str(tmp_path)})):
        calls.clear()
        runs.evaluate_sweep("fig4", changed_dllm, changed_inputs, out, "cpu", evaluate, **quiet)
        assert calls == ["c__k_1", "c__k_2", "c__k_3"]


def test_a_sweeps_timing_started_again_keeps_its_timed_points_and_writes_the_points(tmp_path, monkeypatch):
    """The timed job (rule dllm_sweep) reads the lm-eval job's record: points.json holds one record per point, its
    lm-eval fields and its timing in the order the figure and tables read (the layout of the one job that did both
    before); killed at the third point and started again it times only that one; a damaged lm-eval file of a point
    stops it naming the file and the rule that remakes it; an lm-eval run made again is timed again."""
    import json

    from unie.core.integrity import DamagedFileError

    runs, evaluate, time_point, calls, timed, dllm, inputs = _stand_ins(monkeypatch, tmp_path)
    dllm = {**dllm, "timing": {"source": "timed"}}
    quiet = dict(log=lambda m: None)
    out = tmp_path / "sweep"
    evaluated = runs.evaluate_sweep("fig4", dllm, inputs, out, "cpu", evaluate, **quiet)
    time_point.stop_at = 3
    with pytest.raises(TimeoutError):
        runs.time_sweep("fig4", dllm, inputs, out, "cpu", **quiet)
    assert timed == ["c__k_1", "c__k_2", "c__k_3"] and not (out / "points.json").exists()
    timed.clear()
    time_point.stop_at = None
    records = runs.time_sweep("fig4", dllm, inputs, out, "cpu", **quiet)
    assert timed == ["c__k_3"]
    points = json.loads((out / "points.json").read_text())
    assert points["points"] == records and points["trusted"] and points["batch_size"] == 2
    assert list(records[0]) == [
        *("sweep", "point", "curve", "label", "key", "value", "task", "metric", "accuracy", "stderr", "n"),
        *("tokens_per_s", "nfe", "seconds", "requests", "generated_tokens", "model_args", "tokens_per_s_lmeval"),
        *("flags", "trusted", "timing"),
    ]
    assert [r["accuracy"] for r in records] == [e["accuracy"] for e in evaluated] == [25.0, 50.0, 75.0]
    assert records[0]["timing"]["threads_lmeval"] == json.loads((out / runs.LMEVAL_RECORD).read_text())["threads"]
    damaged = out / "c__k_2" / "throughput.json"
    damaged.write_text(damaged.read_text().replace('"nfe": 4', '"nfe": 5'))
    (out / "c__k_2" / runs.TIMED).unlink()
    with pytest.raises(DamagedFileError, match=r"c__k_2/throughput.json.*rule dllm_sweep_eval"):
        runs.time_sweep("fig4", dllm, inputs, out, "cpu", **quiet)
    calls.clear()
    timed.clear()
    runs.evaluate_sweep("fig4", {**dllm, "batch_size": 4}, inputs, out, "cpu", evaluate, **quiet)
    runs.time_sweep("fig4", {**dllm, "batch_size": 4}, inputs, out, "cpu", **quiet)
    assert calls == timed == ["c__k_1", "c__k_2", "c__k_3"]


def test_the_default_source_takes_each_scored_passs_own_throughput_and_checks_its_cpu(tmp_path, monkeypatch):
    """dllm.timing.source lm_eval (the default): points.json holds each point's lm-eval pass's tokens/s, nothing is
    timed again, the pass's CPU / wall is checked against its threads (a starved pass is flagged, a pass without a
    recorded CPU time is not CPU-checked), a damaged throughput.json still stops the job naming the rule that remakes
    it, and the plan holds no core for it; an unknown source is refused."""
    import json

    from unie.config.dllm_plan import DllmPlan
    from unie.config.profile import resolve_config
    from unie.core.integrity import DamagedFileError

    import torch

    runs, evaluate, _, _, timed, dllm, inputs = _stand_ins(monkeypatch, tmp_path)
    quiet = dict(log=lambda m: None)
    out = tmp_path / "sweep"
    threads = torch.get_num_threads()  # what the lm-eval job records as its passes' threads
    cpu = {"c__k_1": None, "c__k_2": 0.9 * threads, "c__k_3": 0.2 * threads}  # CPU-s over the pass's 1.0 s

    def evaluate_cpu(args, tasks, include, point_dir, batch_size, **kw):  # as the adapter records a pass's CPU
        result = evaluate(args, tasks, include, point_dir, batch_size, **kw)
        tp, c = point_dir / "throughput.json", cpu[args["name"]]
        if c is not None:
            tp.write_text(json.dumps({**json.loads(tp.read_text()), "cpu_seconds": c}))
        return result

    runs.evaluate_sweep("fig4", dllm, inputs, out, "cpu", evaluate_cpu, **quiet)
    assert json.loads((out / runs.LMEVAL_RECORD).read_text())["threads"] == threads
    records = runs.time_sweep("fig4", dllm, inputs, out, "cpu", **quiet)
    assert timed == [] and [r["tokens_per_s"] for r in records] == [8.0, 8.0, 8.0]
    assert [r["timing"]["source"] for r in records] == ["lm_eval"] * 3
    assert [r["timing"]["cpu_checked"] for r in records] == [False, True, True]
    assert [r["flags"] for r in records] == [[], [], ["cpu_starved"]] and [r["trusted"] for r in records] == [
        True,
        True,
        False,
    ]
    assert records[1]["timing"]["cpu_ratio"] == pytest.approx(0.9 * threads)
    points = json.loads((out / "points.json").read_text())
    assert points["timing"]["source"] == "lm_eval" and not points["trusted"]
    damaged = out / "c__k_2" / "throughput.json"
    damaged.write_text(damaged.read_text().replace('"nfe": 4', '"nfe": 5'))
    with pytest.raises(DamagedFileError, match=r"c__k_2/throughput.json.*rule dllm_sweep_eval"):
        runs.time_sweep("fig4", dllm, inputs, out, "cpu", **quiet)
    with pytest.raises(ValueError, match="dllm.timing.source 'median'"):
        runs.SweepTiming.from_config({"source": "median"})
    # the plan's rule settings follow the dataclass's default: no core held unless the profile says timed
    for profile in ("config.yaml", "smoke.yaml", "paper.yaml"):
        config = resolve_config([Path(__file__).parents[1] / "config" / profile])
        plan = DllmPlan(config, "runs/x")
        assert plan.sweeps_timed == runs.SweepTiming.from_config(config["dllm"].get("timing")).timed is False
    config["dllm"]["timing"] = {"source": "timed"}
    assert DllmPlan(config, "runs/x").sweeps_timed


def test_a_sweep_point_compares_seconds_per_call_with_its_lm_eval_pass_on_the_same_threads(monkeypatch):
    """The timed passes' seconds per model call are checked against the lm-eval pass's when that pass ran on as many
    torch threads (a GPU, a cluster job); on other threads (a local run: the lm-eval job beside others on
    ``threads``, the timing on every core) they are recorded, not checked."""
    import unie.dllm.decoder as decoder
    import unie.pipeline.dllm_runs as runs

    monkeypatch.setattr(decoder, "build_decoder", lambda args: type("D", (), {"generate": None})())
    monkeypatch.setattr(runs, "sweep_batches", lambda *a: [(["q"], 4)])
    passes = {"seconds_per_call": 0.1, "threads": 2, "flags": [], "trusted": True, "tokens_per_s": 5.0}
    monkeypatch.setattr(runs, "time_passes", lambda *a, **k: dict(passes))
    slow = {"seconds": 4.0, "nfe": 10}  # 0.4 s per call: off by 75 %
    same = runs.time_sweep_point({}, "s.jsonl", 2, runs.SweepTiming(), slow, lmeval_threads=2)
    assert same["call_checked"] and same["flags"] == ["seconds_per_call"] and not same["trusted"]
    assert runs.time_sweep_point({}, "s.jsonl", 2, runs.SweepTiming(), slow)["flags"] == ["seconds_per_call"]
    other = runs.time_sweep_point({}, "s.jsonl", 2, runs.SweepTiming(), slow, lmeval_threads=1)
    assert not other["call_checked"] and other["trusted"] and other["seconds_per_call_lmeval"] == 0.4
    assert other["threads_lmeval"] == 1


def test_an_appendix_sweep_tables_best_accuracy_is_bold_and_in_its_csv():
    """The k/w tables bold their best accuracy (every tied one) and say which in the CSV's ``best``."""
    from unie.report.tables import sweep_table

    points = [
        {
            "key": "K",
            "value": k,
            "accuracy": a,
            "stderr": 2.0,
            "n": 200,
            "tokens_per_s": 100.0 / k,
            "nfe": 8,
            "curve": "uni",
            "label": "+Uni-Energy",
        }
        for k, a in ((2, 20.0), (3, 23.5), (4, 23.5), (5, 21.0))
    ]
    tex, df = sweep_table({"points": points, "task": "toy_gsm8k"}, "K varied.")
    assert df.best.tolist() == [False, True, True, False]
    assert tex.count(r"\textbf{23.5") == 2 and r"\textbf{20.0" not in tex
