"""The whole workflow on config/smoke.yaml: run, outputs, caching, targeted reruns, bad configs, notebook.

These run Snakemake in a subprocess (the way users run it) in a temporary working directory, so the
repository's own runs/ is never touched.  The smoke profile's run directory is runs/smoke/ (unie.config.rundir).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from snakemake_run import run_snakemake

pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
import yaml
from unie.config.profile import resolve_config

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "config" / "smoke.yaml"
OUT = "runs/smoke"  # the smoke profile's run directory in the working directory


def smk(*args, cwd, check=False):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(cwd), *args]
    r = run_snakemake(cmd[3:], cwd)  # in this process (tests/snakemake_run.py)
    if check and r.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


def planned_jobs(dry_run_output: str) -> dict[str, int]:
    """Parse Snakemake's 'Job stats' table of a dry run into {rule: count}."""
    stats = {}
    m = re.search(r"Job stats:\n(.*?)\n\n", dry_run_output, re.S)
    if not m:
        return stats
    for line in m.group(1).splitlines()[2:]:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
            stats[parts[0]] = int(parts[1])
    return stats


@pytest.fixture(scope="module")
def smoke_run(smoke_tree):
    return smoke_tree  # conftest: the workflow run once on config/smoke.yaml


@pytest.mark.slow
def test_smoke_outputs(smoke_run):
    cfg = resolve_config([SMOKE])
    tables = smoke_run / OUT / "results" / "tables"
    for name in ("table1_ppl", "table2_genppl"):
        first, second = (tables / f"{name}.tex").read_text().splitlines()[:2]  # the packages, then one float
        assert first.startswith("% LaTeX packages: booktabs") and second.startswith(r"\begin{table}")
    t1 = pd.read_csv(tables / "table1_ppl.csv")
    assert list(t1.row.unique()) == list(cfg["tables"]["table1_ppl"])
    assert set(t1.domain) == set(cfg["data"]["domains"])
    assert t1[t1.source.notna()].ppl.notna().all()
    assert t1[t1.row == "DCD"].ppl.isna().all() and "DCD & -- & --" in (tables / "table1_ppl.tex").read_text()
    exact = t1[t1.source == "exact"].set_index("domain").ppl
    for src in ("mdlm", "ar", "sedd", "duo", "bd3lm"):  # no trained model beats the data distribution
        model = t1[t1.source == src].set_index("domain").ppl
        assert (model >= exact).all(), (src, model, exact)
    t2 = pd.read_csv(tables / "table2_genppl.csv")
    mdlm = t2[t2.run == "mdlm"]
    assert sorted(mdlm.steps.unique()) == sorted(cfg["sampling"]["steps"])
    assert set(t2.evaluator) == set(cfg["genppl"]["evaluators"])
    assert t2.genppl.notna().all() and (t2.genppl > 1).all()
    assert set(t2[t2.run == "ar"].steps) == {cfg["data"]["seq_len"]}
    # the "Data" row is real data: under the exact evaluator it has the lowest Gen PPL
    ex = t2[t2.evaluator == "exact"]
    assert ex[ex.run == "data"].genppl.iloc[0] < ex[ex.run != "data"].genppl.min()
    # every cell of the LaTeX table comes from the CSV written by the rules
    tex = (tables / "table2_genppl.tex").read_text()
    assert f"{ex[ex.run == 'data'].genppl.iloc[0]:.1f}" in tex
    # samples contain no masks and have the configured shape
    from unie.data.tokens import load_tokens

    x = load_tokens(smoke_run / OUT / "results" / "samples" / "mdlm" / "steps2.parquet")
    assert x.shape == (cfg["sampling"]["n_samples"], cfg["data"]["seq_len"])
    info = json.loads((smoke_run / OUT / "results" / "models" / "mdlm" / "config.json").read_text())
    assert (x != info["tokenizer"]["mask_id"]).all()
    # energy rows, the excess-NLL column, Figure 2, the partition check, NCE's dev report
    assert {"EDLM-AR", "EDLM-NCE", "Uni-EDLM-AR", "Uni-EDLM-NCE"} <= set(t2.row) and t2.excess_nll.notna().all()
    assert "Excess NLL" in tex and "KL" not in tex  # named for what it is: not a KL (it needs H(q))
    # excess NLL = the samples' NLL per token under pi minus pi's entropy rate (one number for the table)
    ex_rows = t2[t2.evaluator == "exact"]
    h = (ex_rows.nll_per_token - ex_rows.excess_nll).round(9)
    assert h.nunique() == 1 and 2.0 < h.iloc[0] < 3.0
    for ext in ("pdf", "png", "csv"):
        assert (smoke_run / OUT / "results" / "figures" / f"fig2_ablation.{ext}").stat().st_size > 0
    fig = pd.read_csv(smoke_run / OUT / "results" / "figures" / "fig2_ablation.csv")
    assert set(fig.context) == {"teacher_forced", "masked", "exact"}
    assert set(fig.curve) == {"No energy", "Inv-E", "Ind-E", "Uni-E", "Uni-E (resample)"}  # Uni-E by both rules
    part = pd.read_csv(tables / "partition_check.csv")
    assert (part.derived_xs.round(4) == 3.0**part.revealed).all() and (part.fixed_xs_max.round(6) == 1).all()
    nce = json.loads((smoke_run / OUT / "results" / "models" / "uni_edlm_nce" / "config.json").read_text())
    assert nce["extra"]["dev"]["dev_split"].endswith("valid.parquet") and cfg["ppl"]["split"] == "test"
    sel = nce["extra"]["dev"]["selected"]["dev"]  # Uni-EDLM-NCE: p_theta's dev NELBO may not get worse
    assert sel["admissible"] and sel["guard"] <= nce["extra"]["dev"]["initial"]["dev"]["guard"]
    ebm = json.loads((smoke_run / OUT / "results" / "models" / "edlm_nce" / "config.json").read_text())
    assert ebm["backbone"] == "energy_net" and ebm["method"] == "nce"  # EDLM-NCE: a separate E_phi(x0, xt)
    assert json.loads((smoke_run / OUT / "results" / "ppl" / "edlm_nce.json").read_text())["estimator"].startswith(
        "EDLM"
    )
    energy_meta = json.loads((smoke_run / OUT / "results" / "genppl" / "uni_edlm_ar" / "steps2.json").read_text())
    assert energy_meta["sampling"]["options"]["ar_context"] == "masked"


