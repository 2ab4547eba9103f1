"""Render `snakemake --report report.html` in a headless Chromium and check what a reader sees.

    snakemake --report report.html && python scripts/render_report.py report.html --screenshot landing.png

The report's landing page is built by its JavaScript; this loads it in Chromium (Debian: `apt-get install
chromium`), lets the script run, and reads the page Chromium made (`--dump-dom`): it must show the run's tables
inline (HTML tables with their captions, not only downloads) and its figures.  It prints one line per check and
exits 1 if one fails; `--screenshot` also writes what a reader sees first.  tests/test_workflow.py runs it on the
smoke run's report when Chromium is installed (and says why it is skipped when not).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


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
        return subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", "--window-size=1400,1000",
                               "--virtual-time-budget=10000", *args, url],
                              capture_output=True, text=True, timeout=timeout)


def rendered_dom(report: Path) -> str:
    """The landing page's DOM after the report's scripts ran."""
    r = chromium(report.resolve().as_uri(), "--dump-dom")
    if r.returncode != 0 or "<html" not in r.stdout:
        raise RuntimeError(f"chromium failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


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
    args = p.parse_args(argv)
    results = checks(rendered_dom(args.report))
    for name, ok in results.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    if args.screenshot:
        chromium(args.report.resolve().as_uri(), f"--screenshot={args.screenshot.resolve()}")
        print(f"landing page: {args.screenshot}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
