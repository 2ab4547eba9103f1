"""Rule ``paper_vs_ours``: read ``config/paper_values.yaml`` and the workflow's table CSVs, write
``results/tables/paper_vs_ours.{md,tex,csv}`` (:mod:`unie.report.paper`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from .tables_figures import _write_text, read_table_csv  # read_table_csv: also imported from here (notebooks)


def paper_vs_ours(
    values,
    table_csvs: dict,
    *,
    profile: str,
    evaluators: list[str],
    steps: list[int],
    md_path,
    tex_path,
    csv_path,
    log=print,
) -> str:
    """``values``: the paper's values (``config/paper_values.yaml``, read, or its path); ``table_csvs``: table key
    (``table1_ppl`` ...) -> our CSV, each checked against its record before it is read (:func:`read_table_csv`); a
    table of the YAML without one is listed with the reason (the k and w tables until the workflow makes them)."""
    from ..report.paper import render, sections

    if not isinstance(values, dict):
        values = yaml.safe_load(Path(values).read_text())
    tables = {key: read_table_csv(path) for key, path in table_csvs.items()}
    md, tex, long = render(sections(values, tables, evaluators=list(evaluators), steps=list(steps)), profile)
    _write_text(md, md_path)
    _write_text(tex, tex_path)
    _write_text(long.to_csv(index=False), csv_path)
    log(md)
    return md
