"""Damage, through Snakemake with the default target, on a copy of the completed smoke run (conftest's
``smoke_tree``): every kind of damage at once, one dry run, one run.  The dry run names each damaged file and plans
the jobs the run then runs; the run sets each one aside, makes it again (byte for byte where the file is
deterministic) with what is made from it, and the tables equal the undamaged run's.  Then a token file replaced with
its old modification time kept (``cp -p``) retrains the models made from it, in a run stopped by SIGTERM and
continued.

The cases (each a file of a different job, so that one run covers them all):

* ``bd3lm``'s weights: one byte flipped;
* ``sedd``'s weights truncated, and its ``last.pt`` garbage (training starts again from step 0);
* ``duo``'s ``config.json`` deleted (its weights cannot be verified);
* the dev split ``owt/valid.parquet``: one byte flipped (a page fails its CRC; NCE's two models are retrained);
* a one-digit edit, the modification time kept, of Table 1's ``results/ppl/mdlm.json``, Table 2's
  ``results/genppl/mdlm/steps2.json`` and Table 3's lm-eval ``results/dllm/rows/llada/results.json``
  (``0.0 -> 0.5``).

Every path is in the smoke run's directory, ``runs/smoke/``."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
from unie.data.tokens import read_token_meta  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "config" / "smoke.yaml"

pytestmark = pytest.mark.slow

RUN = "runs/smoke"  # the smoke profile's run directory: every path below is in it
WEIGHTS = {"flipped": f"{RUN}/results/models/bd3lm/model.safetensors",
           "truncated": f"{RUN}/results/models/sedd/model.safetensors",
           "config.json deleted": f"{RUN}/results/models/duo/model.safetensors"}
TOKENS = f"{RUN}/resources/tokenized/owt/valid.parquet"
RESULTS = {"ppl": f"{RUN}/results/ppl/mdlm.json", "genppl": f"{RUN}/results/genppl/mdlm/steps2.json",
           "lm-eval": f"{RUN}/results/dllm/rows/llada/results.json"}
REMADE_BY = {WEIGHTS["flipped"]: "train", WEIGHTS["truncated"]: "train", WEIGHTS["config.json deleted"]: "train",
             TOKENS: "tokenize", RESULTS["ppl"]: "ppl", RESULTS["genppl"]: "sample_run",
             RESULTS["lm-eval"]: "dllm_eval_llada"}
# what the damaged files' jobs are, and what is made from them (the run remakes them all).  Table 2's runs were
# sampled before, so each is resampled by its own job (unie.config.sampling_jobs): 10 on the standard step counts, the data
# and AR runs at L steps; every one of them, since each takes the table's models (three of which are remade)
TABLE2_RESAMPLED = {"sample_run": 10, "sample": 2}
PLANNED = {"train": 5, "tokenize": 1, "ppl": 4, "ppl_energy": 2, **TABLE2_RESAMPLED, "dllm_eval_llada": 1,
           "dllm_room_llada": 1, "fig2": 1,
           "fig3": 1, "table1": 1, "table2": 1, "table3": 1, "table_app_dllm_full": 1, "table_app_selection": 1,
           "paper_vs_ours": 1, "paper_page": 1, "all": 1}
NCE = (f"{RUN}/results/models/uni_edlm_nce/model.safetensors", f"{RUN}/results/models/edlm_nce/model.safetensors")


def smk(*args, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(cwd), "--cores", "2", *args,
           "--configfile", str(SMOKE)]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def planned_jobs(out: str) -> dict[str, int]:
    """Snakemake's first 'Job stats' table as {rule: count}."""
    m = re.search(r"Job stats:\n(.*?)\n\n", out, re.S)
    rows = (line.split() for line in (m.group(1).splitlines()[2:] if m else []))
    return {r[0]: int(r[1]) for r in rows if len(r) == 2 and r[1].isdigit() and r[0] != "total"}


def unie_lines(out: str) -> list[str]:
    """The lines of the damage checks (not the run directory the run names first)."""
    return [line for line in out.splitlines() if line.startswith("unie: ") and not line.startswith("unie: run directory")]


def flip(path: Path, offset: int) -> None:
    b = bytearray(path.read_bytes())
    b[offset] ^= 0x01
    path.write_bytes(bytes(b))


