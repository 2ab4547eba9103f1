"""The package's layers: a module imports only from its own layer or lower ones (no import of a higher
layer, not even a lazy one inside a function), and every declared entry point runs."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import unie

PKG = Path(unie.__file__).parent
REPO = PKG.parent
# lowest first; a module may import its own layer and the layers before it
LAYERS = {
    "core": 0,
    "data": 1,
    "models": 1,
    "methods": 2,
    "energy": 3,
    "dllm": 4,
    "eval": 5,
    "report": 6,
    "config": 7,
    "pipeline": 8,
    "cli": 9,
}


def layer_of(module: str) -> str | None:
    """``unie.methods.mdlm`` -> ``methods``; ``unie`` itself (the registration hub) -> None."""
    parts = module.split(".")
    if parts[0] != "unie" or len(parts) < 2:
        return None
    return parts[1]


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every ``unie.*`` module imported anywhere in ``path`` (top level or inside functions), absolute."""
    rel = path.relative_to(REPO).with_suffix("")
    package = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] if node.module else [f"{mod}.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
            out += [(node.lineno, n) for n in names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return [(line, m) for line, m in out if m == "unie" or m.startswith("unie.")]


def test_every_module_belongs_to_a_layer():
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        if rel.name == "__init__.py" and len(rel.parts) == 1:
            continue
        top = rel.parts[0].removesuffix(".py")
        assert top in LAYERS, f"{rel}: not in a known layer {sorted(LAYERS)}"


def test_no_module_imports_a_higher_layer():
    bad = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        if len(rel.parts) == 1 and rel.name == "__init__.py":
            continue  # the package hub imports everything to fill the registries
        own = LAYERS[rel.parts[0].removesuffix(".py")]
        for line, mod in imports_of(path):
            target = layer_of(mod)
            if target is None:
                if own < LAYERS["pipeline"]:  # `import unie` runs every registration: only the top may do it
                    bad.append(f"{rel}:{line} imports the whole package")
                continue
            if LAYERS[target] > own:
                bad.append(f"{rel}:{line} ({rel.parts[0]}) imports {mod} ({target})")
    assert not bad, "\n".join(bad)


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def import_cycles(pkg: Path = PKG) -> list[list[str]]:
    """The groups of modules that import one another in a circle (strongly connected components of more than one
    module, or a module importing itself), counting imports inside functions too: a cycle held together by a lazy
    import is still a cycle.  The package hub (``unie/__init__.py``, which imports everything to fill the
    registries) is left out."""
    modules = {module_name(p): p for p in pkg.rglob("*.py")}
    modules.pop("unie", None)
    graph = {}
    for name, path in modules.items():
        graph[name] = sorted({m if m in modules else m.rsplit(".", 1)[0] for _, m in imports_of(path)} & set(modules))
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph[v]:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    """No two modules import each other, directly or around a circle, not even through an import inside a function
    (the layer order alone allows a cycle within a layer)."""
    cycles = import_cycles()
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_cycle_check_catches_a_cycle():
    """The checker itself: a lazy import that closes a circle is reported."""
    fake = PKG / "pipeline" / "_cycle_probe.py"
    fake.write_text("def f():\n    from . import _cycle_probe2\n")
    fake2 = PKG / "pipeline" / "_cycle_probe2.py"
    fake2.write_text("from ._cycle_probe import f\n")
    try:
        assert ["unie.pipeline._cycle_probe", "unie.pipeline._cycle_probe2"] in import_cycles()
    finally:
        fake.unlink()
        fake2.unlink()


def test_layer_check_catches_a_violation(tmp_path, monkeypatch):
    """The checker itself: a methods module importing the pipeline is reported."""
    fake = PKG / "methods" / "_layer_probe.py"
    fake.write_text("from ..pipeline.sample import run_sampler\n")
    try:
        with pytest.raises(AssertionError, match="_layer_probe.py:1"):
            test_no_module_imports_a_higher_layer()
    finally:
        fake.unlink()


def test_declared_entry_points_run():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("scripts", {})
    assert scripts, "pyproject declares no console script"
    for name, target in scripts.items():
        module, func = target.split(":")
        code = f"import sys; sys.argv = ['{name}', '--help']; from {module} import {func}; {func}()"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert r.returncode == 0 and "usage" in r.stdout.lower(), (name, r.stdout, r.stderr)


def test_a_module_name_says_which_room_it_is_in():
    """No two modules of the package share a file name, and no module is named like one of its packages
    (``pipeline/models.py`` beside ``models/``): an import or a traceback names one module unambiguously."""
    names = {}
    for path in PKG.rglob("*.py"):
        if path.name != "__init__.py":
            names.setdefault(path.stem, []).append(str(path.relative_to(PKG)))
    twins = {n: p for n, p in names.items() if len(p) > 1}
    assert not twins, twins
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    shadowing = sorted(p for n, ps in names.items() if n in packages for p in ps)
    assert not shadowing, f"modules named like a package: {shadowing}"


def test_no_run_output_is_tracked():
    """Outputs are never committed: no tracked file under a run's or the shared output folders, no sbatch output
    (``slurm-*.out``), no Snakemake metadata; and .gitignore keeps them out."""
    r = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("not a git checkout")
    outputs = re.compile(r"^(runs|results|resources|logs|benchmarks|\.snakemake)/|(^|/)slurm-\d+\.out$")
    assert not [f for f in r.stdout.splitlines() if outputs.search(f)]
    ignored = (REPO / ".gitignore").read_text().split()
    assert {"runs/", "results/", "resources/", ".snakemake/", "slurm-*.out"} <= set(ignored)


PIPELINE_IMPORT = re.compile(r"unie\.pipeline(\.\w+)?")


def script_imports_beside_the_pipeline(scripts: Path = REPO / "workflow" / "scripts") -> list[str]:
    """``script.py:line imports module`` for every ``unie`` module a workflow script imports (top level or inside a
    function) that is not ``unie.pipeline`` or one of its modules."""
    return [
        f"{path.relative_to(REPO)}:{line} imports {mod}"
        for path in sorted(scripts.glob("*.py"))
        for line, mod in imports_of(path)
        if not PIPELINE_IMPORT.fullmatch(mod)
    ]


def test_every_workflow_script_is_a_shim_over_the_pipeline():
    """A rule's script reads its ``snakemake`` object and calls :mod:`unie.pipeline`, the only code that reads and
    writes the workflow's files: it imports no other ``unie`` module, not even inside a function."""
    bad = script_imports_beside_the_pipeline()
    assert not bad, "workflow scripts importing unie beside unie.pipeline:\n" + "\n".join(bad)


def test_the_shim_check_catches_a_script_importing_a_lower_layer():
    """The checker itself: each import of a script that reaches past the pipeline (here inside its job, as
    dllm_eval.py's did, and the package hub's names) is named with its line and module; the standard library and
    ``unie.pipeline.*`` are not."""
    scripts = REPO / "workflow" / "scripts"
    bad = scripts / "_shim_probe.py"
    bad.write_text(
        "import os\n\nfrom unie.pipeline.rule import job\n\nwith job(snakemake) as log:\n"
        "    from unie.dllm.lmeval import run_evaluation\n"
        "    import unie.core.integrity\n"
        "    from unie import load_for_sampling\n"
        "    from unie.pipeline import dllm_runs\n"
    )
    try:
        found = [f for f in script_imports_beside_the_pipeline(scripts) if "_shim_probe" in f]
    finally:
        bad.unlink()
    assert found == [
        "workflow/scripts/_shim_probe.py:6 imports unie.dllm.lmeval",
        "workflow/scripts/_shim_probe.py:7 imports unie.core.integrity",
        "workflow/scripts/_shim_probe.py:8 imports unie",
    ]


def test_no_workflow_script_shadows_a_standard_library_module():
    """A script run as a file puts its folder first on sys.path: a ``tokenize.py`` there would be imported in place of
    the standard library's (which ``linecache``, hence every traceback, imports)."""
    scripts = {p.stem for p in (REPO / "workflow" / "scripts").glob("*.py")} | {
        p.stem for p in (REPO / "scripts").glob("*.py")
    }
    assert not scripts & set(sys.stdlib_module_names)


def test_the_test_files_handed_out_first_exist():
    """tests/conftest.py hands the longest test files out first under pytest-xdist: a renamed one would silently lose
    its place."""
    from conftest import LONGEST_FIRST

    missing = [name for name in LONGEST_FIRST if not (REPO / "tests" / name).is_file()]
    assert not missing, f"tests/conftest.py LONGEST_FIRST names files that are not in tests/: {missing}"
