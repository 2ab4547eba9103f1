"""The warm job server (unie.pipeline.warm): a job's script runs in a fork of a process that imported torch once, with
the job's streams, directory, environment and exit status; signals reach it; a killed job takes its child with it;
without a server a job runs in its own process.  The smoke run's jobs ran warm once the server was ready (its records
say so)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from unie.pipeline import warm

JOB = textwrap.dedent(
    """
    import json, os, sys, time
    from types import SimpleNamespace
    torch_before = "torch" in sys.modules
    lm_eval_before = "lm_eval.evaluator" in sys.modules and "transformers" in sys.modules
    from unie.pipeline.warm import delegate, child_start
    delegate(SimpleNamespace(bench_iteration=None), time.time())  # a client: never returns when a server took it
    print("out line", flush=True)
    print("err line", file=sys.stderr, flush=True)
    json.dump({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(), "torch": torch_before,
               "lm_eval": lm_eval_before, "var": os.environ.get("JOB_VAR"), "child": os.environ.get("UNIE_WARM_CHILD"),
               "argv": sys.argv[1:], "start": child_start()}, open("facts.json", "w"))
    if sys.argv[1:] == ["sleep"]:
        time.sleep(60)
    sys.exit(int(sys.argv[1]) if sys.argv[1:] and sys.argv[1].isdigit() else 0)
    """
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A run's server (``start`` as the Snakefile's onstart calls it), ended by ``stop`` as onsuccess does."""
    run = tmp_path_factory.mktemp("run")
    saved = dict(os.environ)
    proc = warm.start(str(run))
    assert proc is not None and os.environ[warm.ADDRESS].split("\t")[1].endswith("socket")
    address = os.environ[warm.ADDRESS]
    os.environ.clear()
    os.environ.update(saved)
    log = run / "logs" / "warm-server.log"
    deadline = time.time() + 120
    while not Path(address.split("\t")[1]).exists() and time.time() < deadline:  # ready once it imported torch
        time.sleep(0.05)
    while " imported " not in log.read_text() and time.time() < deadline:  # then lm-eval and transformers
        time.sleep(0.05)
    yield {"proc": proc, "address": address, "log": log}
    os.environ[warm.ADDRESS] = address
    warm.stop(proc)
    assert warm.ADDRESS not in os.environ and proc.poll() is not None  # it ended with the run
    assert not Path(address.split("\t")[1]).exists()


