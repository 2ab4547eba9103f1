"""The replicates (unie.config.replicate_plan, unie.report.replicate_tables, unie.pipeline.replicate_runs): each seed's
run command, the aggregate of a table over seeds against numbers computed by hand, the claims' verdicts, and
`snakemake replicates` on a small part of the smoke profile (three run directories and the aggregate)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest
from snakemake_run import run_snakemake

from unie.config.replicate_plan import aggregate_dir, given_profile, replicate_command
from unie.report.replicate_tables import aggregate, claims, task_average_change, verdict, view

REPO = Path(__file__).resolve().parents[1]


def test_a_seeds_command_is_the_outer_runs_with_the_seed_replaced():
    cmd = replicate_command(
        "py",
        "S",
        "/w",
        ["config/smoke.yaml"],
        {"seed": 5, "threads": 2, "slurm_partitions": {"cpu": "n", "gpu": "a100"}},
        2,
        ["all"],
        4,
        None,
    )
    assert cmd[:7] == ["py", "-m", "snakemake", "-s", "S", "-d", "/w"]
    assert cmd[cmd.index("--cores") + 1] == "4" and "--profile" not in cmd
    cfg = cmd[cmd.index("--config") + 1 : cmd.index("--")]
    assert cfg == ["threads=2", "slurm_partitions={cpu: n, gpu: a100}", "seed=2"] and cmd[-1] == "all"
    slurm = replicate_command("py", "S", "/w", [], {}, 0, ["all", "table_app_map"], None, "slurm")
    assert slurm[-2:] == ["all", "table_app_map"]
    assert slurm[slurm.index("--profile") + 1] == "slurm" and "--cores" not in slurm
    assert given_profile(["snakemake", "--profile", "slurm", "replicates"], {}) == "slurm"
    assert given_profile(["snakemake", "--profile=x"], {}) == "x"
    assert given_profile(["snakemake"], {"SNAKEMAKE_PROFILE": "y"}) == "y"
    assert aggregate_dir("runs/toy", {}) == "runs/toy+replicates"
    assert aggregate_dir("runs/toy+seed-1", {"seed": 1}, lambda: "runs/toy") == "runs/toy+replicates"


def test_aggregate_of_a_table_by_hand():
    frames = {
        s: pd.DataFrame(
            {
                "row": ["MDLM", "AR"],
                "source": ["mdlm", "ar"],
                "domain": ["owt", "owt"],
                "ppl": [10.0 + s, 20.0 - s],
                "bound": [True, True],
                "best": [s == 0, s != 0],
            }
        )
        for s in (0, 1, 2)
    }
    a = aggregate("table1_ppl", frames)
    assert list(a.quantity) == ["ppl", "ppl"] and list(a.row) == ["MDLM", "AR"]  # booleans are not quantities
    mdlm = a[a.row == "MDLM"].iloc[0]
    assert (mdlm.seed_0, mdlm.seed_1, mdlm.seed_2) == (10.0, 11.0, 12.0)
    assert mdlm["mean"] == pytest.approx(11.0) and mdlm["sd"] == pytest.approx(1.0)
    assert (mdlm["min"], mdlm["max"], mdlm["n_runs"]) == (10.0, 12.0, 3)
    dup = {s: pd.concat([f, f]) for s, f in frames.items()}
    with pytest.raises(ValueError, match="do not name a cell"):
        aggregate("table1_ppl", dup)


def test_an_undeclared_table_read_from_csv_is_keyed_by_its_text_columns(tmp_path):
    """read_csv gives text columns pandas' ``str`` dtype (pandas 3), not ``object``: they still key the cells (the
    default run's paper_vs_ours.csv, whose rows repeat across tables, failed here before)."""
    frames = {}
    for s in (0, 1, 2):
        path = tmp_path / f"t{s}.csv"
        pd.DataFrame(
            {"row": ["AR", "AR"], "column": ["OWT", "PTB"], "ours": [11.0 + s, 9.0 - s], "table": ["t1", "t1"]}
        ).to_csv(path, index=False)
        frames[s] = pd.read_csv(path)
    a = aggregate("some_new_table", frames)
    assert list(a.column) == ["OWT", "PTB"] and list(a["mean"]) == [12.0, 8.0]
    b = aggregate("paper_vs_ours", frames)  # declared: (table, row, column)
    assert list(b["mean"]) == [12.0, 8.0]


