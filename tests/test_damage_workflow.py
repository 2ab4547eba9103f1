"""Damage, through Snakemake with the default target, on a copy of the completed smoke run (conftest's
``smoke_tree``): every kind of damage at once, one dry run, one run.  The dry run names each damaged file in one
line and plans the jobs the run then runs; the run sets each one aside, makes it again (byte for byte where the file
is deterministic) with what is made from it, and the tables equal the undamaged run's.  Then a token file replaced
with its old modification time kept (``cp -p``) retrains the models made from it, in a run stopped by SIGTERM and
continued; then a deleted result file, and a sweep point's edited lm-eval file, are planned with what is made from
them (a dry run: the sweep's job is the slowest of the DLLM half).

The cases (each a file of a different job where it can be, so that one run covers them all):

* ``bd3lm``'s weights: one byte flipped;
* ``sedd``'s weights truncated, and its ``last.pt`` garbage (training starts again from step 0);
* ``duo``'s ``config.json`` deleted (its weights cannot be verified);
* ``uni_edlm_nce``'s ``config.json``: ``n_heads`` 2 -> 1, the modification time kept (every tensor keeps its
  shape: it would load as another network);
* the dev split ``owt/valid.parquet``: one byte flipped (a page fails its CRC; NCE's two models are retrained);
* ``owt/test.parquet`` replaced by a valid Parquet of other tokens without the project's metadata, and
  ``lm1b/test.parquet`` by OWT's test tokens (``cp -p``, the file's own metadata says ``dataset: owt``);
* a one-digit edit, the modification time kept, of Table 1's ``results/ppl/mdlm.json``, Table 2's
  ``results/genppl/mdlm/steps2.json`` and Table 3's lm-eval ``results/dllm/rows/dream_apd/results.json``
  (``0.0 -> 0.5``), of lm-eval's own results in the subfolder of a Dream row (``rows/dream/dream/results_*.json``),
  and ``rows/dream_ind/dream_ind/results_*.json`` truncated (rows whose folder sorts before ``effect.json``): the
  three are rows of the Dream-like model's one lm-eval job, so the run remakes one lm-eval job and one room, not
  three and two;
* ``results/ppl/ar.json`` with its hash fields deleted;
* a byte flipped in a Gen PPL's samples (``results/samples/sedd/steps16.parquet``) and in a figure
  (``results/figures/fig2_ablation.png``); one digit of Table 2's LaTeX and CSV (``990.0 -> 390.0``) and of the
  partition check's LaTeX.

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
from snakemake_run import run_snakemake

pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
from unie.data.tokens import read_token_meta  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "config" / "smoke.yaml"

pytestmark = pytest.mark.slow

RUN = "runs/smoke"  # the smoke profile's run directory: every path below is in it
R = f"{RUN}/results"
WEIGHTS = {
    "flipped": f"{R}/models/bd3lm/model.safetensors",
    "truncated": f"{R}/models/sedd/model.safetensors",
    "config.json deleted": f"{R}/models/duo/model.safetensors",
}
CONFIG = f"{R}/models/uni_edlm_nce/config.json"
TOKENS = f"{RUN}/resources/tokenized/owt/valid.parquet"
BARE_TOKENS = f"{RUN}/resources/tokenized/owt/test.parquet"  # other tokens, no unie.tokens metadata
SWAPPED_TOKENS = f"{RUN}/resources/tokenized/lm1b/test.parquet"  # OWT's test tokens copied over it
RESULTS = {
    "ppl": f"{R}/ppl/mdlm.json",
    "genppl": f"{R}/genppl/mdlm/steps2.json",
    "lm-eval": f"{R}/dllm/rows/dream_apd/results.json",
}
STRIPPED = f"{R}/ppl/ar.json"  # its hash fields deleted
SAMPLES = f"{R}/samples/sedd/steps16.parquet"
PAGES = {
    "table tex": f"{R}/tables/table2_genppl.tex",
    "table csv": f"{R}/tables/table2_genppl.csv",
    "partition tex": f"{R}/tables/partition_check.tex",
    "figure": f"{R}/figures/fig2_ablation.png",
}
# lm-eval's own files below a row or a sweep point (their names carry lm-eval's time stamp: found in the tree)
NESTED = {"dream": f"{R}/dllm/rows/dream/dream", "dream_ind": f"{R}/dllm/rows/dream_ind/dream_ind"}
NESTED_REMADE_WITH = {
    "dream": (f"{R}/dllm/rows/dream/effect.json", "dllm_eval_dream"),
    "dream_ind": (f"{R}/dllm/rows/dream_ind/effect.json", "dllm_eval_dream"),
}
SWEEP_POINT = f"{R}/dllm/sweeps/app_k/uni__K_2/uni__K_2"  # a sweep point's lm-eval files (the last test: a dry run)
# file -> (what the line says is wrong, the rule that remakes it, the file it is remade with when not itself)
DAMAGE = {
    WEIGHTS["flipped"]: ("content hash differs from the one recorded when it was written", "train", None),
    WEIGHTS["truncated"]: ("{half} bytes, {size} when written", "train", None),
    WEIGHTS["config.json deleted"]: (
        "its config.json (the architecture, the size and hash of these weights) is missing",
        "train",
        None,
    ),
    CONFIG: (
        "its values differ from the content hash it recorded when it was written (an edited or corrupted value)",
        "train",
        f"{R}/models/uni_edlm_nce/model.safetensors",
    ),
    TOKENS: (
        "pyarrow cannot read it (could not verify page integrity, CRC checksum verification failed",
        "tokenize",
        None,
    ),
    BARE_TOKENS: ("it has no unie.tokens metadata: not a token file written by rule tokenize", "tokenize", None),
    SWAPPED_TOKENS: ("its metadata says it holds dataset 'owt', where dataset 'lm1b' is expected", "tokenize", None),
    RESULTS["ppl"]: ("its values differ from the content hash it recorded", "ppl", None),
    RESULTS["genppl"]: ("its values differ from the content hash it recorded", "sample_run", None),
    RESULTS["lm-eval"]: ("content hash differs from the one recorded when it was written", "dllm_eval_dream", None),
    STRIPPED: (
        "it carries no content hash, although every result file of this workflow is written with one",
        "ppl",
        None,
    ),
    SAMPLES: ("content hash differs from the one recorded when it was written", "sample_run", None),
    PAGES["table tex"]: ("content hash differs from the one recorded when it was written", "table2", None),
    PAGES["table csv"]: ("content hash differs from the one recorded when it was written", "table2", None),
    PAGES["partition tex"]: ("content hash differs from the one recorded when it was written", "partition_check", None),
    PAGES["figure"]: ("content hash differs from the one recorded when it was written", "fig2", None),
}
# what the damaged files' jobs are, and what is made from them (the run remakes them all).  Table 2's runs were
# sampled before, so each is resampled by its own job (unie.config.sampling_jobs): 10 on the standard step counts, the data
# and AR runs at L steps; every one of them, since each takes the table's models (three of which are remade)
TABLE2_RESAMPLED = {"sample_run": 10, "sample": 2}
PLANNED = {
    "train": 5,
    "tokenize": 3,
    "ppl": 5,
    "ppl_exact": 1,
    "ppl_energy": 4,
    **TABLE2_RESAMPLED,
    "dllm_eval_dream": 1,
    "dllm_room_dream": 1,
    "fig2": 1,
    "fig3": 1,
    "partition_check": 1,
    "table1": 1,
    "table2": 1,
    "table3": 1,
    "table_app_dllm_full": 1,
    "paper_vs_ours": 1,
    "paper_page": 1,
    "all": 1,
}
NCE = (f"{R}/models/uni_edlm_nce/model.safetensors", f"{R}/models/edlm_nce/model.safetensors")
MEASURED = {"seconds", "tokens_per_s"}  # wall-clock columns: measured again when their job reruns


def smk(*args, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(cwd),
        "--cores",
        "2",
        *args,
        "--configfile",
        str(SMOKE),
    ]
    return run_snakemake(cmd[3:], cwd)  # in this process (tests/snakemake_run.py)


def planned_jobs(out: str) -> dict[str, int]:
    """Snakemake's first 'Job stats' table as {rule: count}."""
    m = re.search(r"Job stats:\n(.*?)\n\n", out, re.S)
    rows = (line.split() for line in (m.group(1).splitlines()[2:] if m else []))
    return {r[0]: int(r[1]) for r in rows if len(r) == 2 and r[1].isdigit() and r[0] != "total"}