def run_job(tmp_path, args=(), address=None, extra_env=None, **kw):
    (tmp_path / "job.py").write_text(JOB)
    env = {**os.environ, "JOB_VAR": "from the job", **(extra_env or {})}
    env.pop(warm.ADDRESS, None)
    if address:
        env[warm.ADDRESS] = address
    return subprocess.Popen(
        [sys.executable, str(tmp_path / "job.py"), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_a_job_runs_in_a_fork_of_the_server_with_its_streams_directory_environment_and_status(server, tmp_path):
    p = run_job(tmp_path, ["3"], server["address"])
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3, err
    assert out == "out line\n" and err == "err line\n"
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["ppid"] == server["proc"].pid != p.pid  # the server's child, not the client
    assert facts["torch"] and facts["lm_eval"]  # imported before the script's first line: the start-up it saves
    assert facts["cwd"] == str(tmp_path) and facts["var"] == "from the job" and facts["argv"] == ["3"]
    assert facts["child"] is None  # taken out of the environment: the job's own subprocesses do not inherit it
    assert abs(facts["start"] - time.time()) < 60  # the client's start, the job's start in its record
    assert f"job {facts['pid']}: {tmp_path} job.py" in server["log"].read_text()


def test_without_a_server_or_switched_off_a_job_runs_in_its_own_process(server, tmp_path):
    for address, off in ((None, None), (server["address"], "0")):
        env = {"UNIE_WARM": off} if off else {}
        (tmp_path / "job.py").write_text(JOB)
        p = subprocess.run(
            [sys.executable, str(tmp_path / "job.py")],
            cwd=tmp_path,
            env={**os.environ, **env, **({warm.ADDRESS: address} if address else {})},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 0, p.stderr
        facts = json.loads((tmp_path / "facts.json").read_text())
        assert facts["ppid"] != server["proc"].pid and not facts["torch"] and facts["start"] is None


def test_a_job_whose_hugging_face_variables_differ_from_the_servers_runs_in_its_own_process(server, tmp_path):
    """transformers, datasets and lm-eval read HF_HUB_OFFLINE, HF_HOME and the like when imported: a job that sets
    them otherwise than the server imported with must import them itself."""
    assert "HF_HUB_OFFLINE" in warm.import_env({"HF_HUB_OFFLINE": "1", "PATH": "/bin"})
    assert warm.import_env({"PATH": "/bin", "OMP_NUM_THREADS": "1"}) == {}
    value = "0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1"
    p = run_job(tmp_path, ["4"], server["address"], extra_env={"HF_HUB_OFFLINE": value})
    out, err = p.communicate(timeout=60)
    assert p.returncode == 4 and out == "out line\n", err
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["pid"] == p.pid and not facts["lm_eval"] and facts["start"] is None  # the job's own process
    assert f"not taken: {tmp_path} job.py: HF_HUB_OFFLINE differ" in server["log"].read_text()


def test_lm_eval_and_transformers_are_imported_for_a_run_with_two_jobs_that_use_them():
    assert warm.wants_later(["dllm_eval_llada", "dllm_room_llada", "table3"])
    assert not warm.wants_later(["train", "sample_table2", "table2", "tokenizer"])  # one: its own import is cheaper


def test_a_job_that_starts_while_the_server_imports_waits_for_it_and_a_table_rerun_starts_none(tmp_path):
    """A run's first jobs start right after ``onstart``, before the server has imported torch (about 3 s): they wait
    for it and run warm.  A server that died leaves its jobs to run in their own processes at once.  A run of table
    and figure jobs only (no torch) starts no server."""
    saved = dict(os.environ)
    proc = warm.start(str(tmp_path / "run"), ["download", "tokenizer", "table1"])
    try:
        address = os.environ[warm.ADDRESS]
        assert address.split("\t")[2] == str(proc.pid)
        t0 = time.monotonic()
        p = run_job(tmp_path, ["0"], address)  # at once: the socket is not there yet
        p.communicate(timeout=120)
        facts = json.loads((tmp_path / "facts.json").read_text())
        assert p.returncode == 0 and facts["ppid"] == proc.pid and facts["torch"], (facts, time.monotonic() - t0)
    finally:
        os.environ[warm.ADDRESS] = address
        warm.stop(proc)
        os.environ.clear()
        os.environ.update(saved)
    dead = address.rsplit("\t", 1)[0] + f"\t{proc.pid}"  # ended: its socket is gone, its pid too
    t0 = time.monotonic()
    p = run_job(tmp_path, ["0"], dead)
    p.communicate(timeout=60)
    assert json.loads((tmp_path / "facts.json").read_text())["pid"] == p.pid and time.monotonic() - t0 < 20
    assert warm.wants_server(["train", "table1"]) and not warm.wants_server(["table1", "fig2", "paper_page"])
    assert warm.start(str(tmp_path / "run"), ["table1", "table_app_k", "fig3"]) is None
    assert warm.ADDRESS not in os.environ


def test_another_hosts_server_is_not_used(server, tmp_path):
    path = server["address"].split("\t")[1]
    p = run_job(tmp_path, [], f"another-host\t{path}")
    p.communicate(timeout=60)
    assert json.loads((tmp_path / "facts.json").read_text())["pid"] == p.pid


def _wait_for_facts(tmp_path, p):
    deadline = time.time() + 60
    while not (tmp_path / "facts.json").exists() and time.time() < deadline and p.poll() is None:
        time.sleep(0.02)
    time.sleep(0.2)
    return json.loads((tmp_path / "facts.json").read_text())


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        # a zombie until the server reaps it
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_job_reaches_the_script_and_its_status_is_the_jobs(server, tmp_path, sig):
    p = run_job(tmp_path, ["sleep"], server["address"])
    child = _wait_for_facts(tmp_path, p)["pid"]
    p.send_signal(sig)
    p.communicate(timeout=60)
    assert p.returncode == -sig  # died of it, as the script's own process would have
    deadline = time.time() + 10
    while not _gone(child) and time.time() < deadline:
        time.sleep(0.05)
    assert _gone(child)


def test_a_job_killed_outright_takes_its_child_with_it(server, tmp_path):
    p = run_job(tmp_path, ["sleep"], server["address"])
    child = _wait_for_facts(tmp_path, p)["pid"]
    p.kill()
    p.wait(timeout=30)
    deadline = time.time() + 10
    while not _gone(child) and time.time() < deadline:
        time.sleep(0.05)
    assert _gone(child)


def test_the_smoke_runs_jobs_ran_warm_once_the_server_was_ready_and_recorded_their_cpu_and_memory(smoke_pristine):
    """The shared smoke run (``snakemake --cores 2``, local executor): every job ran in the server (those that started
    before it was ready waited for it), each record with its CPU seconds and memory (Snakemake's benchmark files would
    measure only the waiting client)."""
    import re

    from unie.config.priorities import parse_records

    run = smoke_pristine / "runs" / "smoke"
    recs = parse_records((run / "benchmarks" / "jobs.jsonl").read_text())
    log = (run / "logs" / "warm-server.log").read_text()
    (ready,) = [float(t) for t in re.findall(r" ready at ([0-9.]+)", log)]
    cold = [(r["rule"], round(r["start"] - ready, 2)) for r in recs if not r["warm"]]
    assert not cold and len(recs) > 50, cold  # those that started before it was ready waited for it
    assert all(r["cpu_s"] > 0 and r["max_rss_mb"] > 50 for r in recs)
    assert not list(run.glob("benchmarks/*/*.tsv"))  # no benchmark: directive left
    assert len([line for line in log.splitlines() if " job " in line]) == sum(r["warm"] for r in recs)
    assert " imported transformers, " in log and " not taken" not in log  # lm-eval's too: the run has lm-eval jobs
