"""Render `snakemake --report report.html` in a headless Chromium and check what a reader sees.

    snakemake --report report.html && python scripts/render_report.py report.html --screenshot landing.png \
        --page runs/toy/results/report/paper.html

The report's landing page is built by its JavaScript; this loads it in Chromium (Debian: `apt-get install
chromium`), lets the script run, and reads the page Chromium made (`--dump-dom`): it must show the run's tables
inline (HTML tables with their captions, not only downloads) and its figures.  With `--page` (the run's
results/report/paper.html, the report's landing page as a file) it also opens that page at the window's 1,400 px and
measures every table against its column: a table wider than the column (clipped, or behind a scrollbar) fails.
It prints one line per check and exits 1 if one fails; `--screenshot` also writes what a reader sees first.
tests/test_workflow.py runs it on the smoke run's report when Chromium is installed (and says why it is skipped
when not).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def find_chromium() -> str | None:
    """The Chromium (or Chrome) executable on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium(url: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run headless Chromium on ``url`` with ``args`` in a fresh profile directory (nothing of the user's)."""
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="unie-chromium-") as profile:
        return subprocess.run(
            [
                exe,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--window-size=1400,1000",
                "--virtual-time-budget=10000",
                *args,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def rendered_dom(report: Path) -> str:
    """The landing page's DOM after the report's scripts ran."""
    r = chromium(report.resolve().as_uri(), "--dump-dom")
    if r.returncode != 0 or "<html" not in r.stdout:
        raise RuntimeError(f"chromium failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


# measures each table of the page after layout and writes the widths into the DOM, where --dump-dom reads them
MEASURE = """<script>window.addEventListener('load', () => {
  document.querySelectorAll('figure.table').forEach(f => {
    const t = f.querySelector('table');
    if (t) f.setAttribute('data-widths', t.scrollWidth + '/' + f.clientWidth);
  });
});</script>"""


def overflowing_tables(page: Path) -> list[str]:
    """The tables of ``page`` (a standalone HTML page: the run's ``results/report/paper.html``) wider than the column
    they sit in at a 1,400 px window, each as ``"<caption start>: <table> px in <column> px"``.  Measured by Chromium
    on a copy of the page with :data:`MEASURE` added (the page itself is not changed)."""
    html = page.read_text()
    html = html.replace("</body>", MEASURE + "</body>") if "</body>" in html else html + MEASURE
    with tempfile.TemporaryDirectory(prefix="unie-page-") as tmp:
        probe = Path(tmp) / "page.html"
        probe.write_text(html)
        r = chromium(probe.as_uri(), "--dump-dom")
    if r.returncode != 0 or "<html" not in r.stdout:
        raise RuntimeError(f"chromium failed ({r.returncode}): {r.stderr[-2000:]}")
    found = re.findall(r'<figure class="table" data-widths="(\d+)/(\d+)"><figcaption>(.{0,70})', r.stdout)
    if not found and "<table" in html:
        raise RuntimeError(f"{page}: no table was measured (did the page's layout run?)")
    return [f"{re.sub('<[^>]+>', '', cap).strip()}: {w} px in {c} px" for w, c, cap in found if int(w) > int(c)]


def checks(dom: str) -> dict[str, bool]:
    """What the landing page must show: the paper's artefacts first, tables inline with captions, figures."""
    page = dom.split('class="unie-page"', 1)
    body = page[1] if len(page) == 2 else ""
    first = re.search(r"<h2>([^<]*)</h2>", body)
    return {
        "the landing page is the run's tables and figures": len(page) == 2,
        "it starts with the paper's Table 1": bool(first) and first.group(1).startswith("Table 1"),
        "tables inline as HTML": body.count("<table>") >= 2,
        "every table with its caption visible": body.count('<figure class="table"><figcaption>') >= 2,
        "figures inline": body.count('<img src="data:image/png;base64,') >= 1,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("report", type=Path, help="the report written by `snakemake --report report.html`")
    p.add_argument("--screenshot", type=Path, help="write the landing page as a PNG")
    p.add_argument("--page", type=Path, help="the run's results/report/paper.html: check that no table overflows")
    args = p.parse_args(argv)
    results = checks(rendered_dom(args.report))
    wide = overflowing_tables(args.page) if args.page else []
    if args.page:
        results["no table wider than its column at 1,400 px"] = not wide
    for name, ok in results.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    for line in wide:
        print(f"     too wide: {line}")
    if args.screenshot:
        chromium(args.report.resolve().as_uri(), f"--screenshot={args.screenshot.resolve()}")
        print(f"landing page: {args.screenshot}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
