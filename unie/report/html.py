r"""The workflow's tables and figures as one HTML page to read (rule ``paper_page``, ``results/report/paper.html``,
also the landing page of ``snakemake --report``).

Pure functions.  A table is converted from the ``.tex`` the table rule wrote (one or more ``table`` floats of
:func:`unie.report.tables.latex_float` / :mod:`unie.report.paper`: a caption, booktabs tabulars, ``\midrule``
between row groups) so that the page shows exactly the cells of the LaTeX table, its bold and its caption; a figure
is its PNG, embedded, under its caption.  Only the LaTeX those writers produce is understood (``\textbf``,
``\textcolor``, ``{\scriptsize ...}``, inline maths with a few symbols, escaped ``\% \_ \&``); anything else is shown
as its text without the backslash.
"""

from __future__ import annotations

import base64
import html
import re

# inline maths and text symbols -> Unicode
SYMBOLS = {
    "pi": "π",
    "pm": "±",
    "dagger": "†",
    "ddagger": "‡",
    "S": "§",
    "downarrow": "↓",
    "uparrow": "↑",
    "tau": "τ",
    "Delta": "Δ",
    "sim": "~",
    "min": "min",
    "max": "max",
    "arg": "arg ",
    "exp": "exp",
    "log": "log",
    "leq": "≤",
    "geq": "≥",
    "times": "×",
    "cdot": "·",
    "approx": "≈",
    "ldots": "…",
    "dots": "…",
    "infty": "∞",
    "sigma": "σ",
    "theta": "θ",
    "phi": "φ",
    "alpha": "α",
    "mid": "|",
    "textbackslash": "\\",
    "quad": " ",
    ",": " ",
}
COLOURS = {"red": "#c62828", "green!50!black": "#2e7d32", "blue": "#1565c0", "gray": "#616161", "black": "#000"}
SIZES = ("scriptsize", "footnotesize", "small", "tiny")


def _group(s: str, i: int) -> tuple[str, int]:
    """The text of the brace group that opens at ``s[i]`` (``{...}``, nested braces kept) and the index after it;
    a single character when ``s[i]`` is not a brace (``^2``)."""
    if i >= len(s):
        return "", i
    if s[i] == "\\":  # a command as the argument (^\dagger)
        m = re.match(r"\\([a-zA-Z]+|.)", s[i:])
        return m.group(0), i + len(m.group(0))
    if s[i] != "{":
        return s[i], i + 1
    depth, j = 0, i
    while j < len(s):
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return s[i + 1 : j], j + 1
        j += 1
    return s[i + 1 :], len(s)


def _math_end(s: str, i: int) -> int:
    """The index of the ``$`` that closes the inline maths opened just before ``s[i]``."""
    j = i
    while j < len(s):
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == "$":
            return j
        j += 1
    return len(s)


