"""`snakemake --profile slurm` on a real, throw-away, single-node Slurm (marked ``slurm``; `.ci/run` runs it).

The module fixture brings the cluster up with ``.ci/slurm-up.sh`` (munged, slurmctld, slurmd; partitions
``cpu`` and ``gpu`` as the profile expects; two fake GPUs declared as GRES; no accounting database, so the
profile's status command must work without ``sacct``) and tears it down by PID with ``.ci/slurm-down.sh``.
It skips, saying why, only where that is impossible (not root, no apt-get and no Slurm binaries, or a real
Slurm configuration already in /etc/slurm).

The test runs the smoke config through the repository's own ``slurm/`` profile from a launch directory that
holds nothing but a copy of ``slurm/`` and ``config/`` (what a user has in a clone), with the training jobs
asking for one (fake) GPU, then checks that every non-local job went through ``sbatch`` (Snakemake's
submission lines, the plugin's per-job Slurm logs, and Slurm's own record in ``squeue --states=all``, each
job COMPLETED on the partition its GPU request implies) and that the results equal a local
``snakemake --cores 2`` run of the same config, file by file (timings excepted): conftest's ``smoke_pristine``,
which the main test run leaves in pytest's cache for the same sources.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
import torch

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "config" / "smoke.yaml"
CI_DIR = Path(os.environ.get("SLURM_CI_DIR", "/tmp/unie-slurm-ci"))

pytestmark = pytest.mark.slurm

# keys (JSON, Parquet metadata) and CSV columns whose values are wall-clock measurements: the only ones that
# differ between two runs of the smoke config (checked on a pair of runs); rule timing's repeats and threads
# (a timed job holds every core it is given: --cores locally, the job's CPUs under Slurm) and Figure 3's
# wall-clock ratios are measurements too
TIMING_KEYS = re.compile(
    r"^(seconds|seconds_all|ratio_to_ar|threads|elapsed_s|tokens_per_s|requests_per_s|date|"
    r"start_time|end_time|total_evaluation_time_seconds|"
    # the checks of a timing (unie.eval.timing): its spread, CPU/wall, seconds per call, the
    # flags they raise and the reruns they cause, and the timed passes of a sweep point
    r"seconds_min|seconds_max|seconds_per_call|seconds_per_call_lmeval|spread|cpu_seconds|cpu_seconds_all|"
    r"cpu_ratio|cpu_checked|flags|earlier_flags|trusted|timing_trusted|attempts|tokens_per_s_all|"
    r"tokens_per_s_lmeval|"
    # a sweep point's timing against its lm-eval pass: that pass's threads (one core locally, the job's CPUs under
    # Slurm) and whether seconds per call could be compared (only on equal threads)
    r"threads_lmeval|call_checked)$"
)
# lm-eval's timestamp in its file names
STAMP = re.compile(r"_\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d+")


def _cannot_bring_up() -> str | None:
    if os.geteuid() != 0:
        return "needs root to start munged/slurmctld/slurmd and link /etc/slurm/slurm.conf"
    if not shutil.which("apt-get") and not all(Path(b).exists() for b in ("/usr/sbin/slurmctld", "/usr/sbin/slurmd")):
        return "Slurm is not installed and there is no apt-get to install it"
    conf = Path("/etc/slurm/slurm.conf")
    if conf.exists() and not conf.is_symlink():
        return "/etc/slurm/slurm.conf belongs to a real Slurm installation; not starting a throw-away one"
    return None


@pytest.fixture(scope="module")
def slurm_cluster():
    reason = _cannot_bring_up()
    if reason:
        pytest.skip(reason)
    env = {**os.environ, "SLURM_CI_DIR": str(CI_DIR)}
    up = subprocess.run([str(REPO / ".ci" / "slurm-up.sh")], env=env, capture_output=True, text=True)
    try:
        if up.returncode != 0:
            raise AssertionError(f".ci/slurm-up.sh failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
        parts = subprocess.run(["sinfo", "-h", "-o", "%P %t"], capture_output=True, text=True, check=True).stdout
        assert "cpu idle" in parts and "gpu idle" in parts, parts
        yield CI_DIR
    finally:
        subprocess.run([str(REPO / ".ci" / "slurm-down.sh")], env=env, capture_output=True, text=True)


def _snakemake(*args, cwd: Path, timeout: int):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), *args]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{r.stdout[-5000:]}\n{r.stderr[-5000:]}")
    return r.stdout + r.stderr


def _launch_dir(path: Path) -> Path:
    """What a user has after cloning: the profile and the configs (the Snakefile is given with -s)."""
    path.mkdir(parents=True)
    shutil.copytree(REPO / "slurm", path / "slurm")
    shutil.copytree(REPO / "config", path / "config")
    return path


# provenance that hashes files holding timings (a samples Parquet's metadata, lm-eval's results JSON, a timing
# JSON a figure was made from, a model's training history in its config's `files`): those files are compared
# themselves, timings aside.  A model's made_from (its token files, its data tensors, the weights it started from)
# holds no timing and is compared.
# lm-eval's `git_hash` is the commit of the repository the run's working directory lies in, if any (conftest's
# cached smoke run lies in the clone's .pytest_cache, the cluster run in /tmp): a record of where, not a result.
WHERE_KEYS = ("git_hash",)
# A sweep point's `made_with` holds its resume stamp (unie.pipeline.dllm_runs.resume_stamp: its inputs' modification
# times, so that a Slurm retry reuses only points of the same inputs): a record of when, like a timing.
PROVENANCE_KEYS = ("content_sha256", "records", "made_from", "files", "made_with")


def _strip_timing(obj, keep=()):
    if isinstance(obj, dict):
        return {
            k: _strip_timing(v, keep) if k != "made_from" else _parents(v)
            for k, v in obj.items()
            if not TIMING_KEYS.search(k) and k not in WHERE_KEYS and (k in keep or k not in PROVENANCE_KEYS)
        }
    if isinstance(obj, list):
        return [_strip_timing(v, keep) for v in obj]
    return obj


def _parents(made_from):
    """A model's ``made_from`` without its parent's ``config.json`` (whose identity is its content hash, which covers
    the parent's training times): that file is compared itself, timings aside; its weights stay in."""
    if not isinstance(made_from, dict):
        return made_from
    return {k: v for k, v in made_from.items() if not k.endswith("/config.json")}


def _files(root: Path) -> dict[Path, Path]:
    """Files under ``root`` by relative path, lm-eval's timestamp removed from its file names
    (``results_2026-11-23T21-36-47.756058.json`` -> ``results.json``)."""
    files = {Path(STAMP.sub("", str(p.relative_to(root)))): p for p in root.rglob("*") if p.is_file()}
    assert len(files) == sum(1 for p in root.rglob("*") if p.is_file()), f"{root}: two files differ only by a timestamp"
    return files


def _same_results(a: Path, b: Path) -> list[str]:
    """Differences between two results/ trees: JSON/JSONL (the working directory's path replaced, timing keys
    dropped), CSV by value, Parquet by table (its metadata JSON without timings), checkpoints by their tensors,
    everything else by bytes."""
    diffs = []
    files_a, files_b = _files(a), _files(b)
    if files_a.keys() != files_b.keys():
        diffs.append(
            f"file sets differ: only local {sorted(map(str, files_a.keys() - files_b.keys()))[:10]}, "
            f"only slurm {sorted(map(str, files_b.keys() - files_a.keys()))[:10]}"
        )

    def text(path: Path, root: Path) -> str:  # lm-eval records the task files' absolute paths
        return path.read_text().replace(str(root.parent), "<workdir>")

    for rel in sorted(files_a.keys() & files_b.keys()):
        pa, pb = files_a[rel], files_b[rel]
        if rel.suffix in (".pdf", ".png", ".html"):
            continue  # figures embed their creation dates (and the report page embeds the figures)
        if rel.suffix == ".tex" and rel.name.startswith(("table_app_k", "table_app_w")):
            continue  # the k/w tables print throughput (a measurement); their CSVs are compared without it
        if rel.suffix == ".json":
            keep = ("made_from",) if "models" in rel.parts else ()
            same = _strip_timing(json.loads(text(pa, a)), keep) == _strip_timing(json.loads(text(pb, b)), keep)
        elif rel.suffix == ".jsonl":
            same = [_strip_timing(json.loads(x)) for x in text(pa, a).splitlines()] == [
                _strip_timing(json.loads(x)) for x in text(pb, b).splitlines()
            ]
        elif rel.suffix == ".csv":
            da, db = pd.read_csv(pa), pd.read_csv(pb)
            keep = [c for c in da.columns if not TIMING_KEYS.search(str(c))]
            same = list(da.columns) == list(db.columns) and da[keep].equals(db[keep])
        elif rel.suffix == ".parquet":
            ta, tb = pq.read_table(pa), pq.read_table(pb)
            meta = [{k: _strip_timing(json.loads(v)) for k, v in (t.schema.metadata or {}).items()} for t in (ta, tb)]
            same = ta.equals(tb) and meta[0] == meta[1]
        elif rel.suffix == ".pt":  # checkpoints: the tensors (their training history holds wall-clock times)
            ca, cb = (torch.load(p, map_location="cpu", weights_only=True) for p in (pa, pb))
            same = ca["step"] == cb["step"] and all(
                ca[k].keys() == cb[k].keys() and all(torch.equal(ca[k][n], cb[k][n]) for n in ca[k])
                for k in ("model", "ema")
            )
        else:
            same = pa.read_bytes() == pb.read_bytes()
        if not same:
            diffs.append(str(rel))
    return diffs


def test_smoke_through_slurm_profile_equals_local_run(slurm_cluster, smoke_pristine, tmp_path):
    # what Snakemake will run, and which of it is local (localrules run on the submit host, not through sbatch)
    local = _launch_dir(tmp_path / "local")
    plan = _snakemake("--configfile", str(SMOKE), "-n", "--cores", "2", "-d", str(local), cwd=local, timeout=300)
    n_jobs = int(re.search(r"^total\s+(\d+)", plan, re.M).group(1))

    cluster = _launch_dir(tmp_path / "cluster")
    # the training jobs ask for one GPU, so they go to the `gpu` partition with --gpus=1 (fake GRES here); the
    # models still train on the CPU (`device: cpu` in the smoke config), so the results must not change
    (cluster / "gpu_training.yaml").write_text("resources: {train: {gpu: 1}, dllm_train: {gpu: 1}}\n")
    out = _snakemake(
        "--profile",
        "slurm",
        "--configfile",
        "config/smoke.yaml",
        "gpu_training.yaml",
        "-d",
        str(cluster),
        "--slurm-init-seconds-before-status-checks",
        "2",  # a CI-sized wait before the first status check
        "--seconds-between-status-checks",
        "2",  # and between two (Snakemake's default, 10 s, was most of the run's 650 s: its jobs wait on each other)
        "--retries",
        "0",  # a failed job fails the test (the profile's retries would resubmit it)
        cwd=cluster,
        timeout=2400,
    )
    submissions = re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", out)
    submitted = dict(submissions)
    assert len(submitted) == len(submissions), "a job was submitted twice"
    n_local = len(re.findall(r"^localrule ", out, re.M))
    assert submitted and len(submitted) + n_local == n_jobs, (len(submitted), n_local, n_jobs, out[-3000:])

    # Slurm's own record (MinJobAge in .ci/slurm-up.sh keeps finished jobs visible): every job COMPLETED,
    # training jobs on the gpu partition with a GPU, every other job on the cpu partition
    rec = subprocess.run(
        ["squeue", "--states=all", "-h", "-o", "%i|%T|%P"], capture_output=True, text=True, check=True
    ).stdout.split()
    state = {i: (t, p) for i, t, p in (line.split("|") for line in rec)}
    logs = {p.stem: p for p in (cluster / "logs" / "slurm").rglob("*.log")}
    for job, slurm_id in submitted.items():
        assert slurm_id in state, f"Slurm has no record of job {slurm_id}"
        status, part = state[slurm_id]
        show = subprocess.run(["scontrol", "show", "job", "-o", slurm_id], capture_output=True, text=True).stdout
        gres = next(iter(re.findall(r"TresPerJob=(\S+)", show)), None)  # e.g. gres:gpu:1 for --gpus=1
        assert status == "COMPLETED", (slurm_id, status)
        assert slurm_id in logs, f"no Slurm log for job {slurm_id}"
        rule = logs[slurm_id].relative_to(cluster / "logs" / "slurm").parts[0].removeprefix("rule_")
        if rule in ("train", "dllm_train"):
            assert part == "gpu" and gres == "gres:gpu:1", (rule, part, gres)
        else:
            assert part == "cpu", (rule, part)
    assert any(p.relative_to(cluster / "logs" / "slurm").parts[0] == "rule_train" for p in logs.values())

    # the same results as a local run of the same config and sources: conftest's (`snakemake --cores 2` from nothing,
    # kept in pytest's cache under a digest of the sources, so CI's main test run has made it already)
    diffs = _same_results(smoke_pristine / "runs" / "smoke" / "results", cluster / "runs" / "smoke" / "results")
    assert not diffs, "\n".join(diffs)
