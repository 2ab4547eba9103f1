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
    return {
        "id": i,
        "rule": rule,
        "start": start,
        "end": end,
        "threads": threads,
        "inputs": list(inputs),
        "outputs": list(outputs),
    }


# a -> b -> d and a -> c -> d: a 0-10, b 10-40 (the long branch), c 10-15, d 40-45; e independent 0-5
JOBS = [
    _job("a", "data", 0, 10, outputs=["x"]),
    _job("b", "train", 10, 40, ["x"], ["m1"]),
    _job("c", "train", 10, 15, ["x"], ["m2"]),
    _job("d", "table", 40, 45, ["m1", "m2"], ["t"]),
    _job("e", "tokenizer", 0, 5, outputs=["tok"]),
]


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
        sm = SimpleNamespace(
            rule=j["rule"],
            threads=1,
            input=j["inputs"],
            output=[f"runs/toy/results/{o}" for o in j["outputs"]] or ["runs/toy/results/none"],
            log=[f"runs/toy/logs/{j['id']}.log"],
        )
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


# ---------------------------------------------------------------------- critical path first (job priorities)
def test_remaining_chains_by_hand():
    """A job's priority is its own seconds plus the longest remaining chain of the jobs that read its outputs."""
    from unie.config.priorities import remaining_chains

    # the DAG of JOBS above: a 10 -> b 30 -> d 5, a -> c 5 -> d; e 5 alone
    own = {"a": 10.0, "b": 30.0, "c": 5.0, "d": 5.0, "e": 5.0}
    consumers = {"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set(), "e": set()}
    # d: 5; b: 30 + 5; c: 5 + 5; a: 10 + max(35, 10); e: 5
    assert remaining_chains(own, consumers) == {"a": 45.0, "b": 35.0, "c": 10.0, "d": 5.0, "e": 5.0}
    # a consumer that does not run (not in own) adds nothing
    assert remaining_chains({"a": 10.0, "c": 5.0}, consumers) == {"a": 15.0, "c": 5.0}


def test_expected_seconds_from_records_and_their_fallbacks():
    from unie.config.priorities import job_key, measured_seconds, own_seconds

    recs = [
        {"rule": "dllm_train", "wildcards": {"dmodel": "llada"}, "start": 0, "end": 300, "ok": True},
        {"rule": "dllm_train", "wildcards": {"dmodel": "llada"}, "start": 400, "end": 402, "ok": True},  # resumed
        {"rule": "dllm_train", "wildcards": {"dmodel": "proxy"}, "start": 0, "end": 20, "ok": True},
        {"rule": "table3", "wildcards": {}, "start": 0, "end": 1, "ok": True},
        {"rule": "train", "start": 0, "end": 99, "ok": True},
    ]  # from before records had wildcards: left out
    seconds = measured_seconds(recs)
    assert seconds == {"dllm_train[dmodel=llada]": 300.0, "dllm_train[dmodel=proxy]": 20.0, "table3": 1.0}
    assert job_key("r", {"b": 2, "a": "x"}) == "r[a=x,b=2]"
    assert own_seconds("dllm_train[dmodel=dream]", seconds) == 160.0  # its rule's median
    assert own_seconds("fig4", seconds) == 20.0  # the median of every job
    assert own_seconds("fig4", {}) is None


class _Job:
    def __init__(self, rule, wildcards=None, norun=False):
        self.rule = SimpleNamespace(name=rule)
        self.wildcards_dict = dict(wildcards or {})
        self.is_norun = norun


class _Wildcards(dict):
    pass


def test_every_rule_gets_its_jobs_remaining_chain_over_the_dag():
    """The Snakefile's priorities (unie.pipeline.run.chain_priorities) over a DAG like Snakemake's: the LLaDA-like
    training's chain outranks a longer job with a short chain, a rule's own priority stays for a job the DAG lacks."""
    from unie.pipeline.run import chain_priorities

    data, llada, dream = (
        _Job("dllm_data"),
        _Job("dllm_train", {"dmodel": "llada"}),
        _Job("dllm_train", {"dmodel": "dream"}),
    )
    ev, sweep, table, all_ = (
        _Job("dllm_eval_llada"),
        _Job("dllm_sweep_eval", {"sweep": "fig4"}),
        _Job("table3"),
        _Job("all", norun=True),
    )
    mdlm = _Job("train", {"model": "mdlm"})
    depending = {
        data: {llada: {"m"}, dream: {"m"}},
        llada: {ev: {"w"}, sweep: {"w"}},
        dream: {table: {"w2"}},
        ev: {table: {"r"}},
        sweep: {},
        table: {all_: {"t"}},
        mdlm: {all_: {"t2"}},
        all_: {},
    }
    dag = SimpleNamespace(needrun_jobs=lambda: list(depending), depending=depending)
    rules = {
        n: SimpleNamespace(name=n, priority=p)
        for n, p in (
            ("dllm_data", 0),
            ("dllm_train", 20),
            ("dllm_eval_llada", 0),
            ("dllm_sweep_eval", 0),
            ("table3", 0),
            ("all", 0),
            ("train", 20),
            ("other", 7),
        )
    }
    workflow = SimpleNamespace(rules=list(rules.values()), dag=dag)
    seconds = {
        "dllm_data": 10,
        "dllm_train[dmodel=llada]": 300,
        "dllm_train[dmodel=dream]": 100,
        "dllm_eval_llada": 200,
        "table3": 1,
        "train[model=mdlm]": 400,
    }  # dllm_sweep_eval: the median, 150
    assert chain_priorities(workflow, seconds)

    def prio(rule, **wc):
        return rules[rule].priority(_Wildcards(wc))

    # table3 1; eval 200 + 1; sweep 150; llada 300 + max(201, 150); dream 100 + 1; data 10 + max(501, 101); all 0
    assert prio("table3") == 1 and prio("dllm_eval_llada") == 201 and prio("dllm_sweep_eval", sweep="fig4") == 150
    assert prio("dllm_train", dmodel="llada") == 501 and prio("dllm_train", dmodel="dream") == 101
    assert prio("dllm_data") == 511 and prio("all") == 0
    assert prio("train", model="mdlm") == 400 < prio("dllm_train", dmodel="llada")  # longer job, shorter chain
    assert prio("other") == 7  # not in the DAG: its rule's own priority
    # nothing measured: the rules keep their own priorities
    still = SimpleNamespace(name="train", priority=20)
    assert not chain_priorities(SimpleNamespace(rules=[still], dag=dag), {}) and still.priority == 20


def test_a_fresh_clones_run_of_a_shipped_profile_orders_its_jobs_by_measured_seconds(smoke_pristine, tmp_path):
    """``config/job_seconds/{toy,smoke}.tsv`` are in the repository: a run directory with no records of its own (a
    fresh clone's) takes its jobs' seconds from its profile's table, which names every job of a smoke run and every
    rule of it for the default profile (without them every job kept its rule's own priority: the critical path did
    not start first)."""
    from unie.config.priorities import job_key, parse_records, rule_of, table_path
    from unie.pipeline.job_records import expected_seconds

    seconds = {p: expected_seconds(tmp_path / "a fresh run", p) for p in ("toy", "smoke")}
    for profile, (table, source) in seconds.items():
        assert table and source == str(table_path(profile)), (profile, source)
    jobs = {
        job_key(r["rule"], r["wildcards"])
        for r in parse_records((smoke_pristine / "runs" / "smoke" / "benchmarks" / "jobs.jsonl").read_text())
    }
    assert jobs and jobs <= set(seconds["smoke"][0]), sorted(jobs - set(seconds["smoke"][0]))
    assert {rule_of(k) for k in jobs} <= {rule_of(k) for k in seconds["toy"][0]}


def test_the_reference_table_is_written_from_a_runs_records(tmp_path):
    from unie.config.priorities import main, read_table

    jobs = tmp_path / "runs" / "toy+seed-1" / "benchmarks" / "jobs.jsonl"
    jobs.parent.mkdir(parents=True)
    jobs.write_text(
        "\n".join(
            json.dumps(r)
            for r in (
                {"rule": "dllm_train", "wildcards": {"dmodel": "llada"}, "start": 0, "end": 374.04, "ok": True},
                {"rule": "table3", "wildcards": {}, "start": 0, "end": 1, "ok": False},
                "not json",
            )
        )
        + "\n"
    )
    out = tmp_path / "toy.tsv"
    assert main([str(jobs), "--out", str(out)]) == 0
    assert read_table(out) == {"dllm_train[dmodel=llada]": 374.0}
    assert main([str(tmp_path / "none.jsonl")]) == 1


def test_only_a_local_runs_default_rate_limit_is_dropped():
    """unie.pipeline.run.quiet_scheduler: Snakemake's default limit (100 jobs a second) goes in a run on this machine;
    a limit given otherwise, a cluster executor's and one inside a cluster job stay."""
    MaxJobsPerTimespan = pytest.importorskip(
        "snakemake.settings.types", reason="the workflow extra: pip install -e '.[workflow]'"
    ).MaxJobsPerTimespan
    from unie.pipeline.run import quiet_scheduler

    def run(limit, local=True, remote=False):
        settings = SimpleNamespace(max_jobs_per_timespan=MaxJobsPerTimespan.parse_choice(limit) if limit else None)
        workflow = SimpleNamespace(remote_exec=remote, scheduling_settings=settings)
        plugin = SimpleNamespace(common_settings=SimpleNamespace(local_exec=local))
        return quiet_scheduler(workflow, plugin), settings.max_jobs_per_timespan

    dropped, left = run("100/1s")
    assert dropped and left is None
    for kw in ({"limit": "10/1s"}, {"limit": "100/1m"}, {"limit": "100/1s", "local": False}):
        dropped, left = run(**kw)
        assert not dropped and left is not None, kw
    dropped, left = run("100/1s", remote=True)
    assert not dropped and left is not None
    assert run(None) == (False, None)
