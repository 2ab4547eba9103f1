"""results/tables/paper_vs_ours: the paper's numbers (config/paper_values.yaml) checked against the .tex, and the
comparison logic (orderings, Kendall's tau-b, differences in the paper profile)."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest
import yaml

from paper_tex import cell_values, parse_tex_table
from unie.report.paper import compare, kendall_tau_b, orderings, ours_long, paper_columns, render

REPO = Path(__file__).resolve().parents[1]
VALUES = yaml.safe_load((REPO / "config" / "paper_values.yaml").read_text())
TEX = next((p for p in (REPO.parent / "shared" / "paper" / "uni-e.tex", REPO / ".." / "shared" / "paper" / "uni-e.tex")
            if p.exists()), None)


@pytest.mark.skipif(TEX is None, reason="the paper's .tex (../shared/paper/uni-e.tex) is not beside this clone")
@pytest.mark.parametrize("key", list(VALUES["tables"]))
def test_every_paper_number_equals_the_tex(key):
    spec = VALUES["tables"][key]
    header, rows = parse_tex_table(TEX.read_text(), spec["label"])
    assert set(rows) == set(spec["rows"]), key
    for name, row in spec["rows"].items():
        cells, line = rows[name]
        assert row["line"] == line, (key, name)
        if spec["kind"] == "genppl":  # evaluator-major; Data and AR have one value per evaluator, at L
            want = []
            for cell in cells[1:4]:
                v = cell_values(cell)
                want += v if len(v) == 4 else [None, None, None, v[0]]
        else:
            want = [cell_values(c)[0] for c in cells]
        assert row["values"] == want, (key, name)
    if spec["kind"] in ("ppl", "dllm"):
        assert spec["columns"] == header[1:]


def test_kendall_tau_b_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(0)
    for n in (2, 3, 7, 12):
        x = [rng.choice([1.0, 2.0, 3.0, 4.5]) for _ in range(n)]
        y = [rng.choice([0.5, 1.0, 2.0]) for _ in range(n)]
        want = stats.kendalltau(x, y, variant="b").statistic
        got = kendall_tau_b(x, y)
        assert (got is None and pd.isna(want)) or got == pytest.approx(want, abs=1e-12)
    assert kendall_tau_b([1, 2, 3], [3, 2, 1]) == -1 and kendall_tau_b([1, 1], [2, 3]) is None


SPEC = {"kind": "dllm", "lower_is_better": False, "columns": ["A", "B"], "title": "T", "label": "t",
        "rows": {"base": {"ours": ["llada"], "values": [10.0, 50.0]},
                 "base/+E": {"ours": ["llada_uni", "other"], "values": [12.0, 40.0]},
                 "big": {"ours": ["missing_here", "ar_large"], "values": [30.0, 45.0]}}}
OURS = pd.DataFrame({"row": ["llada", "llada", "llada_uni", "llada_uni", "ar_large", "ar_large"],
                     "column": ["A", "B", "A", "B", "A", "B"], "value": [1.0, 5.0, 2.0, 5.0, 0.5, 4.0]})


def test_orderings_best_rows_ties_and_tau():
    ours = ours_long(SPEC, OURS)
    assert ours[("big", "A")] == 0.5  # the first of `ours` present in our table
    df = compare(SPEC, ours)
    order = orderings(SPEC, df).set_index("column")
    assert order.loc["A", "best_paper"] == "big" and order.loc["A", "best_ours"] == "base/+E"
    assert not order.loc["A", "agree"]
    assert order.loc["B", "best_ours"] == "base = base/+E" and order.loc["B", "agree"]  # a tie, one of them best
    assert order.loc["A", "kendall_tau_b"] == pytest.approx(kendall_tau_b([10, 12, 30], [1, 2, 0.5]))
    lower = dict(SPEC, lower_is_better=True)
    assert orderings(lower, df).set_index("column").loc["A", "best_paper"] == "base"


def test_paper_profile_shows_differences_and_toy_profile_says_scales_differ():
    df = compare(SPEC, ours_long(SPEC, OURS))
    assert df.set_index(["row", "column"]).loc[("base", "A"), "diff"] == pytest.approx(1.0 - 10.0)
    sections = [{"key": "t", "spec": SPEC, "df": df, "order": orderings(SPEC, df)},
                {"key": "k", "spec": dict(SPEC, title="K"), "reason": "not produced"}]
    md_paper, tex_paper, _ = render(sections, "paper")
    md_toy, tex_toy, long = render(sections, "toy")
    assert "| base | 10 / 1 (-9.00) | 50 / 5 (-45.00) |" in md_paper
    assert "| base | 10 / 1 | 50 / 5 |" in md_toy and "scales differ" in md_toy and "(-9.00)" not in md_toy
    assert "Not compared: not produced" in md_toy and r"\begin{tabular}" in tex_toy
    assert set(long.table) == {"t"} and len(long) == 6


def test_genppl_columns_map_by_position():
    spec = VALUES["tables"]["table2_genppl"]
    ours = pd.DataFrame({"row": ["MDLM", "MDLM", "AR"], "evaluator": ["exact", "ar", "exact"], "steps": [4, 32, 32],
                         "genppl": [90.0, 20.0, 13.0]})
    got = ours_long(spec, ours, evaluators=["exact", "ar_long", "ar"], steps=[4, 8, 16, 32])
    assert got == {("MDLM", "Llama2 128"): 90.0, ("MDLM", "GPT2 1024"): 20.0, ("AR", "Llama2 1024"): 13.0}
    assert len(paper_columns(spec)) == 12