def latex_inline(text: str, math: bool = False) -> str:
    """A LaTeX cell or caption as HTML (escaped): ``\\textbf{x}`` -> ``<b>``, ``{\\scriptsize ±x}`` -> ``<small>``,
    ``\\textcolor{red}{x}`` -> a coloured span, ``$\\pi$`` -> π, ``x^{2}`` / ``x_s`` -> sup / sub, ``--`` -> –."""
    s, out, i = str(text), [], 0
    while i < len(s):
        c = s[i]
        if c == "$" and not math:
            j = _math_end(s, i + 1)
            out.append(latex_inline(s[i + 1 : j], math=True))
            i = j + 1
        elif c == "\\":
            m = re.match(r"\\([a-zA-Z]+|.)", s[i:])
            name = m.group(1)
            i += len(m.group(0))
            if name in ("textbf", "mathbf"):
                arg, i = _group(s, i)
                out.append(f"<b>{latex_inline(arg, math)}</b>")
            elif name in ("textit", "emph", "mathit"):
                arg, i = _group(s, i)
                out.append(f"<i>{latex_inline(arg, math)}</i>")
            elif name in ("mathrm", "text", "textrm", "operatorname"):
                arg, i = _group(s, i)
                out.append(latex_inline(arg, math))
            elif name == "textcolor":
                colour, i = _group(s, i)
                arg, i = _group(s, i)
                out.append(f'<span style="color:{COLOURS.get(colour, "inherit")}">{latex_inline(arg, math)}</span>')
            elif name == "ref":
                _, i = _group(s, i)
                out.append("above")
            elif name in SIZES:
                continue
            elif name in SYMBOLS:
                out.append(SYMBOLS[name])
            elif name == "\\":
                out.append("<br>")
            elif len(name) == 1:  # \% \_ \& \# \$ \{ \}
                out.append(html.escape(name))
            else:
                out.append(html.escape(name))
            if name in SYMBOLS and i < len(s) and s[i] == " " and math:
                i += 1
        elif c == "{":
            arg, i = _group(s, i)
            small = re.match(r"\\(scriptsize|footnotesize|tiny)\b\s*", arg)
            inner = latex_inline(arg[small.end() :] if small else arg, math)
            out.append(f"<small>{inner}</small>" if small else inner)
        elif c == "}":
            i += 1
        elif c in "^_" and math:
            arg, i = _group(s, i + 1)
            tag = "sup" if c == "^" else "sub"
            out.append(f"<{tag}>{latex_inline(arg, True)}</{tag}>")
        elif s.startswith("---", i):
            out.append("—")
            i += 3
        elif s.startswith("--", i):
            out.append("–")
            i += 2
        elif c == "-" and math:
            out.append("−")
            i += 1
        elif c == "~":
            out.append("&nbsp;")
            i += 1
        else:
            out.append(html.escape(c))
            i += 1
    return "".join(out)


def _cells(row: str) -> list[str]:
    """A tabular row's cells: split at ``&`` not escaped, the closing ``\\\\`` dropped."""
    row = re.sub(r"\s*\\\\\s*$", "", row.strip())
    return [c.strip() for c in re.split(r"(?<!\\)&", row)]


def _tabular(lines: list[str], spec: str) -> str:
    """One ``tabular`` (its lines between ``\\begin`` and ``\\end``) as an HTML ``<table>``: the header row in
    ``<thead>``, each group of rows between ``\\midrule`` in its own ``<tbody>``."""
    align = [{"l": "left", "r": "right"}.get(a, "center") for a in re.sub(r"[^lcr]", "", spec)]
    header, groups, seen_mid = None, [[]], False
    for line in lines:
        line = line.strip()
        if line in (r"\toprule", r"\bottomrule") or not line:
            continue
        if line == r"\midrule":
            if seen_mid and groups[-1]:
                groups.append([])
            seen_mid = True
            continue
        if header is None and not seen_mid:
            header = _cells(line)
        else:
            groups[-1].append(_cells(line))

    def row(cells, tag):
        return (
            "<tr>"
            + "".join(
                f'<{tag} style="text-align:{align[j] if j < len(align) else "center"}">{latex_inline(c)}</{tag}>'
                for j, c in enumerate(cells)
            )
            + "</tr>"
        )

    out = ["<table>"]
    if header is not None:
        out.append("<thead>" + row(header, "th") + "</thead>")
    out += ["<tbody>" + "".join(row(r, "td") for r in g) + "</tbody>" for g in groups if g]
    return "".join(out) + "</table>"


def tex_to_html(tex: str) -> str:
    """The ``table`` floats of a ``.tex`` written by the workflow as HTML: per float a ``<figure>`` with its caption
    (visible, above the table, as in the paper) and its tabulars; a comment line that says why a table is missing
    (``% ...: not compared: ...``) becomes a note."""
    out, lines, i = [], tex.splitlines(), 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("%") and "not compared" in line:
            out.append(f'<p class="note">{html.escape(line.lstrip("% "))}</p>')
        if line.startswith(r"\begin{table}"):
            j = next(k for k in range(i, len(lines)) if lines[k].strip() == r"\end{table}")
            body = "\n".join(lines[i:j])
            k = body.find(r"\caption")
            caption = _group(body, k + len(r"\caption"))[0] if k >= 0 else ""
            parts = []
            for m in re.finditer(r"\\begin\{tabular\}\{([^}]*)\}\n(.*?)\n\\end\{tabular\}", body, re.S):
                parts.append(_tabular(m.group(2).splitlines(), m.group(1)))
            out.append(
                f'<figure class="table"><figcaption>{latex_inline(caption)}</figcaption>{"".join(parts)}</figure>'
            )
            i = j
        i += 1
    return "\n".join(out)