def unie_lines(out: str) -> list[str]:
    """The lines of the damage checks (not the run directory the run names first)."""
    return [
        line for line in out.splitlines() if line.startswith("unie: ") and not line.startswith("unie: run directory")
    ]


def flip(path: Path, offset: int) -> None:
    b = bytearray(path.read_bytes())
    b[offset] ^= 0x01
    path.write_bytes(bytes(b))


def keep_mtime(path: Path, write) -> None:
    """``write(path)``, the file's modification time kept (as bit rot, or an edit followed by ``touch -r``)."""
    st = path.stat()
    write(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def edit_keep_mtime(path: Path, old: str, new: str) -> None:
    """One edit of a text file, its modification time kept."""
    text = path.read_text()
    assert text.count(old) >= 1, (path, old)
    keep_mtime(path, lambda p: p.write_text(text.replace(old, new, 1)))


def one_digit(value: float) -> tuple[str, str]:
    text = repr(value)
    return text, ("1" if text[0] != "1" else "2") + text[1:]


def only_file(folder: Path, pattern: str) -> Path:
    (found,) = folder.glob(pattern)
    return found


@pytest.fixture(scope="module")
def damaged(smoke_tree, tmp_path_factory):
    """A copy of the completed smoke run, damaged every way at once, then a dry run and a run (default target)."""
    wd = tmp_path_factory.mktemp("damaged")
    shutil.copytree(
        smoke_tree,
        wd,
        symlinks=True,
        dirs_exist_ok=True,
        ignore=lambda d, names: ["locks"] if d.endswith(".snakemake") else [],
    )
    nested = {k: str(only_file(wd / d, "results_*.json").relative_to(wd)) for k, d in NESTED.items()}
    damage = {**DAMAGE, **{f: ("", NESTED_REMADE_WITH[k][1], NESTED_REMADE_WITH[k][0]) for k, f in nested.items()}}
    size = (wd / WEIGHTS["truncated"]).stat().st_size
    damage[WEIGHTS["truncated"]] = (
        DAMAGE[WEIGHTS["truncated"]][0].format(half=size // 2, size=size),
        *DAMAGE[WEIGHTS["truncated"]][1:],
    )
    tables = [str(p.relative_to(wd)) for p in (wd / R / "tables").iterdir() if p.is_file()]
    keep = [
        *WEIGHTS.values(),
        f"{R}/models/duo/config.json",
        CONFIG,
        TOKENS,
        BARE_TOKENS,
        SWAPPED_TOKENS,
        *NCE,
        *tables,
    ]
    before = {f: (wd / f).read_bytes() for f in keep}
    results = {k: json.loads((wd / f).read_text()) for k, f in RESULTS.items()}
    flip(wd / WEIGHTS["flipped"], -100)
    w = wd / WEIGHTS["truncated"]
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    (wd / R / "checkpoints/sedd/last.pt").write_bytes(b"not a checkpoint" * 64)
    (wd / R / "models/duo/config.json").unlink()
    edit_keep_mtime(wd / CONFIG, '"n_heads": 2', '"n_heads": 1')
    flip(wd / TOKENS, 200)  # inside the first data page
    shutil.copy2(wd / BARE_TOKENS, wd / SWAPPED_TOKENS)  # cp -p: OWT's tokens at lm1b's place
    import pyarrow as pa
    import pyarrow.parquet as pq

    other = pa.table({"input_ids": pq.read_table(wd / TOKENS.replace("valid", "train")).column("input_ids")})
    keep_mtime(wd / BARE_TOKENS, lambda p: pq.write_table(other.slice(0, 64).replace_schema_metadata(None), p))
    edit_keep_mtime(wd / RESULTS["ppl"], *one_digit(results["ppl"]["domains"]["owt"]["ppl"]))
    edit_keep_mtime(wd / RESULTS["genppl"], *one_digit(results["genppl"]["genppl"]["exact"]["ppl"]))
    edit_keep_mtime(wd / RESULTS["lm-eval"], '"exact_match,none": 0.0', '"exact_match,none": 0.5')
    edit_keep_mtime(wd / nested["dream"], '"exact_match,none": 0.0', '"exact_match,none": 0.5')
    keep_mtime(wd / nested["dream_ind"], lambda p: p.write_bytes(p.read_bytes()[:200]))
    raw = json.loads((wd / STRIPPED).read_text())
    keep_mtime(
        wd / STRIPPED,
        lambda p: p.write_text(
            json.dumps(
                {k: v for k, v in raw.items() if k not in ("content_sha256", "made_by", "made_from", "records")},
                indent=2,
            )
        ),
    )
    flip(wd / SAMPLES, 300)
    flip(wd / PAGES["figure"], 400)
    edit_keep_mtime(wd / PAGES["table tex"], "990.0", "390.0")
    ar_row = next(
        line
        for line in (wd / PAGES["table csv"]).read_text().splitlines()
        if line.startswith("AR,ar,") and ",exact," in line
    )
    genppl = ar_row.split(",")[5]
    edit_keep_mtime(wd / PAGES["table csv"], ar_row, ar_row.replace(genppl, "3" + genppl[1:], 1))
    edit_keep_mtime(wd / PAGES["partition tex"], "27.000001", "37.000001")
    damaged_files = {f: (wd / f).read_bytes() for f in damage}
    dry = smk("-n", cwd=wd)
    untouched = all((wd / f).read_bytes() == b for f, b in damaged_files.items())
    run = smk(cwd=wd)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return SimpleNamespace(
        wd=wd,
        before=before,
        results=results,
        dry=dry,
        run=run,
        untouched_by_dry_run=untouched,
        damage=damage,
        nested=nested,
    )


def test_the_dry_run_names_each_damage_in_one_line_and_plans_the_jobs_the_run_runs(damaged):
    assert damaged.dry.returncode == 0 and damaged.untouched_by_dry_run  # it renames nothing
    dry, run = damaged.dry.stdout + damaged.dry.stderr, damaged.run.stdout + damaged.run.stderr
    assert planned_jobs(dry) == planned_jobs(run) == PLANNED
    for f, (problem, rule, remade_with) in damaged.damage.items():
        how = f"it with {remade_with} (rule {rule})" if remade_with else f"it (rule {rule})"
        (said,) = [line for line in unie_lines(dry) if line.startswith(f"unie: {f} is damaged: {problem}")]
        assert said.endswith(
            f"the run will set it aside as {f}.damaged and {'remake' if remade_with else 'rebuild'} {how}"
        ), said
        (done,) = [line for line in unie_lines(run) if line.startswith(f"unie: {f} is damaged: {problem}")]
        assert done.endswith(f"set aside as {f}.damaged; this run {'remakes' if remade_with else 'rebuilds'} {how}")
        assert (damaged.wd / f"{f}.damaged").exists()
    # the run's closing summary and the timeline it writes when it ends (a dry run writes none)
    said_run = [line for line in unie_lines(run) if not line.startswith(("unie: done", "unie: timeline"))]
    assert len(unie_lines(dry)) == len(said_run) == len(damaged.damage)  # nothing else said, nothing twice


@pytest.mark.parametrize("case", list(WEIGHTS))
def test_damaged_weights_are_rebuilt_byte_for_byte(damaged, case):
    f = WEIGHTS[case]
    assert f"unie: {f} is damaged: {damaged.damage[f][0]}; set aside" in damaged.run.stderr
    assert (damaged.wd / f).read_bytes() == damaged.before[f]
    if case == "truncated":  # with a garbage last.pt: training started again from step 0
        log = (damaged.wd / RUN / "logs/train/sedd.log").read_text()
        assert f"discarding {R}/checkpoints/sedd/last.pt: it cannot be read" in log
    if case == "config.json deleted":
        cfg = f"{R}/models/duo/config.json"
        assert (damaged.wd / cfg).read_bytes() == damaged.before[cfg]


def test_an_edited_model_config_is_remade_with_its_weights(damaged):
    """``n_heads`` 2 -> 1: named, the model retrained (its last.pt resumed: the same weights, byte for byte), the
    config as written, and Table 1's row from it as before (the tables, below)."""
    assert json.loads((damaged.wd / CONFIG).read_text())["model"]["n_heads"] == 2
    assert (damaged.wd / CONFIG).read_bytes() == damaged.before[CONFIG]
    assert (damaged.wd / NCE[0]).read_bytes() == damaged.before[NCE[0]]


def test_damaged_and_foreign_token_files_are_rebuilt_and_what_reads_them_remade(damaged):
    """A flipped page (CRC), a Parquet without the project's metadata, another domain's tokens at lm1b's place:
    each rebuilt by rule tokenize, byte for byte, and the models and perplexities made from them remade (NCE's
    two models from the dev split; every Table 1 row from the test splits: the tables, below)."""
    assert "CRC checksum verification failed" in damaged.run.stderr
    for f in (TOKENS, BARE_TOKENS, SWAPPED_TOKENS, *NCE):
        assert (damaged.wd / f).read_bytes() == damaged.before[f], f
    assert read_token_meta(damaged.wd / SWAPPED_TOKENS)["source"]["dataset"] == "lm1b"


@pytest.mark.parametrize("kind", list(RESULTS))
def test_an_edited_result_is_named_and_remade_before_a_table_reads_it(damaged, kind):
    """A one-digit edit with its modification time kept (a dry run of Snakemake alone sees nothing): named with
    the rule that remakes it, remade, and the table has the undamaged value."""
    f = RESULTS[kind]
    problem, rule, _ = DAMAGE[f]
    assert f"unie: {f} is damaged: {problem}" in damaged.run.stderr
    assert f"set aside as {f}.damaged; this run rebuilds it (rule {rule})" in damaged.run.stderr
    now, before = json.loads((damaged.wd / f).read_text()), damaged.results[kind]
    if kind == "ppl":
        assert now["domains"] == before["domains"]
    elif kind == "genppl":

        def scores(g):  # the sampling and scoring times are measured again
            return {ev: {k: v for k, v in r.items() if k != "seconds"} for ev, r in g["genppl"].items()}

        assert scores(now) == scores(before)
    else:
        assert now["results"] == before["results"]


def test_a_result_without_its_hash_fields_is_remade_with_them(damaged):
    now = json.loads((damaged.wd / STRIPPED).read_text())
    assert now["made_by"] == "ppl" and len(now["content_sha256"]) == 64
    assert now["domains"] == json.loads((damaged.wd / f"{STRIPPED}.damaged").read_text())["domains"]


@pytest.mark.parametrize("kind", list(NESTED))
def test_lm_evals_files_in_a_subfolder_are_remade_by_their_rows_or_points_rule(damaged, kind):
    """``dream`` and ``dream_ind`` sort before ``effect.json``: their lm-eval files are remade all the same (new
    time-stamped names), and the set-aside copy asks for nothing more (the deletion test's dry run, below)."""
    folder = damaged.wd / NESTED[kind]
    (new,) = folder.glob("results_*.json")
    assert (
        str(new.relative_to(damaged.wd)) != damaged.nested[kind]
        and (damaged.wd / f"{damaged.nested[kind]}.damaged").exists()
    )
    assert "n-samples" in json.loads(new.read_text())


def test_the_tables_equal_the_undamaged_runs(damaged):
    """Every table, Table 2 edited in both its files and the comparison with the paper included, as the undamaged
    run wrote it; only the wall-clock columns of the tables that show one (Table 2's sampling time, the k and w
    sweeps' throughput) are measured again."""
    tables = damaged.wd / R / "tables"
    names = sorted(p.name for p in tables.iterdir() if p.is_file() and p.suffix != ".damaged")  # the set-aside: above
    assert names == sorted(Path(f).name for f in damaged.before if f.startswith(f"{R}/tables/"))
    for name in names:
        f = f"{R}/tables/{name}"
        if name in ("table2_genppl.csv", "table_app_k.csv", "table_app_w.csv"):
            a, b = pd.read_csv(tables / name), pd.read_csv(io.BytesIO(damaged.before[f]))
            drop = sorted(MEASURED & set(a.columns))
            pd.testing.assert_frame_equal(a.drop(columns=drop), b.drop(columns=drop))
        elif name in ("table_app_k.tex", "table_app_w.tex"):  # throughput printed beside each accuracy
            strip = lambda t: re.sub(r"& \d+ \\\\", "", t)  # noqa: E731
            assert strip((tables / name).read_text()) == strip(damaged.before[f].decode()), name
        else:
            assert (tables / name).read_bytes() == damaged.before[f], name


def test_a_replaced_token_file_retrains_its_models_and_sigterm_ends_saying_so(damaged):
    """Other tokens of the dev split over it, its old modification time kept (a regenerated split copied in with
    ``cp -p``): the run says the file was replaced and plans NCE's two trainings and what follows; sent SIGTERM once
    training started, it lets the running jobs finish and ends with one line saying so (not Snakemake's 'At least
    one job did not complete successfully'); the same command continues, and the models record the new tokens."""
    from unie.data.tokens import load_tokens, write_token_file

    wd = damaged.wd
    valid = wd / TOKENS
    meta = read_token_meta(valid)
    rows = load_tokens(valid).numpy()[::-1]  # the same split's tokens in another order: another content hash
    keep_mtime(
        valid,
        lambda p: write_token_file(
            p, [rows], meta["seq_len"], {k: meta[k] for k in ("tokenizer", "vocab_size", "wrap", "source")}
        ),
    )
    assert all(valid.stat().st_mtime_ns < (wd / m).stat().st_mtime_ns for m in NCE)  # Snakemake alone sees nothing
    new = read_token_meta(valid)["content_sha256"]
    logs = [wd / RUN / "logs/train/uni_edlm_nce.log", wd / RUN / "logs/train/edlm_nce.log"]
    started = {p: p.stat().st_mtime_ns for p in logs}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(wd),
            "--cores",
            "2",
            "--configfile",
            str(SMOKE),
        ],
        cwd=wd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.exists() and p.stat().st_mtime_ns != t for p, t in started.items()):
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    stopped, _ = proc.communicate(timeout=300)
    (said,) = [m for m in unie_lines(stopped) if "was replaced" in m]
    assert said.startswith(f"unie: {TOKENS} was replaced (content ") and "its modification time kept" in said
    assert all(m in said for m in NCE) and said.endswith("this run remakes what was made from it")
    planned = {
        "train": 2,
        "ppl_energy": 2,
        **TABLE2_RESAMPLED,
        "fig2": 1,
        "fig3": 1,
        "table1": 1,
        "table2": 1,
        "paper_vs_ours": 1,
        "paper_page": 1,
        "all": 1,
    }
    assert planned_jobs(stopped) == planned
    assert proc.returncode == 1, stopped[-3000:]
    (line,) = [m for m in unie_lines(stopped) if "SIGTERM" in m]
    assert re.fullmatch(
        r"unie: stopped by SIGTERM: the running jobs finished \((1|2) in this run\), none failed; "
        r"\d+ not started: rerun the same command to continue",
        line,
    ), line
    assert "did not complete successfully" not in stopped and "Traceback" not in stopped
    rest = smk(cwd=wd)
    assert rest.returncode == 0, rest.stderr[-3000:]
    done = sum(planned.values()) - sum(planned_jobs(rest.stdout + rest.stderr).values())
    assert done == int(re.search(r"\((\d) in this run\)", line).group(1))
    for m in NCE:  # retrained on the new tokens (the jobs above: every planned job ran, once)
        assert json.loads((wd / m).with_name("config.json").read_text())["extra"]["made_from"][TOKENS] == new


