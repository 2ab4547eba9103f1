"""Algorithm 2's candidate selection rule through the DLM half: the config says which rule every energy run uses
(EDLM rows: EDLM's own `resample`; Uni-EDLM rows: the paper's `argmin`), a bad rule is an error naming its key,
Table 2 and Figures 2-3 show the rule each energy row or curve was drawn with (read from the results), and
`select` itself (shapes, the two rules)."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import torch

from unie.core.options import ConfigError
from unie.config.checks import check_config, expand_config
from unie.config.expand import fig2_runs, fig3_runs
from unie.config.profile import resolve_config


@pytest.fixture(scope="module")
def grid():
    return resolve_config()


def _expanded(cfg):
    cfg = copy.deepcopy(cfg)
    expand_config(cfg)
    check_config(cfg)
    return cfg


# ---------------------------------------------------------------------- the config
def test_every_energy_run_of_the_grid_states_its_rule(grid):
    runs = grid["sampling"]["runs"]
    energy = {n: r for n, r in runs.items() if r["sampler"] == "energy"}
    assert set(energy) >= {"edlm_ar", "edlm_nce", "uni_edlm_ar", "uni_edlm_nce"}
    for name, run in energy.items():
        assert "selection" in run["options"], name  # written out, argmin included: the config says it
    assert runs["edlm_ar"]["options"]["selection"] == runs["edlm_nce"]["options"]["selection"] == "resample"
    assert runs["edlm_ar"]["options"]["temperature"] == runs["edlm_nce"]["options"]["temperature"] == 1.0  # is_temp
    assert runs["uni_edlm_ar"]["options"]["selection"] == runs["uni_edlm_nce"]["options"]["selection"] == "argmin"
    assert grid["figures"]["fig3_tradeoff"]["edlm"]["selection"] == "resample"


def test_the_default_rule_is_the_samplers():
    from unie.energy.sampler import EnergyOptions
    from unie.config.expand import DEFAULT_SELECTION

    assert EnergyOptions().selection == DEFAULT_SELECTION == "argmin"


def test_fig2_draws_uni_e_with_both_rules_in_every_panel(grid):
    runs = fig2_runs(grid)
    fig = grid["figures"]["fig2_ablation"]
    for ctx in fig["contexts"]:
        assert list(runs[ctx]) == ["Inv-E", "Ind-E", "Uni-E", "Uni-E (resample)"]
        assert runs[ctx]["Uni-E (resample)"] == f"fig2_uni_{ctx}_resample"
    assert runs["masked"]["Uni-E"] == "uni_edlm_ar"  # Table 2's run (argmin written out there, default here)
    assert runs["exact"]["Uni-E"] == "fig2_uni_exact"
    cfg = _expanded(grid)
    new = cfg["sampling"]["runs"]["fig2_uni_masked_resample"]
    assert new["options"] == {"energy": "uni", "K": 2, "w": 1.0, "ar_context": "masked", "selection": "resample"}
    assert new["models"] == {"dlm": "mdlm", "proxy": "ar_masked"} and new["n_samples"] == fig["n_samples"]
    # a generated argmin run keeps the spec it always had (the rule's params): no rerun of an existing tree
    assert "selection" not in cfg["sampling"]["runs"]["fig2_uni_exact"]["options"]
    assert len([n for n in cfg["sampling"]["runs"] if n.endswith("_resample")]) == len(fig["contexts"]) + 1


def test_fig3_edlm_line_uses_edlms_rule(grid):
    runs = fig3_runs(grid)
    assert runs["tradeoff"]["EDLM-AR"] == "fig3_ind_k2_w20_resample"
    assert runs["tradeoff"]["Uni-EDLM-AR"] == "fig3_uni_k2_w20" and runs["w"][1.0] == "uni_edlm_ar"
    cfg = _expanded(grid)
    assert cfg["sampling"]["runs"]["fig3_ind_k2_w20_resample"]["options"]["selection"] == "resample"
    assert "fig3_ind_k2_w20" not in cfg["sampling"]["runs"]


def test_reuse_compares_resolved_options(grid):
    """A configured run reused by a figure matches whether or not it writes the default rule out."""
    cfg = copy.deepcopy(grid)
    del cfg["sampling"]["runs"]["uni_edlm_ar"]["options"]["selection"]
    assert fig2_runs(cfg)["masked"]["Uni-E"] == "uni_edlm_ar" and fig3_runs(cfg)["w"][1.0] == "uni_edlm_ar"
    cfg["sampling"]["runs"]["uni_edlm_ar"]["options"]["selection"] = "resample"
    assert fig2_runs(cfg)["masked"] == {
        **fig2_runs(grid)["masked"],
        "Uni-E": "fig2_uni_masked",
        "Uni-E (resample)": "uni_edlm_ar",
    }


@pytest.mark.parametrize(
    "where, mutate",
    [
        (
            "sampling.runs.edlm_ar.options",
            lambda c: c["sampling"]["runs"]["edlm_ar"]["options"].update(selection="best"),
        ),
        (
            "figures.fig2_ablation.energies.Uni-E (resample).selection",
            lambda c: c["figures"]["fig2_ablation"]["energies"].update(
                {"Uni-E (resample)": {"energy": "uni", "selection": "best"}}
            ),
        ),
        (
            "figures.fig3_tradeoff.edlm.selection",
            lambda c: c["figures"]["fig3_tradeoff"]["edlm"].update(selection="best"),
        ),
        ("figures.fig3_tradeoff.selection", lambda c: c["figures"]["fig3_tradeoff"].update(selection="best")),
    ],
)
def test_an_unknown_selection_names_its_key_and_itself(grid, where, mutate):
    cfg = copy.deepcopy(grid)
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        expand_config(cfg)
        check_config(cfg)
    msg = str(err.value)
    assert where in msg and "'best'" in msg and "argmin" in msg and "resample" in msg, msg


@pytest.mark.parametrize(
    "entry, key",
    [
        ({"energy": "nope"}, "figures.fig2_ablation.energies.X.energy"),
        ("nope", "figures.fig2_ablation.energies.X"),
        ({"energy": "uni", "rule": "argmin"}, "figures.fig2_ablation.energies.X.rule"),
    ],
)
def test_a_bad_fig2_curve_names_its_key(grid, entry, key):
    cfg = copy.deepcopy(grid)
    cfg["figures"]["fig2_ablation"]["energies"]["X"] = entry
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        expand_config(cfg)


def test_schema_accepts_a_curve_with_a_rule_and_refuses_other_keys(grid):
    from pathlib import Path

    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    schema = str(Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml")
    validate(copy.deepcopy(grid), schema)
    cfg = copy.deepcopy(grid)
    cfg["figures"]["fig2_ablation"]["energies"]["X"] = {"energy": "uni", "rule": "resample"}
    with pytest.raises(WorkflowError):
        validate(cfg, schema)


# ---------------------------------------------------------------------- Table 2
def _record(run, steps, options, nll=3.0, se=0.04):
    import math

    return {
        "sampling": {"run": run, "steps": steps, "options": options, "seconds": 1.0, "nfe": steps},
        "entropy_bits": 4.4,
        "genppl": {"exact": {"ppl": math.exp(nll), "nll_per_token": nll, "nll_se": se}},
    }


RUNS = {"mdlm": {"sampler": "ancestral"}, "edlm_ar": {"sampler": "energy"}, "uni_edlm_ar": {"sampler": "energy"}}
ROWS = {"MDLM": "mdlm", "EDLM-AR": "edlm_ar", "Uni-EDLM-AR": "uni_edlm_ar"}
EVS = {"exact": {"kind": "exact", "label": r"$\pi$"}}


def _table2_records(tau=1.0):
    res = {"energy": "ind", "K": 2, "selection": "resample", "temperature": tau}
    arg = {"energy": "uni", "K": 2, "selection": "argmin", "temperature": 1.0}
    return [
        r
        for s in (4, 8)
        for r in (_record("mdlm", s, {"eps": 1e-5}), _record("edlm_ar", s, res), _record("uni_edlm_ar", s, arg))
    ]


def test_table2_names_each_energy_rows_rule():
    from unie.report.markdown import table2 as md_table2
    from unie.report.tables import table2

    tex, df = table2(ROWS, RUNS, EVS, _table2_records())
    assert r"EDLM-AR {\scriptsize (resample)}" in tex and r"Uni-EDLM-AR {\scriptsize (argmin)}" in tex
    assert "MDLM &" in tex and r"MDLM {\scriptsize" not in tex  # a sampler without a rule: the label alone
    assert "softmax" in tex and "argmin" in tex  # the caption says what the two rules are
    assert list(df.columns)[-2:] == ["selection", "best"]  # the CSV: columns added at the end
    rule = df.groupby("row").selection.first()
    assert rule["EDLM-AR"] == "resample" and rule["Uni-EDLM-AR"] == "argmin" and pd.isna(rule["MDLM"])
    assert df.row.unique().tolist() == list(ROWS)  # the row labels stay the config's
    md = md_table2(df, "exact")
    assert "| EDLM-AR (resample) |" in md and "| Uni-EDLM-AR (argmin) |" in md and "| MDLM |" in md


def test_table2_never_bolds_a_row_in_the_column_of_its_own_network():
    """A sampler that decodes with an evaluator's network (DCD, EDLM-AR with the AR proxy) is judged by itself in
    that column: a double dagger, never bold there (bold in the others when best); the CSV's ``best`` says which
    cells are bold."""
    import math

    from unie.report.tables import table2

    runs = {
        "mdlm": {"sampler": "ancestral", "models": {"dlm": "mdlm"}},
        "dcd": {"sampler": "dcd", "models": {"dlm": "mdlm", "proxy": "ar"}},
    }
    rows = {"MDLM": "mdlm", "DCD": "dcd"}
    evs = {"exact": {"kind": "exact", "label": r"$\pi$"}, "ar": {"kind": "model", "model": "ar", "label": "AR"}}

    def rec(run, nll_exact, nll_ar):
        return {
            "sampling": {"run": run, "steps": 4, "options": {}, "seconds": 1.0, "nfe": 4},
            "entropy_bits": 4.4,
            "genppl": {
                "exact": {"ppl": math.exp(nll_exact), "nll_per_token": nll_exact, "nll_se": 0.01},
                "ar": {"ppl": math.exp(nll_ar), "nll_per_token": nll_ar, "nll_se": 0.01},
            },
        }

    tex, df = table2(rows, runs, evs, [rec("mdlm", 3.0, 2.5), rec("dcd", 2.9, 2.0)])  # DCD lower under both
    best = df.set_index(["row", "evaluator"]).best
    assert best["DCD", "exact"] and not best["MDLM", "exact"]  # a fair column: DCD is best
    assert not best["DCD", "ar"] and best["MDLM", "ar"]  # its own network's column: the other row is best
    assert r"$^\ddagger$" in tex and "Judged by one of the networks its sampler decodes with (DCD)" in tex


def test_table2_states_a_temperature_other_than_one_and_refuses_mixed_rules():
    from unie.report.tables import table2

    tex, _ = table2(ROWS, RUNS, EVS, _table2_records(tau=0.5))
    assert r"(resample, $\tau$=0.5)" in tex
    records = _table2_records()
    records[1]["sampling"]["options"] = {**records[1]["sampling"]["options"], "selection": "argmin"}
    with pytest.raises(ValueError, match="different selection rules"):
        table2(ROWS, RUNS, EVS, records)


# ---------------------------------------------------------------------- Figures 2 and 3
def test_fig2_has_the_resample_series_in_every_panel():
    import matplotlib

    matplotlib.use("Agg")
    from unie.report.figures import fig2_ablation
    from unie.report.markdown import fig2_table

    fig = {
        "evaluator": "exact",
        "baseline": "mdlm",
        "K": 2,
        "w": 1.0,
        "contexts": ["teacher_forced", "exact"],
        "energies": {"Uni-E": "uni", "Uni-E (resample)": {"energy": "uni", "selection": "resample"}},
    }
    fig["runs"] = {c: {"Uni-E": f"u_{c}", "Uni-E (resample)": f"r_{c}"} for c in fig["contexts"]}
    records = [_record("mdlm", s, {"eps": 1e-5}) for s in (4, 8)]
    for c in fig["contexts"]:
        records += [_record(f"u_{c}", s, {"selection": "argmin"}, nll=2.9) for s in (4, 8)]
        records += [_record(f"r_{c}", s, {"selection": "resample"}, nll=2.95, se=0.05) for s in (4, 8)]
    figure, df = fig2_ablation(fig, records)
    for c, ax in zip(fig["contexts"], figure.axes):
        assert set(df[df.context == c].curve) == {"No energy", "Uni-E", "Uni-E (resample)"}
        assert len(ax.containers) == 3  # one error-bar series per curve in every panel
    labels = figure.axes[-1].get_legend_handles_labels()[1]
    assert labels == ["No energy", "Uni-E", "Uni-E (resample)"]
    assert set(df[df.curve == "Uni-E (resample)"].selection) == {"resample"}
    assert set(df[df.curve == "Uni-E"].selection) == {"argmin"} and df[df.curve == "No energy"].selection.isna().all()
    assert {"nll", "nll_se"} <= set(df.columns)  # the CSV carries the s.e. the docs word their claims by
    assert (df[df.curve == "Uni-E (resample)"].nll_se == 0.05).all()
    md = fig2_table(df)
    assert "| Uni-E (resample) |" in md and "resample" in md.split("\n")[-1] and "s.e. of NLL" in md


def test_fig3_tradeoff_labels_name_the_rule():
    from unie.report.figures import genppl_frame, with_selection, _selection_at
    from unie.report.markdown import fig3_claims

    df = genppl_frame([_record("e", 4, {"selection": "resample"}), _record("ar", 32, {})])
    assert _selection_at(df, "e") == "resample" and _selection_at(df, "ar") is None
    assert with_selection("EDLM-AR", "resample") == "EDLM-AR (resample)"
    assert with_selection("EDLM-AR (resample)", "resample") == "EDLM-AR (resample)"
    assert with_selection("AR", None) == "AR"
    claims = fig3_claims(
        {
            "ar": {"genppl": 11.7, "seconds": 0.2},
            "wallclock": {
                "EDLM-AR": {"selection": "resample", "genppl": None, "best_genppl": 30.0},
                "MDLM": {"genppl": None, "best_genppl": 25.0},
            },
        }
    )
    assert "* EDLM-AR (resample): never" in claims and "* MDLM: never" in claims


# ---------------------------------------------------------------------- select itself
def test_select_shapes_and_rules():
    from unie.energy.energies import SELECTIONS, select

    assert {"argmin", "resample"} <= set(SELECTIONS)
    E = torch.tensor([[0.0, 5.0, 1.0], [3.0, -2.0, 0.5]], dtype=torch.float64)  # B = 2, K = 3
    assert select(E, "argmin").tolist() == [0, 1]
    g = torch.Generator().manual_seed(0)
    j = select(E, "resample", 1.0, g)
    assert j.shape == (2,) and j.dtype == torch.long and ((0 <= j) & (j < 3)).all()
    # a gap of many nats: resampling is argmin in practice; at a high temperature it is near uniform
    assert torch.equal(select(E * 100, "resample", 1.0, torch.Generator().manual_seed(1)), E.argmin(-1))
    draws = torch.stack([select(E, "resample", 1.0, g) for _ in range(4000)])  # (4000, B)
    freq = torch.stack([(draws == k).double().mean(0) for k in range(3)], -1)  # (B, K)
    assert torch.allclose(freq, torch.softmax(-E, -1), atol=0.03)  # j ~ softmax(-E / tau): low energy preferred
    hot = torch.stack([select(E, "resample", 1e6, g) for _ in range(3000)])
    assert torch.allclose(
        torch.stack([(hot == k).double().mean(0) for k in range(3)], -1),
        torch.full((2, 3), 1 / 3, dtype=torch.float64),
        atol=0.04,
    )
    assert torch.equal(
        select(E, "resample", 1.0, torch.Generator().manual_seed(7)),
        select(E, "resample", 1.0, torch.Generator().manual_seed(7)),
    )  # reproducible per generator
    with pytest.raises(ValueError, match="unknown selection 'best'"):
        select(E, "best")
