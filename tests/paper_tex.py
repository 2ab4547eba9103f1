"""A small reader of the paper's LaTeX tables, used only to check config/paper_values.yaml against the .tex."""

from __future__ import annotations

import re

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def cell_values(cell: str) -> list[float]:
    """The numbers of a cell, without the coloured deltas ``(\\textcolor{..}{+3.1})`` and markup."""
    cell = re.sub(r"\(\s*\\textcolor\{[^}]*\}\{[^}]*\}\s*\)", "", cell)
    cell = re.sub(r"\$[^$]*\$", "", cell)
    return [float(x) for x in NUMBER.findall(cell)]


def parse_tex_table(tex: str, label: str) -> tuple[list[str], dict[str, tuple[list[str], int]]]:
    """``(header cells, {row name: (cells, line number)})`` of the tabular just before ``\\label{label}``.

    A row name repeated in a later block (``+APD`` under LLaDA and under Dream) is keyed ``block/name``, the block
    being the last row before it that has no delta colour (the backbone)."""
    end = tex.index("\\label{" + label + "}")
    start = tex.rindex("\\begin{tabular}", 0, end)
    stop = tex.index("\\end{tabular}", start)
    body = tex[start:stop]
    body = body[body.index("}", body.index("{", len("\\begin{tabular}"))) + 1 :]  # drop the column spec
    offset = start + len(tex[start:stop]) - len(body)
    rows, header, block, pos = {}, None, None, 0
    for raw in body.split("\\\\"):
        pos += len(raw) + 2
        text = re.sub(r"\\(toprule|midrule|bottomrule)|\\rowcolor\{[^}]*\}\{[^}]*\}|\\rowcolor\{[^}]*\}", "", raw)
        if "&" not in text:
            continue
        cells = [c.strip() for c in text.split("&")]
        name = re.sub(r"\$[^$]*\$", "", cells[0]).strip()
        if header is None:
            header = cells
            continue
        if "textcolor" not in text and not name.startswith("+"):
            block = name
        key = f"{block}/{name}" if name.startswith("+") and block else name
        rows[key] = (cells[1:], tex.count("\n", 0, tex.index(cells[0], offset + pos - len(raw) - 2)) + 1)
    return header, rows
