"""What an operator meets, through Snakemake on config/smoke.yaml: kill -9 mid-training, the orphaned job (its log
kept), the lock, a corrupted ``last.pt``, a config change, and ``--config`` on the command line.  Damaged files
(weights, tokens, results) under the default target: ``test_damage_workflow.py``.

One working directory walks through the README's recovery steps in order; a second holds the references (the
same targets run uninterrupted).  The AR is given 300 steps (about 2.5 s on an AVX-512 Xeon, checkpointed every 20) so that it can be killed mid-run.  A
config change is an edit of the profile's own file (in a copy of the workflow: Snakefile, workflow/, config/), so
that the run keeps its directory, runs/smoke/ (a --config override would be another run, in its own directory)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from snakemake_run import run_snakemake

pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
import torch

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "config" / "smoke.yaml"
RUN = "runs/smoke"  # the smoke profile's run directory
TARGET = f"{RUN}/results/models/ar/model.safetensors"
CKPT = f"{RUN}/results/checkpoints/ar"
SHORT = "train: {steps: 30, batch_size: 32, lr: 3.0e-3, warmup: 5, ema: 0.9, ckpt_every: 15, log_every: 10}"
# a line every 10 steps: the orphan let go on in step 3 writes its next line (and so copies its log) within 10 steps
# on any CPU (a progress bar's next refresh can be 200 steps away on a fast one, past the end)
LONG = "train: {steps: 300, batch_size: 32, lr: 3.0e-3, warmup: 5, ema: 0.9, ckpt_every: 20, log_every: 10}"

pytestmark = pytest.mark.slow


def workflow_copy(root: Path) -> Path:
    """A copy of the workflow (Snakefile, workflow/, config/) whose config/smoke.yaml a test edits."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "workflow", "config"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, root / name)
    return root


def ar_steps(flow: Path, long: bool) -> None:
    """config/smoke.yaml of the copy ``flow`` trains the AR 300 steps (``long``) or its own 30."""
    profile = flow / "config" / "smoke.yaml"
    text = profile.read_text()
    old, new = (SHORT, LONG) if long else (LONG, SHORT)
    assert text.count(old) + text.count(new) >= 1
    first = text.index("  ar:\n")  # the AR's entry (the first one in the models)
    profile.write_text(text[:first] + text[first:].replace(old, new, 1))


def smk(*args, cwd, check=False, configfile=True, flow: Path | None = None):
    flow = flow or REPO
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(flow / "Snakefile"),
        "-d",
        str(cwd),
        "--cores",
        "1",
        *args,
        *(["--configfile", str(flow / "config" / "smoke.yaml")] if configfile else []),
    ]  # last: it takes several
    r = run_snakemake(cmd[3:], cwd)  # in this process (tests/snakemake_run.py)
    if check and r.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def weights(wd: Path) -> bytes:
    return (wd / TARGET).read_bytes()


def last_step(wd: Path) -> int:
    try:
        return int(torch.load(wd / CKPT / "last.pt", weights_only=True)["step"])
    except Exception:  # not there yet
        return -1


def training_children(wd: Path) -> list[int]:
    """PIDs of the processes that run the train job's script with ``wd`` as their working directory: the run's warm
    server's child (unie.pipeline.warm; its process only waits for it), else the script's own process."""
    own, warm = [], []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if Path(os.readlink(d / "cwd")) != wd:
                continue
            if "train.py" in cmd:
                own.append(int(d.name))
            elif "unie.pipeline.warm serve" in cmd:  # a child (the server itself runs in /)
                warm.append(int(d.name))
        except OSError:
            continue
    return warm or own


@pytest.fixture(scope="module")
def references(smoke_pristine, tmp_path_factory):
    """The AR's weights from uninterrupted runs: 300 steps, and the smoke config's 30; on the shared smoke run's
    data (its ``resources/``, modification times kept), so that only the AR trains here."""
    ref = tmp_path_factory.mktemp("reference")
    shutil.copytree(smoke_pristine / RUN / "resources", ref / RUN / "resources")
    flow = workflow_copy(tmp_path_factory.mktemp("reference_workflow"))
    ar_steps(flow, long=True)
    smk(TARGET, cwd=ref, check=True, flow=flow)
    long = weights(ref)
    ar_steps(flow, long=False)
    smk(TARGET, cwd=ref, check=True, flow=flow)  # steps 30: a config change, trained fresh (tested below)
    return {"long": long, "smoke": weights(ref), "resources": ref / RUN / "resources"}


