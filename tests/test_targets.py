"""The named targets (unie.config.targets): each one the README documents resolves, is the rule that writes
its files (so `snakemake -f NAME` reruns it), and has its section and caption in `snakemake --report`."""

import re
import sys
from pathlib import Path

import pytest
from snakemake_run import run_snakemake

from unie.config.targets import TARGETS, readme_table

REPO = Path(__file__).resolve().parents[1]


def readme_targets() -> dict[str, str]:
    """The README's "## Targets" table: first column `name` -> the rest of its row."""
    text = (REPO / "README.md").read_text()
    assert "\n## Targets" in text, "README.md has no '## Targets' section (python -m unie.config.targets --readme)"
    section = text.split("\n## Targets", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\|\s*`([\w-]+)`\s*\|(.*)$", section, re.M)}


def test_readme_documents_exactly_the_targets():
    rows = readme_targets()
    assert list(rows) == list(TARGETS), f"README's Targets table != unie.config.targets:\n{readme_table()}"
    for name, rest in rows.items():
        assert TARGETS[name].output in rest, (name, rest)


def snakefile_targets() -> list[str]:
    """The Snakefile's list of the named targets: the indented lines (``#   a, b, ...``) of its comment that begins
    ``# The named targets``."""
    lines = (REPO / "Snakefile").read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("# The named targets")]
    assert len(starts) == 1, "the Snakefile has no (or more than one) '# The named targets' comment"
    names = []
    for line in lines[starts[0] + 1 :]:
        if not line.startswith("#"):
            break
        if line.startswith("#   "):
            names += [n.strip() for n in line[1:].split(",") if n.strip()]
    return names


def defined_rules(*paths: Path) -> set[str]:
    text = "\n".join(p.read_text() for p in paths)
    return set(re.findall(r"^(?:local)?rule (\w+):", text, re.M))


def test_the_snakefile_lists_exactly_the_targets():
    """The Snakefile's table of contents names every target of unie.config.targets, in its order, and nothing else;
    each is a rule of the Snakefile or workflow/rules/*.smk (`all` of the Snakefile itself)."""
    listed = snakefile_targets()
    missing, extra = [n for n in TARGETS if n not in listed], [n for n in listed if n not in TARGETS]
    assert listed == list(TARGETS), f"missing {missing}, not targets {extra}; the list: {', '.join(TARGETS)}"
    rules = defined_rules(REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk")))
    assert not [n for n in TARGETS if n not in rules], sorted(set(TARGETS) - rules)
    assert "all" in defined_rules(REPO / "Snakefile")


def test_every_target_resolves_to_the_rule_that_writes_it(tmp_path):
    pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(tmp_path),
        "-n",
        "--cores",
        "2",
        *TARGETS,
    ]
    r = run_snakemake(cmd[3:], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    blocks = dict(re.findall(r"^(?:local)?rule (\w+):\n((?:    .*\n?)*)", r.stdout, re.M))
    for name, t in TARGETS.items():
        assert name in blocks, f"no job of rule {name!r}: `snakemake {name}` does not resolve"
        if name != "all":  # `-f NAME` forces the job of rule NAME: it must write the files, not only ask for them
            out = re.search(r"^\s+output: (.*)$", blocks[name], re.M)
            where = f"runs/toy{t.beside}/{t.output}" if t.beside else f"runs/toy/{t.output}"
            assert out and where in out.group(1).split(", "), (name, blocks[name])  # its run's


def test_report_sections_and_captions():
    smk = "\n".join(p.read_text() for p in sorted((REPO / "workflow" / "rules").glob("*.smk")))
    calls = re.findall(r"report\(((?:[^()]|\([^()]*\))*)\)", smk)  # report(run_path(...), **REPORT[name], ...), on
    used = {m for call in calls for m in re.findall(r'\*\*REPORT\["(\w+)"\]', call)}  # one line or several
    assert "report(" in smk and used == {n for n, t in TARGETS.items() if t.category}
    for name in used:
        caption = REPO / TARGETS[name].caption
        assert caption.is_file() and len(caption.read_text().split()) > 20, caption
    # workflow.rst: the report's landing page (the Snakefile's `report:`), every other caption a target's
    assert sorted(p.stem for p in (REPO / "workflow" / "report").glob("*.rst")) == sorted([*used, "workflow"])
    assert 'report: "workflow/report/workflow.rst"' in (REPO / "Snakefile").read_text()