def edit_keep_mtime(path: Path, old: str, new: str) -> None:
    """One edit of a text file, its modification time kept (as bit rot, or an edit followed by ``touch -r``)."""
    st = path.stat()
    text = path.read_text()
    assert text.count(old) >= 1, (path, old)
    path.write_text(text.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def one_digit(value: float) -> tuple[str, str]:
    text = repr(value)
    return text, ("1" if text[0] != "1" else "2") + text[1:]


@pytest.fixture(scope="module")
def damaged(smoke_tree, tmp_path_factory):
    """A copy of the completed smoke run, damaged every way at once, then a dry run and a run (default target)."""
    wd = tmp_path_factory.mktemp("damaged")
    shutil.copytree(smoke_tree, wd, symlinks=True, dirs_exist_ok=True,
                    ignore=lambda d, names: ["locks"] if d.endswith(".snakemake") else [])
    keep = [*WEIGHTS.values(), f"{RUN}/results/models/duo/config.json", TOKENS, *NCE,
            *(str(p.relative_to(wd)) for p in (wd / RUN / "results/tables").iterdir())]
    before = {f: (wd / f).read_bytes() for f in keep}
    results = {k: json.loads((wd / f).read_text()) for k, f in RESULTS.items()}
    flip(wd / WEIGHTS["flipped"], -100)
    w = wd / WEIGHTS["truncated"]
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    (wd / RUN / "results/checkpoints/sedd/last.pt").write_bytes(b"not a checkpoint" * 64)
    (wd / RUN / "results/models/duo/config.json").unlink()
    flip(wd / TOKENS, 200)  # inside the first data page
    edit_keep_mtime(wd / RESULTS["ppl"], *one_digit(results["ppl"]["domains"]["owt"]["ppl"]))
    edit_keep_mtime(wd / RESULTS["genppl"], *one_digit(results["genppl"]["genppl"]["exact"]["ppl"]))
    edit_keep_mtime(wd / RESULTS["lm-eval"], '"exact_match,none": 0.0', '"exact_match,none": 0.5')
    damaged_files = {f: (wd / f).read_bytes() for f in REMADE_BY}
    dry = smk("-n", cwd=wd)
    untouched = all((wd / f).read_bytes() == b for f, b in damaged_files.items())
    run = smk(cwd=wd)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return SimpleNamespace(wd=wd, before=before, results=results, dry=dry, run=run, untouched_by_dry_run=untouched)


def test_the_dry_run_names_each_damage_and_plans_the_jobs_the_run_runs(damaged):
    assert damaged.dry.returncode == 0 and damaged.untouched_by_dry_run  # it renames nothing
    dry, run = damaged.dry.stdout + damaged.dry.stderr, damaged.run.stdout + damaged.run.stderr
    assert planned_jobs(dry) == planned_jobs(run) == PLANNED
    for f, rule in REMADE_BY.items():
        (said,) = [line for line in unie_lines(dry) if line.startswith(f"unie: {f} is damaged: ")]
        assert said.endswith(f"the run will set it aside as {f}.damaged and rebuild it (rule {rule})")
        (done,) = [line for line in unie_lines(run) if line.startswith(f"unie: {f} is damaged: ")]
        assert done.endswith(f"set aside as {f}.damaged; this run rebuilds it (rule {rule})")
        assert (damaged.wd / f"{f}.damaged").exists()
    said_run = [line for line in unie_lines(run) if not line.startswith("unie: done")]  # the run's closing summary
    assert len(unie_lines(dry)) == len(said_run) == len(REMADE_BY)


@pytest.mark.parametrize("case", list(WEIGHTS))
def test_damaged_weights_are_rebuilt_byte_for_byte(damaged, case):
    f = WEIGHTS[case]
    problem = {"flipped": "content hash differs from the one recorded when it was written",
               "truncated": f"{len(damaged.before[f]) // 2} bytes, {len(damaged.before[f])} when written",
               "config.json deleted": "its config.json (the architecture, the size and hash of these weights) is "
                                      "missing"}[case]
    assert f"unie: {f} is damaged: {problem}; set aside" in damaged.run.stderr
    assert (damaged.wd / f).read_bytes() == damaged.before[f]
    if case == "truncated":  # with a garbage last.pt: training started again from step 0
        log = (damaged.wd / RUN / "logs/train/sedd.log").read_text()
        assert f"discarding {RUN}/results/checkpoints/sedd/last.pt: it cannot be read" in log
    if case == "config.json deleted":
        cfg = f"{RUN}/results/models/duo/config.json"
        assert (damaged.wd / cfg).read_bytes() == damaged.before[cfg]


def test_a_flipped_token_file_is_rebuilt_and_its_models_retrained(damaged):
    assert "CRC checksum verification failed" in damaged.run.stderr
    for f in (TOKENS, *NCE):
        assert (damaged.wd / f).read_bytes() == damaged.before[f], f


@pytest.mark.parametrize("kind", list(RESULTS))
def test_an_edited_result_is_named_and_remade_before_a_table_reads_it(damaged, kind):
    """A one-digit edit with its modification time kept (a dry run of Snakemake alone sees nothing): named with
    the rule that remakes it, remade, and the table has the undamaged value."""
    f = RESULTS[kind]
    problem = ("content hash differs from the one recorded when it was written" if kind == "lm-eval" else
               "its values differ from the content hash it recorded when it was written (an edited or corrupted "
               "value)")
    assert f"unie: {f} is damaged: {problem}; set aside as {f}.damaged; this run rebuilds it (rule " \
           f"{REMADE_BY[f]})" in damaged.run.stderr
    now, before = json.loads((damaged.wd / f).read_text()), damaged.results[kind]
    if kind == "ppl":
        assert now["domains"] == before["domains"]
    elif kind == "genppl":
        def scores(g):  # the sampling and scoring times are measured again
            return {ev: {k: v for k, v in r.items() if k != "seconds"} for ev, r in g["genppl"].items()}

        assert scores(now) == scores(before)
    else:
        assert now["results"] == before["results"]


def test_the_tables_equal_the_undamaged_runs(damaged):
    tables = damaged.wd / RUN / "results/tables"
    for name in sorted(p.name for p in tables.iterdir()):
        f = f"{RUN}/results/tables/{name}"
        if name == "table2_genppl.csv":  # its sampling wall-clock column is measured again
            a, b = pd.read_csv(tables / name), pd.read_csv(io.BytesIO(damaged.before[f]))
            pd.testing.assert_frame_equal(a.drop(columns="seconds"), b.drop(columns="seconds"))
        else:
            assert (tables / name).read_bytes() == damaged.before[f], name


def test_a_replaced_token_file_retrains_its_models_and_sigterm_ends_saying_so(damaged):
    """``cp -p`` of other tokens over the dev split (an old modification time): the run says the file was replaced
    and plans NCE's two trainings and what follows; sent SIGTERM once training started, it lets the running jobs
    finish and ends with one line saying so (not Snakemake's 'At least one job did not complete successfully');
    the same command continues, and the models record the new tokens."""
    wd = damaged.wd
    valid, test = wd / TOKENS, wd / RUN / "resources/tokenized/owt/test.parquet"
    shutil.copy2(test, valid)  # cp -p: other tokens (same shape) with their old modification time
    assert all(valid.stat().st_mtime_ns < (wd / m).stat().st_mtime_ns for m in NCE)  # Snakemake alone sees nothing
    new = read_token_meta(valid)["content_sha256"]
    logs = [wd / RUN / "logs/train/uni_edlm_nce.log", wd / RUN / "logs/train/edlm_nce.log"]
    started = {p: p.stat().st_mtime_ns for p in logs}
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(wd),
                             "--cores", "2", "--configfile", str(SMOKE)], cwd=wd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.exists() and p.stat().st_mtime_ns != t for p, t in started.items()):
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    stopped, _ = proc.communicate(timeout=300)
    (said,) = [m for m in unie_lines(stopped) if "was replaced" in m]
    assert said.startswith(f"unie: {TOKENS} was replaced (content ") and "its modification time kept" in said
    assert all(m in said for m in NCE) and said.endswith("this run remakes what was made from it")
    planned = {"train": 2, "ppl_energy": 2, **TABLE2_RESAMPLED, "fig2": 1, "fig3": 1, "table1": 1, "table2": 1,
               "paper_vs_ours": 1, "paper_page": 1, "all": 1}
    assert planned_jobs(stopped) == planned
    assert proc.returncode == 1, stopped[-3000:]
    (line,) = [m for m in unie_lines(stopped) if "SIGTERM" in m]
    assert re.fullmatch(r"unie: stopped by SIGTERM: the running jobs finished \((1|2) in this run\), none failed; "
                        r"\d+ not started: rerun the same command to continue", line), line
    assert "did not complete successfully" not in stopped and "Traceback" not in stopped
    rest = smk(cwd=wd)
    assert rest.returncode == 0, rest.stderr[-3000:]
    done = sum(planned.values()) - sum(planned_jobs(rest.stdout + rest.stderr).values())
    assert done == int(re.search(r"\((\d) in this run\)", line).group(1))
    for m in NCE:  # retrained on the new tokens (the jobs above: every planned job ran, once)
        assert json.loads((wd / m).with_name("config.json").read_text())["extra"]["made_from"][TOKENS] == new
