"""Runs in their own place, reruns as small as the change.

* The default run, ``--config seed=1``, the smoke profile and the paper profile plan disjoint output paths, each
  under its own ``runs/<name>/`` (dry runs from an empty directory); only the shared downloads are outside.
* A tree from before run directories is named in one line and not read.
* Losing one sample file of a finished smoke run plans that run's job and what reads its files, not the table's
  sampling; a file created and removed beside the samples plans nothing.
* A copied clone (the workflow files and a finished smoke run, ``cp -a``) plans nothing.
* The run directory's name (unie.config.rundir) and the cut of the sampling runs into jobs (unie.config.sampling_jobs).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from snakemake_run import run_snakemake

from unie.config.sampling_jobs import MARKER, marker_path, sampling_jobs
from unie.config.rundir import (
    EXECUTION_KEYS,
    SHARED_RESOURCES,
    differences,
    earlier_layout_notice,
    name_from,
    run_directory,
    run_name,
)

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "config" / "smoke.yaml"
PAPER = REPO / "config" / "paper.yaml"


# ---------------------------------------------------------------------- the name
def test_the_run_directory_is_named_by_the_profile_and_what_changes_results(tmp_path):
    assert run_directory() == "runs/toy" and run_name([SMOKE]) == "smoke" and run_name([PAPER]) == "paper"
    assert run_name(None, {"seed": 1}) == "toy+seed-1"
    assert run_name([SMOKE], {"seed": 1, "device": "cuda"}) == "smoke+device-cuda+seed-1"  # in key order
    # how a run executes is not in the name: the same directory, the same files
    for execution in (
        {"threads": 2},
        {"sampling": {"job": "step"}},
        {"dllm": {"eval_job": "row"}},
        {"slurm_partitions": {"cpu": "normal", "gpu": "a100"}},
        {"max_runtime": 60},
    ):
        assert run_name(None, execution) == "toy", execution
    assert {"threads", "resources", "slurm_partitions", "max_runtime"} <= set(EXECUTION_KEYS)
    # a value that is no short plain word: the first 8 hex digits of its SHA-256 (the same value, the same name)
    name = run_name([SMOKE], {"sampling": {"steps": [2, 4]}})
    assert re.fullmatch(r"smoke\+sampling\.steps-[0-9a-f]{8}", name)
    assert (
        name == run_name([SMOKE], {"sampling": {"steps": [2, 4]}}) != run_name([SMOKE], {"sampling": {"steps": [2, 8]}})
    )
    # an extra config file is compared with the profile's own file as --config is
    overlay = tmp_path / "seed1.yaml"
    overlay.write_text("seed: 1\n")
    assert run_name([REPO / "config" / "config.yaml", overlay]) == "toy+seed-1"
    # --config profile=paper on the toy profile's file is neither profile's own run
    assert run_name(None, {"profile": "paper"}) == "toy+profile-paper"
    # many settings at once: one digest of them all
    many = {"seed": 1, "device": "cuda", "precision": "bf16", "data": {"seq_len": 64}}
    assert re.fullmatch(r"toy\+[0-9a-f]{8}", run_name(None, many))
    assert differences({"a": {"b": 1, "c": 2}, "threads": 3}, {"a": {"b": 1, "c": 3}, "threads": 1}) == {"a.c": 2}
    assert name_from("toy", {}) == "toy" and name_from("toy", {"x": "a b"}).startswith("toy+x-")


def test_a_tree_from_before_run_directories_is_named_in_one_line(tmp_path):
    assert earlier_layout_notice("runs/toy", tmp_path) is None
    (tmp_path / "logs" / "slurm").mkdir(parents=True)  # the Slurm executor's own logs: not an earlier run's
    (tmp_path / "resources" / "hf").mkdir(parents=True)  # a shared download
    assert earlier_layout_notice("runs/toy", tmp_path) is None
    (tmp_path / "results" / "tables").mkdir(parents=True)
    (tmp_path / "resources" / "tokenized").mkdir(parents=True)
    line = earlier_layout_notice("runs/toy", tmp_path)
    assert line == (
        "unie: results/, resources/tokenized/ are from before run directories and not read: this run "
        "builds runs/toy/ from the start (delete them when you no longer need them; docs/runs.md)"
    )


# ---------------------------------------------------------------------- the jobs
def test_fresh_runs_of_a_table_share_a_job_and_a_run_sampled_before_has_its_own(tmp_path):
    runs = {"data": [16], "mdlm": [2, 16], "sedd": [2, 16], "fig2_x": [2, 16], "fig2_y": [2, 16], "fig3_z": [2, 16]}
    fresh = sampling_jobs("table", runs, [2, 16], str(tmp_path))
    assert fresh.tables == {"table2": ["data", "mdlm", "sedd"], "fig2": ["fig2_x", "fig2_y"]}
    assert fresh.per_run == ["fig3_z"] and fresh.per_step == []  # a table with one fresh run: that run's own job
    assert fresh.table_of("fig3_z") == "fig3" and fresh.table_of("data") == "table2"
    for run in ("mdlm", "fig2_x"):  # sampled before (its marker), then one of its files lost
        Path(marker_path(str(tmp_path), run)).parent.mkdir(parents=True)
        Path(marker_path(str(tmp_path), run)).write_text("")
    later = sampling_jobs("table", runs, [2, 16], str(tmp_path))
    assert later.tables == {"table2": ["data", "sedd"]}
    assert later.per_run == ["mdlm", "fig2_x", "fig2_y", "fig3_z"] and later.per_step == []
    assert sampling_jobs("run", runs, [2, 16], str(tmp_path)).per_step == ["data"]
    assert sampling_jobs("step", runs, [2, 16], str(tmp_path)).per_step == list(runs)
    assert MARKER == ".made"


def test_a_run_no_table_reads_is_not_sampled_by_the_tables_job(tmp_path):
    """A profile that excludes Table 2 rows (``exclude: {tables: {table2_genppl: [...]}}``) keeps their sampling runs:
    Table 2's job samples only the runs the table reads, the others have jobs of their own (made when read)."""
    runs = {"data": [16], "mdlm": [2, 16], "sedd": [2, 16], "duo": [2, 16], "fig2_x": [2, 16], "fig2_y": [2, 16]}
    jobs = sampling_jobs("table", runs, [2, 16], str(tmp_path), table2_runs={"data", "mdlm", ""})
    assert jobs.tables == {"table2": ["data", "mdlm"], "fig2": ["fig2_x", "fig2_y"]}
    assert jobs.per_run == ["sedd", "duo"] and jobs.per_step == []
    assert jobs.table_of("sedd") is None and jobs.job_runs("sedd") == ["sedd"]
    assert jobs.job_runs("mdlm") == ["data", "mdlm"] and jobs.job_runs("fig2_y") == ["fig2_x", "fig2_y"]
    every = sampling_jobs("table", runs, [2, 16], str(tmp_path), table2_runs=set(runs))  # the shipped profiles
    assert every == sampling_jobs("table", runs, [2, 16], str(tmp_path))


