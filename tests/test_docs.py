"""The documentation stays true to the repository: the code map names every module of ``unie/`` and only modules
that exist, every rule of the Snakefile and only rules it defines, every config file and workflow folder, and the
package's layer order as tests/test_layout.py enforces it; every relative link of README.md, CHANGELOG.md and
docs/*.md points to a file a clone has; no page cites a file outside the repository; and docs/results.md is
generated from result files (``unie.report.markdown``, rule ``docs``), never typed in."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from unie.report import markdown

REPO = Path(__file__).resolve().parents[1]
CODE_MAP = REPO / "docs" / "code-map.md"
MAPS = [REPO / "README.md", CODE_MAP]
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
SMK = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]


def named_paths(text: str) -> set[str]:
    """Every ``unie/...`` path in backticks, brace lists expanded (``unie/methods/{ar,sedd}.py``)."""
    out = set()
    for span in re.findall(r"`(unie/[^`\s]*)`", text):
        m = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", span)
        out |= {f"{m.group(1)}{x}{m.group(3)}" for x in m.group(2).split(",")} if m else {span}
    return out


def test_the_code_map_names_only_modules_that_exist():
    missing = sorted(
        f"{page.name}: {p}"
        for page in MAPS
        for p in named_paths(page.read_text())
        if not (REPO / p.rstrip("/")).exists()
    )
    assert not missing, "the code map names modules that do not exist:\n" + "\n".join(missing)


def test_every_module_has_a_code_map_entry():
    named = set().union(*(named_paths(page.read_text()) for page in MAPS))
    modules = sorted(str(p.relative_to(REPO)) for p in (REPO / "unie").rglob("*.py") if p.name != "__init__.py")
    unmapped = [m for m in modules if m not in named]
    assert not unmapped, "modules without a row in docs/code-map.md:\n" + "\n".join(unmapped)


def snakefile_rules() -> tuple[set[str], set[str]]:
    """The rules the Snakefile and its includes define: the named ones (``rule NAME:``, also inside an ``if``), and
    the prefixes of those a loop defines (``rule:`` with ``name: f"PREFIX{...}"``, e.g. ``dllm_eval_{model}``)."""
    named, prefixes = set(), set()
    for path in SMK:
        text = path.read_text()
        named |= set(re.findall(r"^\s*(?:rule|checkpoint)\s+(\w+)\s*:", text, re.M))
        prefixes |= set(re.findall(r"\bname:\s*f[\"'](\w+?)\{", text))
    return named, prefixes


def rules_named(text: str) -> set[str]:
    """Every rule a page names: the backticked names after "rule" or "rules" (``rules `a`, `b` and `c```), a brace
    list expanded (``sample_{table2,fig2}``), a placeholder kept (``dllm_eval_{model}``)."""
    out = set()
    item = r"`[^`]+`(?: \([^()]*\))?"  # a name, perhaps with a parenthetical about it
    for run in re.findall(rf"\brules? ({item}(?:(?:,| and| or|, and) {item})*)", text):
        for name in re.findall(r"`([^`]+)`", re.sub(r" \([^()]*\)", "", run)):
            m = re.fullmatch(r"(\w*)\{([^}]*)\}(\w*)", name)
            out |= (
                {f"{m.group(1)}{x}{m.group(3)}" for x in m.group(2).split(",")} if m and "," in m.group(2) else {name}
            )
    return out


def test_the_code_map_names_the_snakefiles_rules_and_only_those():
    named, prefixes = snakefile_rules()
    assert {"all", "train", "table1", "table3"} <= named and "dllm_eval_" in prefixes  # the parser sees the rules
    on_map = rules_named(CODE_MAP.read_text())
    unknown = sorted(
        n
        for n in on_map
        if n not in named
        and not (re.fullmatch(r"\w+\{\w+\}", n) and n.split("{")[0] in prefixes)  # a loop's rules by their placeholder
        and not any(n.startswith(p) and re.fullmatch(r"\w+", n) for p in prefixes)
    )  # one of a loop's rules
    assert not unknown, "docs/code-map.md names rules the Snakefile does not define:\n" + "\n".join(unknown)
    missing = sorted(n for n in named if n not in on_map)
    missing += sorted(f"{p}{{...}}" for p in prefixes if not any(re.fullmatch(rf"{p}\{{\w+\}}", n) for n in on_map))
    assert not missing, "rules of the Snakefile that docs/code-map.md does not name:\n" + "\n".join(missing)


def test_the_rule_names_are_read_as_written():
    text = "rules `a`, `b` and `c_{x,y}`; rule `d_{model}` (one per `model`), `f`; the `selection` rules through `e`"
    assert rules_named(text) == {"a", "b", "c_x", "c_y", "d_{model}", "f"}


def test_the_code_map_names_every_config_file_rule_file_and_workflow_folder():
    spans = set(re.findall(r"`([^`\s]+)`", CODE_MAP.read_text()))
    want = [f"config/{p.name}" for p in sorted((REPO / "config").iterdir()) if p.is_file()]
    want += [str(p.relative_to(REPO)) for p in SMK]
    missing = [w for w in want if w not in spans]
    missing += [
        f"workflow/{d.name}/"
        for d in sorted((REPO / "workflow").iterdir())
        if d.is_dir()
        if not any(s.startswith(f"workflow/{d.name}/") for s in spans)
    ]
    assert not missing, "docs/code-map.md does not name:\n" + "\n".join(missing)


def test_the_code_map_states_the_layer_order_the_layout_test_enforces():
    tree = ast.parse((REPO / "tests" / "test_layout.py").read_text())
    layers = next(
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "LAYERS" for t in n.targets)
    )
    expected = [{k for k, v in layers.items() if v == level} for level in sorted(set(layers.values()))]
    line = next(ln for ln in CODE_MAP.read_text().splitlines() if ln.startswith("`core` →"))
    stated = [set(re.findall(r"`(\w+)`", part)) for part in line.split("→")]
    assert stated == expected, f"docs/code-map.md states {stated}, tests/test_layout.py enforces {expected}"


def test_no_page_cites_a_file_outside_the_repository():
    """The repository stands alone: no tracked file points into the specification kept beside the clone on the
    machines it was developed on; what the code relies on is written in docs/."""
    outside = "|".join(
        re.escape(a + b)
        for a, b in (("../", "shared/"), ("/work/", "shared"), ("shared/", "spec/"), ("spec/", "notes/"))
    )
    files = clone_files()
    if files is None:
        pytest.skip("not a git checkout")
    bad = []
    for rel in sorted(files):
        path = REPO / rel
        if rel == "tests/test_paper_vs_ours.py" or not path.is_file() or path.suffix in {".png", ".pt", ".parquet"}:
            continue  # the one test that looks for the paper's .tex beside the clone (test plumbing)
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        bad += [f"{rel}:{i}: {ln.strip()}" for i, ln in enumerate(text.splitlines(), 1) if re.search(outside, ln)]
    assert not bad, "files that cite something outside the repository:\n" + "\n".join(bad)


def test_the_timing_keys_docs_timing_shows_are_the_schemas_and_the_defaults(tmp_path):
    """docs/timing.md's config block: every key is one the schema and a profile accept (a misspelled one is refused),
    and its values are the defaults it says they are."""
    import dataclasses

    import yaml

    from unie.core.options import ConfigError
    from unie.eval.timing import TimingChecks
    from unie.pipeline.dllm_runs import SweepTiming
    from unie.config.validate import workflow_config

    text = (REPO / "docs" / "timing.md").read_text().split("## Config keys", 1)[1]
    block = yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))
    overlay = tmp_path / "timing.yaml"
    overlay.write_text(yaml.safe_dump(block))
    config = workflow_config([REPO / "config" / "smoke.yaml", overlay])
    assert config["dllm"]["timing"] == block["dllm"]["timing"]
    assert config["figures"]["fig3_tradeoff"]["timing"] == block["figures"]["fig3_tradeoff"]["timing"]

    fig3 = dict(block["figures"]["fig3_tradeoff"]["timing"])
    assert fig3.pop("checks") == dataclasses.asdict(TimingChecks())
    from unie.config.profile import resolve_config

    default = resolve_config([REPO / "config" / "config.yaml"])["figures"]["fig3_tradeoff"]["timing"]  # grid + profile
    assert fig3 == default
    assert block["dllm"]["timing"] == dataclasses.asdict(SweepTiming())

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    fields = {f.name for f in dataclasses.fields(TimingChecks)}
    assert set(schema["$defs"]["timing_checks"]["properties"]) == fields  # the schema's keys are the dataclass's
    assert set(schema["properties"]["dllm"]["properties"]["timing"]["properties"]) == {
        f.name for f in dataclasses.fields(SweepTiming)
    }

    block["dllm"]["timing"]["checks"]["max_sprd"] = 0.3
    overlay.write_text(yaml.safe_dump(block))
    with pytest.raises(ConfigError, match="max_sprd"):
        workflow_config([REPO / "config" / "smoke.yaml", overlay])


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def clone_files() -> set[str] | None:
    """The files a clone has (tracked or about to be: not ignored); None outside a git checkout."""
    r = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, text=True
    )
    return set(r.stdout.splitlines()) if r.returncode == 0 else None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_into_the_clone(page):
    files, bad = clone_files(), []
    for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        rel = dest.relative_to(REPO).as_posix() if dest.is_relative_to(REPO) else None
        if rel is None or not dest.exists() or (files is not None and dest.is_file() and rel not in files):
            bad.append(f"{target}: not a file of the clone")
        elif anchor and dest.suffix == ".md":
            anchors = {slug(h) for h in re.findall(r"^#+ (.*)$", dest.read_text(), re.M)}
            if anchor not in anchors:
                bad.append(f"{target}: no heading #{anchor}")
    assert not bad, f"{page.name}:\n" + "\n".join(bad)


def test_the_readme_lists_every_target():
    section = (REPO / "README.md").read_text().split("## Targets", 1)[1].split("\n## ", 1)[0]
    targets = re.findall(r"^\| `(\w+)`", section, re.M)
    for name in ("all", "table1", "table2", "table3", "fig2", "fig3", "fig4", "cases", "bench"):
        assert name in targets, name


# ---- the generated results page ------------------------------------------------------------------------------


def fake_results(root: Path) -> Path:
    """A results directory with two small tables in the workflow's CSV formats."""
    (root / "tables").mkdir(parents=True)
    pd.DataFrame(
        {
            "row": ["Data ($\\pi$, exact)", "Data ($\\pi$, exact)", "MDLM", "MDLM"],
            "source": ["exact", "exact", "mdlm", "mdlm"],
            "domain": ["owt", "ptb", "owt", "ptb"],
            "ppl": [10.878, 8.148, 12.634, 9.93],
            "nll_per_token": [2.39, 2.10, 2.54, 2.30],
            "nll_se": [0.0067, 0.0080, 0.036, 0.049],
            "n_mc": [None, None, 1, 1],
        }
    ).to_csv(root / "tables" / "table1_ppl.csv", index=False)
    rows = [
        ("llada", "LLaDA-like", "MATH500", 31.0, None, None),
        ("llada", "LLaDA-like", "MMLU", 26.0, None, None),
        ("llada_dawn", "+DAWN", "MATH500", 30.0, -1.0, 2.2),
        ("llada_dawn", "+DAWN", "MMLU", 33.5, 7.5, 2.4),
    ]
    pd.DataFrame(
        [
            {
                "row": r,
                "label": lab,
                "task": "t",
                "column": c,
                "metric": "acc",
                "value": v,
                "stderr": 3.0,
                "n": 200,
                "delta": d,
                "delta_se": s,
            }
            for r, lab, c, v, d, s in rows
        ]
    ).to_csv(root / "tables" / "table3_dllm.csv", index=False)
    (root / "tables" / "paper_vs_ours.md").write_text("# The paper's numbers beside ours\n\n## Table 1\n\nx\n")
    from unie.core.integrity import write_page_record

    for f in (root / "tables").iterdir():  # as the table rules' jobs leave them: each with its record
        if f.is_file():
            write_page_record(f)
    return root