@pytest.mark.slow
def test_fig3_and_timing(smoke_run):
    cfg = resolve_config([SMOKE])
    fig_cfg = cfg["figures"]["fig3_tradeoff"]
    figs = smoke_run / OUT / "results" / "figures"
    for ext in ("pdf", "png"):
        assert (figs / f"fig3_tradeoff.{ext}").stat().st_size > 0
    pts = pd.read_csv(figs / "fig3_tradeoff.csv")
    assert set(pts.panel) == {"k", "w", "tradeoff"}
    assert set(pts[pts.panel == "k"].curve) == {f"k={k}" for k in fig_cfg["Ks"]}
    # each energy curve names its selection rule: EDLM's own resample, the paper's argmin
    assert set(pts[pts.panel == "tradeoff"].curve) == {"AR", "MDLM", "EDLM-AR (resample)", "Uni-EDLM-AR (argmin)"}
    # w = 1 at K = 2 is Table 2's Uni-EDLM-AR (reused, 32 samples); the generated points have n_samples 16
    w1 = pts[(pts.panel == "w") & (pts.curve == "w=1.0")]
    assert set(w1.run) == {"uni_edlm_ar"}
    gen = json.loads((smoke_run / OUT / "results" / "genppl" / "fig3_uni_k1_w20" / "steps2.json").read_text())
    assert gen["n_samples"] == fig_cfg["n_samples"] and gen["sampling"]["options"]["K"] == 1
    # every plotted Gen PPL is the one in the result JSON of its run
    for r in pts.itertuples():
        rec = json.loads((smoke_run / OUT / "results" / "genppl" / r.run / f"steps{r.steps}.json").read_text())
        assert rec["genppl"][fig_cfg["evaluator"]]["ppl"] == pytest.approx(r.genppl, rel=1e-12)
    # the timing protocol: one batch, warm-up excluded, the median of the repeats, all cores held
    for run in set(pts[pts.panel == "tradeoff"].run):
        t = json.loads((smoke_run / OUT / "results" / "timing" / f"{run}.json").read_text())
        assert t["threads"] == 2  # --cores 2: the job held both
        for p in t["points"]:
            assert p["batch_size"] == fig_cfg["timing"]["batch_size"] and len(p["seconds_all"]) == 3
            assert p["seconds"] == sorted(p["seconds_all"])[1]
        sec = pts[(pts.run == run) & (pts.panel == "tradeoff")].set_index("steps").seconds
        assert {p["steps"]: p["seconds"] for p in t["points"]} == pytest.approx(sec.to_dict())
    summary = json.loads((figs / "fig3_tradeoff.json").read_text())
    assert set(summary["k"]) == {str(k) for k in fig_cfg["Ks"]} and summary["k"]["1"]["2"]["dnll"] == 0.0
    assert set(summary["wallclock"]) == {"MDLM", "EDLM-AR", "Uni-EDLM-AR"} and summary["ar"]["seconds"] > 0


@pytest.mark.slow
def test_paper_vs_ours(smoke_run):
    """Every 'ours' cell of paper_vs_ours is the regenerated table's value; the paper's from config/paper_values.yaml."""
    tables = smoke_run / OUT / "results" / "tables"
    long = pd.read_csv(tables / "paper_vs_ours.csv")
    t1 = pd.read_csv(tables / "table1_ppl.csv")
    mdlm = long[(long.table == "table1_ppl") & (long.row == "MDLM") & (long.column == "OWT")].iloc[0]
    assert mdlm.ours == t1[(t1.row == "MDLM") & (t1.domain == "owt")].ppl.iloc[0] and mdlm.paper == 23.83
    t3 = pd.read_csv(tables / "table3_dllm.csv")
    cell = long[(long.table == "table3_dllm") & (long.row == "LLaDa-8B") & (long.column == "MMLU")].iloc[0]
    assert cell.ours == t3[(t3.row == "llada") & (t3.column == "MMLU")].value.iloc[0] and cell.paper == 57.3
    md = (tables / "paper_vs_ours.md").read_text()
    assert "scales differ" in md and (tables / "paper_vs_ours.tex").stat().st_size > 0
    tk = pd.read_csv(tables / "table_app_k.csv")
    k2 = long[(long.table == "table_app_k") & (long.row == "k=2") & (long.column == "Accuracy")].iloc[0]
    assert k2.ours == tk[tk.row == "k=2"].value.iloc[0] and k2.paper == 38.6
    assert long[(long.table == "table_app_k") & (long.column == "Throughput")].ours.isna().all()