def test_a_long_table_with_a_value_column_aggregates_and_shows_percent():
    """Table 3's CSV is long with a column named ``value`` (accuracy in %): each (row, task) cell aggregated, shown
    as it is (no rescaling), the room rows too."""
    frames = {
        s: pd.DataFrame(
            {
                "row": ["llada", "llada", "llada__ceiling"],
                "task": ["toy_math", "toy_gsm8k", "toy_math"],
                "column": ["MATH500", "GSM8K", "MATH500"],
                "value": [10.0 + s, 20.0, 12.0 + s],
                "delta": [None, None, 2.0],
                "delta_se": [None, None, 0.5],
            }
        )
        for s in (0, 1, 2)
    }
    a = aggregate("table3_dllm", frames)
    cell_ = a[(a.row == "llada") & (a.task == "toy_math") & (a.quantity == "value")].iloc[0]
    assert (cell_.seed_0, cell_.seed_2, cell_["mean"]) == (10.0, 12.0, 11.0)
    shown = view("table3_dllm", a)
    assert "11.00 ± 1.00 [10.00, 12.00]" in shown and "llada__ceiling" in shown
    # a room row has no in_average of its own: it is averaged over the tasks Table 3 averages
    t3 = pd.DataFrame(
        {
            "row": ["llada", "llada", "llada_uni", "llada_uni", "llada__ceiling", "llada__ceiling"],
            "task": ["toy_math", "toy_mmlu"] * 3,
            "value": [1.0] * 6,
            "in_average": [True, False, True, False, None, None],
            "delta": [None, None, 2.0, 8.0, 4.0, 9.0],
            "delta_se": [None, None, 0.5, 0.5, 0.5, 0.5],
        }
    )
    avg = task_average_change(t3).set_index("row").delta
    assert avg.to_dict() == {"llada_uni": 2.0, "llada__ceiling": 4.0}


def test_verdicts_and_claims():
    assert verdict([2.5, 3.0, 2.1]) == "holds in all 3 (+)"
    assert verdict([-2.5, -3.0, -2.1]) == "holds in all 3 (−)"
    assert verdict([2.5, 1.0, -2.2]) == "holds in 2 of 3 (+−)"
    assert verdict([0.5, -1.9, 1.0]) == "level in all 3"
    assert verdict([2.5, -3.0, -2.1]) == "signs differ, beyond 2 s.e. in all 3 (+−−)"
    assert verdict([float("nan")] * 3) == "no value"
    sel = {
        s: pd.DataFrame({"row": ["llada", "llada_uni"], "delta": [None, d], "delta_se": [None, 0.5]})
        for s, d in ((0, 1.5), (1, 1.2), (2, 0.4))
    }
    t2 = {
        s: pd.DataFrame(
            {
                "row": ["MDLM", "X"],
                "run": ["mdlm", "x"],
                "steps": [8, 8],
                "evaluator": ["exact"] * 2,
                "nll_per_token": [3.0, 3.0 + d],
                "nll_se": [0.03, 0.04],
            }
        )
        for s, d in ((0, 0.2), (1, 0.25), (2, 0.3))
    }
    c = claims({"table_app_selection": sel, "table2_genppl": t2})
    uni = c[c.cell == "llada_uni"].iloc[0]
    assert uni.z_0 == pytest.approx(3.0) and uni.verdict == "holds in 2 of 3 (++)"
    x = c[c.table == "table2_genppl"].iloc[0]
    assert x.seed_0 == pytest.approx(0.2) and x.se_0 == pytest.approx(0.05) and x.verdict == "holds in all 3 (+)"