def test_a_deleted_result_is_remade_with_the_table_made_from_it(damaged):
    """``rm results/ppl/mdlm.json`` in the finished tree: Snakemake alone does nothing while Table 1 is there; the
    dry run names it and plans its job and what is made from it.  In the same dry run, a sweep point's lm-eval
    results one digit edited (a third folder depth and name): named, and planned with its sweep's two jobs (its lm-eval
    runs, their timing) and what reads that sweep alone (the k table: Figure 4 and the w table read the other two
    sweeps, which are not run again).  Nothing else is planned (the files set aside above, lm-eval's old time-stamped ones among them, ask
    for nothing more), and ``snakemake --report`` makes no report meanwhile."""
    wd = damaged.wd
    (wd / f"{RESULTS['ppl']}.damaged").unlink()  # the copy set aside above (else: "set aside ... not made again")
    (wd / RESULTS["ppl"]).unlink()
    point = str(only_file(wd / SWEEP_POINT, "results_*.json").relative_to(wd))
    edit_keep_mtime(wd / point, '"exact_match,none": 0.0', '"exact_match,none": 0.5')
    dry = smk("-n", cwd=wd)
    out = dry.stdout + dry.stderr
    assert planned_jobs(out) == {
        "ppl": 1,
        "dllm_sweep_eval": 1,
        "dllm_sweep": 1,
        "table1": 1,
        "table_app_k": 1,
        "paper_vs_ours": 1,
        "paper_page": 1,
        "all": 1,
    }, out[-3000:]
    said = unie_lines(out)
    assert (
        len(said) == 2
        and said[0].startswith(f"unie: {point} is damaged: content hash differs")
        and said[0].endswith(f"remake it with {R}/dllm/sweeps/app_k/lmeval.json (rule dllm_sweep_eval)")
    )
    assert said[1] == (
        f"unie: {RESULTS['ppl']} is missing (deleted?), and {R}/tables/table1_ppl.csv, "
        f"{R}/tables/table1_ppl.tex were made from it: the run will remake it (rule ppl) and what is "
        "made from it"
    )
    report = smk("--report", str(wd / "report.html"), cwd=wd)  # no report while a file is to be remade
    assert report.returncode == 1 and not (wd / "report.html").exists()
    assert unie_lines(report.stderr)[-1].startswith("unie: no report is made from damaged, deleted or replaced files")