def figure_html(png: bytes, caption_html: str, alt: str) -> str:
    """A figure: the PNG embedded (a data URI, so that the page stands alone) under its caption."""
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return (
        f'<figure class="figure"><img src="{uri}" alt="{html.escape(alt)}">'
        f"<figcaption>{caption_html}</figcaption></figure>"
    )


STYLE = """
.unie-page { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1a1a1a;
  line-height: 1.45; max-width: 1150px; margin: 0 auto; padding: 0.5rem 1rem 3rem; font-size: 15px; }
.unie-page h1 { font-size: 1.6rem; margin: 0.6rem 0; }
.unie-page h2 { font-size: 1.3rem; margin: 2rem 0 0.4rem; border-bottom: 1px solid #ccc; padding-bottom: 0.2rem; }
.unie-page h3 { font-size: 1.1rem; margin: 1.4rem 0 0.3rem; }
.unie-page nav ul { columns: 2; padding-left: 1.2rem; margin: 0.4rem 0; }
.unie-page a { color: #1565c0; }
.unie-page figure { margin: 0.6rem 0 1.4rem; }
.unie-page figcaption { font-size: 0.9rem; color: #333; margin: 0.3rem 0 0.5rem; max-width: 1100px; }
.unie-page figure.table { overflow-x: auto; }
/* wide tables (Table 3: seven tasks, each a value with its s.e.) fit the column at 1,400 px: smaller type, narrow
   padding, cells that wrap (scripts/render_report.py --page checks that no table overflows) */
.unie-page table { border-collapse: collapse; margin: 0.4rem 0 0.8rem; font-size: 0.82rem;
  border-top: 2px solid #222; border-bottom: 2px solid #222; }
.unie-page thead th { border-bottom: 1px solid #222; padding: 0.25rem 0.35rem; font-weight: 600; }
.unie-page tbody + tbody { border-top: 1px solid #888; }
.unie-page td { padding: 0.18rem 0.35rem; }
.unie-page td small, .unie-page th small { color: #555; font-size: 0.78em; }
.unie-page img { max-width: 100%; height: auto; border: 1px solid #eee; }
.unie-page .note { font-size: 0.9rem; color: #555; }
.unie-page .caption-from-report p { margin: 0.2rem 0; }
/* inside `snakemake --report`'s landing page (the page is its workflow description): start at the top left, take
   the width the column allows, the rule graph below the page instead of beside it */
.items-center.justify-center:has(.unie-page) { align-items: flex-start; justify-content: flex-start; }
.flex.gap-3:has(.unie-page) { flex-wrap: wrap; flex: 1 1 0; min-width: 0; max-width: 100%; }
.py-2:has(.unie-page) { flex: 1 1 100%; min-width: 0; }
.prose.max-w-lg:has(.unie-page) { max-width: none; }
.prose .unie-page { max-width: 100%; padding: 0; }
.unie-page table { width: auto; }
.unie-page code::before, .unie-page code::after { content: none; }
"""


def page(title: str, intro_html: str, sections: list[tuple[str, str, str]]) -> str:
    """The whole page: ``sections`` are ``(anchor, heading, body HTML)``, listed in a contents list at the top."""
    toc = "".join(f'<li><a href="#{a}">{html.escape(h)}</a></li>' for a, h, _ in sections)
    body = "".join(f'<section id="{a}"><h2>{html.escape(h)}</h2>{b}</section>' for a, h, b in sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f'<style>{STYLE}</style></head><body><div class="unie-page"><h1>{html.escape(title)}</h1>{intro_html}'
        f"<nav><ul>{toc}</ul></nav>{body}</div></body></html>\n"
    )


__all__ = ["figure_html", "latex_inline", "page", "tex_to_html"]