def test_a_change_is_shown_with_its_se_to_the_se_s_first_digit():
    from unie.report.replicate_tables import with_se

    assert with_se(1.8, 0.6) == "+1.8 ± 0.6" and with_se(-0.63, 0.61) == "-0.6 ± 0.6"
    assert with_se(0.021, 0.048) == "+0.02 ± 0.05" and with_se(3.04, 1.3) == "+3.0 ± 1.3"
    assert with_se(0.5, float("nan")) == "+0.5"


def test_claims_against_edlm_ar_no_energy_and_k1():
    """Table 2 rows against EDLM-AR too; each Figure 2 curve against no energy in its own panel and steps; each
    Figure 3 point against k = 1 at its steps; the references themselves make no claim."""
    t2 = {
        s: pd.DataFrame(
            {
                "row": ["MDLM", "EDLM-AR", "Uni"],
                "run": ["mdlm", "edlm_ar", "uni"],
                "steps": [8] * 3,
                "evaluator": ["exact"] * 3,
                "nll_per_token": [3.0, 2.9, 3.0 + d],
                "nll_se": [0.03] * 3,
            }
        )
        for s, d in ((0, 0.2), (1, 0.25), (2, 0.3))
    }
    f2 = {
        s: pd.DataFrame(
            {
                "context": ["tf", "tf", "exact", "exact"],
                "curve": ["No energy", "Ind-E"] * 2,
                "run": ["mdlm", "ind", "mdlm", "ind"],
                "steps": [4] * 4,
                "selection": ["", "argmin"] * 2,
                "nll": [3.0, 3.0 - d, 3.5, 3.5],
                "nll_se": [0.03, 0.04, 0.03, 0.04],
            }
        )
        for s, d in ((0, 0.2), (1, 0.05), (2, 0.3))
    }
    f3 = {
        s: pd.DataFrame(
            {
                "panel": ["k", "k", "w"],
                "curve": ["k=1", "k=2", "w=1"],
                "run": ["a", "b", "c"],
                "steps": [16] * 3,
                "nll": [3.0, 3.01, 3.2],
                "nll_se": [0.05] * 3,
            }
        )
        for s in (0, 1, 2)
    }
    c = claims({"table2_genppl": t2, "fig2_ablation": f2, "fig3_tradeoff": f3})
    vs_edlm = c[(c.table == "table2_genppl") & c.change.str.contains("edlm_ar")].set_index("cell")
    assert list(vs_edlm.index) == ["MDLM / 8 / exact", "Uni / 8 / exact"]
    assert vs_edlm.loc["Uni / 8 / exact", "seed_0"] == pytest.approx(0.3)
    assert vs_edlm.loc["Uni / 8 / exact", "verdict"] == "holds in all 3 (+)"
    f2c = c[c.table == "fig2_ablation"].set_index("cell")
    assert list(f2c.index) == ["tf / Ind-E / argmin / 4", "exact / Ind-E / argmin / 4"]
    assert f2c.loc["tf / Ind-E / argmin / 4", "se_0"] == pytest.approx(0.05)
    assert f2c.loc["tf / Ind-E / argmin / 4", "verdict"] == "holds in 2 of 3 (−−)"
    assert f2c.loc["exact / Ind-E / argmin / 4", "verdict"] == "level in all 3"
    f3c = c[c.table == "fig3_tradeoff"].set_index("cell")
    assert f3c.loc["k / k=2 / 16", "verdict"] == "level in all 3"
    assert f3c.loc["w / w=1 / 16", "seed_1"] == pytest.approx(0.2) and "k=1" not in " ".join(f3c.index)


