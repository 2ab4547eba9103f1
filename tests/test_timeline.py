"""Every run's timeline (unie.report.timeline, unie.pipeline.job_records): the critical path and the idle core-time of a
small DAG against values computed by hand, and the records a job writes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from unie.pipeline.job_records import read_jobs, record_job
from unie.pipeline.tables_figures import write_timeline
from unie.report.timeline import critical_path, dependencies, lanes, summary


def _job(i, rule, start, end, inputs=(), outputs=(), threads=1):
    return {"id": i, "rule": rule, "start": start, "end": end, "threads": threads, "inputs": list(inputs),
            "outputs": list(outputs)}


# a -> b -> d and a -> c -> d: a 0-10, b 10-40 (the long branch), c 10-15, d 40-45; e independent 0-5
JOBS = [_job("a", "data", 0, 10, outputs=["x"]), _job("b", "train", 10, 40, ["x"], ["m1"]),
        _job("c", "train", 10, 15, ["x"], ["m2"]), _job("d", "table", 40, 45, ["m1", "m2"], ["t"]),
        _job("e", "tokenizer", 0, 5, outputs=["tok"])]


def test_critical_path_by_hand():
    assert dependencies(JOBS) == {"a": set(), "b": {"a"}, "c": {"a"}, "d": {"b", "c"}, "e": set()}
    path, length = critical_path(JOBS)
    assert path == ["a", "b", "d"] and length == pytest.approx(45.0)


def test_idle_core_time_by_hand():
    s = summary(JOBS, cores=2)
    # 0-5: a, e (2 cores); 5-10: a (1); 10-15: b, c (2); 15-40: b (1); 40-45: d (1): busy 10+5+10+25+5 = 55 of 90
    assert s["wall_s"] == pytest.approx(45) and s["busy_core_s"] == pytest.approx(55)
    assert s["idle_core_s"] == pytest.approx(35) and s["idle_share"] == pytest.approx(35 / 90)
    wide = summary([_job("w", "timing", 0, 10, threads=4)], cores=2)
    assert wide["busy_core_s"] == pytest.approx(20)  # a job never holds more than the run's cores
    assert len(set(lanes(JOBS).values())) == 2


def test_jobs_record_themselves_and_the_run_writes_its_timeline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for j in JOBS:
        sm = SimpleNamespace(rule=j["rule"], threads=1, input=j["inputs"],
                             output=[f"runs/toy/results/{o}" for o in j["outputs"]] or ["runs/toy/results/none"],
                             log=[f"runs/toy/logs/{j['id']}.log"])
        sm.input = [f"runs/toy/results/{i}" for i in j["inputs"]]
        record_job(sm, 1000 + j["start"], 1000 + j["end"], ok=True)
    record_job(SimpleNamespace(rule="old", threads=1, input=[], output=["runs/toy/results/old"], log=[]), 10, 20, True)
    assert len(read_jobs("runs/toy", since=999)) == 5
    rec = write_timeline("runs/toy", since=999, cores=2, log=lambda m: None)
    assert rec["critical_path"] == ["data", "train", "table"] and rec["critical_s"] == pytest.approx(45)
    assert rec["idle_share"] == pytest.approx(35 / 90)
    tsv = (tmp_path / "runs/toy/benchmarks/timeline.tsv").read_text().splitlines()
    assert len(tsv) == 6 and sum(int(line.split("\t")[5]) for line in tsv[1:]) == 3
    assert (tmp_path / "runs/toy/benchmarks/timeline.png").stat().st_size > 0
    assert json.loads((tmp_path / "runs/toy/benchmarks/timeline.json").read_text())["jobs"] == 5