@pytest.mark.slow
def test_case_studies(smoke_run):
    figs = smoke_run / OUT / "results" / "figures"
    for case in ("invariant", "independent", "non_invariant", "non_independent"):
        for ext in ("pdf", "png"):
            assert (figs / f"case_{case}.{ext}").stat().st_size > 0
    rec = json.loads((figs / "case_studies.json").read_text())
    dep, inv = rec["cases"]["dependency"], rec["cases"]["invariance"]
    n = resolve_config([SMOKE])["figures"]["case_studies"]["n_samples"]
    assert dep["n"] == inv["n"] == n and 0 <= dep["n_avoided"] <= dep["n_errors"] <= n
    mdlm, uni = rec["cases"]["non_independent"], rec["cases"]["independent"]
    assert mdlm["row"] == uni["row"] == dep["index"] and mdlm["model"] == "MDLM" and uni["model"] == "Uni-E"
    # the shown gap is the sample's worst one, and the caption states the rule
    assert mdlm["gap"] == pytest.approx(min(mdlm["dependency_gaps"].values(), default=0.0))
    assert "dependency gap" in mdlm["rule"] and "invariance gap" in rec["cases"]["non_invariant"]["rule"]


@pytest.mark.slow
def test_bench_target(smoke_run):
    """`snakemake bench`: the ratios and their analytic limits, measured in one run (consistent with each other)."""
    smk("bench", "--cores", "2", "--configfile", str(SMOKE), cwd=smoke_run, check=True)
    r = json.loads((smoke_run / OUT / "results" / "bench" / "sampler.json").read_text())
    cfg = resolve_config([SMOKE])["bench"]
    assert r["P"] == cfg["K"] + 1 and r["threads"] == 2 and r["batch_size"] == cfg["batch_size"]
    # every ratio and limit is the median over interleaved rounds of that round's own ratio
    rounds = r["rounds"]
    assert len(rounds) == cfg["repeats"]
    med = statistics.median
    q = [r["P"] * x["C_AR_s"] / x["C_DLM_s"] for x in rounds]
    ws = r["window_step"]
    assert ws["limit"] == pytest.approx(med([1 + v for v in q]))
    assert r["whole_run"]["limit"] == pytest.approx(med([1 + cfg["w"] * v for v in q]))
    assert ws["measured"] == pytest.approx(med([x["seconds_full"] / x["seconds_plain"] for x in rounds]))
    assert r["whole_run"]["measured"] == pytest.approx(med([x["seconds_part"] / x["seconds_plain"] for x in rounds]))
    to_limit = med([x["seconds_full"] / x["seconds_plain"] / (1 + v) for x, v in zip(rounds, q)])
    assert ws["measured_to_limit"] == pytest.approx(to_limit) and ws["within_1.1"] == (to_limit <= 1.1)
    # the timings themselves are checked for being timings only: which is faster is the bench's finding, and a test
    # run beside other tests (CI's xdist workers) cannot say it (one CI run measured 0.56 here)
    assert all(x[k] > 0 for x in rounds for k in ("seconds_plain", "seconds_full", "seconds_part", "C_AR_s", "C_DLM_s"))
    assert 0 < ws["rows_scored"] <= 1 and r["train_tokens_per_s"] > 0
    eq = r["equal_quality"]
    assert [u["steps"] for u in eq["uni"]] == sorted(resolve_config([SMOKE])["sampling"]["steps"])
    assert (eq["steps"] is None) == (min(u["genppl"] for u in eq["uni"]) > eq["ar_genppl"])
    md = (smoke_run / OUT / "results" / "bench" / "sampler.md").read_text()
    assert f"{ws['measured']:.3f}" in md and f"{ws['limit']:.3f}" in md
    # training from the Parquet token file's view against the memory-mapped .npy: same batches, both timed
    tf = r["token_file"]
    assert tf["identical_batches"] and tf["batch_size"] == cfg["train_batch"] and tf["rounds"] == cfg["repeats"]
    assert all(len(v) == cfg["repeats"] and min(v) > 0 for v in tf["per_round"].values())
    assert tf["ratio"] > 0 and tf["read_us_per_batch"]["parquet"] > 0 and tf["read_us_per_batch"]["npy"] > 0
    assert f"{tf['ratio']:.3f}" in md and not tf["view_built"]  # training built the view before


@pytest.mark.slow
def test_one_job_per_run_equals_one_per_step(smoke_run, tmp_path):
    """sampling.job: table (the smoke and default profiles: one job per table for all its runs and step counts)
    writes the files one job per (run, step count) would."""
    from unie.data.tokens import load_tokens
    from unie.pipeline.sample import SampleJob, run_sampler

    cfg = resolve_config([SMOKE])
    assert cfg["sampling"]["job"] == "table"
    models = smoke_run / OUT / "results" / "models"
    run = "uni_edlm_ar"
    spec = cfg["sampling"]["runs"][run]
    inputs = {
        "tokenizer": str(smoke_run / OUT / "resources" / "tokenizer"),
        **{role: str(models / m / "model.safetensors") for role, m in spec["models"].items()},
    }
    steps = cfg["sampling"]["steps"][-1]
    out = tmp_path / "alone.parquet"
    job = SampleJob.from_spec(
        run,
        spec,
        inputs,
        seq_len=cfg["data"]["seq_len"],
        n_samples=cfg["sampling"]["n_samples"],
        batch_size=cfg["sampling"]["batch_size"],
        domain=cfg["data"]["train_domain"],
        seed=cfg["seed"],
    )
    run_sampler(job, steps, out, log=lambda *a: None)
    together = load_tokens(smoke_run / OUT / "results" / "samples" / run / f"steps{steps}.parquet")
    assert (load_tokens(out) == together).all()