@pytest.mark.slow
def test_snakemake_replicates_builds_each_seeds_run_and_the_aggregate(tmp_path):
    """`snakemake replicates` on the smoke profile with Table 2 cut to the data, the AR and the MDLM (an overlay that
    drops the other rows), each seed's run building only Table 2: three run directories with their own trainings,
    and the aggregate page and CSVs."""
    pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
    overlay = tmp_path / "small.yaml"
    overlay.write_text(
        "exclude:\n  tables:\n    table2_genppl: [SEDD, Duo, Block Diffusion, DCD, ReMDM, EDLM-AR, "
        "EDLM-NCE, Uni-EDLM-AR, Uni-EDLM-NCE]\n"
    )
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(tmp_path),
        "--cores",
        "2",
        "replicates",
        "--configfile",
        str(REPO / "config" / "smoke.yaml"),
        str(overlay),
        "--config",
        "replicates={seeds: [0, 1, 2], targets: [table2]}",
    ]
    r = run_snakemake(cmd[3:], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = next((tmp_path / "runs").glob("*+replicates"))
    dirs = {
        m["seed"]: Path(m["run_dir"]).name
        for m in (json.loads(p.read_text()) for p in (out / "runs").glob("seed-*.json"))
    }
    assert sorted(dirs) == [0, 1, 2] and len(set(dirs.values())) == 3
    assert dirs[0] == out.name[: -len("+replicates")]  # the aggregate sits beside the seed-0 run
    for name in dirs.values():
        assert (tmp_path / "runs" / name / "results" / "tables" / "table2_genppl.csv").is_file(), name
    page = (out / "replicates.md").read_text()
    assert f"seed 2: `runs/{dirs[2]}/`" in page and "## table2_genppl" in page
    agg = pd.read_csv(out / "tables" / "table2_genppl.csv")
    assert {"seed_0", "seed_1", "seed_2", "mean", "sd", "min", "max"} <= set(agg.columns)
    genppl = agg[agg.quantity == "genppl"]
    assert (genppl.n_runs == 3).all() and (genppl.sd > 0).any()  # three trainings, not one run three times
    w = {
        s: (tmp_path / "runs" / d / "results" / "models" / "mdlm" / "model.safetensors").read_bytes()
        for s, d in dirs.items()
    }
    assert len(set(w.values())) == 3  # each seed trained its own MDLM
    manifest = json.loads((out / "runs" / "seed-1.json").read_text())
    assert manifest["run_dir"] == f"runs/{dirs[1]}" and "seed=1" in manifest["command"]
    assert math.isfinite(pd.read_csv(out / "claims.csv").z_0.iloc[0])


def test_the_maps_break_even_over_trainings_reads_each_trainings_crossing_or_its_ends():
    from unie.report.replicate_tables import break_even_claims, break_even_view

    def frame(auc_ind, ind_ends, uni_ends):
        rows = []
        for rule, auc, ends in (("ind", auc_ind, ind_ends), ("uni", None, uni_ends)):
            for proxy, (d, se) in zip(("paper", "oracle"), ends):
                rows.append(
                    {
                        "backbone": "dream",
                        "draw": "τ = 1",
                        "w": 0.5,
                        "rule": rule,
                        "label": rule,
                        "proxy": proxy,
                        "delta": d,
                        "se": se,
                        "auc": 0.7 if proxy == "paper" else 0.95,
                    }
                )
            rows.append(
                {
                    "backbone": "dream",
                    "draw": "τ = 1",
                    "w": 0.5,
                    "rule": "break_even",
                    "label": rule,
                    "proxy": None,
                    "auc": auc,
                    "auc_se": None if auc is None else 0.02,
                    "dlm_auc": 0.64,
                    "chain_from": "paper",
                    "chain_to": "oracle",
                }
            )
        return pd.DataFrame(rows)

    frames = {
        0: frame(0.61, [(-1.0, 0.5), (5.0, 0.5)], [(-3.0, 0.5), (-2.0, 0.5)]),
        1: frame(0.66, [(-0.5, 0.5), (6.0, 0.5)], [(-2.5, 0.5), (-1.5, 0.5)]),
        2: frame(None, [(0.4, 0.5), (4.0, 0.5)], [(-2.0, 0.5), (-1.2, 0.5)]),
    }
    be = break_even_claims(frames).set_index("rule")
    assert be.loc["ind", "verdict"] == "breaks even in 2 of 3"
    assert be.loc["ind", "auc_1"] == pytest.approx(0.66) and math.isnan(be.loc["ind", "auc_2"])
    assert be.loc["ind", "learned_2"] == pytest.approx(0.4) and be.loc["ind", "oracle_2"] == pytest.approx(4.0)
    assert be.loc["ind", "learned_auc_2"] == pytest.approx(0.7) and be.loc["ind", "oracle_auc_2"] == pytest.approx(0.95)
    assert be.loc["uni", "verdict"] == "loses at both ends in all 3"
    frames[2] = frame(0.58, [(-0.4, 0.5), (4.0, 0.5)], [(-2.0, 0.5), (-0.2, 0.5)])
    be = break_even_claims(frames).set_index("rule")
    assert be.loc["ind", "verdict"] == "breaks even in all 3 (AUC 0.58–0.66)"
    assert be.loc["uni", "verdict"] == "never crosses (ends: loss/loss, loss/loss, loss/level)"
    shown = break_even_view(be.reset_index())
    assert "0.66 ± 0.02 (backbone 0.64)" in shown and be.loc["ind", "dlm_auc_0"] == pytest.approx(0.64)
    assert "0.66 ± 0.02" in shown and "never (-2.0 ± 0.5 at AUC 0.70 … -0.2 ± 0.5 at 0.95)" in shown


def test_the_judgement_check_counts_cells_whose_sign_follows_their_judgement():
    from unie.report.replicate_tables import judgement_check

    f = pd.DataFrame(
        {
            "backbone": ["dream"] * 5,
            "rule": ["ind", "ind", "uni", "rerank", "break_even"],
            "proxy": ["paper", "oracle", "paper", "weak", None],
            "delta": [-5.0, 8.0, 3.0, 0.5, None],
            "se": [1.0, 1.0, 1.0, 1.0, None],
            "auc": [0.60, 0.95, 0.68, 0.50, 0.71],
            "dlm_auc": [0.70] * 5,
        }
    )
    (r,) = judgement_check({0: f}).to_dict("records")
    # ind/paper: a loss judged worse; ind/oracle: a gain judged better; uni/paper: a gain judged worse (against,
    # gap 0.02); rerank/weak: within 2 s.e.
    assert (r["cells"], r["beyond"], r["agree"], r["against"]) == (4, 3, 2, 1)
    assert r["worst_gap"] == pytest.approx(0.02)


def test_the_aggregate_of_three_maps_writes_the_break_even_and_the_judgement_check(tmp_path):
    from unie.pipeline.replicate_runs import aggregate_replicates, write_manifest

    manifests = []
    for seed, (be_auc, delta) in enumerate([(0.70, -4.0), (0.74, -5.0), (0.72, -3.0)]):
        run = tmp_path / f"run{seed}"
        (run / "results" / "tables").mkdir(parents=True)
        common = {"backbone": "dream", "draw": "τ = 1", "w": 1.0, "dlm_auc": 0.71}
        pd.DataFrame(
            [
                {**common, "rule": "ind", "label": "ind", "proxy": "paper", "delta": delta, "se": 1.0, "auc": 0.6},
                {**common, "rule": "ind", "label": "ind", "proxy": "oracle", "delta": 9.0, "se": 1.0, "auc": 0.95},
                {
                    **common,
                    "rule": "break_even",
                    "label": "ind",
                    "proxy": None,
                    "auc": be_auc,
                    "auc_se": 0.02,
                    "chain_from": "paper",
                    "chain_to": "oracle",
                },
            ]
        ).to_csv(run / "results" / "tables" / "table_app_map.csv", index=False)
        m = tmp_path / "agg" / "runs" / f"seed-{seed}.json"
        write_manifest(seed, str(run), ["snakemake", f"seed={seed}"], m)
        manifests.append(m)
    aggregate_replicates(manifests, tmp_path / "agg", log=lambda *_: None)
    be = pd.read_csv(tmp_path / "agg" / "break_even.csv")
    assert be.verdict.iloc[0] == "breaks even in all 3 (AUC 0.70–0.74)"
    check = pd.read_csv(tmp_path / "agg" / "judgement_check.csv")
    assert list(check.agree) == [2, 2, 2] and list(check.against) == [0, 0, 0]
    page = (tmp_path / "agg" / "replicates.md").read_text()
    assert "break-even judgements over the trainings" in page and "0.74 ± 0.02 (backbone 0.71)" in page