def test_the_results_page_is_generated_from_the_csvs(tmp_path):
    results = fake_results(tmp_path / "results")
    out = tmp_path / "results.md"
    r = subprocess.run(
        [sys.executable, str(REPO / "workflow" / "scripts" / "docs_results.py"), str(results), str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    assert page.startswith("# Results of the last run (generated)")
    assert "| Data (π, exact) | 10.88 | 8.15 | 0.007–0.008 |" in page  # LaTeX label made plain, s.e. range
    assert "| MDLM | 12.63 | 9.93 | 0.036–0.049 |" in page
    assert "| +DAWN | 30.0 (-1.0 ± 2.2) | 33.5 (+7.5 ± 2.4) | 31.8 |" in page  # delta ± paired s.e., average
    assert "| LLaDA-like | 31.0 | 26.0 | 28.5 |" in page
    assert "### The paper's numbers beside ours" in page and "#### Table 1" in page  # included one level down
    assert "Table 2" not in page  # a missing table is left out, not invented
    csv = results / "tables" / "table1_ppl.csv"  # one digit edited: refused, naming the file
    csv.write_text(csv.read_text().replace("12.634", "92.634"))
    r = subprocess.run(
        [sys.executable, str(REPO / "workflow" / "scripts" / "docs_results.py"), str(results), str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode != 0 and f"{csv} is damaged: its content hash" in r.stderr and out.read_text() == page


def test_an_unknown_table_still_gets_a_section():
    page = markdown.page_from_results({"table_new": pd.DataFrame({"row": ["a"], "value": [1.23456]})})
    assert "## `table_new`" in page and "| a | 1.235 |" in page


def test_the_rule_script_writes_the_page(tmp_path):
    """The script under Snakemake (its ``snakemake`` object), as rule docs runs it."""
    import runpy
    from types import SimpleNamespace

    import torch

    results = fake_results(tmp_path / "results")
    out = tmp_path / "results" / "docs" / "results.md"
    smk = SimpleNamespace(
        input=SimpleNamespace(tables=[str(p) for p in sorted(results.glob("tables/*"))], timing=[]),
        output=SimpleNamespace(md=str(out)),
        params=SimpleNamespace(note="Profile `toy`, seed 0."),
        log=[str(tmp_path / "docs.log")],
        threads=1,
    )
    threads = torch.get_num_threads()
    try:
        runpy.run_path(str(REPO / "workflow" / "scripts" / "docs_results.py"), init_globals={"snakemake": smk})
    finally:
        torch.set_num_threads(threads)
    page = out.read_text()
    assert "Profile `toy`, seed 0." in page and "| MDLM | 12.63 | 9.93 | 0.036–0.049 |" in page


def test_the_committed_results_page_is_the_generators_output():
    page = (REPO / "docs" / "results.md").read_text()
    assert page.startswith("# Results of the last run (generated)") and "rule `docs`" in page


def test_the_documented_lmeval_command_is_the_one_the_default_profile_records():
    """docs/dllm.md shows the command line the default profile records for its LLaDA-like + Uni-Energy row
    (``config.unie_command``): every word but the paths is rebuilt from config/config.yaml and the grid the way rule
    dllm_eval runs the row (tests/lmeval_rows.py); the paths are relative.  The page's prose about the toy
    geometry and Algorithm 3's options states the config's values."""
    from lmeval_rows import documented_command, expected_row_command
    from unie.config.profile import resolve_config

    text = (REPO / "docs" / "dllm.md").read_text()
    cfg = resolve_config([REPO / "config" / "config.yaml"])
    argv = documented_command(text, "name=llada_uni")
    assert argv == expected_row_command("llada_uni", cfg, argv)
    dec, energy = cfg["dllm"]["decoding"], cfg["dllm"]["energy"]
    m = re.search(
        r"a canvas of `gen_length` (\d+) positions in blocks of (\d+), `m = (\d+)` tokens per step, so\s+"
        r"N = (\d+) iterations and `w = ([\d.]+)`",
        text,
    )
    assert m, "docs/dllm.md: the Decoding bullet's geometry sentence is missing"
    assert [int(m[1]), int(m[2]), int(m[3]), int(m[4]), float(m[5])] == [
        dec["gen_length"],
        dec["block_length"],
        dec["tokens_per_step"],
        dec["gen_length"] // dec["tokens_per_step"],
        energy["w"],
    ]
    m = re.search(
        r"\(`unie/dllm/energy_decoding.py`\): `K = (\d+)`, `w = ([\d.]+)` .*?drawn from\s+p_θ at `temperature` "
        r"([\d.]+), .*?\(`greedy_first: (true|false)`",
        text,
        re.S,
    )
    assert m, "docs/dllm.md: the Algorithm 3 bullet's options are missing"
    assert [int(m[1]), float(m[2]), float(m[3]), m[4] == "true"] == [
        energy["K"],
        energy["w"],
        energy["temperature"],
        energy["greedy_first"],
    ]


def test_the_citation_and_the_links_name_the_paper_its_code_and_each_baselines_paper():
    """CITATION.cff cites the paper with its year, arXiv identifier and the code link the paper gives, and lists it
    under ``references``; the README links the paper and its code; docs/baselines.md gives each baseline's arXiv
    paper; the paper profile's page links the Google-Drive folders of the checkpoints placed by hand."""
    import yaml

    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    paper = cff["preferred-citation"]
    assert paper["year"] == 2026 and paper["repository-code"] == "https://github.com/BlueWhaleLab/Uni-E"
    assert any(i["type"] == "doi" and i["value"].endswith("2606.09159") for i in paper["identifiers"])
    refs = {r["title"]: r for r in cff["references"]}
    assert refs[paper["title"]]["url"] == "https://arxiv.org/abs/2606.09159"
    assert all(r.get("url", "").startswith("https://arxiv.org/abs/") for r in refs.values())
    readme = (REPO / "README.md").read_text()
    assert "https://arxiv.org/abs/2606.09159" in readme and "https://github.com/BlueWhaleLab/Uni-E" in readme
    table = (REPO / "docs" / "baselines.md").read_text().split("## Where the paper's", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    assert len(rows) >= 13 and all(re.search(r"\(https://arxiv\.org/abs/\d{4}\.\d{5}\)", r) for r in rows), rows
    assert {r["url"] for r in refs.values()} >= set(re.findall(r"\((https://arxiv\.org/abs/[\d.]+)\)", table)) - {
        "https://arxiv.org/abs/2606.09159"
    }
    profile = (REPO / "docs" / "paper-profile.md").read_text()
    assert profile.count("https://drive.google.com/drive/folders/") >= 2