@pytest.mark.slow
def test_a_local_run_wakes_its_scheduler_without_timers(smoke_run, monkeypatch):
    """A local run keeps no job rate limit (unie.pipeline.run.quiet_scheduler): Snakemake's scheduling loop starts no
    1-second timer after its passes (with the default limit, each pass that found jobs ready started one, and each
    timer's pass another: chains of wake-ups to the end of the run).  Counted, not timed: the timers started
    in this process while a table job is remade; the next test brings the tree up to date again."""
    import threading

    if os.environ.get("UNIE_TESTS_SNAKEMAKE") == "subprocess":
        pytest.skip("counts the timers of a run in this process (tests/snakemake_run.py)")
    started = []

    class Counted(threading.Timer):
        def start(self):
            started.append(self.interval)
            super().start()

    monkeypatch.setattr(threading, "Timer", Counted)
    r = smk("-f", f"{OUT}/results/tables/table1_ppl.tex", "--cores", "2", "--configfile", str(SMOKE), cwd=smoke_run)
    assert r.returncode == 0, r.stderr[-3000:]
    assert planned_jobs(r.stdout + r.stderr) == {"table1": 1}
    assert started == []


@pytest.mark.slow
def test_rerun_is_noop_and_targeted(smoke_run):
    from unie.data.tokens import load_tokens

    r = smk("--cores", "2", "--configfile", str(SMOKE), "-n", f"{OUT}/results/tables/table2_genppl.tex", cwd=smoke_run)
    assert r.returncode == 0
    assert "Nothing to be done" in r.stdout + r.stderr
    steps = resolve_config([SMOKE])["sampling"]["steps"][-1]
    target = smoke_run / OUT / "results" / "samples" / "mdlm" / f"steps{steps}.parquet"
    target.unlink()
    r = smk("--cores", "2", "--configfile", str(SMOKE), "-n", f"{OUT}/results/tables/table2_genppl.tex", cwd=smoke_run)
    assert r.returncode == 0, r.stderr
    # the run's own job (sampling.job: table samples a run sampled before by itself), not Table 2's sampling
    assert planned_jobs(r.stdout + r.stderr) == {"sample_run": 1, "table2": 1}
    # and really rerunning rewrites only that run's files, with the same tokens as the table's job wrote
    same_run = {p: load_tokens(p) for p in target.parent.glob("*.parquet") if p != target}
    before = {
        p: p.stat().st_mtime_ns
        for p in (smoke_run / OUT / "results" / "samples").rglob("*.parquet")
        if p.parent != target.parent
    }
    smk(
        f"{OUT}/results/tables/table2_genppl.tex", "--cores", "2", "--configfile", str(SMOKE), cwd=smoke_run, check=True
    )
    assert target.exists()
    assert before and all(p.stat().st_mtime_ns == t for p, t in before.items())
    assert same_run and all((load_tokens(p) == x).all() for p, x in same_run.items())
    r = smk("--cores", "2", "--configfile", str(SMOKE), "-n", f"{OUT}/results/tables/table2_genppl.tex", cwd=smoke_run)
    assert "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]  # the table job took them
    smk("--cores", "2", "--configfile", str(SMOKE), cwd=smoke_run, check=True)  # the figures too: the tree up to date


@pytest.mark.slow
def test_notebook_reads_results(smoke_run):
    pytest.importorskip("nbclient", reason="the notebook extra: pip install -e '.[notebook]'")
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "notebooks" / "results.ipynb", as_version=4)
    os.environ["UNIE_RUN"] = str(smoke_run / OUT)
    os.environ["MPLBACKEND"] = "Agg"
    try:
        NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO / "notebooks")}}
        ).execute()
    finally:
        os.environ.pop("UNIE_RUN")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not any(o.get("output_type") == "error" for o in outputs)
    said = "".join(o.get("text", "") for o in nb.cells[1].get("outputs", []))
    assert f"reading the run {smoke_run / OUT}" in said  # which run it reads


@pytest.mark.slow
def test_the_report_reads_as_a_paper(smoke_run, tmp_path):
    """results/report/paper.html has every table inline (caption visible) and every figure; `snakemake --report`
    makes it the landing page; headless Chromium renders it so (scripts/render_report.py), when installed."""
    import runpy

    page = (smoke_run / OUT / "results" / "report" / "paper.html").read_text()
    tables = sorted((smoke_run / OUT / "results" / "tables").glob("*.tex"))
    assert page.count('<figure class="table"><figcaption>') >= len(tables)  # paper_vs_ours.tex holds several
    pngs = list((smoke_run / OUT / "results" / "figures").glob("*.png"))
    assert page.count('<img src="data:image/png;base64,') == len(pngs)
    assert page.index("<h2>Table 1: perplexity</h2>") < page.index("<h2>Figure 2: energy ablation</h2>")
    assert "\\textbf" not in page and "$" not in page.split("<body>", 1)[1]  # LaTeX converted, none left over
    report = tmp_path / "report.html"
    r = smk("--configfile", str(SMOKE), "--report", str(report), cwd=smoke_run)
    assert r.returncode == 0 and report.stat().st_size > 0, r.stderr[-3000:]
    render = runpy.run_path(str(REPO / "scripts" / "render_report.py"))
    if render["find_chromium"]() is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium): the report was written, not rendered")
    checks = render["checks"](render["rendered_dom"](report))
    assert all(checks.values()), checks
    # every table fits its column at 1,400 px (the page's own style; a table made wider than it is caught)
    paper = smoke_run / OUT / "results" / "report" / "paper.html"
    assert render["overflowing_tables"](paper) == []
    wide = tmp_path / "wide.html"
    wide.write_text(paper.read_text().replace("<table>", '<table style="min-width: 2000px">', 1))
    assert len(render["overflowing_tables"](wide)) == 1