# ---------------------------------------------------------------------- the workflow
def smk(*args, cwd: Path, snakefile: Path = REPO / "Snakefile") -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "-d", str(cwd), "--cores", "2", *args]
    return run_snakemake(cmd[3:], cwd)  # in this process (tests/snakemake_run.py)


def planned(out: str) -> list[dict]:
    """The jobs of a dry run: ``{rule, output: [paths], wildcards}`` each."""
    jobs = []
    for rule, block in re.findall(r"^(?:local)?rule (\w+):\n(.*?)(?:\n\n|\n(?=\[)|\Z)", out, re.S | re.M):
        outputs = re.search(r"^\s+output: (.*)$", block, re.M)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        jobs.append(
            {
                "rule": rule,
                "output": [f.strip() for f in outputs.group(1).split(",")] if outputs else [],
                "wildcards": wildcards.group(1) if wildcards else "",
            }
        )
    return jobs


@pytest.mark.slow
def test_the_default_run_a_seed_and_the_paper_profile_plan_disjoint_paths(tmp_path):
    """Dry runs from empty directories: every output of each plan is in its own run directory, but the shared
    downloads; the default profile's plan is the same whatever the grouping of its jobs (its directory too)."""
    plans = {}
    for name, args in {
        "toy": (),
        "toy+seed-1": ("--config", "seed=1"),
        "smoke": ("--configfile", str(SMOKE)),
        "paper": ("--configfile", str(PAPER)),
    }.items():
        wd = tmp_path / name
        wd.mkdir()
        if name == "toy":  # a tree from before run directories: named, not read
            (wd / "results" / "tables").mkdir(parents=True)
            (wd / "results" / "tables" / "table1_ppl.tex").write_text("an earlier run's")
        r = smk("-n", *args, cwd=wd)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-3000:]
        assert f"unie: run directory runs/{name}/" in out
        assert ("from before run directories" in out) == (name == "toy")
        files = {f for job in planned(out) for f in job["output"]}
        assert len(files) > 50, name
        shared = {f for f in files if f.startswith(SHARED_RESOURCES)}
        assert all(f.startswith(f"runs/{name}/") for f in files - shared), sorted(files - shared)[:5]
        assert not shared or name == "paper"  # the toy profiles download nothing
        plans[name] = files - shared
    names = list(plans)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not plans[a] & plans[b], (a, b)
    # the paper profile's downloads are shared: a second run of it does not fetch them again
    assert "runs/paper/results/tables/table1_ppl.tex" in plans["paper"]


