"""Rule ``paper_vs_ours``: read ``config/paper_values.yaml`` and the workflow's table CSVs, write
``results/tables/paper_vs_ours.{md,tex,csv}`` (:mod:`unie.report.paper`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from .report import _write_text


def paper_vs_ours(values_path, table_csvs: dict, *, profile: str, evaluators: list[str], steps: list[int],
                  md_path, tex_path, csv_path, log=print) -> str:
    """``table_csvs``: table key (``table1_ppl`` ...) -> our CSV; a table of the YAML without one is listed with
    the reason (the k and w tables until the workflow makes them)."""
    from ..report.paper import compare, orderings, ours_long, render

    values = yaml.safe_load(Path(values_path).read_text())
    sections = []
    for key, spec in values["tables"].items():
        if key not in table_csvs:
            sections.append({"key": key, "spec": spec,
                             "reason": f"this workflow does not produce `{key}` yet (issue 9 adds the DLLM k and w "
                                       "sweeps)" if spec["kind"] == "sweep" else f"this profile does not produce `{key}`"})
            continue
        ours = ours_long(spec, pd.read_csv(table_csvs[key]), evaluators=evaluators, steps=steps)
        df = compare(spec, ours)
        note = None
        if spec["kind"] == "genppl":
            note = ("Columns: the paper's " + ", ".join(spec["evaluators"]) + " are our evaluators "
                    + ", ".join(evaluators[: len(spec["evaluators"])]) + "; its " + " / ".join(map(str, spec["steps"]))
                    + " steps are our " + " / ".join(map(str, steps)) + " (L/8 ... L).")
        elif spec["kind"] == "dllm":
            note = "Rows: the paper's row is ours as listed in config/paper_values.yaml (`ours`); columns by name."
        sections.append({"key": key, "spec": spec, "df": df, "order": orderings(spec, df), "note": note})
    md, tex, long = render(sections, profile)
    _write_text(md, md_path)
    _write_text(tex, tex_path)
    _write_text(long.to_csv(index=False), csv_path)
    log(md)
    return md