def test_a_run_ends_naming_what_to_read(tmp_path):
    from unie.config.targets import run_summary

    assert "no table or figure yet" in run_summary(tmp_path, "runs/toy")
    for f in (
        "results/report/paper.html",
        "results/tables/paper_vs_ours.md",
        "results/tables/table1_ppl.tex",
        "results/figures/fig2_ablation.png",
    ):
        (tmp_path / "runs/toy" / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "runs/toy" / f).write_text("x")
    text = run_summary(tmp_path, "runs/toy")
    assert "runs/toy/results/report/paper.html" in text and "runs/toy/results/tables/paper_vs_ours.md" in text
    assert "1 tables in runs/toy/results/tables/" in text and "snakemake --cores 2 docs" in text
    assert "this run's directory: runs/toy/" in text and "UNIE_RUN" not in text  # the notebook's default run
    (tmp_path / "runs/toy").rename(tmp_path / "runs/toy+seed-1")
    assert "UNIE_RUN=runs/toy+seed-1 jupyter lab" in run_summary(tmp_path, "runs/toy+seed-1")


def _bad_config(tmp_path, mutate) -> subprocess.CompletedProcess:
    cfg = yaml.safe_load(SMOKE.read_text())  # the profile overlay
    mutate(cfg)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return smk("--cores", "1", "--configfile", str(path), cwd=tmp_path)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda c: c["models"]["mdlm"]["train"].update(stepz=3), "stepz"),
        (lambda c: c["models"]["mdlm"]["train"].update(steps="many"), "many"),
        (lambda c: c.update(sampling_typo=1), "sampling_typo"),
        # a profile is an overlay of config/experiments.yaml: a change to the grid is refused, naming the key
        (
            lambda c: c.update(sampling={"runs": {"mdlm": {"models": {"dlm": "mdlmm"}}}}),
            "sampling.runs.mdlm.models.dlm",
        ),
        (lambda c: c["models"]["mdlm"].update(method="mdlmx"), "models.mdlm.method"),
        (
            lambda c: c.setdefault("genppl", {}).update(
                evaluators={
                    "exact": {"kind": "exact", "label": "pi"},
                    "ar": {"kind": "model", "model": "nope", "label": "AR"},
                }
            ),
            "genppl.evaluators.ar.model",
        ),
        (lambda c: c["data"]["domains"].append("klingon"), "klingon"),
        (lambda c: c.update(tables={"table2_genppl": {"Foo": "foo"}}), "tables.table2_genppl.Foo"),
    ],
    ids=[
        "unknown-key",
        "wrong-type",
        "unknown-top-level",
        "unknown-model",
        "unknown-method",
        "unknown-evaluator",
        "unknown-domain",
        "unknown-run",
    ],
)
def test_bad_config_fails_before_any_job(tmp_path, mutate, expected):
    r = _bad_config(tmp_path, mutate)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert expected in out, out[-3000:]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "resources").exists()