@pytest.fixture(scope="module")
def copied_smoke(smoke_tree, tmp_path_factory) -> Path:
    """A copy of the finished smoke run (conftest), so that this module deletes files in its own."""
    wd = tmp_path_factory.mktemp("runs") / "smoke"
    shutil.copytree(smoke_tree, wd, symlinks=True)
    return wd


@pytest.mark.slow
def test_losing_one_sample_plans_that_runs_job_and_what_reads_it(copied_smoke, smoke_tree):
    wd = copied_smoke
    run = wd / "runs" / "smoke"
    r = smk("-n", "--configfile", str(SMOKE), cwd=wd)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    # a file created and removed beside the samples: the tables take the files they read, not the folder
    stray = run / "results" / "samples" / "mdlm" / "stray.txt"
    stray.write_text("x")
    stray.unlink()
    r = smk("-n", "--configfile", str(SMOKE), cwd=wd)
    assert "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    lost = run / "results" / "samples" / "mdlm" / "steps16.parquet"
    lost.unlink()
    r = smk("-n", "--configfile", str(SMOKE), cwd=wd)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    jobs = planned(out)
    sampling = [j for j in jobs if j["rule"].startswith("sample")]
    # one job, mdlm's own (every step count of the run), not Table 2's sampling of all its runs
    assert [(j["rule"], j["wildcards"]) for j in sampling] == [("sample_run", "run=mdlm")]
    assert all("/mdlm/" in f for f in sampling[0]["output"])
    # and what reads mdlm's files: Table 2, the figures that plot the run, then the pages built on them
    assert {j["rule"] for j in jobs} <= {"sample_run", "table2", "fig2", "fig3", "paper_vs_ours", "paper_page", "all"}
    assert {"table2", "paper_vs_ours", "all"} <= {j["rule"] for j in jobs}
    # the same for a named target: the run's job and Table 2
    r = smk("-n", "table2", "--configfile", str(SMOKE), cwd=wd)  # the target before --configfile (it takes several)
    assert sorted(j["rule"] for j in planned(r.stdout + r.stderr)) == ["sample_run", "table2"]
    # really rerunning remakes the same tokens, and no other run's files
    from unie.data.tokens import load_tokens

    before = {p: p.stat().st_mtime_ns for p in (run / "results" / "samples").rglob("*.parquet")}
    r = smk("table2", "--configfile", str(SMOKE), cwd=wd)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert lost.exists()
    assert all(p.stat().st_mtime_ns == t for p, t in before.items() if p.parent.name != "mdlm")
    assert (load_tokens(lost) == load_tokens(smoke_tree / lost.relative_to(wd))).all()
    r = smk("-n", "table2", "--configfile", str(SMOKE), cwd=wd)
    assert "Nothing to be done" in r.stdout + r.stderr


@pytest.mark.slow
def test_a_copied_clone_plans_nothing(smoke_tree, tmp_path):
    """The workflow files and a finished smoke run in one directory, copied with ``cp -a`` elsewhere: the copy plans
    nothing (no input or parameter names the clone's absolute path)."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("Snakefile", "workflow", "config"):
        subprocess.run(["cp", "-a", str(REPO / name), str(clone / name)], check=True)
    for name in ("runs", ".snakemake"):
        subprocess.run(["cp", "-a", str(smoke_tree / name), str(clone / name)], check=True)
    copy = tmp_path / "elsewhere" / "copy"
    copy.parent.mkdir()
    subprocess.run(["cp", "-a", str(clone), str(copy)], check=True)
    r = smk("-n", "--configfile", str(copy / "config" / "smoke.yaml"), cwd=copy, snakefile=copy / "Snakefile")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "Nothing to be done" in out, "\n".join(f"{j['rule']}: {j['output'][:2]}" for j in planned(out))