def test_kill_orphan_lock_resume_corrupt_and_config_change(references, tmp_path):
    wd = tmp_path / "work"
    flow = workflow_copy(tmp_path / "workflow")
    ar_steps(flow, long=True)
    shutil.copytree(references["resources"], wd / RUN / "resources")  # the same data (and mtimes): only training here
    # 1. kill -9 snakemake mid-training: its job (the training process) keeps running, an orphan
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(flow / "Snakefile"),
            "-d",
            str(wd),
            "--cores",
            "1",
            TARGET,
            "--configfile",
            str(flow / "config" / "smoke.yaml"),
        ],
        cwd=wd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 240
        while last_step(wd) < 0 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.002)  # its first checkpoint (step 20): the training process is the one that writes it
        (orphan,) = training_children(wd)
        os.kill(orphan, signal.SIGSTOP)  # frozen before snakemake is killed, holding the checkpoint directory's lock
        assert 0 < last_step(wd) < 300, "training ended before it could be interrupted"
        proc.kill()
        proc.wait()
        assert training_children(wd) == [orphan]  # documented: killing snakemake leaves its job running
        # 2. snakemake's own lock: the README's --unlock
        r = smk(TARGET, cwd=wd, flow=flow)
        assert r.returncode != 0 and "--unlock" in r.stdout + r.stderr
        smk("--unlock", cwd=wd, check=True, flow=flow)
        # 3. a rerun beside the orphan never trains into the same directory: one line names the holder
        r = smk(TARGET, cwd=wd, flow=flow)
        assert r.returncode != 0
        assert f"unie: error: {CKPT} is in use by pid {orphan}" in r.stderr, r.stderr[-2000:]
        # ... and loses none of the orphan's log (snakemake removed the file before the refused job): the orphan,
        # let go on for a moment, copies its earlier lines to the new file and writes its next ones there
        log, moved = wd / RUN / "logs/train/ar.log", f"--- pid {orphan}: this log was replaced by another run's job"
        assert f"in use by pid {orphan}" in log.read_text() and moved not in log.read_text()
        os.kill(orphan, signal.SIGCONT)
        deadline = time.time() + 60
        while time.time() < deadline and moved not in log.read_text():
            time.sleep(0.01)
        os.kill(orphan, signal.SIGSTOP)
        text = log.read_text()
        assert text.index(f"in use by pid {orphan}") < text.index(moved)  # the refused job's lines, then the orphan's
        assert "training ar (ar)" in text[text.index(moved) :]  # its first line, written before the refused job
    finally:
        for pid in training_children(wd):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(0.2)
    # 4. the orphan gone, a rerun resumes from its last checkpoint and gives the uninterrupted model, byte for byte
    step = last_step(wd)
    smk(TARGET, cwd=wd, check=True, flow=flow)
    log = (wd / RUN / "logs/train/ar.log").read_text()
    assert f"resumed from {CKPT}/last.pt at step {step}" in log and 0 < step < 300
    assert weights(wd) == references["long"]
    # 5. a corrupted last.pt is reported in one line and discarded; with a config change (30 steps) the model is
    #    the one a fresh checkout trains, and nothing else is lost
    ckpt = wd / CKPT / "last.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    tokens = (wd / RUN / "resources/tokenized/owt/train.parquet").read_bytes()
    ar_steps(flow, long=False)
    smk(TARGET, cwd=wd, check=True, flow=flow)
    log = (wd / RUN / "logs/train/ar.log").read_text()
    (line,) = [l for l in log.splitlines() if f"discarding {CKPT}/last.pt" in l]
    assert "cannot be read" in line and "training starts again from step 0" in line
    assert weights(wd) == references["smoke"] and (wd / RUN / "results/models/ar/config.json").exists()
    assert (wd / RUN / "resources/tokenized/owt/train.parquet").read_bytes() == tokens
    # 6. the config changed back (300 steps): the 30-step last.pt is not resumed, the log says why
    ar_steps(flow, long=True)
    smk(TARGET, cwd=wd, check=True, flow=flow)
    log = (wd / RUN / "logs/train/ar.log").read_text()
    assert f"not resuming {CKPT}/last.pt (step 30)" in log and "train.steps: 30 -> 300" in log
    assert weights(wd) == references["long"]


def test_config_overrides_on_the_command_line(tmp_path):
    """``--config`` alone overrides the default profile (it used to replace it and fail the schema), and nested
    values given on the command line are typed (Snakemake passes them as strings)."""
    r = smk("-n", "--config", "seed=1", cwd=tmp_path, configfile=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "unie: run directory runs/toy+seed-1/" in r.stderr  # another run: its own directory
    r = smk("-n", "--config", "resources={train: {runtime: 30, gpu: 0}}", "max_runtime=60", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    r = smk("-n", "--config", "max_runtime=0", cwd=tmp_path)
    assert r.returncode != 0 and "max_runtime" in r.stdout + r.stderr