def test_table3_cells_are_lm_eval_values(smoke_run):
    """Every Table 3 cell equals the metric lm-eval wrote in its own results JSON (x 100), and the JSON kept
    under results/dllm/rows/{row}/ is byte-identical to the results_*.json lm-eval's tracker wrote."""
    from unie.data.tasks import PRIMARY_METRIC

    table = pd.read_csv(smoke_run / OUT / "results" / "tables" / "table3_dllm.csv")
    room = table[table.row.str.contains("__")]  # each backbone's window ceiling and floor (rule dllm_room_{backbone})
    df = table[~table.row.isin(room.row)]
    rows = sorted(df.row.unique())
    assert rows == sorted(
        ["proxy", "llada", "llada_dawn", "llada_core", "llada_uni", "dream", "dream_apd", "dream_ind"]
    )
    assert sorted(room.row.unique()) == ["dream__ceiling", "dream__floor", "llada__ceiling", "llada__floor"]
    for _, cell in room.iterrows():  # a room cell is its backbone's lm-eval value plus the tree's change
        base = df[(df.row == cell.delta_to) & (df.task == cell.task)].value.item()
        assert cell.value == pytest.approx(base + cell.delta) and cell.delta_se >= 0
        assert (cell.delta >= 0) if cell.row.endswith("ceiling") else (cell.delta <= 0)
    for row in rows:
        d = smoke_run / OUT / "results" / "dllm" / "rows" / row
        kept = (d / "results.json").read_bytes()
        written = list(d.rglob("results_*.json"))
        assert len(written) == 1 and written[0].read_bytes() == kept
        res = json.loads(kept)
        assert res["lm_eval_version"] == "0.4.13"
        for _, cell in df[df.row == row].iterrows():
            m = f"{PRIMARY_METRIC[cell.task]},none"
            assert cell.metric == m
            assert cell.value == pytest.approx(100 * res["results"][cell.task][m], abs=1e-9)
            assert res["n-samples"][cell.task]["effective"] == 8
        assert list(d.rglob("samples_toy_mbpp_*.jsonl"))  # --log_samples
        tp = json.loads((d / "throughput.json").read_text())
        assert tp["warmup_excluded"] and tp["requests"] == 7 * 8 and tp["tokens_per_s"] > 0
    energy = df[df.delta.notna()]
    assert len(energy) == 5 * 7 and energy.delta_se.notna().all() and (energy.delta_se >= 0).all()
    tex = (smoke_run / OUT / "results" / "tables" / "table3_dllm.tex").read_text()
    assert "MATH500" in tex and "+Uni-Energy" in tex
    # CoRe is a reading: its label carries a dagger and the note is printed under the table, once
    assert "+CoRe$^{\\dagger}$" in tex and tex.count("our reading of its neighbour-stability test") == 1
    # the appendix's full table: every row, the appendix-only one too; Table 3 without it, the shared cells equal
    full = pd.read_csv(smoke_run / OUT / "results" / "tables" / "table_app_dllm_full.csv")
    all_rows = resolve_config([SMOKE])["dllm"]["rows"]
    full_rows = [r for r in full.row.unique() if "__" not in r]  # room rows as in Table 3
    assert full_rows == [r for r, spec in all_rows.items() if not spec.get("selection_table")]
    appendix = [r for r, spec in all_rows.items() if spec.get("appendix_only")]
    assert {"ar_large2", "dream_uni_masked"} <= set(full.row) and not set(appendix) & set(rows)
    shared = full[~full.row.isin(appendix)].reset_index(drop=True)
    pd.testing.assert_frame_equal(shared, table.reset_index(drop=True))
    full_tex = (smoke_run / OUT / "results" / "tables" / "table_app_dllm_full.tex").read_text()
    assert "AR proxy (appendix only)" in full_tex
    # the masked reading's row: its own label, a dagger and the note that says what its proxy reads, once
    assert "+Uni-Energy (masked)$^{\\dagger2}$" in full_tex and full_tex.count("The proxy reads the masked state") == 1
    # every decoder row's effect.json: the paired change against its backbone, and Algorithm 3's window counters
    for row, spec in all_rows.items():
        eff = json.loads((smoke_run / OUT / "results" / "dllm" / "rows" / row / "effect.json").read_text())
        assert eff["row"] == row and eff["backbone"] == spec.get("delta_to")
        if spec.get("delta_to"):
            averaged = resolve_config([SMOKE])["dllm"]["tasks"]["average"]  # the average's tasks (5 of 7)
            assert eff["avg"]["items"] == len(averaged) * 8 and 0 <= eff["avg"]["changed"] <= 1
        if "energy" in spec.get("options", {}):
            w = eff["window"]
            assert w["window_rows"] > 0 and 0 <= w["steered"] <= w["disagree"] <= 1
            assert eff["selection"] == spec["options"].get("selection", "argmin")
        else:
            assert eff["window"] is None
    # the selection-rule table: the backbone, Table 3's energy row and the selection row, with their effects
    sel = pd.read_csv(smoke_run / OUT / "results" / "tables" / "table_app_selection.csv")
    assert list(sel.row) == ["llada", "llada_uni", "llada_rerank"]
    assert list(sel.selection)[1:] == ["argmin", "proxy_rerank"] and sel.disagree[1:].notna().all()
    assert "proxy rerank" in (smoke_run / OUT / "results" / "tables" / "table_app_selection.tex").read_text()


