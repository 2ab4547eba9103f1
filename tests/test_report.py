"""What a reader sees: Table 1 never calls a non-bound the best; the tables as HTML (the same cells, bold and
caption as the LaTeX); one colour per row in every figure; legible case-study text."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from unie.report import markdown
from unie.report.html import latex_inline, tex_to_html
from unie.report.tables import table1


def _ppl_record(source, ppl: dict, spec=None):
    rec = {
        "source": source,
        "n_mc": 1,
        "domains": {d: {"ppl": p, "nll_per_token": math.log(p), "nll_se": 0.01} for d, p in ppl.items()},
    }
    if spec:
        rec["spec"] = spec
    return rec


ROWS = {
    "Data ($\\pi$, exact)": "exact",
    "AR": "ar",
    "MDLM": "mdlm",
    "DCD": None,
    "EDLM-CoAR": "edlm_coar",
    "EDLM-NCE": "edlm_nce",
    "Uni-EDLM-AR": "uni_edlm_ar",
}
RECORDS = [
    _ppl_record("exact", {"owt": 10.88, "lm1b": 9.64}),
    _ppl_record("ar", {"owt": 11.29, "lm1b": 11.60}),
    _ppl_record("mdlm", {"owt": 12.63, "lm1b": 13.21}),
    _ppl_record(
        "edlm_coar",
        {"owt": 11.43, "lm1b": 13.50},
        {"energy": "ind", "dlm": "mdlm", "proxy": "ar", "ar_context": "teacher_forced_carry_over"},
    ),
    _ppl_record("edlm_nce", {"owt": 11.57, "lm1b": 12.62}, {"energy": "ebm", "dlm": "mdlm", "ebm": "edlm_nce"}),
    _ppl_record(
        "uni_edlm_ar",
        {"owt": 4.11, "lm1b": 4.11},
        {"energy": "uni", "dlm": "mdlm", "proxy": "ar_masked", "ar_context": "masked"},
    ),
]


def _rows(tex: str) -> dict[str, str]:
    body = tex.split(r"\midrule", 1)[1].split(r"\bottomrule")[0]
    return {line.split(" & ")[0]: line for line in body.splitlines() if " & " in line}


def test_table1_never_bolds_a_value_that_is_not_a_bound():
    tex, df = table1(ROWS, ["owt", "lm1b"], RECORDS)
    rows = _rows(tex)
    # Uni-EDLM's 4.11 is below the data's exact 10.88: marked, never bold
    assert r"\textbf" not in rows[r"Uni-EDLM-AR$^\dagger$"] and r"\textbf" not in rows[r"EDLM-NCE$^\dagger$"]
    # EDLM-CoAR's estimator is in expectation the AR's own NLL (the reference row's): marked, never bold although
    # its 11.43 is the lowest bound on OWT; the best among the methods' bounds: MDLM in both columns (EDLM-NCE's
    # 12.62 on LM1B is lower but not a bound)
    assert r"\textbf" not in rows[r"EDLM-CoAR$^\S$"]
    assert all(c.startswith(r"\textbf") for c in rows["MDLM"].split(" & ")[1:3])
    assert "DCD" in rows and "dagger" not in rows["DCD"]  # no likelihood: no mark
    caption = tex.split(r"\caption{", 1)[1]
    assert r"$^\dagger$ Not an upper bound on perplexity" in caption and "among the bounds" in caption
    assert r"$^\S$ Its estimator is in expectation the AR proxy's own NLL (EDLM-CoAR)" in caption
    cells = df.set_index(["row", "domain"])
    assert not cells.loc[("Uni-EDLM-AR", "owt"), "bound"] and cells.loc[("MDLM", "owt"), "bound"]
    assert set(df[df.best].row + "/" + df[df.best].domain) == {"MDLM/owt", "MDLM/lm1b"}
    assert set(df[df.reference_estimator].row) == {"EDLM-CoAR"}
    assert pd.isna(cells.loc[("DCD", "owt"), "bound"])


def test_table1_markdown_marks_and_bolds_as_the_latex(tmp_path):
    _, df = table1(ROWS, ["owt", "lm1b"], RECORDS)
    df.to_csv(tmp_path / "t1.csv", index=False)
    md = markdown.table1(pd.read_csv(tmp_path / "t1.csv"))
    assert "| Uni-EDLM-AR † | 4.11 | 4.11 |" in md and "| EDLM-CoAR § | 11.43 | 13.50 |" in md
    assert "| MDLM | **12.63** | **13.21** |" in md and "† Not an upper bound on perplexity" in md
    assert "§ Its estimator is in expectation the AR proxy's own NLL" in md
    # a CSV from before the bound column: laid out as it was, nothing invented
    old = markdown.table1(pd.read_csv(tmp_path / "t1.csv").drop(columns=["bound", "best", "reference_estimator"]))
    assert "**" not in old and "†" not in old


def test_latex_cells_and_captions_as_html():
    assert latex_inline(r"\textbf{6.44{\scriptsize $\pm$0.94}}") == "<b>6.44<small>±0.94</small></b>"
    assert latex_inline(r"Uni-EDLM-AR$^\dagger$") == "Uni-EDLM-AR<sup>†</sup>"
    assert latex_inline(r"toy\_math 100\% -- $3^{|D|}$ $-$1") == "toy_math 100% – 3<sup>|D|</sup> −1"
    assert latex_inline(r"\textcolor{red}{loss} a<b & c") == '<span style="color:#c62828">loss</span> a&lt;b &amp; c'


def test_a_table_float_as_html_keeps_cells_groups_bold_and_caption():
    tex, _ = table1(ROWS, ["owt", "lm1b"], RECORDS)
    page = tex_to_html(tex)
    assert page.count("<table>") == 1 and page.count("<tbody>") == 4  # the row groups of the LaTeX table
    assert "<figcaption>Perplexity per domain" in page and "<sup>†</sup> Not an upper bound" in page
    assert (
        "<b>12.63<small>" in page and ">Uni-EDLM-AR<sup>†</sup></td>" in page and ">EDLM-CoAR<sup>§</sup></td>" in page
    )
    assert "<th" in page and ">OWT</th>" in page and "\\" not in page.replace("\\\\", "")


def test_every_row_has_its_own_colour_in_every_figure():
    from unie.config.profile import resolve_config
    from unie.report.figures import ROW_COLOURS, row_colours, row_key

    assert len(set(ROW_COLOURS.values())) == len(ROW_COLOURS)  # no colour is shared by two rows
    cfg = resolve_config()
    labels = [
        *cfg["tables"]["table1_ppl"],
        *cfg["tables"]["table2_genppl"],
        *cfg["figures"]["fig2_ablation"]["energies"],
        "No energy",
        *cfg["figures"]["fig3_tradeoff"]["baselines"],
        cfg["figures"]["fig3_tradeoff"]["edlm"]["label"],
        *[r["label"] for r in cfg["dllm"]["rows"].values()],
        *[c["label"] for s in cfg["dllm"]["sweeps"]["sets"].values() for c in s.values()],
    ]
    colours = row_colours(labels)
    for a in labels:  # the same label the same colour wherever it is drawn, two rows never the same
        assert colours[a] == row_colours([a])[a]
    assert len(set(colours.values())) == len({row_key(a) for a in labels})
    # an alias draws its row ("No energy" is the MDLM run; Table 1's data row is Table 2's), a rule variant its row
    assert colours["No energy"] == colours["MDLM"] and colours[r"Data ($\pi$, exact)"] == colours["Data"]
    assert row_colours(["EDLM-AR (resample)"])["EDLM-AR (resample)"] == colours["EDLM-AR"]
    # labels nobody listed still get distinct colours, none of a listed row
    new = row_colours(["my sampler", "another one", "MDLM"])
    assert len(set(new.values())) == 3 and new["MDLM"] == ROW_COLOURS["MDLM"]
    assert not {new["my sampler"], new["another one"]} & set(ROW_COLOURS.values())


def test_case_study_text_keeps_its_contrast():
    from matplotlib import colormaps

    from unie.report.figures import contrast_ratio, text_colour

    cmap = colormaps["viridis"]
    for v in np.linspace(0, 1, 41):
        fc = cmap(v)
        assert contrast_ratio(text_colour(fc), fc) >= 4.5, v  # WCAG AA for normal text