@pytest.mark.slow
def test_a_rows_recorded_command_reruns_it(smoke_run, tmp_path, hf_offline):
    """A Table 3 row's results JSON records the lm-eval command line that reruns it
    (``config.unie_command``); the pipeline's command is the one tests/lmeval_rows.py rebuilds from the profile (so
    docs/dllm.md's, checked the same way, is the default profile's).  Run as a user would, from the run directory
    with ``--limit 3`` appended (and the output sent to a temporary folder), it gives the row's own answers to the
    first 3 items of every task, the same metrics and the same parsed ``model_args``, decoder options and weights.
    A control with one decoding option changed (``tokens_per_step``) answers differently: the comparison can fail."""
    import shlex

    from lmeval_rows import expected_row_command
    from unie.data.tasks import PRIMARY_METRIC

    row = "llada_uni"  # Algorithm 3: sampled candidates (the seed matters), a proxy read through the bridge
    row_dir = smoke_run / OUT / "results" / "dllm" / "rows" / row
    recorded = json.loads((row_dir / "results.json").read_text())
    argv = shlex.split(recorded["config"]["unie_command"])
    assert argv[:3] == ["python", "-m", "unie.dllm.lmeval"] and "--log_samples" in argv
    assert argv == expected_row_command(row, resolve_config([SMOKE]), argv)
    metrics = {t: PRIMARY_METRIC[t] for t in resolve_config([SMOKE])["dllm"]["tasks"]["names"]}

    def rerun(out, *extra):
        r = subprocess.run(
            [sys.executable, *argv[1:], *extra, "--limit", "3", "--output_path", str(out)],
            cwd=smoke_run,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr[-4000:]
        (found,) = out.rglob("results_*.json")
        samples = {
            t: {
                json.loads(line)["doc_id"]: json.loads(line)
                for line in next(out.rglob(f"samples_{t}_*.jsonl")).read_text().splitlines()
            }
            for t in metrics
        }
        return json.loads(found.read_text()), samples

    def row_samples(task):
        (path,) = row_dir.rglob(f"samples_{task}_*.jsonl")
        return {rec["doc_id"]: rec for rec in map(json.loads, path.read_text().splitlines())}

    res, samples = rerun(tmp_path / "rerun")
    for key in ("model_args", "unie_decoder"):
        assert res["config"][key] == recorded["config"][key], key
    answers = 0
    for task, metric in metrics.items():
        own = row_samples(task)
        assert sorted(samples[task]) == [0, 1, 2]
        for i, rec in samples[task].items():
            assert rec["doc"] == own[i]["doc"]
            assert rec["filtered_resps"] == own[i]["filtered_resps"] and rec[metric] == own[i][metric]
            answers += bool(rec["filtered_resps"][0].strip())
        expected = statistics.fmean(own[i][metric] for i in range(3))
        assert res["results"][task][f"{metric},none"] == pytest.approx(expected, abs=1e-12)
    assert answers >= 7  # not a comparison of empty strings
    control, other = rerun(tmp_path / "control", "--model_args", "tokens_per_step=8")
    assert control["config"]["model_args"]["decoding"]["tokens_per_step"] == 8
    assert any(other[t][i]["filtered_resps"] != row_samples(t)[i]["filtered_resps"] for t in metrics for i in range(3))


def test_sweeps_fig4_and_kw_tables_are_lm_eval_values(smoke_run):
    """Figure 4's points and the appendix k/w tables come from one lm-eval run per sweep point (its results JSON
    kept byte for byte), each point's decoder differs only in the varied option, and every point's throughput
    is the adapter's (warm-up excluded, the config's batch size)."""
    cfg = resolve_config([SMOKE])["dllm"]
    for sweep, curves in cfg["sweeps"]["sets"].items():
        d = smoke_run / OUT / "results" / "dllm" / "sweeps" / sweep
        pts = json.loads((d / "points.json").read_text())
        want = [(c, k, v) for c, spec in curves.items() for k, vs in spec["vary"].items() for v in vs]
        assert [(p["curve"], p["key"], p["value"]) for p in pts["points"]] == want
        # two jobs: the lm-eval runs (rule dllm_sweep_eval, on `threads` beside other jobs), then their throughput (rule
        # dllm_sweep): points.json keeps each lm-eval record as it was written
        lm = json.loads((d / "lmeval.json").read_text())
        assert lm["made_by"] == "dllm_sweep_eval" and pts["made_by"] == "dllm_sweep" and lm["threads"] == 1
        assert [{k: p[k] for k in e} for e, p in zip(lm["points"], pts["points"])] == lm["points"]
        for p in pts["points"]:
            kept = (d / p["point"] / "results.json").read_bytes()
            written = list((d / p["point"]).rglob("results_*.json"))
            assert len(written) == 1 and written[0].read_bytes() == kept
            res = json.loads(kept)
            assert list(res["results"]) == ["toy_math"] and res["n-samples"]["toy_math"]["effective"] == 8
            assert p["accuracy"] == pytest.approx(100 * res["results"]["toy_math"]["exact_match,none"], abs=1e-9)
            assert p["stderr"] == pytest.approx(100 * res["results"]["toy_math"]["exact_match_stderr,none"], abs=1e-9)
            assert p["model_args"][p["key"]] == p["value"] and p["model_args"]["name"] == p["point"]
            tp = json.loads((d / p["point"] / "throughput.json").read_text())
            assert tp["warmup_excluded"] and tp["batch_size"] == cfg["batch_size"] and tp["requests"] == 8
            assert tp["decoder"] == p["point"]
            assert p["tokens_per_s_lmeval"] == tp["tokens_per_s"] > 0  # the adapter's single pass, kept
            # the plotted throughput (dllm.timing.source lm_eval, the default): that scored pass's, with the CPU check
            # of its own process CPU time over the same stretches (one thread, beside one other job at most)
            assert p["tokens_per_s"] == tp["tokens_per_s"] and p["timing"]["source"] == "lm_eval"
            assert p["timing"]["cpu_checked"] and p["timing"]["cpu_seconds"] == tp["cpu_seconds"] > 0
            assert p["timing"]["cpu_ratio"] == pytest.approx(tp["cpu_seconds"] / tp["seconds"])
            assert p["timing"]["threads"] == 1 and isinstance(p["trusted"], bool)
        assert pts["timing"]["source"] == "lm_eval" and not list(d.glob("*/timing.json"))  # nothing timed again
    fig4 = pd.read_csv(smoke_run / OUT / "results" / "figures" / "fig4_dllm_tradeoff.csv")
    assert set(fig4.curve) == set(cfg["sweeps"]["sets"]["fig4"])
    assert (smoke_run / OUT / "results" / "figures" / "fig4_dllm_tradeoff.png").stat().st_size > 0
    tex = (smoke_run / OUT / "results" / "tables" / "table_app_k.tex").read_text()
    assert "Tokens/s: the scored lm-eval pass on 1 thread." in tex  # each caption says where its tokens/s come from
    for sweep, key in (("app_k", "K"), ("app_w", "w")):
        t = pd.read_csv(smoke_run / OUT / "results" / "tables" / f"table_{sweep}.csv")
        assert list(t.option.unique()) == [key] and list(t.column.unique()) == ["Accuracy"]
        pts = json.loads((smoke_run / OUT / "results" / "dllm" / "sweeps" / sweep / "points.json").read_text())[
            "points"
        ]
        assert t.value.tolist() == [p["accuracy"] for p in pts]
        assert t.row.tolist() == [f"{key.lower()}={p['value']}" for p in pts]  # the paper's row names
        assert f"${key}$" in (smoke_run / OUT / "results" / "tables" / f"table_{sweep}.tex").read_text()


def test_map_target_is_outside_all_and_its_points_are_lm_eval_runs(smoke_run):
    """`snakemake table_app_map fig_app_map` (not part of `all`: the smoke run made none of its files): per backbone,
    the backbone and APD per proxy are lm-eval runs on the first `limit` items of each of the map's own tasks (more
    items than Table 3's, Table 3's first; APD on the first `whole` only); per (draw, window) the window's candidate
    tree of the first `whole` items gives the room (ceiling >= 0 >= floor) and one cell per rule x proxy (every proxy
    of the map and each mixture of the continuum) with its paired change (on every item: the others read along the
    rules' paths), its judgement and its share of the ceiling;
    the oracle proxy is written from the test items; the table and figure read the points."""
    from unie.dllm.rows import map_tree_grid

    cfg = resolve_config([SMOKE])["dllm"]
    m = cfg["map"]
    assert not (smoke_run / OUT / "results" / "dllm" / "map").exists()
    smk("table_app_map", "fig_app_map", "--cores", "2", "--configfile", str(SMOKE), cwd=smoke_run, check=True)
    oracle = json.loads((smoke_run / OUT / "resources" / "dllm" / "oracle" / "oracle.json").read_text())
    assert oracle["eps"] == m["oracle_eps"]
    for task in m["tasks"]:  # the map's own tasks: more items than Table 3's, Table 3's first
        own = (smoke_run / OUT / "resources" / "dllm" / "map_tasks" / "data" / f"{task}_test.jsonl").read_text()
        table3 = (smoke_run / OUT / "resources" / "dllm" / "tasks" / "data" / f"{task}_test.jsonl").read_text()
        assert len(own.splitlines()) == m["items"] > len(table3.splitlines()) and own.startswith(table3)
    (backbone,) = m["backbones"]
    pts = json.loads((smoke_run / OUT / "results" / "dllm" / "map" / backbone / "points.json").read_text())
    assert [p["rule"] for p in pts["points"]] == ["backbone"] + ["apd"] * len(m["proxies"])
    assert (pts["limit"], pts["items"], pts["whole"]) == (m["limit"], m["items"], m["whole"])
    assert m["apd"]["whole_only"] and m["whole"] < m["limit"]  # APD reads the whole trees' items only
    for p in pts["points"]:
        res = json.loads(
            (smoke_run / OUT / "results" / "dllm" / "map" / backbone / p["name"] / "results.json").read_text()
        )
        read = m["whole"] if p["rule"] == "apd" else m["limit"]
        assert sorted(res["results"]) == sorted(m["tasks"])
        assert p["limit"] == read and all(res["n-samples"][t]["effective"] == read for t in m["tasks"])
        assert p["avg"] == pytest.approx(sum(p["accuracy"].values()) / len(m["tasks"]))
        if p["rule"] != "backbone":  # paired with the backbone on the items both read
            assert p["effect"]["items"] == read * len(m["tasks"])
    proxies = [*m["proxies"], *[f"mix{round(100 * x)}" for x in m["continuum"]["lambdas"]]]
    assert len(pts["trees"]) == len(m["draws"]) * len(m["windows"])
    # each (draw, window) tree a job of its own, merged in the map's order
    grid = map_tree_grid(cfg)
    assert [(t["draw"], t["w"]) for t in pts["trees"]] == list(grid.values())
    trees_dir = smoke_run / OUT / "results" / "dllm" / "map" / backbone / "trees"
    assert sorted(p.stem for p in trees_dir.glob("*.json")) == sorted(grid)
    assert m["whole"] < m["limit"]  # the smoke profile reads items both ways
    for tree in pts["trees"]:
        assert tree["items"] == m["limit"] * len(m["tasks"]) and 0 <= tree["exhaustive"] <= 1
        assert tree["whole_items"] == m["whole"] * len(m["tasks"]) == tree["ceiling"]["avg"]["items"]
        assert tree["ceiling"]["avg"]["delta"] >= 0 >= tree["floor"]["avg"]["delta"]
        assert sorted((c["rule"], c["proxy"]) for c in tree["cells"]) == sorted(
            (r, p) for r in m["rules"] for p in proxies
        )
        for c in tree["cells"]:  # on the whole trees' items no rule beats the best leaf or loses more than the worst
            assert c["effect"]["items"] == tree["items"] and c["effect_whole"]["items"] == tree["whole_items"]
            ceiling, floor = tree["ceiling"]["avg"]["delta"], tree["floor"]["avg"]["delta"]
            assert floor - 1e-9 <= c["effect_whole"]["delta"] <= ceiling + 1e-9
    assert max(tree["exhaustive"] for tree in pts["trees"]) > 0  # (the untrained models' wide windows are cut)
    table = pd.read_csv(smoke_run / OUT / "results" / "tables" / "table_app_map.csv")
    assert {"apd", *m["rules"]} <= set(table.rule)
    be = table[table.rule == "break_even"]  # each rule's crossing along the continuum, named by its two ends
    assert sorted(be.label) == sorted(list(m["rules"]) * len(pts["trees"])) and (be.chain_to == "oracle").all()
    assert be.chain_from.isin([m["continuum"].get("proxy"), *proxies]).all()
    assert (smoke_run / OUT / "results" / "tables" / "table_app_map.tex").stat().st_size > 0
    assert (smoke_run / OUT / "results" / "figures" / "fig_app_map.png").stat().st_size > 0
